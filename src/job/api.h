/* The job service's HTTP/JSON API on 127.0.0.1 (libmicrohttpd, one thread).
 *
 *   GET  /v1/health                          {"status": "ok", "pid": P}
 *   POST /v1/jobs                            a spec (job/spec.h) -> 201 and the job
 *   GET  /v1/jobs[?status=S]                 {"jobs": [...]}, by id
 *   GET  /v1/jobs/ID                         the job with its spec and history
 *   POST /v1/jobs/ID/stop                    202 and the job (409 when it had already ended)
 *   GET  /v1/jobs/ID/logs[?rank=R][&offset=N] text from byte N of the launcher's log (all ranks,
 *                                            prefixed) or of rank R's; at most 1 MiB per answer
 *
 * A refused request gets a 4xx and {"error": "one line"}, and changes nothing: malformed or oversized
 * bodies (ANVIL_JOB_SPEC_MAX_BYTES), unknown fields, bad values, unknown jobs or paths. Principals,
 * tokens and roles will be checked here, before any handler runs. */
#ifndef ANVIL_JOB_API_H
#define ANVIL_JOB_API_H

#include "job/store.h"
#include "job/supervisor.h"

typedef struct anvil_api anvil_api;

/* Listens on 127.0.0.1:port (0: a free port, see anvil_api_port); jobs without an output get their
 * run folder under runs_dir. NULL after anvil_fail. */
anvil_api *anvil_api_start(anvil_store *st, anvil_supervisor *sup, const char *runs_dir, int port);
int anvil_api_port(const anvil_api *api);
void anvil_api_stop(anvil_api *api);

#endif

/* Faults on a schedule (anvil chaos): the kinds of fault, and the schedules that say when each
 * strikes, explicit or drawn from a seed with a mean time between failures.
 *
 * A schedule's text is a comma-separated list of events, each "WHEN KIND[:TARGET]":
 *   WHEN    "30s" (seconds after the chaos run starts; "1.5s", "2m" too) or "step:200" (once the
 *           job's heartbeat reports step 200 or later)
 *   KIND    kill-rank, stop-rank (SIGKILL / SIGSTOP of one rank), kill-attempt (every process of
 *           the attempt), host-lost (every rank of one host; on Slurm, its node's slurmd killed
 *           too, and started again once the job has left the node out), net-cut (one host cut off
 *           the network until the attempt ends: a job on simulated hosts, anvil serve --sim-hosts),
 *           disk-full (the run folder's file system filled until the attempt ends), daemon-kill
 *           (the daemon killed with SIGKILL, then started again as it was), s3-503 (the next
 *           requests to the job's S3 endpoint answered 503 SlowDown by a fault proxy in front of
 *           it), s3-reset (the next transfers through that proxy, GET bodies and PUT or part
 *           uploads, cut mid-body by a TCP RST)
 *   TARGET  the rank (kill-rank, stop-rank) or host (host-lost, net-cut) index; without one, drawn
 *           from the run's seed among the job's ranks or hosts when the fault strikes. For s3-503
 *           and s3-reset, how many requests it strikes (default ANVIL_CHAOS_S3_503_N, _RESET_N)
 * e.g. "20s kill-rank:1, step:300 stop-rank, 90s daemon-kill, step:500 s3-503:20". Events strike
 * in the order of the list; a "step:" event waits for its step, a time one for its time, each after
 * the one before. */
#ifndef ANVIL_JOB_CHAOS_H
#define ANVIL_JOB_CHAOS_H

#include <stdint.h>

typedef enum {
    ANVIL_FAULT_KILL_RANK,
    ANVIL_FAULT_STOP_RANK,
    ANVIL_FAULT_KILL_ATTEMPT,
    ANVIL_FAULT_HOST_LOST,
    ANVIL_FAULT_NET_CUT,
    ANVIL_FAULT_DISK_FULL,
    ANVIL_FAULT_DAEMON_KILL,
    ANVIL_FAULT_S3_503,
    ANVIL_FAULT_S3_RESET,
    ANVIL_FAULT_NKINDS
} anvil_fault_kind;

/* "kill-rank", ...; and the kind of a name, or -1. */
const char *anvil_fault_kind_name(anvil_fault_kind k);
int anvil_fault_kind_parse(const char *name);
/* Whether the daemon's backend carries the kind out (the others, the chaos client does itself). */
int anvil_fault_kind_in_daemon(anvil_fault_kind k);
/* Whether the kind takes a rank or host index; and whether that is a host's (host-lost, net-cut). */
int anvil_fault_kind_targeted(anvil_fault_kind k);
int anvil_fault_kind_on_host(anvil_fault_kind k);
/* Whether the kind strikes the job's S3 requests through a fault proxy, and takes a count. */
int anvil_fault_kind_s3(anvil_fault_kind k);
/* Every kind's name, ", " between them, for the messages that list them. */
const char *anvil_fault_kind_list(void);

/* An s3-503 storm's requests when the event names no count: fewer than the S3 client's attempts
 * (ANVIL_S3_MAX_ATTEMPTS, 8), so that its retries absorb it even when it falls on one request. */
#define ANVIL_CHAOS_S3_503_N 5
#define ANVIL_CHAOS_S3_RESET_N 2

typedef struct {
    double at_s;     /* seconds after the start; -1 when by step */
    int64_t at_step; /* -1 when by time */
    anvil_fault_kind kind;
    int target; /* rank or host index; -1: drawn when it strikes */
    int count;  /* the requests an S3 fault strikes; -1 for the other kinds */
} anvil_chaos_event;

typedef struct {
    anvil_chaos_event *ev;
    int n;
} anvil_chaos_schedule;

#define ANVIL_CHAOS_MAX_EVENTS 1000

/* Parses a schedule's text; -1 after anvil_fail naming the event (its number and text) and what
 * is wrong in it. */
int anvil_chaos_parse(const char *text, anvil_chaos_schedule *s);
/* A random schedule over duration_s: faults at exponentially distributed gaps of mean mtbf_s, each
 * of a kind drawn from kinds, from seed; the same arguments give the same schedule. -1 after
 * anvil_fail (mtbf_s or duration_s not positive, no kinds, more than ANVIL_CHAOS_MAX_EVENTS). */
int anvil_chaos_random(uint64_t seed, double mtbf_s, double duration_s, const anvil_fault_kind *kinds, int nkinds,
                       anvil_chaos_schedule *s);
void anvil_chaos_free(anvil_chaos_schedule *s);

#endif

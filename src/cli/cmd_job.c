/* anvil job: the job service's client, over HTTP (cli/client.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/exit.h"
#include "core/fsutil.h"
#include "job/spec.h"

static const char *usage =
    "usage: anvil job [--state DIR | --url URL] [--token-file F] [--json] <command> ...\n"
    "\n"
    "  submit SPEC.json                       submit a job spec (README: 'The job service')\n"
    "  submit --name N [--role R] [--procs P] [--max-retries R] [--max-runtime S] [--hang-timeout S]\n"
    "         [--output DIR] [--env NAME=VALUE ...] [--metric NAME=REGEX ...]\n"
    "         -- <anvil subcommand and its options>\n"
    "  list [--status S]                      your jobs (an admin's: all), by id (S: Pending, Running, ...)\n"
    "  describe ID                            a job, its spec and its status history\n"
    "  logs ID [--rank R] [--follow]          the launcher's merged log, or rank R's\n"
    "  stop ID                                checkpoint and stop (SIGKILL after the daemon's grace)\n"
    "  wait ID                                until the job ends\n"
    "  goodput ID                             where the job's time went: productive, recomputed, detection,\n"
    "                                         restart, checkpoint, eval, queue; ETTR; each attempt and fault\n"
    "  audit [--user U] [--limit N]           the last N (100) entries of the audit trail (admins)\n"
    "\n"
    "The daemon is found through DIR/serve.port (default ~/.local/share/anvil) or --url. The token\n"
    "(sent as 'Authorization: Bearer', never printed) is read from --token-file F, else $ANVIL_TOKEN,\n"
    "else ~/.config/anvil/token. Tables by default, the daemon's JSON with --json. Exit status: 0\n"
    "done (wait: Completed), 1 error (no daemon, no token), 2 bad usage, 3 the job ended Failed or\n"
    "Stopped (wait), 4 the daemon refused the request (one line says why).\n";

static bool final(const char *status) {
    return !strcmp(status, "Completed") || !strcmp(status, "Failed") || !strcmp(status, "Stopped");
}

static void print_row(const cJSON *j) {
    char t[32];
    const char *owner = client_str(j, "owner"), *sec = client_str(j, "secondary_status");
    printf("%-6.0f %-24s %-12s %-10s %-22s %-7.0f %s\n", client_num(j, "id"), client_str(j, "name"),
           owner[0] ? owner : "-", client_str(j, "status"), sec[0] ? sec : "-", client_num(j, "attempt"),
           client_when(client_num(j, "submitted_at"), t, sizeof t));
}

static int submit(const client *cl, int argc, char **argv) {
    cJSON *spec = NULL;
    char *text = NULL;
    if (argc == 2 && strcmp(argv[1], "--help") && strncmp(argv[1], "--", 2)) {
        size_t len;
        if (anvil_read_file_max(argv[1], 1 << 20, &text, &len)) return cli_fail("job");
    } else {
        spec = cJSON_CreateObject();
        cJSON *res = cJSON_AddObjectToObject(spec, "resources");
        int i = 1;
        for (; i < argc && strcmp(argv[i], "--"); i++) {
            const char *a = argv[i], *v = arg_value("job", argc, argv, &i);
            int n;
            double d;
            if (!v) return cJSON_Delete(spec), ANVIL_EXIT_USAGE;
            if (!strcmp(a, "--name")) cJSON_AddStringToObject(spec, "name", v);
            else if (!strcmp(a, "--role")) cJSON_AddStringToObject(spec, "role", v);
            else if (!strcmp(a, "--output")) cJSON_AddStringToObject(spec, "output", v);
            else if (!strcmp(a, "--procs") && !arg_int("job", a, v, 1, 1024, &n))
                cJSON_AddNumberToObject(res, "procs_per_host", n);
            else if (!strcmp(a, "--max-retries") && !arg_int("job", a, v, 0, 100, &n))
                cJSON_AddNumberToObject(spec, "max_retries", n);
            else if (!strcmp(a, "--max-runtime") && !arg_double("job", a, v, &d))
                cJSON_AddNumberToObject(spec, "max_runtime_s", d);
            else if (!strcmp(a, "--hang-timeout") && !arg_double("job", a, v, &d))
                cJSON_AddNumberToObject(spec, "hang_timeout_s", d);
            else if ((!strcmp(a, "--env") || !strcmp(a, "--metric")) && strchr(v, '=')) {
                /* --metric: the spec's metric_definitions, which the daemon checks. */
                const char *field = a[2] == 'e' ? "env" : "metric_definitions";
                cJSON *map = cJSON_GetObjectItemCaseSensitive(spec, field);
                if (!map) map = cJSON_AddObjectToObject(spec, field);
                char *key = strndup(v, strcspn(v, "="));
                if (key) cJSON_AddStringToObject(map, key, strchr(v, '=') + 1);
                free(key);
            }
            else {
                cJSON_Delete(spec);
                if (!strcmp(a, "--env") || !strcmp(a, "--metric"))
                    return cli_usage_error("job", "submit: %s takes NAME=%s", a, a[2] == 'e' ? "VALUE" : "REGEX");
                return strcmp(a, "--procs") && strcmp(a, "--max-retries") && strcmp(a, "--max-runtime") &&
                               strcmp(a, "--hang-timeout")
                           ? cli_usage_error("job", "submit: unknown option '%s'", a)
                           : ANVIL_EXIT_USAGE;
            }
        }
        if (i + 1 >= argc) {
            cJSON_Delete(spec);
            return cli_usage_error("job", "submit: give SPEC.json, or --name N -- <anvil subcommand ...>");
        }
        cJSON_AddItemToObject(spec, "command",
                              cJSON_CreateStringArray((const char *const *)argv + i + 1, argc - i - 1));
        text = cJSON_PrintUnformatted(spec);
        cJSON_Delete(spec);
    }
    if (!text) {
        anvil_fail("out of memory");
        return cli_fail("job");
    }
    cJSON *job;
    int rc = client_call(cl, "POST", "/v1/jobs", text, &job);
    free(text);
    if (rc) return rc;
    if (cl->json) client_print_json(job);
    else
        /* Without an output the run folder is the service's own (README: roles), not under the role's prefixes. */
        printf("submitted job %.0f (%s, role %s), run folder %s%s\n", client_num(job, "id"), client_str(job, "name"),
               client_str(job, "role"), client_str(job, "run_dir"),
               cJSON_IsString(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(job, "spec"), "output"))
                   ? ""
                   : " (the service's own: the spec gives no output)");
    cJSON_Delete(job);
    return 0;
}

static int list(const client *cl, int argc, char **argv) {
    char path[128] = "/v1/jobs";
    if (argc == 3 && !strcmp(argv[1], "--status")) snprintf(path, sizeof path, "/v1/jobs?status=%.60s", argv[2]);
    else if (argc != 1) return cli_usage_error("job", "list takes only --status S");
    cJSON *all;
    int rc = client_call(cl, "GET", path, NULL, &all);
    if (rc) return rc;
    if (cl->json) {
        client_print_json(all);
    } else {
        printf("%-6s %-24s %-12s %-10s %-22s %-7s %s\n", "ID", "NAME", "OWNER", "STATUS", "SECONDARY", "ATTEMPT",
               "SUBMITTED");
        const cJSON *j;
        cJSON_ArrayForEach(j, cJSON_GetObjectItemCaseSensitive(all, "jobs")) print_row(j);
    }
    cJSON_Delete(all);
    return 0;
}

/* The bad nodes of an excluded_nodes list, one a line, each with the attempt that found it and why. */
static void print_excluded(const cJSON *list, const char *indent) {
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        printf("%s%s", indent, client_str(e, "node"));
        if (client_num(e, "attempt") > 0) printf(" (attempt %.0f)", client_num(e, "attempt"));
        printf(": %s\n", client_str(e, "why"));
    }
}

/* One attempt of describe: where it ran (its Slurm job and nodes, or its session; its handle when it says
 * more, a warm step's script), how Slurm saw it end (state, reason, restarts), its exit and its step's,
 * how its end was judged, the node failure that lost it and the nodes it got excluded: all that its JSON
 * has. */
static void print_attempt(const cJSON *e) {
    char t[32], u[32];
    const char *id = client_str(e, "slurm_job_id"), *handle = client_str(e, "handle");
    const char *reason = client_str(e, "reason");
    const cJSON *procs = cJSON_GetObjectItemCaseSensitive(e, "processes");
    printf("  %.0f  %s", client_num(e, "attempt"), client_str(e, "backend"));
    if (id[0]) printf("  Slurm job %s", id);
    else if (client_num(e, "session") > 0) printf("  session %.0f", client_num(e, "session"));
    if (handle[0] && strcmp(handle, id) && (id[0] || !cJSON_GetObjectItemCaseSensitive(e, "session")))
        printf(" (handle %s)", handle);
    if (cJSON_IsNumber(procs)) printf(" (%.0f live processes)", procs->valuedouble);
    if (client_str(e, "node_list")[0]) printf(" on %s", client_str(e, "node_list"));
    if (client_str(e, "state")[0]) printf(", Slurm state %s", client_str(e, "state"));
    if (reason[0] && strcmp(reason, "None")) printf(" (reason %s)", reason);
    const char *restarts = client_str(e, "restarts");
    if (restarts[0] && strcmp(restarts, "0")) printf(" (Slurm restarts %s)", restarts);
    printf(", started %s", client_when(client_num(e, "started_at"), t, sizeof t));
    if (client_num(e, "ended_at") > 0)
        printf(", ended %s, exit %.0f", client_when(client_num(e, "ended_at"), u, sizeof u),
               client_num(e, "exit_code"));
    else
        printf(", running");
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(e, "step_exit")))
        printf(", step exit %.0f", client_num(e, "step_exit"));
    printf("\n");
    if (client_str(e, "outcome")[0]) printf("     %s\n", client_str(e, "outcome"));
    if (client_str(e, "lost")[0] && !strstr(client_str(e, "outcome"), client_str(e, "lost")))
        printf("     %s\n", client_str(e, "lost"));
    print_excluded(cJSON_GetObjectItemCaseSensitive(e, "excluded_nodes"), "     excluded ");
}

/* describe's backend object and every attempt. */
static void print_attempts(const cJSON *j) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "backend"), *e;
    printf("backend:        %s", client_str(b, "name"));
    if (client_str(b, "partition")[0]) printf(" (partition %s)", client_str(b, "partition"));
    if (client_str(b, "warm_pool_status")[0])
        printf(", warm pool %s: %s", client_str(b, "warm_pool_id"), client_str(b, "warm_pool_status"));
    printf("\n");
    const cJSON *bad = cJSON_GetObjectItemCaseSensitive(b, "excluded_nodes");
    if (cJSON_GetArraySize(bad)) {
        printf("excluded nodes:\n");
        print_excluded(bad, "  ");
    }
    printf("attempts:\n");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "attempts")) print_attempt(e);
}

/* The parts of a goodput object's "parts", in one line: "productive 69.8 s, recomputed 2.0 s, ...". */
static void print_parts(const cJSON *parts) {
    const cJSON *p;
    const char *sep = "";
    cJSON_ArrayForEach(p, parts) {
        if (cJSON_IsNumber(p) && p->valuedouble > 0) printf("%s%s %.1f s", sep, p->string, p->valuedouble);
        if (cJSON_IsNumber(p) && p->valuedouble > 0) sep = ", ";
    }
}

static void print_goodput_line(const cJSON *g) {
    if (!g) return;
    printf("goodput:        ETTR %.1f%% of %.1f s: ", 100 * client_num(g, "ettr"), client_num(g, "wall_s"));
    print_parts(cJSON_GetObjectItemCaseSensitive(g, "parts"));
    printf(" (job goodput ID: the table)\n");
}

void cli_print_goodput(const cJSON *g, double id) {
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(g, "parts"), *p, *e;
    double wall = client_num(g, "wall_s");
    printf("job %.0f: wall %.1f s, ETTR %.1f%% (productive / (wall - queue))\n", id, wall, 100 * client_num(g, "ettr"));
    printf("  %-11s %10s %7s\n", "PART", "SECONDS", "SHARE");
    cJSON_ArrayForEach(p, parts) printf("  %-11s %10.1f %6.1f%%\n", p->string, p->valuedouble,
                                         wall > 0 ? 100 * p->valuedouble / wall : 0);
    printf("attempts:\n");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(g, "attempts")) {
        char t[32];
        printf("  %.0f  started %s, ", client_num(e, "attempt"), client_when(client_num(e, "started_at"), t, sizeof t));
        if (client_num(e, "resumed_from") < 0) printf("never trained");
        else printf("steps %.0f to %.0f", client_num(e, "resumed_from"), client_num(e, "last_step"));
        if (client_num(e, "kept_through") >= 0 && client_num(e, "kept_through") < client_num(e, "last_step"))
            printf(" (kept through %.0f)", client_num(e, "kept_through"));
        printf(": ");
        print_parts(cJSON_GetObjectItemCaseSensitive(e, "parts"));
        printf("\n");
    }
    const cJSON *faults = cJSON_GetObjectItemCaseSensitive(g, "faults");
    if (cJSON_GetArraySize(faults)) printf("faults:\n");
    cJSON_ArrayForEach(e, faults) {
        char t[32];
        const char *target = client_str(e, "target");
        printf("  %s  %s%s%s (attempt %.0f): lost %.1f s = ", client_when(client_num(e, "at"), t, sizeof t),
               client_str(e, "kind"), target[0] ? " " : "", target, client_num(e, "attempt"), client_num(e, "lost_s"));
        /* A fault that ended its attempt has a detection; one that its attempt went on through cost
         * stalled steps only. */
        if (client_num(e, "detection_s") <= 0) printf("stall %.1f (the attempt went on)\n", client_num(e, "stall_s"));
        else
            printf("detection %.1f + recomputed %.1f + restart %.1f\n", client_num(e, "detection_s"),
                   client_num(e, "recomputed_s"), client_num(e, "restart_s"));
    }
}

static void print_job(const cJSON *j) {
    char t[32];
    printf("id:             %.0f\nname:           %s\nowner:          %s\nrole:           %s\nstatus:         %s",
           client_num(j, "id"), client_str(j, "name"), client_str(j, "owner"), client_str(j, "role"),
           client_str(j, "status"));
    printf(client_str(j, "secondary_status")[0] ? " (%s)\n" : "%s\n", client_str(j, "secondary_status"));
    if (client_str(j, "failure_reason")[0]) printf("failure_reason: %s\n", client_str(j, "failure_reason"));
    printf("attempt:        %.0f\nexit_code:      %.0f\nrun folder:     %s\n", client_num(j, "attempt"),
           client_num(j, "exit_code"), client_str(j, "run_dir"));
    printf("submitted:      %s\n", client_when(client_num(j, "submitted_at"), t, sizeof t));
    printf("started:        %s\n", client_when(client_num(j, "started_at"), t, sizeof t));
    printf("ended:          %s\n", client_when(client_num(j, "ended_at"), t, sizeof t));
    char *spec = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "spec"));
    printf("spec:           %s\n", spec ? spec : "");
    free(spec);
    print_attempts(j);
    print_goodput_line(cJSON_GetObjectItemCaseSensitive(j, "goodput"));
    printf("history:\n");
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "history")) {
        const char *sec = client_str(e, "secondary_status");
        printf("  %s  %-10s %-22s %s\n", client_when(client_num(e, "at"), t, sizeof t), client_str(e, "status"),
               sec[0] ? sec : "-", client_str(e, "message"));
    }
}

static int job_path(int argc, char **argv, const char *suffix, char *path, size_t cap) {
    char *end;
    if (argc < 2 || strtoll(argv[1], &end, 10) <= 0 || *end)
        return cli_usage_error("job", "%s needs a job ID", argv[0]);
    snprintf(path, cap, "/v1/jobs/%s%s", argv[1], suffix);
    return 0;
}

static int describe(const client *cl, int argc, char **argv, bool stop) {
    char path[128];
    if (argc != 2) return cli_usage_error("job", "%s takes one job ID", argv[0]);
    if (job_path(argc, argv, stop ? "/stop" : "", path, sizeof path)) return ANVIL_EXIT_USAGE;
    cJSON *j;
    int rc = client_call(cl, stop ? "POST" : "GET", path, stop ? "" : NULL, &j);
    if (rc) return rc;
    if (cl->json) client_print_json(j);
    else if (stop) printf("job %.0f: %s\n", client_num(j, "id"), client_str(j, "status"));
    else print_job(j);
    cJSON_Delete(j);
    return 0;
}

static int goodput(const client *cl, int argc, char **argv) {
    char path[128];
    if (argc != 2) return cli_usage_error("job", "goodput takes one job ID");
    if (job_path(argc, argv, "/goodput", path, sizeof path)) return ANVIL_EXIT_USAGE;
    cJSON *g;
    int rc = client_call(cl, "GET", path, NULL, &g);
    if (rc) return rc;
    if (cl->json) client_print_json(g);
    else cli_print_goodput(g, atof(argv[1]));
    cJSON_Delete(g);
    return 0;
}

static int wait_job(const client *cl, int argc, char **argv) {
    char brief[128], whole[128];
    if (argc != 2) return cli_usage_error("job", "wait takes one job ID");
    if (job_path(argc, argv, "?brief=1", brief, sizeof brief) || job_path(argc, argv, "", whole, sizeof whole))
        return ANVIL_EXIT_USAGE;
    for (;;) {
        cJSON *j;
        int rc = client_call(cl, "GET", brief, NULL, &j);
        if (rc) return rc;
        bool done = final(client_str(j, "status"));
        if (done && cl->json) {
            /* The whole job once it has ended, as describe gives it. */
            cJSON_Delete(j);
            if ((rc = client_call(cl, "GET", whole, NULL, &j))) return rc;
        }
        const char *s = client_str(j, "status");
        if (done) {
            if (cl->json) client_print_json(j);
            else {
                const char *sec = client_str(j, "secondary_status");
                printf("job %.0f: %s%s%s%s\n", client_num(j, "id"), s, sec[0] ? " (" : "", sec, sec[0] ? ")" : "");
                const char *why = client_str(j, "failure_reason");
                if (why[0]) printf("failure_reason: %s\n", why);
            }
            rc = strcmp(s, "Completed") ? ANVIL_EXIT_JOB_FAILED : 0;
            cJSON_Delete(j);
            return rc;
        }
        cJSON_Delete(j);
        usleep(300 * 1000);
    }
}

static int logs(const client *cl, int argc, char **argv) {
    char base[128], path[256];
    int rank = -1;
    bool follow = false;
    if (job_path(argc, argv, "/logs", base, sizeof base)) return ANVIL_EXIT_USAGE;
    for (int i = 2; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--follow") || !strcmp(argv[i], "-f")) follow = true;
        else if (!strcmp(argv[i], "--rank")) {
            if (!(v = arg_value("job", argc, argv, &i)) || arg_int("job", "--rank", v, 0, 1 << 20, &rank))
                return ANVIL_EXIT_USAGE;
        } else return cli_usage_error("job", "logs: unknown option '%s'", argv[i]);
    }
    long long offset = 0;
    bool ended = false;
    for (;;) {
        snprintf(path, sizeof path, "%s?offset=%lld", base, offset);
        if (rank >= 0) snprintf(path + strlen(path), sizeof path - strlen(path), "&rank=%d", rank);
        long code = 0;
        client_buffer b;
        if (client_http(cl, "GET", path, NULL, &code, &b)) {
            free(b.data);
            return cli_fail("job");
        }
        if (code >= 400) {
            int rc = client_refused(cl, code, b.data);
            free(b.data);
            return rc;
        }
        fwrite(b.data, 1, b.len, stdout);
        fflush(stdout);
        offset += (long long)b.len;
        free(b.data);
        if (b.len) continue;
        /* Everything written so far has been read: done, unless following a job that still runs. */
        if (!follow || ended) return 0;
        cJSON *j;
        snprintf(path, sizeof path, "%.*s?brief=1", (int)(strlen(base) - 5), base);
        int rc = client_call(cl, "GET", path, NULL, &j);
        if (rc) return rc;
        ended = final(client_str(j, "status"));
        cJSON_Delete(j);
        if (!ended) usleep(500 * 1000);
    }
}

static int audit(const client *cl, int argc, char **argv) {
    char path[200] = "/v1/audit", sep = '?';
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = arg_value("job", argc, argv, &i);
        int limit;
        if (!v) return ANVIL_EXIT_USAGE;
        if (!strcmp(a, "--user")) {
            if (!anvil_job_name_valid(v, 64)) return cli_usage_error("job", "audit: --user takes a user name");
            snprintf(path + strlen(path), sizeof path - strlen(path), "%cuser=%s", sep, v);
        } else if (!strcmp(a, "--limit")) {
            if (arg_int("job", a, v, 1, 1000000, &limit)) return ANVIL_EXIT_USAGE;
            snprintf(path + strlen(path), sizeof path - strlen(path), "%climit=%d", sep, limit);
        } else {
            return cli_usage_error("job", "audit: unknown option '%s'", a);
        }
        sep = '&';
    }
    cJSON *all;
    int rc = client_call(cl, "GET", path, NULL, &all);
    if (rc) return rc;
    if (cl->json) {
        client_print_json(all);
    } else {
        printf("%-7s %-21s %-12s %-16s %-13s %-24s %-6s %s\n", "ID", "AT", "USER", "TOKEN", "ACTION", "TARGET",
               "RESULT", "DETAIL");
        const cJSON *e;
        char t[32];
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(all, "audit")) {
            printf("%-7.0f %-21s %-12s %-16s %-13s %-24s %-6.0f %s\n", client_num(e, "id"),
                   client_when(client_num(e, "at"), t, sizeof t), client_str(e, "user")[0] ? client_str(e, "user") : "-",
                   client_str(e, "token_id")[0] ? client_str(e, "token_id") : "-", client_str(e, "action"),
                   client_str(e, "target"), client_num(e, "result"), client_str(e, "detail"));
        }
    }
    cJSON_Delete(all);
    return 0;
}

int cmd_job(int argc, char **argv) {
    client cl;
    int n, rc = client_open(&cl, "job", usage, argc, argv, &n);
    if (rc >= 0) return rc;
    const char *c = n ? argv[0] : "";
    if (!n) rc = cli_usage_error("job", "which command? (submit, list, describe, logs, stop, wait, audit, goodput)");
    else if (!strcmp(c, "submit")) rc = submit(&cl, n, argv);
    else if (!strcmp(c, "list")) rc = list(&cl, n, argv);
    else if (!strcmp(c, "describe")) rc = describe(&cl, n, argv, false);
    else if (!strcmp(c, "stop")) rc = describe(&cl, n, argv, true);
    else if (!strcmp(c, "wait")) rc = wait_job(&cl, n, argv);
    else if (!strcmp(c, "logs")) rc = logs(&cl, n, argv);
    else if (!strcmp(c, "audit")) rc = audit(&cl, n, argv);
    else if (!strcmp(c, "goodput")) rc = goodput(&cl, n, argv);
    else rc = cli_usage_error("job", "unknown command '%s'", c);
    client_close(&cl);
    return rc;
}

/* anvil job: the job service's client, over HTTP (libcurl). */
#include <curl/curl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/exit.h"
#include "core/fsutil.h"

static const char *usage =
    "usage: anvil job [--state DIR | --url URL] [--json] <command> ...\n"
    "\n"
    "  submit SPEC.json                       submit a job spec (README: 'The job service')\n"
    "  submit --name N [--procs P] [--max-retries R] [--max-runtime S] [--hang-timeout S]\n"
    "         [--output DIR] [--env NAME=VALUE ...] -- <anvil subcommand and its options>\n"
    "  list [--status S]                      jobs, by id (S: Pending, Running, Completed, ...)\n"
    "  describe ID                            a job, its spec and its status history\n"
    "  logs ID [--rank R] [--follow]          the launcher's merged log, or rank R's\n"
    "  stop ID                                checkpoint and stop (SIGKILL after the daemon's grace)\n"
    "  wait ID                                until the job ends\n"
    "\n"
    "The daemon is found through DIR/serve.port (default ~/.local/share/anvil) or --url.\n"
    "Tables by default, the daemon's JSON with --json. Exit status: 0 done (wait: Completed),\n"
    "1 error (no daemon), 2 bad usage, 3 the job ended Failed or Stopped (wait), 4 the daemon\n"
    "refused the request (one line says why).\n";

typedef struct {
    char url[512];
    bool json;
} client;

typedef struct {
    char *data;
    size_t len;
} buffer;

static size_t collect(char *p, size_t size, size_t n, void *cls) {
    buffer *b = cls;
    char *grown = realloc(b->data, b->len + size * n + 1);
    if (!grown) return 0;
    memcpy(grown + b->len, p, size * n);
    b->data = grown;
    b->len += size * n;
    b->data[b->len] = 0;
    return size * n;
}

/* One request; *code the HTTP status. -1 with a message when the daemon cannot be reached. */
static int http(const client *cl, const char *method, const char *path, const char *body, size_t blen, long *code,
                buffer *out) {
    char url[1024];
    snprintf(url, sizeof url, "%s%s", cl->url, path);
    out->data = calloc(1, 1);
    out->len = 0;
    CURL *h = curl_easy_init();
    if (!h || !out->data) {
        if (h) curl_easy_cleanup(h);
        return anvil_fail("out of memory");
    }
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)blen);
    }
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    if (rc != CURLE_OK) return anvil_fail("%s: %s (is anvil serve running?)", url, curl_easy_strerror(rc));
    return 0;
}

/* The JSON answer of a request, or the exit status when there is none to show: 4 for a refusal
 * (its one-line reason printed), 1 for a daemon that cannot be reached or failed. */
static int call(const client *cl, const char *method, const char *path, const char *body, cJSON **answer) {
    long code = 0;
    buffer b;
    *answer = NULL;
    if (http(cl, method, path, body, body ? strlen(body) : 0, &code, &b)) {
        free(b.data);
        return cli_fail("job");
    }
    cJSON *j = cJSON_Parse(b.data);
    free(b.data);
    if (code >= 400 || !j) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        fprintf(stderr, "anvil job: error: %s (HTTP %ld)\n", cJSON_IsString(e) ? e->valuestring : "bad answer", code);
        cJSON_Delete(j);
        return code >= 400 && code < 500 ? ANVIL_EXIT_REFUSED : ANVIL_EXIT_ERROR;
    }
    *answer = j;
    return 0;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *when(double t, char *buf, size_t cap) {
    if (t <= 0) return "-";
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%SZ", &tm);
    return buf;
}

static void print_json(const cJSON *j) {
    char *t = cJSON_Print(j);
    if (t) puts(t);
    free(t);
}

static bool final(const char *status) {
    return !strcmp(status, "Completed") || !strcmp(status, "Failed") || !strcmp(status, "Stopped");
}

static void print_row(const cJSON *j) {
    char t[32];
    printf("%-6.0f %-24s %-10s %-22s %-7.0f %s\n", num(j, "id"), str(j, "name"), str(j, "status"),
           str(j, "secondary_status")[0] ? str(j, "secondary_status") : "-", num(j, "attempt"),
           when(num(j, "submitted_at"), t, sizeof t));
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
            else if (!strcmp(a, "--output")) cJSON_AddStringToObject(spec, "output", v);
            else if (!strcmp(a, "--procs") && !arg_int("job", a, v, 1, 1024, &n))
                cJSON_AddNumberToObject(res, "procs_per_host", n);
            else if (!strcmp(a, "--max-retries") && !arg_int("job", a, v, 0, 100, &n))
                cJSON_AddNumberToObject(spec, "max_retries", n);
            else if (!strcmp(a, "--max-runtime") && !arg_double("job", a, v, &d))
                cJSON_AddNumberToObject(spec, "max_runtime_s", d);
            else if (!strcmp(a, "--hang-timeout") && !arg_double("job", a, v, &d))
                cJSON_AddNumberToObject(spec, "hang_timeout_s", d);
            else if (!strcmp(a, "--env") && strchr(v, '=')) {
                cJSON *env = cJSON_GetObjectItemCaseSensitive(spec, "env");
                if (!env) env = cJSON_AddObjectToObject(spec, "env");
                char *key = strndup(v, strcspn(v, "="));
                if (key) cJSON_AddStringToObject(env, key, strchr(v, '=') + 1);
                free(key);
            }
            else {
                cJSON_Delete(spec);
                if (!strcmp(a, "--env")) return cli_usage_error("job", "submit: --env takes NAME=VALUE");
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
    int rc = call(cl, "POST", "/v1/jobs", text, &job);
    free(text);
    if (rc) return rc;
    if (cl->json) print_json(job);
    else printf("submitted job %.0f (%s), run folder %s\n", num(job, "id"), str(job, "name"), str(job, "run_dir"));
    cJSON_Delete(job);
    return 0;
}

static int list(const client *cl, int argc, char **argv) {
    char path[128] = "/v1/jobs";
    if (argc == 3 && !strcmp(argv[1], "--status")) snprintf(path, sizeof path, "/v1/jobs?status=%.60s", argv[2]);
    else if (argc != 1) return cli_usage_error("job", "list takes only --status S");
    cJSON *all;
    int rc = call(cl, "GET", path, NULL, &all);
    if (rc) return rc;
    if (cl->json) {
        print_json(all);
    } else {
        printf("%-6s %-24s %-10s %-22s %-7s %s\n", "ID", "NAME", "STATUS", "SECONDARY", "ATTEMPT", "SUBMITTED");
        const cJSON *j;
        cJSON_ArrayForEach(j, cJSON_GetObjectItemCaseSensitive(all, "jobs")) print_row(j);
    }
    cJSON_Delete(all);
    return 0;
}

static void print_job(const cJSON *j) {
    char t[32];
    printf("id:             %.0f\nname:           %s\nstatus:         %s", num(j, "id"), str(j, "name"),
           str(j, "status"));
    printf(str(j, "secondary_status")[0] ? " (%s)\n" : "%s\n", str(j, "secondary_status"));
    if (str(j, "failure_reason")[0]) printf("failure_reason: %s\n", str(j, "failure_reason"));
    printf("attempt:        %.0f\nexit_code:      %.0f\nrun folder:     %s\n", num(j, "attempt"), num(j, "exit_code"),
           str(j, "run_dir"));
    printf("submitted:      %s\n", when(num(j, "submitted_at"), t, sizeof t));
    printf("started:        %s\n", when(num(j, "started_at"), t, sizeof t));
    printf("ended:          %s\n", when(num(j, "ended_at"), t, sizeof t));
    char *spec = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "spec"));
    printf("spec:           %s\nhistory:\n", spec ? spec : "");
    free(spec);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "history")) {
        printf("  %s  %-10s %-22s %s\n", when(num(e, "at"), t, sizeof t), str(e, "status"),
               str(e, "secondary_status")[0] ? str(e, "secondary_status") : "-", str(e, "message"));
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
    int rc = call(cl, stop ? "POST" : "GET", path, stop ? "" : NULL, &j);
    if (rc) return rc;
    if (cl->json) print_json(j);
    else if (stop) printf("job %.0f: %s\n", num(j, "id"), str(j, "status"));
    else print_job(j);
    cJSON_Delete(j);
    return 0;
}

static int wait_job(const client *cl, int argc, char **argv) {
    char path[128];
    if (argc != 2) return cli_usage_error("job", "wait takes one job ID");
    if (job_path(argc, argv, "", path, sizeof path)) return ANVIL_EXIT_USAGE;
    for (;;) {
        cJSON *j;
        int rc = call(cl, "GET", path, NULL, &j);
        if (rc) return rc;
        const char *s = str(j, "status");
        if (final(s)) {
            if (cl->json) print_json(j);
            else {
                const char *sec = str(j, "secondary_status");
                printf("job %.0f: %s%s%s%s\n", num(j, "id"), s, sec[0] ? " (" : "", sec, sec[0] ? ")" : "");
                if (str(j, "failure_reason")[0]) printf("failure_reason: %s\n", str(j, "failure_reason"));
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
        buffer b;
        if (http(cl, "GET", path, NULL, 0, &code, &b)) {
            free(b.data);
            return cli_fail("job");
        }
        if (code >= 400) {
            cJSON *e = cJSON_Parse(b.data);
            fprintf(stderr, "anvil job: error: %s (HTTP %ld)\n", str(e, "error"), code);
            cJSON_Delete(e);
            free(b.data);
            return code < 500 ? ANVIL_EXIT_REFUSED : ANVIL_EXIT_ERROR;
        }
        fwrite(b.data, 1, b.len, stdout);
        fflush(stdout);
        offset += (long long)b.len;
        free(b.data);
        if (b.len) continue;
        /* Everything written so far has been read: done, unless following a job that still runs. */
        if (!follow || ended) return 0;
        cJSON *j;
        snprintf(path, sizeof path, "%.*s", (int)(strlen(base) - 5), base);
        int rc = call(cl, "GET", path, NULL, &j);
        if (rc) return rc;
        ended = final(str(j, "status"));
        cJSON_Delete(j);
        if (!ended) usleep(500 * 1000);
    }
}

/* --state DIR's serve.port, as http://127.0.0.1:PORT. */
static int find_daemon(const char *state, client *cl) {
    char *dir = cli_state_dir(state), path[PATH_MAX], *text = NULL;
    size_t len;
    if (!dir) return anvil_fail("out of memory");
    snprintf(path, sizeof path, "%s/serve.port", dir);
    free(dir);
    if (anvil_read_file_max(path, 32, &text, &len))
        return anvil_fail("%s: no daemon's port (is anvil serve running? or give --url)", path);
    int port = atoi(text);
    free(text);
    if (port <= 0 || port > 65535) return anvil_fail("%s: not a port number", path);
    snprintf(cl->url, sizeof cl->url, "http://127.0.0.1:%d", port);
    return 0;
}

int cmd_job(int argc, char **argv) {
    client cl = {0};
    const char *state = NULL, *url = NULL;
    /* The options of every command, wherever they stand before a '--', are taken out of argv. */
    int n = 0;
    bool past = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!past && !strcmp(a, "--")) past = true;
        if (!past && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            fputs(usage, stdout);
            return 0;
        } else if (!past && !strcmp(a, "--json")) {
            cl.json = true;
        } else if (!past && (!strcmp(a, "--state") || !strcmp(a, "--url"))) {
            const char *v = arg_value("job", argc, argv, &i);
            if (!v) return ANVIL_EXIT_USAGE;
            *(a[2] == 's' ? &state : &url) = v;
        } else {
            argv[n++] = argv[i];
        }
    }
    if (!n) return cli_usage_error("job", "which command? (submit, list, describe, logs, stop, wait)");
    if (url) snprintf(cl.url, sizeof cl.url, "%s", url);
    else if (find_daemon(state, &cl)) return cli_fail("job");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc;
    const char *c = argv[0];
    if (!strcmp(c, "submit")) rc = submit(&cl, n, argv);
    else if (!strcmp(c, "list")) rc = list(&cl, n, argv);
    else if (!strcmp(c, "describe")) rc = describe(&cl, n, argv, false);
    else if (!strcmp(c, "stop")) rc = describe(&cl, n, argv, true);
    else if (!strcmp(c, "wait")) rc = wait_job(&cl, n, argv);
    else if (!strcmp(c, "logs")) rc = logs(&cl, n, argv);
    else rc = cli_usage_error("job", "unknown command '%s'", c);
    curl_global_cleanup();
    return rc;
}

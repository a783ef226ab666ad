/* The hooks' delivery thread: runs commands and POSTs events queued in the outbox (outbox.c). */
#include "job/hooks.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "job/outbox.h"

extern char **environ;

/* The longest wait between two attempts of one delivery. */
#define BACKOFF_CAP_S 60.0

struct anvil_hooks {
    anvil_store *st;
    anvil_hooks_options o;
    char *log;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
};

/* Whether host, as libcurl's URL parser gives it, is this machine's loopback. */
static bool loopback(const char *host) {
    struct in_addr a;
    if (!strcasecmp(host, "localhost") || !strcmp(host, "[::1]")) return true;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* The URL parsed by libcurl, which the POST then uses as parsed; NULL with why when it is not an
 * http:// URL to a loopback host without user, password or options. */
static CURLU *parse_url(const char *url, char *why, size_t cap) {
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *part = NULL;
    CURLUcode rc = u ? curl_url_set(u, CURLUPART_URL, url, 0) : CURLUE_OUT_OF_MEMORY;
    if (rc) snprintf(why, cap, "not a URL (%s)", curl_url_strerror(rc));
    else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) || strcmp(scheme, "http"))
        snprintf(why, cap, "only http:// is allowed");
    else if (!curl_url_get(u, CURLUPART_USER, &part, 0) || !curl_url_get(u, CURLUPART_PASSWORD, &part, 0) ||
             !curl_url_get(u, CURLUPART_OPTIONS, &part, 0))
        snprintf(why, cap, "a user name, password or options before the host are not allowed");
    else if (!curl_url_get(u, CURLUPART_ZONEID, &part, 0) || curl_url_get(u, CURLUPART_HOST, &host, 0) || !loopback(host))
        snprintf(why, cap, "the host must be this machine's loopback (127.0.0.1, localhost or [::1])");
    else why[0] = 0;
    curl_free(scheme);
    curl_free(host);
    curl_free(part);
    if (why[0]) {
        curl_url_cleanup(u);
        return NULL;
    }
    return u;
}

int anvil_hook_check(const anvil_hook *h) {
    if (!h->target[0]) return anvil_fail("hook: empty %s", h->kind == ANVIL_HOOK_URL ? "URL" : "command");
    if (h->kind == ANVIL_HOOK_COMMAND) return 0;
    char why[200];
    CURLU *u = parse_url(h->target, why, sizeof why);
    if (!u) return anvil_fail("hook URL %s: %s", h->target, why);
    curl_url_cleanup(u);
    return 0;
}

/* One line through the caller's report function. */
static void report(const anvil_hooks *h, const char *fmt, ...) ANVIL_PRINTF(2, 3);
static void report(const anvil_hooks *h, const char *fmt, ...) {
    if (!h->o.report) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    h->o.report(h->o.report_ctx, line);
}

/* The event's JSON text, malloc'd. */
static char *event_text(anvil_store *st, const anvil_outbox_row *r) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "event_id", (double)r->id);
    cJSON_AddNumberToObject(o, "job_id", (double)r->job_id);
    cJSON_AddNumberToObject(o, "at", r->at);
    cJSON_AddStringToObject(o, "status", r->status);
    cJSON_AddStringToObject(o, "secondary_status", r->secondary);
    cJSON_AddStringToObject(o, "message", r->message);
    cJSON_AddNumberToObject(o, "delivery_attempt", r->attempts + 1);
    anvil_job job;
    if (anvil_store_get(st, r->job_id, &job) == 0) {
        cJSON *j = anvil_job_json(&job);
        if (j) cJSON_AddItemToObject(o, "job", j);
        anvil_job_free(&job);
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Runs the command with the event on its standard input; 0 when it exited 0 within the timeout,
 * else -1 with why. */
static int run_command(const anvil_hooks *h, const anvil_outbox_row *r, const char *event, char *why, size_t cap) {
    /* The event in a memory file rather than a pipe: a command that never reads its input cannot
     * block the write. Close-on-exec, so that no attempt started meanwhile inherits it. */
    int in = memfd_create("anvil-hook-event", MFD_CLOEXEC);
    size_t len = strlen(event);
    if (in < 0 || write(in, event, len) != (ssize_t)len || lseek(in, 0, SEEK_SET)) {
        snprintf(why, cap, "cannot stage the event: %s", strerror(errno));
        if (in >= 0) close(in);
        return -1;
    }
    int out = open(h->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    /* Everything the child needs is built before fork: between fork and exec only system calls. */
    int envc = 0;
    while (environ[envc]) envc++;
    char **envp = calloc((size_t)envc + 4, sizeof *envp);
    char vars[3][64];
    snprintf(vars[0], sizeof vars[0], "ANVIL_HOOK_EVENT_ID=%lld", (long long)r->id);
    snprintf(vars[1], sizeof vars[1], "ANVIL_JOB_ID=%lld", (long long)r->job_id);
    snprintf(vars[2], sizeof vars[2], "ANVIL_JOB_STATUS=%.40s", r->status);
    int k = 0;
    for (int i = 0; envp && i < envc; i++)
        if (strncmp(environ[i], "ANVIL_HOOK_EVENT_ID=", 20) && strncmp(environ[i], "ANVIL_JOB_ID=", 13) &&
            strncmp(environ[i], "ANVIL_JOB_STATUS=", 17))
            envp[k++] = environ[i];
    for (int i = 0; envp && i < 3; i++) envp[k++] = vars[i];
    char *const argv[] = {"sh", "-c", r->target, NULL};
    pid_t pid = envp && out >= 0 ? fork() : -1;
    if (pid == 0) {
        setpgid(0, 0);
        dup2(in, 0);
        dup2(out, 1);
        dup2(out, 2);
        execve("/bin/sh", argv, envp);
        _exit(127);
    }
    int e = errno;
    if (pid > 0) setpgid(pid, pid);
    free(envp);
    close(in);
    if (out >= 0) close(out);
    if (pid < 0) {
        snprintf(why, cap, "cannot start it: %s", out < 0 ? "cannot open the hooks' log" : strerror(e));
        return -1;
    }
    int status = 0;
    double deadline = now_s() + h->o.timeout_s;
    pid_t got;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && now_s() < deadline) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (got == 0) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        snprintf(why, cap, "still running after %g s: killed", h->o.timeout_s);
        return -1;
    }
    if (got < 0) {
        snprintf(why, cap, "waitpid: %s", strerror(errno));
        return -1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (WIFEXITED(status)) snprintf(why, cap, "exit %d", WEXITSTATUS(status));
    else snprintf(why, cap, "killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return -1;
}

static size_t discard(char *p, size_t size, size_t n, void *ctx) {
    (void)p;
    (void)ctx;
    return size * n;
}

/* POSTs the event; 0 on a 2xx answer within the timeout, else -1 with why. */
static int post(const anvil_hooks *h, const anvil_outbox_row *r, const char *event, char *why, size_t cap) {
    /* Checked again at each delivery: the outbox may hold a row queued by an older daemon. */
    CURLU *u = parse_url(r->target, why, cap);
    if (!u) return -1;
    CURL *c = curl_easy_init();
    if (!c) {
        curl_url_cleanup(u);
        snprintf(why, cap, "curl: out of memory");
        return -1;
    }
    char idh[64], err[CURL_ERROR_SIZE] = "";
    snprintf(idh, sizeof idh, "X-Anvil-Event-Id: %lld", (long long)r->id);
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    if (hd) hd = curl_slist_append(hd, idh);
    curl_easy_setopt(c, CURLOPT_CURLU, u);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    /* Hooks go to this machine: no proxy from the environment may carry them elsewhere. */
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, event);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(h->o.timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
    CURLcode cc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hd);
    curl_easy_cleanup(c);
    curl_url_cleanup(u);
    if (cc != CURLE_OK) {
        snprintf(why, cap, "%s", err[0] ? err : curl_easy_strerror(cc));
        return -1;
    }
    if (code / 100 == 2) return 0;
    snprintf(why, cap, "answered HTTP %ld", code);
    return -1;
}

/* One attempt of r, recorded with its outcome and logged. */
static void deliver(anvil_hooks *h, anvil_outbox_row *r) {
    char why[512] = "", *event = event_text(h->st, r);
    int rc = -1;
    if (!event) snprintf(why, sizeof why, "out of memory");
    else if (r->kind == ANVIL_HOOK_COMMAND) rc = run_command(h, r, event, why, sizeof why);
    else rc = post(h, r, event, why, sizeof why);
    free(event);
    r->attempts++;
    double now = anvil_store_now();
    const char *what = r->kind == ANVIL_HOOK_COMMAND ? "command" : "URL";
    if (!rc) {
        r->delivered_at = now;
        report(h, "hook %s: job %lld %s (event %lld) delivered, attempt %d", what,
                (long long)r->job_id, r->status, (long long)r->id, r->attempts);
    } else if (r->attempts >= h->o.max_attempts) {
        r->given_up_at = now;
        report(h, "hook %s: job %lld %s (event %lld): %s; given up after %d attempts", what,
                (long long)r->job_id, r->status, (long long)r->id, why, r->attempts);
    } else {
        double wait = fmin(BACKOFF_CAP_S, ldexp(1.0, r->attempts - 1));
        r->next_at = now + wait;
        report(h, "hook %s: job %lld %s (event %lld): %s; attempt %d of %d, next in %g s", what,
                (long long)r->job_id, r->status, (long long)r->id, why, r->attempts, h->o.max_attempts, wait);
    }
    free(r->last_error);
    r->last_error = strdup(rc ? why : "");
    if (!r->last_error || anvil_outbox_record(h->st, r))
        report(h, "hook: cannot record event %lld: %s", (long long)r->id,
                r->last_error ? anvil_errmsg() : "out of memory");
}

static void *loop(void *arg) {
    anvil_hooks *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->quit) {
        pthread_mutex_unlock(&h->mu);
        anvil_outbox_row *rows;
        int n;
        if (anvil_outbox_due(h->st, anvil_store_now(), &rows, &n)) {
            report(h, "hook: %s", anvil_errmsg());
            n = 0;
            rows = NULL;
        }
        for (int i = 0; i < n; i++) {
            pthread_mutex_lock(&h->mu);
            bool quit = h->quit;
            pthread_mutex_unlock(&h->mu);
            if (!quit) deliver(h, &rows[i]);
        }
        anvil_outbox_rows_free(rows, n);
        free(rows);
        pthread_mutex_lock(&h->mu);
        /* Changes are queued by other threads without a signal: a quarter second is the latency. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 250 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        if (!h->quit && !n) pthread_cond_timedwait(&h->cv, &h->mu, &until);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

anvil_hooks *anvil_hooks_start(anvil_store *st, const anvil_hooks_options *o) {
    if (o->max_attempts < 1 || !(o->timeout_s > 0)) {
        anvil_fail("hooks: max attempts must be >= 1 and the timeout > 0");
        return NULL;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        anvil_fail("hooks: curl_global_init failed");
        return NULL;
    }
    anvil_hooks *h = calloc(1, sizeof *h);
    if (!h || !(h->log = strdup(o->log))) {
        free(h);
        anvil_fail("out of memory");
        return NULL;
    }
    h->st = st;
    h->o = *o;
    h->o.log = h->log;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    int e = pthread_create(&h->thread, NULL, loop, h);
    if (e) {
        anvil_fail("hooks: cannot start a thread: %s", strerror(e));
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
        free(h->log);
        free(h);
        return NULL;
    }
    return h;
}

void anvil_hooks_stop(anvil_hooks *h) {
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->quit = true;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->log);
    free(h);
}

/* GET /metrics: the job service in Prometheus's text format, and the API's request figures. */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "job/api_internal.h"
#include "job/goodput.h"
#include "job/store.h"
#include "obs/heartbeat.h"
#include "obs/prom.h"

/* Jobs that ended longer ago than this drop off the page (they stay in the state and the API). */
#define RECENT_S 3600.0
/* Distinct (action, status) pairs and actions kept; the API has fewer. */
#define MAX_KEYS 64

struct anvil_api_stats {
    pthread_mutex_t mu;
    int nactions, ncodes;
    struct {
        const char *action;
        anvil_prom_histogram h;
    } actions[MAX_KEYS];
    struct {
        const char *action;
        unsigned status;
        double n;
    } codes[MAX_KEYS];
};

anvil_api_stats *anvil_api_stats_new(void) {
    anvil_api_stats *s = calloc(1, sizeof *s);
    if (s) pthread_mutex_init(&s->mu, NULL);
    return s;
}

void anvil_api_stats_free(anvil_api_stats *s) {
    if (!s) return;
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* action is one of the API's static names, so it is kept by pointer. */
void anvil_api_stats_observe(anvil_api_stats *s, const char *action, unsigned status, double seconds) {
    if (!s || !action) return;
    pthread_mutex_lock(&s->mu);
    int a = 0, k = 0;
    while (a < s->nactions && strcmp(s->actions[a].action, action)) a++;
    if (a == s->nactions && a < MAX_KEYS) {
        s->actions[a].action = action;
        /* 0.1 ms to about 3 s. */
        anvil_prom_histogram_exponential(&s->actions[a].h, 1e-4, 2.0, 16);
        s->nactions++;
    }
    if (a < s->nactions) anvil_prom_histogram_observe(&s->actions[a].h, seconds);
    while (k < s->ncodes && (strcmp(s->codes[k].action, action) || s->codes[k].status != status)) k++;
    if (k == s->ncodes && k < MAX_KEYS) {
        s->codes[k].action = action;
        s->codes[k].status = status;
        s->codes[k].n = 0;
        s->ncodes++;
    }
    if (k < s->ncodes) s->codes[k].n++;
    pthread_mutex_unlock(&s->mu);
}

static void request_figures(anvil_prom *p, anvil_api_stats *s) {
    pthread_mutex_lock(&s->mu);
    anvil_prom_family(p, "anvil_serve_api_requests_total", ANVIL_PROM_COUNTER,
                      "API requests answered, by action and HTTP status.");
    for (int k = 0; k < s->ncodes; k++) {
        char code[16];
        snprintf(code, sizeof code, "%u", s->codes[k].status);
        anvil_prom_label l[] = {{"action", s->codes[k].action}, {"code", code}};
        anvil_prom_sample(p, "anvil_serve_api_requests_total", l, 2, s->codes[k].n);
    }
    anvil_prom_family(p, "anvil_serve_api_request_seconds", ANVIL_PROM_HISTOGRAM,
                      "Time to answer an API request, by action.");
    for (int a = 0; a < s->nactions; a++) {
        anvil_prom_label l = {"action", s->actions[a].action};
        anvil_prom_histogram_samples(p, "anvil_serve_api_request_seconds", &l, 1, &s->actions[a].h);
    }
    pthread_mutex_unlock(&s->mu);
}

typedef struct {
    double step, loss, tokens_per_s;
} train_record;

/* The last "train" record of run_dir/metrics.jsonl, from its last 16 KiB; 0, or 1 when none. */
static int last_train_record(const char *run_dir, train_record *r) {
    char path[PATH_MAX], buf[16384 + 1];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    off_t end = lseek(fd, 0, SEEK_END), from = end > 16384 ? end - 16384 : 0;
    ssize_t n = end > 0 ? pread(fd, buf, (size_t)(end - from), from) : 0;
    close(fd);
    if (n <= 0) return 1;
    buf[n] = 0;
    char *line = NULL;
    for (char *p = buf; (p = strstr(p, "{\"kind\":\"train\"")); p++) line = p;
    char *nl = line ? strchr(line, '\n') : NULL;
    if (!nl) return 1; /* none, or the last one still being written */
    cJSON *o = anvil_json_parse(line, (size_t)(nl - line), NULL);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step"), *loss = cJSON_GetObjectItemCaseSensitive(o, "loss"),
                *tps = cJSON_GetObjectItemCaseSensitive(o, "tokens_per_s");
    int rc = cJSON_IsNumber(step) && cJSON_IsNumber(loss) && cJSON_IsNumber(tps) ? 0 : 1;
    if (!rc) *r = (train_record){step->valuedouble, loss->valuedouble, tps->valuedouble};
    cJSON_Delete(o);
    return rc;
}

/* A family of one sample per job. */
typedef struct {
    const char *name, *help;
    anvil_prom_type type;
} job_family;

static const job_family job_families[] = {
    {"anvil_job_info", "Each job that runs or ended within the hour: 1, with its status and owner.", ANVIL_PROM_GAUGE},
    {"anvil_job_attempt", "The job's attempts started so far.", ANVIL_PROM_GAUGE},
    {"anvil_job_runtime_seconds", "Seconds since the job's first start, until it ended.", ANVIL_PROM_GAUGE},
    {"anvil_job_step", "The last optimizer step of the job's heartbeat.", ANVIL_PROM_GAUGE},
    {"anvil_job_train_loss", "The training loss of the job's last logged step.", ANVIL_PROM_GAUGE},
    {"anvil_job_train_tokens_per_second", "Throughput of the job's last logged step.", ANVIL_PROM_GAUGE},
};

static void job_figures(anvil_prom *p, const anvil_job *jobs, int n, double now) {
    for (size_t f = 0; f < sizeof job_families / sizeof *job_families; f++) {
        const job_family *fam = &job_families[f];
        anvil_prom_family(p, fam->name, fam->type, fam->help);
        for (int i = 0; i < n; i++) {
            const anvil_job *j = &jobs[i];
            char id[24];
            snprintf(id, sizeof id, "%lld", (long long)j->id);
            const char *status = anvil_job_status_name(j->status);
            anvil_prom_label l[] = {{"job_id", id}, {"name", j->name}, {"status", status},
                                    {"secondary_status", j->secondary}, {"owner", j->owner}, {"role", j->role}};
            anvil_heartbeat hb;
            train_record tr;
            switch (f) {
            case 0: anvil_prom_sample(p, fam->name, l, 6, 1); break;
            case 1: anvil_prom_sample(p, fam->name, l, 2, j->attempt); break;
            case 2:
                if (j->first_started_at > 0)
                    anvil_prom_sample(p, fam->name, l, 2, (j->ended_at > 0 ? j->ended_at : now) - j->first_started_at);
                break;
            case 3:
                if (j->first_started_at > 0 && !anvil_heartbeat_read(j->run_dir, &hb))
                    anvil_prom_sample(p, fam->name, l, 2, (double)hb.step);
                break;
            default:
                if (j->first_started_at > 0 && !last_train_record(j->run_dir, &tr))
                    anvil_prom_sample(p, fam->name, l, 2, f == 4 ? tr.loss : tr.tokens_per_s);
            }
        }
    }
}

/* Each job's goodput accounting (job/goodput.h): seconds by part, the ETTR, and its faults so far. A
 * job whose accounting cannot be read (its metrics file unreadable) is left out of these families. */
static void goodput_figures(anvil_prom *p, const anvil_api_env *env, const anvil_job *jobs, int n, double now) {
    anvil_goodput *g = calloc((size_t)(n ? n : 1), sizeof *g);
    bool *have = calloc((size_t)(n ? n : 1), sizeof *have);
    for (int i = 0; g && have && i < n; i++) have[i] = jobs[i].first_started_at > 0 && !anvil_goodput_of(env->st, env->goodput, &jobs[i], now, &g[i]);
    anvil_prom_family(p, "anvil_job_goodput_seconds", ANVIL_PROM_GAUGE,
                      "Where the job's wall time went: productive, recomputed, detection, restart, checkpoint, eval, "
                      "queue (they add up to its wall time).");
    for (int i = 0; have && i < n; i++) {
        char id[24];
        snprintf(id, sizeof id, "%lld", (long long)jobs[i].id);
        for (int part = 0; have[i] && part < ANVIL_GP_NPARTS; part++) {
            anvil_prom_label l[] = {{"job_id", id}, {"name", jobs[i].name}, {"part", anvil_gp_part_name(part)}};
            anvil_prom_sample(p, "anvil_job_goodput_seconds", l, 3, g[i].total.s[part]);
        }
    }
    for (int f = 0; f < 2; f++) {
        const char *name = f ? "anvil_job_faults" : "anvil_job_ettr";
        anvil_prom_family(p, name, ANVIL_PROM_GAUGE,
                          f ? "Faults injected into the job (anvil chaos)."
                            : "Effective training time ratio: productive seconds over the job's wall time less its queue.");
        for (int i = 0; have && i < n; i++) {
            char id[24];
            snprintf(id, sizeof id, "%lld", (long long)jobs[i].id);
            anvil_prom_label l[] = {{"job_id", id}, {"name", jobs[i].name}};
            if (have[i]) anvil_prom_sample(p, name, l, 2, f ? g[i].nfaults : g[i].ettr);
        }
    }
    for (int i = 0; have && i < n; i++)
        if (have[i]) anvil_goodput_free(&g[i]);
    free(g);
    free(have);
}

static void state_figures(anvil_prom *p, const anvil_store_counts *k) {
    anvil_prom_family(p, "anvil_serve_jobs", ANVIL_PROM_GAUGE, "Jobs in the state, by status.");
    for (int s = 0; s < ANVIL_JOB_NSTATUS; s++) {
        anvil_prom_label l = {"status", anvil_job_status_name((anvil_job_status)s)};
        anvil_prom_sample(p, "anvil_serve_jobs", &l, 1, (double)k->by_status[s]);
    }
    const struct {
        const char *name, *help;
        int64_t v;
    } counters[] = {
        {"anvil_serve_submissions_total", "Jobs submitted.", k->submitted},
        {"anvil_serve_retries_total", "Attempts started as a retry.", k->retries},
        {"anvil_serve_hangs_total", "Hangs detected (no heartbeat within hang_timeout_s).", k->hangs},
        {"anvil_serve_hook_deliveries_total", "Events delivered to a hook.", k->hook_delivered},
        {"anvil_serve_hook_failures_total", "Hook delivery attempts that failed.", k->hook_failed},
        {"anvil_serve_hook_given_up_total", "Events given up after the last attempt.", k->hook_given_up},
    };
    for (size_t i = 0; i < sizeof counters / sizeof *counters; i++) {
        anvil_prom_family(p, counters[i].name, ANVIL_PROM_COUNTER, counters[i].help);
        anvil_prom_sample(p, counters[i].name, NULL, 0, (double)counters[i].v);
    }
}

int api_metrics(anvil_api_call *c) {
    static const char *const none[] = {NULL};
    if (!api_known_args(c, none)) return -1;
    anvil_store_counts k;
    anvil_job *jobs;
    int n;
    double now = anvil_store_now();
    if (anvil_store_counts_read(c->env->st, &k)) return api_internal_error(c, NULL);
    if (anvil_store_list_recent(c->env->st, now - RECENT_S, &jobs, &n))
        return api_internal_error(c, NULL);
    anvil_prom *p = anvil_prom_new();
    if (p) {
        state_figures(p, &k);
        job_figures(p, jobs, n, now);
        goodput_figures(p, c->env, jobs, n, now);
        if (c->env->stats) request_figures(p, c->env->stats);
    }
    anvil_job_list_free(jobs, n);
    size_t len;
    const char *text = p ? anvil_prom_text(p, &len) : NULL;
    char *body = text ? malloc(len + 1) : NULL;
    if (body) memcpy(body, text, len + 1);
    anvil_prom_free(p);
    if (!body) return api_internal_error(c, "out of memory");
    c->rs->status = 200;
    c->rs->body = body;
    c->rs->len = len;
    c->rs->content_type = ANVIL_PROM_CONTENT_TYPE;
    return 0;
}

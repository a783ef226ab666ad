#include "train/telemetry.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "dist/comm.h"
#include "kernels/isa.h"
#include "obs/httpd.h"
#include "obs/logmetric.h"
#include "obs/prom.h"
#include "obs/sysstat.h"
#include "obs/trace.h"

/* What each rank sends rank 0 after a step, in this order, then the value of each log metric. */
enum {
    V_STEP_S,
    V_COMM_WAIT_RATIO,
    V_COMM_WAIT_S,
    V_RSS,
    V_PEAK_RSS,
    V_CPU_S,
    V_CPU_UTIL,
    V_READ,
    V_WRITE,
    V_RX,
    V_TX,
    V_FDS,
    V_PEAK_FLOPS,
    V_COUNT
};

/* The /proc figures are read at most this often (seconds): reading them costs about 0.1 ms. */
#define SYSSTAT_PERIOD_S 1.0

struct anvil_telemetry {
    anvil_telemetry_config c;
    int rank, world, serving;
    int nv;            /* values per rank: V_COUNT and the log metrics */
    anvil_logmetrics *lm;
    FILE *tap;
    anvil_metrics *jsonl;
    double *lm_values;
    int *lm_updated;
    double peak_flops; /* this rank's, FLOP/s */
    anvil_peak peak;   /* ... and where it came from */
    double *mine;      /* nv, untouched while a gather is in flight */
    double *all;       /* world x nv, the gather's result */
    size_t *counts;
    anvil_req *pending;
    anvil_sysstat sys;
    double sys_at, cpu_util;
    double prev_comm_wait;
    anvil_httpd *httpd;
    int profiling;  /* 1 recording, 2 stopped, waiting for the spans begun to end, 0 */
    int steps_done; /* the last step done, 0 before the first */
    /* What the page shows (rank 0), under mu: the server's thread reads it. */
    pthread_mutex_t mu;
    int have_step, have_val, have_ranks;
    anvil_telemetry_step last;
    double last_step_unix, val_loss;
    anvil_prom_histogram step_hist;
    double *shown; /* world x nv */
    struct {
        const char *client;
        anvil_s3_stats st;
    } s3[2]; /* client NULL: none yet */
};

static double unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- the page ---- */

typedef struct {
    const char *name, *help;
    anvil_prom_type type;
    int v; /* index into a rank's values */
} rank_family;

static const rank_family rank_families[] = {
    {"anvil_rank_step_seconds", "Duration of the rank's last optimizer step.", ANVIL_PROM_GAUGE, V_STEP_S},
    {"anvil_rank_comm_wait_ratio",
     "Share of the rank's last step spent waiting for communication that did not overlap computation.",
     ANVIL_PROM_GAUGE, V_COMM_WAIT_RATIO},
    {"anvil_rank_comm_wait_seconds_total", "Time the rank's training thread waited for communication.",
     ANVIL_PROM_COUNTER, V_COMM_WAIT_S},
    {"anvil_rank_resident_memory_bytes", "Resident set size of the rank's process.", ANVIL_PROM_GAUGE, V_RSS},
    {"anvil_rank_resident_memory_peak_bytes", "Peak resident set size of the rank's process.", ANVIL_PROM_GAUGE,
     V_PEAK_RSS},
    {"anvil_rank_cpu_seconds_total", "User and system CPU time of the rank's process.", ANVIL_PROM_COUNTER, V_CPU_S},
    {"anvil_rank_cpu_utilization_ratio",
     "CPU time of the rank's process per second of wall time, over the online CPUs, over the last sample period.",
     ANVIL_PROM_GAUGE, V_CPU_UTIL},
    {"anvil_rank_disk_read_bytes_total", "Bytes the rank's process had read from storage.", ANVIL_PROM_COUNTER,
     V_READ},
    {"anvil_rank_disk_written_bytes_total", "Bytes the rank's process had written to storage.", ANVIL_PROM_COUNTER,
     V_WRITE},
    {"anvil_rank_network_receive_bytes_total",
     "Bytes received on all interfaces of the rank's network namespace (Linux keeps no per-process count).",
     ANVIL_PROM_COUNTER, V_RX},
    {"anvil_rank_network_transmit_bytes_total",
     "Bytes sent on all interfaces of the rank's network namespace (Linux keeps no per-process count).",
     ANVIL_PROM_COUNTER, V_TX},
    {"anvil_rank_open_fds", "Open file descriptors of the rank's process.", ANVIL_PROM_GAUGE, V_FDS},
    {"anvil_rank_peak_flops_per_second",
     "The rank's vector multiply-add peak (its machine's cached best probe), the denominator of MFU.", ANVIL_PROM_GAUGE,
     V_PEAK_FLOPS},
};

static void gauge(anvil_prom *p, const char *name, const char *help, double v) {
    anvil_prom_family(p, name, ANVIL_PROM_GAUGE, help);
    anvil_prom_sample(p, name, NULL, 0, v);
}

double anvil_telemetry_mfu(const anvil_telemetry *t, double flops_per_s) {
    return t->peak_flops > 0 ? flops_per_s / (t->peak_flops * t->world) : NAN;
}

/* Achieved over peak, the peaks of every rank summed (rank 0's times the world before the first
 * gather arrives). */
static double mfu(const anvil_telemetry *t) {
    double flops_per_s = t->last.flops_per_step / t->last.step_s, peak = 0;
    if (!t->have_ranks) return anvil_telemetry_mfu(t, flops_per_s);
    for (int r = 0; r < t->world; r++) peak += t->shown[r * t->nv + V_PEAK_FLOPS];
    return peak > 0 ? flops_per_s / peak : NAN;
}

/* One sample per rank of value v; a rank without the figure (NAN: /proc did not give it, or the
 * log never matched) has none. */
static void per_rank(const anvil_telemetry *t, anvil_prom *p, const char *name, int v) {
    for (int r = 0; r < t->world; r++) {
        double x = t->shown[r * t->nv + v];
        if (isnan(x)) continue;
        char rank[16];
        snprintf(rank, sizeof rank, "%d", r);
        anvil_prom_label l = {"rank", rank};
        anvil_prom_sample(p, name, &l, 1, x);
    }
}

static const char *const s3_ops[ANVIL_S3_NOPS] = {"get", "head", "put", "list", "delete", "multipart"};

static void render_s3(const anvil_telemetry *t, anvil_prom *p) {
    int n = 0;
    while (n < 2 && t->s3[n].client) n++;
    if (!n) return;
    anvil_prom_family(p, "anvil_s3_requests_total", ANVIL_PROM_COUNTER,
                      "Rank 0's S3 requests by client and operation, every attempt counted.");
    for (int i = 0; i < n; i++)
        for (int op = 0; op < ANVIL_S3_NOPS; op++) {
            anvil_prom_label l[] = {{"client", t->s3[i].client}, {"op", s3_ops[op]}};
            anvil_prom_sample(p, "anvil_s3_requests_total", l, 2, (double)t->s3[i].st.requests[op]);
        }
    anvil_prom_family(p, "anvil_s3_retries_total", ANVIL_PROM_COUNTER, "Rank 0's S3 requests that were tried again.");
    for (int i = 0; i < n; i++) {
        anvil_prom_label l = {"client", t->s3[i].client};
        anvil_prom_sample(p, "anvil_s3_retries_total", &l, 1, (double)t->s3[i].st.retries);
    }
    anvil_prom_family(p, "anvil_s3_bytes_total", ANVIL_PROM_COUNTER, "Bytes rank 0's S3 clients took in and sent.");
    for (int i = 0; i < n; i++) {
        anvil_prom_label down[] = {{"client", t->s3[i].client}, {"direction", "down"}};
        anvil_prom_label up[] = {{"client", t->s3[i].client}, {"direction", "up"}};
        anvil_prom_sample(p, "anvil_s3_bytes_total", down, 2, (double)t->s3[i].st.bytes_down);
        anvil_prom_sample(p, "anvil_s3_bytes_total", up, 2, (double)t->s3[i].st.bytes_up);
    }
    anvil_prom_family(p, "anvil_s3_request_latency_seconds", ANVIL_PROM_GAUGE,
                      "Percentiles of rank 0's S3 request latency since the start (a histogram of 10 buckets a "
                      "decade: +-12%).");
    for (int i = 0; i < n; i++) {
        anvil_prom_label p50[] = {{"client", t->s3[i].client}, {"quantile", "0.5"}};
        anvil_prom_label p99[] = {{"client", t->s3[i].client}, {"quantile", "0.99"}};
        anvil_prom_sample(p, "anvil_s3_request_latency_seconds", p50, 2, t->s3[i].st.p50_ms / 1e3);
        anvil_prom_sample(p, "anvil_s3_request_latency_seconds", p99, 2, t->s3[i].st.p99_ms / 1e3);
    }
}

/* Rank 0's peak, the denominator of MFU, and where it came from. */
static void render_peak(const anvil_telemetry *t, anvil_prom *p) {
    const anvil_peak *k = &t->peak;
    char threads[16], probes[16], at[32];
    snprintf(threads, sizeof threads, "%d", k->threads);
    snprintf(probes, sizeof probes, "%d", k->probes);
    time_t when = (time_t)k->probed_at;
    struct tm tm;
    strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&when, &tm));
    anvil_prom_label l[] = {{"source", k->cached ? "cache" : "probe"}, {"file", k->file}, {"cpu", k->cpu},
                            {"path", k->path}, {"dtype", k->dtype}, {"threads", threads}, {"probes", probes},
                            {"probed_at", at}};
    anvil_prom_family(p, "anvil_train_peak_flops_per_second", ANVIL_PROM_GAUGE,
                      "Rank 0's vector multiply-add peak, the denominator of MFU: from this machine's cache of "
                      "the best probe (source=cache), or probed as the run started (source=probe).");
    anvil_prom_sample(p, "anvil_train_peak_flops_per_second", l, 8, t->peak_flops);
}

static void render(const anvil_telemetry *t, anvil_prom *p) {
    char world[16];
    snprintf(world, sizeof world, "%d", t->world);
    anvil_prom_label info[] = {{"kernels", t->c.kernels}, {"dtype", t->c.dtype}, {"ranks", world}};
    anvil_prom_family(p, "anvil_train_info", ANVIL_PROM_GAUGE, "The run's kernels, matmul type and rank count.");
    anvil_prom_sample(p, "anvil_train_info", info, 3, 1);
    if (t->peak_flops > 0) render_peak(t, p);
    gauge(p, "anvil_train_target_steps", "The step the run ends at.", t->c.steps);
    if (t->have_step) {
        const anvil_telemetry_step *s = &t->last;
        gauge(p, "anvil_train_step", "The last optimizer step completed.", s->step);
        gauge(p, "anvil_train_last_step_timestamp_seconds", "When the last step completed, in seconds since the epoch.",
              t->last_step_unix);
        gauge(p, "anvil_train_loss", "Training loss of the last step (mean over its micro-batches and ranks), nats.",
              s->loss);
        gauge(p, "anvil_train_learning_rate", "Learning rate of the last step.", s->lr);
        gauge(p, "anvil_train_grad_norm", "Global gradient norm of the last step, before clipping.", s->grad_norm);
        anvil_prom_family(p, "anvil_train_tokens_total", ANVIL_PROM_COUNTER, "Tokens trained on, over all ranks.");
        anvil_prom_sample(p, "anvil_train_tokens_total", NULL, 0, (double)s->tokens_seen);
        gauge(p, "anvil_train_tokens_per_second", "Training throughput of the last step, over all ranks.",
              s->tokens_per_step / s->step_s);
        gauge(p, "anvil_train_model_flops_per_second",
              "Model FLOP/s of the last step over all ranks (6N + 12LCT per token, PaLM's count).",
              s->flops_per_step / s->step_s);
        gauge(p, "anvil_train_mfu_ratio", "Model FLOP/s over the ranks' measured peak of the kernel in use (dtype and path: "
              "anvil_train_peak_flops_per_second's labels).", mfu(t));
        anvil_prom_family(p, "anvil_train_step_seconds", ANVIL_PROM_HISTOGRAM, "Duration of rank 0's optimizer steps.");
        anvil_prom_histogram_samples(p, "anvil_train_step_seconds", NULL, 0, &t->step_hist);
    }
    if (t->have_val)
        gauge(p, "anvil_train_validation_loss", "Loss on the validation batches at the last validation, nats.",
              t->val_loss);
    render_s3(t, p);
    if (!t->have_ranks) return;
    for (size_t f = 0; f < sizeof rank_families / sizeof rank_families[0]; f++) {
        const rank_family *rf = &rank_families[f];
        anvil_prom_family(p, rf->name, rf->type, rf->help);
        per_rank(t, p, rf->name, rf->v);
    }
    for (int i = 0; i < t->c.nmetrics; i++) {
        char name[ANVIL_LOGMETRIC_NAME_MAX + 16], help[ANVIL_LOGMETRIC_REGEX_MAX + 64];
        snprintf(name, sizeof name, "anvil_log_%s", t->c.metric_names[i]);
        snprintf(help, sizeof help, "The last number the trainer's log gave for --metric %s=%s", t->c.metric_names[i],
                 t->c.metric_regexes[i]);
        anvil_prom_family(p, name, ANVIL_PROM_GAUGE, help);
        per_rank(t, p, name, V_COUNT + i);
    }
}

static void serve(void *ctx, const char *path, anvil_http_reply *out) {
    anvil_telemetry *t = ctx;
    if (strcmp(path, "/metrics")) {
        static const char msg[] = "not found; the metrics are at /metrics\n";
        anvil_http_reply_text(out, 404, "text/plain; charset=utf-8", msg, sizeof msg - 1);
        return;
    }
    anvil_prom *p = anvil_prom_new();
    if (!p) return;
    pthread_mutex_lock(&t->mu);
    render(t, p);
    pthread_mutex_unlock(&t->mu);
    size_t len;
    const char *text = anvil_prom_text(p, &len);
    if (text) anvil_http_reply_text(out, 200, ANVIL_PROM_CONTENT_TYPE, text, len);
    anvil_prom_free(p);
}

/* ---- the ranks' figures ---- */

static void sample_sys(anvil_telemetry *t) {
    double now = anvil_now();
    if (t->sys_at > 0 && now - t->sys_at < SYSSTAT_PERIOD_S) return;
    anvil_sysstat s;
    if (anvil_sysstat_read(&s)) return;
    if (t->sys_at > 0 && s.cpus > 0)
        t->cpu_util = (s.cpu_seconds - t->sys.cpu_seconds) / (now - t->sys_at) / s.cpus;
    t->sys = s;
    t->sys_at = now;
}

/* Takes the gather in flight, if any, into what the page shows. */
static int take_gather(anvil_telemetry *t) {
    if (!t->pending) return 0;
    int rc = anvil_wait(t->pending);
    t->pending = NULL;
    if (rc) return -1;
    if (t->serving) {
        pthread_mutex_lock(&t->mu);
        memcpy(t->shown, t->all, sizeof(double) * (size_t)t->world * t->nv);
        t->have_ranks = 1;
        pthread_mutex_unlock(&t->mu);
    }
    return 0;
}

/* The log metrics that changed in this step, as one record of metrics.jsonl (rank 0). */
static int log_record(anvil_telemetry *t, int step) {
    const char *keys[ANVIL_LOGMETRIC_MAX + 1] = {"step"};
    double vals[ANVIL_LOGMETRIC_MAX + 1] = {step};
    int n = 1;
    for (int i = 0; i < t->c.nmetrics; i++)
        if (t->lm_updated[i]) {
            keys[n] = t->c.metric_names[i];
            vals[n++] = t->lm_values[i];
        }
    return n > 1 && t->jsonl ? anvil_metrics_write(t->jsonl, "log", keys, vals, n) : 0;
}

static int send_mine(anvil_telemetry *t, const anvil_telemetry_step *s) {
    sample_sys(t);
    double *v = t->mine;
    v[V_STEP_S] = s->step_s;
    v[V_COMM_WAIT_RATIO] = s->step_s > 0 ? (s->comm_wait_s - t->prev_comm_wait) / s->step_s : 0;
    v[V_COMM_WAIT_S] = s->comm_wait_s;
    t->prev_comm_wait = s->comm_wait_s;
    v[V_RSS] = t->sys.rss_bytes;
    v[V_PEAK_RSS] = t->sys.peak_rss_bytes;
    v[V_CPU_S] = t->sys.cpu_seconds;
    v[V_CPU_UTIL] = t->cpu_util;
    v[V_READ] = t->sys.read_bytes;
    v[V_WRITE] = t->sys.write_bytes;
    v[V_RX] = t->sys.net_rx_bytes;
    v[V_TX] = t->sys.net_tx_bytes;
    v[V_FDS] = t->sys.open_fds;
    v[V_PEAK_FLOPS] = t->peak_flops;
    memcpy(v + V_COUNT, t->lm_values, sizeof(double) * (size_t)t->c.nmetrics);
    if (t->world == 1) {
        memcpy(t->all, v, sizeof(double) * t->nv);
        return 0;
    }
    t->pending = anvil_iallgather(anvil_dist_world(), v, t->all, t->counts, ANVIL_F64, "metrics of every rank");
    return t->pending ? 0 : -1;
}

/* ---- the object ---- */

anvil_telemetry *anvil_telemetry_open(const anvil_telemetry_config *c) {
    anvil_telemetry *t = calloc(1, sizeof *t);
    if (!t) {
        anvil_fail("train: out of memory");
        return NULL;
    }
    t->c = *c;
    t->rank = anvil_dist_rank();
    t->world = anvil_dist_world_size();
    t->nv = V_COUNT + c->nmetrics;
    pthread_mutex_init(&t->mu, NULL);
    t->lm_values = calloc((size_t)c->nmetrics + 1, sizeof(double));
    t->lm_updated = calloc((size_t)c->nmetrics + 1, sizeof(int));
    if (!t->lm_values || !t->lm_updated) {
        anvil_telemetry_close(t, 0);
        anvil_fail("train: out of memory");
        return NULL;
    }
    for (int i = 0; i < c->nmetrics; i++) t->lm_values[i] = NAN;
    if (c->nmetrics && (!(t->lm = anvil_logmetrics_new(c->metric_names, c->metric_regexes, c->nmetrics)) ||
                        !(t->tap = anvil_logtap_open(c->log, t->lm)))) {
        anvil_telemetry_close(t, 0);
        return NULL;
    }
    return t;
}

FILE *anvil_telemetry_log(anvil_telemetry *t) { return t->tap ? t->tap : t->c.log; }

/* Rank 0's server, and the port it got into the run folder. */
static int start_server(anvil_telemetry *t) {
    t->serving = 1;
    if (!(t->httpd = anvil_httpd_start("train: --metrics-port", t->c.metrics_port, serve, t))) return -1;
    int port = anvil_httpd_port(t->httpd);
    fprintf(anvil_telemetry_log(t), "metrics: http://127.0.0.1:%d/metrics\n", port);
    if (!t->c.out_dir) return 0;
    char path[4096], text[16];
    snprintf(path, sizeof path, "%s/metrics.port", t->c.out_dir);
    int n = snprintf(text, sizeof text, "%d\n", port);
    return anvil_write_file_atomic(path, text, (size_t)n);
}

/* Where MFU's denominator comes from, on rank 0's log. */
static void log_peak(anvil_telemetry *t) {
    const anvil_peak *p = &t->peak;
    FILE *log = anvil_telemetry_log(t);
    if (p->note[0]) fprintf(log, "metrics: note: %s\n", p->note);
    char from[4200];
    if (p->cached) snprintf(from, sizeof from, "from the cache %s (the best of %d probe%s)", p->file, p->probes,
                           p->probes == 1 ? "" : "s");
    else snprintf(from, sizeof from, "probed now%s%s", p->stored ? ", cached in " : "", p->stored ? p->file : "");
    fprintf(log, "metrics: MFU against a peak of %.1f GFLOP/s a rank (%s %s, %d threads), %s\n", p->gflops, p->path,
            p->dtype, p->threads, from);
}

int anvil_telemetry_start(anvil_telemetry *t, anvil_metrics *jsonl) {
    t->jsonl = jsonl;
    if (t->c.cpu) {
        if (anvil_isa_peak(anvil_isa_active(), t->c.bf16, false, &t->peak)) return -1;
        t->peak_flops = t->peak.gflops * 1e9;
        if (t->rank == 0) log_peak(t);
    }
    if (t->c.metrics_port < 0) return 0;
    t->mine = calloc((size_t)t->nv, sizeof(double));
    t->all = calloc((size_t)t->world * t->nv, sizeof(double));
    t->shown = calloc((size_t)t->world * t->nv, sizeof(double));
    t->counts = malloc((size_t)t->world * sizeof(size_t));
    if (!t->mine || !t->all || !t->shown || !t->counts) return anvil_fail("train: out of memory");
    for (int r = 0; r < t->world; r++) t->counts[r] = (size_t)t->nv;
    /* Steps from 1 ms to about 9 minutes, a factor of 2 apart. */
    anvil_prom_histogram_exponential(&t->step_hist, 0.001, 2.0, 20);
    if (t->rank == 0 && start_server(t)) return -1;
    sample_sys(t);
    return 0;
}

int anvil_telemetry_step_begin(anvil_telemetry *t, int step) {
    if (!t->c.profile_dir || step != t->c.profile_first) return 0;
    if (anvil_mkdir_p(t->c.profile_dir)) return -1;
    anvil_trace_thread_name("train");
    anvil_trace_start();
    t->profiling = 1;
    return 0;
}

/* Writes this rank's file of the stopped profile. */
static int write_profile(anvil_telemetry *t, int step) {
    t->profiling = 0;
    char path[4096], process[32];
    snprintf(path, sizeof path, "%s/trace_rank%d.json", t->c.profile_dir, t->rank);
    snprintf(process, sizeof process, "rank %d", t->rank);
    long n = anvil_trace_write(path, t->rank, process);
    if (n < 0) return -1;
    fprintf(anvil_telemetry_log(t), "profile: steps %d-%d, %ld spans, in %s%s\n", t->c.profile_first, step, n, path,
            t->world > 1 ? " (and one file per rank)" : "");
    return 0;
}

int anvil_telemetry_step_done(anvil_telemetry *t, const anvil_telemetry_step *s) {
    t->steps_done = s->step;
    if (t->profiling == 1 && s->step == t->c.profile_last) {
        anvil_trace_stop();
        t->profiling = 2;
    }
    /* A checkpoint write that began in the profile may end a few steps later. */
    if (t->profiling == 2 && anvil_trace_open_spans() == 0 && write_profile(t, t->c.profile_last)) return -1;
    if (t->lm) {
        anvil_logmetrics_take(t->lm, t->lm_values, t->lm_updated);
        if (log_record(t, s->step)) return -1;
    }
    if (t->c.metrics_port < 0) return 0;
    if (take_gather(t) || send_mine(t, s)) return -1;
    if (!t->serving) return 0;
    pthread_mutex_lock(&t->mu);
    t->last = *s;
    t->last_step_unix = unix_now();
    t->have_step = 1;
    anvil_prom_histogram_observe(&t->step_hist, s->step_s);
    if (t->world == 1) {
        memcpy(t->shown, t->all, sizeof(double) * t->nv);
        t->have_ranks = 1;
    }
    pthread_mutex_unlock(&t->mu);
    return 0;
}

void anvil_telemetry_s3(anvil_telemetry *t, const char *client, const anvil_s3_stats *st) {
    if (!t || !t->serving) return;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < 2; i++)
        if (!t->s3[i].client || !strcmp(t->s3[i].client, client)) {
            t->s3[i].client = client;
            t->s3[i].st = *st;
            break;
        }
    pthread_mutex_unlock(&t->mu);
}

void anvil_telemetry_validated(anvil_telemetry *t, int step, double val_loss) {
    (void)step;
    if (!t->serving) return;
    pthread_mutex_lock(&t->mu);
    t->val_loss = val_loss;
    t->have_val = 1;
    pthread_mutex_unlock(&t->mu);
}

int anvil_telemetry_close(anvil_telemetry *t, int failed) {
    if (!t) return 0;
    int rc = failed ? 0 : take_gather(t);
    anvil_trace_stop();
    if (t->profiling && !failed &&
        write_profile(t, t->profiling == 2 ? t->c.profile_last : t->steps_done) && !rc)
        rc = -1;
    anvil_httpd_stop(t->httpd);
    if (t->tap) fclose(t->tap);
    anvil_logmetrics_free(t->lm);
    free(t->lm_values);
    free(t->lm_updated);
    pthread_mutex_destroy(&t->mu);
    if (!t->pending) {
        free(t->mine);
        free(t->all);
    }
    free(t->shown);
    free(t->counts);
    free(t);
    return rc;
}

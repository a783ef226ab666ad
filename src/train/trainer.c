#include "train/trainer.h"

#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/completion.h"
#include "ckpt/model_file.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/rng.h"
#include "data/bytetok.h"
#include "data/loader.h"
#include "data/prep.h"
#include "dist/comm.h"
#include "dist/dataparallel.h"
#include "dist/grid.h"
#include "dist/zero_grid.h"
#include "kernels/isa.h"
#include "obs/heartbeat.h"
#include "obs/metrics.h"
#include "obs/trace.h"
#include "s3/s3.h"
#include "sample/sampler.h"
#include "tok/tokenizer.h"
#include "train/checkpointer.h"
#include "train/ckpt_remote.h"
#include "train/layout.h"
#include "train/ckpt_auto.h"
#include "train/profile.h"
#include "train/resume_check.h"
#include "train/telemetry.h"

void anvil_train_defaults(anvil_train_config *c) {
    memset(c, 0, sizeof *c);
    anvil_model_preset("tiny", &c->model);
    c->B = 4;
    c->T = 64;
    c->steps = 100;
    c->lr = (anvil_lr_schedule){ANVIL_LR_COSINE, 6e-4f, 6e-5f, 0, 0};
    c->adamw = (anvil_adamw_config){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    c->grad_clip = 1.0f;
    c->val_batches = 8;
    c->sample_tokens = 128;
    c->seed = 1337;
    c->log_every = 10;
    c->keep_last = 3;
    c->timing_warmup = 1;
    c->metrics_port = -1;
    c->data_layout = -1;
    c->log = stderr;
}

int anvil_train_check(const anvil_train_config *c) {
    anvil_model_config m = c->model;
    if (anvil_model_config_check(&m)) return -1;
    if (c->B < 1) return anvil_fail("train: --batch must be positive, got %d", c->B);
    if (c->T < 1 || c->T > m.block_size)
        return anvil_fail("train: --seq must be in 1..block_size (%d), got %d", m.block_size, c->T);
    if (anvil_model_batch_check(&m, c->B, c->T)) return -1;
    if (c->device.kind == ANVIL_DEVICE_CPU && c->matmul_dtype == ANVIL_MATMUL_BF16 && anvil_isa_check_bf16()) {
        char why[256];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        return anvil_fail("train: --dtype bf16: %s", why);
    }
    int world = anvil_dist_world_size(), tp = c->tensor_parallel > 1 ? c->tensor_parallel : 1;
    int pp = c->pipeline_parallel > 1 ? c->pipeline_parallel : 1;
    if (anvil_grid_check(world, tp, pp, &m)) return -1;
    if (c->device.kind != ANVIL_DEVICE_CPU && world > 1) {
        char dev[32];
        anvil_device_name(c->device, dev, sizeof dev);
        return anvil_fail("train: --device %s trains in one process (%d here): collectives between GPUs (NCCL) "
                          "are not built yet", dev, world);
    }
    if (tp * pp > 1 && c->zero_stage && anvil_zg_check(c->zero_stage, c->shard_group_size, world / (tp * pp)))
        return -1;
    if (tp * pp > ANVIL_CKPT_MAX_FILES - 2 && c->out_dir)
        return anvil_fail("train: --tp x --pp is %d grid cells, more than the %d shard files a checkpoint holds",
                          tp * pp, ANVIL_CKPT_MAX_FILES - 2);
    if (c->sequence_parallel && tp < 2) return anvil_fail("train: --sequence-parallel needs --tp 2 or more");
    if (c->sequence_parallel && anvil_model_sp_check(tp, c->B, c->T)) return -1;
    /* The ranks of one model replica share their batch: the data ranks are the data-parallel replicas. */
    int data_ranks = world / (tp * pp);
    int64_t bt = (int64_t)c->B * c->T * data_ranks;
    if (c->total_batch_tokens < 0 || (c->total_batch_tokens && c->total_batch_tokens % bt)) {
        if (data_ranks > 1)
            return anvil_fail("train: --total-batch-tokens (%lld) must be a positive multiple of batch*seq*%s "
                              "(%d*%d*%d = %lld)",
                              (long long)c->total_batch_tokens, tp * pp > 1 ? "data-parallel ranks" : "ranks", c->B, c->T,
                              data_ranks, (long long)bt);
        return anvil_fail("train: --total-batch-tokens (%lld) must be a positive multiple of batch*seq (%lld)",
                          (long long)c->total_batch_tokens, (long long)bt);
    }
    anvil_dp_config dc = {.zero_stage = c->zero_stage, .shard_group_size = c->shard_group_size, .adamw = c->adamw};
    if (anvil_dp_check(&dc, world)) return -1;
    if (c->steps < 1) return anvil_fail("train: --steps must be positive, got %d", c->steps);
    if (!(c->lr.lr > 0.0f) || !isfinite(c->lr.lr)) return anvil_fail("train: --lr must be positive, got %g", c->lr.lr);
    if (!(c->lr.min_lr >= 0.0f) || c->lr.min_lr > c->lr.lr)
        return anvil_fail("train: the minimum learning rate must be in [0, lr], got %g", c->lr.min_lr);
    if (c->lr.warmup < 0) return anvil_fail("train: --lr-warmup must be >= 0, got %d", c->lr.warmup);
    if (!(c->adamw.beta1 >= 0.0f && c->adamw.beta1 < 1.0f))
        return anvil_fail("train: --beta1 must be in [0, 1), got %g", c->adamw.beta1);
    if (!(c->adamw.beta2 >= 0.0f && c->adamw.beta2 < 1.0f))
        return anvil_fail("train: --beta2 must be in [0, 1), got %g", c->adamw.beta2);
    if (!(c->adamw.eps > 0.0f)) return anvil_fail("train: --eps must be positive, got %g", c->adamw.eps);
    if (!(c->adamw.weight_decay >= 0.0f))
        return anvil_fail("train: --weight-decay must be >= 0, got %g", c->adamw.weight_decay);
    if (!(c->grad_clip >= 0.0f)) return anvil_fail("train: --grad-clip must be >= 0, got %g", c->grad_clip);
    if (c->val_every < 0 || c->val_batches < 1)
        return anvil_fail("train: --val-every must be >= 0 and --val-batches positive");
    if (!c->synthetic && !c->train_pattern) return anvil_fail("train: no training data (give --data or --synthetic)");
    if (c->synthetic && c->shuffle) return anvil_fail("train: --shuffle needs shards, not --synthetic");
    if ((c->ckpt_every || c->ckpt_minutes > 0 || c->resume) && !c->out_dir)
        return anvil_fail("train: checkpoints and --resume need a run folder (--out)");
    if (c->ckpt_uri && (!c->out_dir || !anvil_s3_is_uri(c->ckpt_uri)))
        return anvil_fail("train: --ckpt-uri %s: needs --out and an s3://bucket/prefix URI", c->ckpt_uri);
    if ((c->ckpt_every < 0 && c->ckpt_every != ANVIL_CKPT_EVERY_AUTO) || c->ckpt_minutes < 0 || c->keep_last < 1 ||
        c->keep_every < 0 || c->mtbf_s < 0)
        return anvil_fail("train: checkpoint intervals and --mtbf must be >= 0 and --keep-last >= 1");
    if (c->profile_dir && (c->profile_first < 1 || c->profile_last < c->profile_first))
        return anvil_fail("train: --profile-steps must be A-B with 1 <= A <= B, got %d-%d", c->profile_first,
                          c->profile_last);
    if (c->profile_dir && c->profile_first > c->steps)
        return anvil_fail("train: --profile-steps %d-%d: the run ends at step %d", c->profile_first, c->profile_last,
                          c->steps);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* Mean loss over the first val_batches batches of the val split (always
 * the same batches, so successive validations are comparable). */
static int validate(const anvil_train_config *c, anvil_layout *L, anvil_loader *val, int32_t *x, int32_t *y,
                    float *out) {
    anvil_loader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < c->val_batches; i++) {
        float l;
        if (anvil_loader_next(val, x, y) || L->ops->forward(L, x, y, &l)) return -1;
        sum += l;
    }
    if (anvil_dist_world_size() > 1 && anvil_allreduce(anvil_dist_world(), &sum, 1, ANVIL_F64, "validation loss"))
        return -1;
    *out = (float)(sum / c->val_batches / anvil_dist_world_size());
    return 0;
}

typedef struct {
    FILE *out;
    const anvil_tok *tk;
    int32_t eot;
} sample_sink;

static void emit_token(void *ctx, int32_t tok) {
    const sample_sink *s = ctx;
    if (tok == s->eot) return;
    if (s->tk) {
        size_t n;
        const unsigned char *b = anvil_tok_token_bytes(s->tk, tok, &n);
        if (b) fwrite(b, 1, n, s->out);
        return;
    }
    char piece[ANVIL_BYTETOK_MAX_PIECE + 1];
    int n = anvil_bytetok_decode(tok, piece);
    if (n > 0) fwrite(piece, 1, (size_t)n, s->out);
}

static void emit_id(void *ctx, int32_t tok) { fprintf(((const sample_sink *)ctx)->out, " %d", tok); }

/* A sample from the start of a document as prep marks it: the tokenizer's
 * beginning-of-text token where it has one (Llama 3's), else the end-of-text
 * one that ends the document before; printed as text when the tokenizer is
 * known (given, or bytes) and as ids otherwise. */
static int print_sample(const anvil_train_config *c, anvil_model *m, int step) {
    const anvil_tok *tk = c->tokenizer;
    int text = tk || m->cfg.vocab_size == ANVIL_BYTETOK_VOCAB;
    int32_t eot = tk ? anvil_tok_eot(tk) : text ? ANVIL_BYTETOK_EOT : -1;
    int32_t start = text ? anvil_data_doc_start(tk) : 0;
    anvil_sample_opts so = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .stop_token = eot};
    sample_sink sink = {c->log, tk, eot};
    anvil_rng rng;
    anvil_rng_seed(&rng, c->seed + (uint64_t)step);
    fprintf(c->log, "--- sample at step %d ---\n", step);
    int rc = anvil_generate(m, &start, 1, c->sample_tokens, &so, &rng, text ? emit_token : emit_id, &sink);
    fprintf(c->log, "\n---\n");
    return rc < 0 ? -1 : 0;
}

static void fill_synthetic(anvil_rng *rng, int32_t *x, int32_t *y, size_t n, int vocab) {
    int32_t prev = (int32_t)(anvil_rng_u64(rng) % (uint64_t)vocab);
    for (size_t i = 0; i < n; i++) {
        x[i] = prev;
        prev = (int32_t)(anvil_rng_u64(rng) % (uint64_t)vocab);
        y[i] = prev;
    }
}

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

/* What the ranks agree on after each step's gradients, in one all-reduce:
 * every rank then logs the same loss and stops or saves after the same step. */
typedef struct {
    double loss_sum; /* the micro-steps' losses, summed over the ranks */
    double stop;     /* ranks that got a stop signal */
    double save;     /* 1 when rank 0's checkpoint policy (which depends on its clock) asks for one */
} step_agreement;

_Static_assert(sizeof(step_agreement) == 3 * sizeof(double), "the agreement is all-reduced as 3 doubles");

/* One training run, from open to close. */
typedef struct {
    const anvil_train_config *c; /* the caller's, or quiet below */
    anvil_train_config quiet;    /* the caller's with another log: /dev/null (ranks other than 0), or a tap on it */
    FILE *devnull;
    anvil_train_result *res;
    int rank, world;
    const anvil_kernels *k;
    anvil_layout *L; /* the model state over the ranks, and how each step runs on it */
    anvil_loader *train, *val;
    anvil_s3_stats s3_last; /* the train loader's S3 counters at the last "s3" record, and its time */
    double s3_last_t;
    anvil_metrics *metrics;
    anvil_checkpointer *ckpt;
    anvil_ckpt_remote *remote; /* each host's lowest rank with --ckpt-uri: its host's uploader */
    int *host_leader;          /* with --ckpt-uri, every rank's host's lowest rank */
    anvil_telemetry *tel;
    int32_t *x, *y; /* a step's micro-batches, one after another */
    double *step_ms; /* per step, for the medians */
    int timed;
    int ckpt_policy;
    size_t bt;
    double tokens_per_step, flops_per_step;
    anvil_rng data_rng;
    anvil_model_tokenizer tok_rec; /* what model.safetensors records (rank 0) */
    char tok_name[96];             /* the same, for checkpoint manifests */
    int64_t start, tokens_seen;
    anvil_lr_schedule sched;
    double t_start;
    int signals_set;
    int lock_fd;  /* rank 0's claim on the run folder, or -1 */
    int ranks_fd; /* every rank's shared lock on the run folder, which outlives no rank: or -1 */
    int bad_input; /* the failure is of the configuration or input: a retry cannot help */
    const char *beat_phase; /* the heartbeat last written, when, and the time it said its phase may take */
    double beat_at, beat_expect;
    int beat_failed;
    struct sigaction old_term, old_usr1;
    /* Since the last "train" record, the time that went to checkpoint stalls, and to validation and
     * sampling: the run's timeline, which the job service's goodput accounting splits (job/goodput.h). */
    double ckpt_s, eval_s;
    /* The longest step, validation-and-sample and checkpoint save so far: what the heartbeat says to
     * expect of each phase, from which the job service derives a hang timeout. */
    double slowest_step_s, slowest_eval_s, slowest_ckpt_s;
    int auto_every; /* --ckpt-every auto's interval in use (0: the first, before any was measured) */
    /* the step that just ran */
    step_agreement agreed;
    float loss, lr, norm;
    double dt;
} anvil_run;

/* Rank 0's heartbeat (obs/heartbeat.h). A write that fails is reported once and training goes on:
 * a supervisor will see no progress, which is the truth it can act on. Phases are the literals
 * below, told apart by address. */
static void beat(anvil_run *r, const char *phase, int64_t step) {
    if (r->rank != 0 || !r->c->out_dir) return;
    double now = anvil_now();
    /* Between training beats lie up to HEARTBEAT_EVERY_S of steps and one more step. Before a phase is
     * measured, an allowance for the bytes it moves stands in (the weights, and for a checkpoint or a
     * resume the moments too). */
    double model = 4.0 * (double)r->res->params, whole = 3 * model;
    double expect = !strcmp(phase, "training")        ? (r->slowest_step_s > 0 ? r->slowest_step_s + ANVIL_HEARTBEAT_EVERY_S
                                                                               : anvil_heartbeat_allowance(model))
                    : !strcmp(phase, "evaluating")    ? (r->slowest_eval_s > 0 ? r->slowest_eval_s
                                                                               : anvil_heartbeat_allowance(model))
                    : !strcmp(phase, "checkpointing") ? (r->slowest_ckpt_s > 0 ? r->slowest_ckpt_s
                                                                               : anvil_heartbeat_allowance(whole))
                    : !strcmp(phase, "loading")       ? anvil_heartbeat_allowance(whole)
                                                      : anvil_heartbeat_allowance(model);
    /* A phase's first measurement is due at once, however recent the last beat: the hang timeout a
     * service derives from the allowance is minutes, and a rank that freezes right after its first step
     * (a retry's, say) would be waited on that long. */
    bool changed = expect < r->beat_expect / 2 || expect > 2 * r->beat_expect;
    if (r->beat_phase == phase && now - r->beat_at < ANVIL_HEARTBEAT_EVERY_S && !changed) return;
    r->beat_phase = phase;
    r->beat_at = now;
    r->beat_expect = expect;
    if (anvil_heartbeat_write(r->c->out_dir, phase, step, expect) && !r->beat_failed) {
        r->beat_failed = 1;
        fprintf(r->c->log, "warning: heartbeat: %s\n", anvil_errmsg());
    }
}

/* Marks the failure under way as one of the configuration or input; returns -1. */
static int bad_input(anvil_run *r) {
    r->bad_input = 1;
    return -1;
}

/* With no local checkpoint, rank 0 downloads the newest one from --ckpt-uri into the run folder,
 * which the other ranks then read as a local one (they share it, as they share local checkpoints).
 * 1 when it downloaded one, 0 when S3 has none, -1 on every rank when the download failed. */
static int fetch_remote(anvil_run *r) {
    const anvil_train_config *c = r->c;
    int64_t found = 0;
    if (r->rank == 0) {
        char dir[4096];
        found = anvil_ckpt_remote_fetch_latest(c->ckpt_uri, c->out_dir, dir, sizeof dir);
        if (found > 0) fprintf(c->log, "resume: downloaded %s from %s\n", dir, c->ckpt_uri);
    }
    if (r->world > 1) {
        int64_t all = found;
        if (anvil_allreduce(anvil_dist_world(), &all, 1, ANVIL_I64, "checkpoint download")) return -1;
        if (all < 0) return r->rank == 0 ? -1 : anvil_fail("rank 0 could not download the checkpoint from %s", c->ckpt_uri);
        found = all;
    }
    return (int)found;
}

/* Checks checkpoint folder dir (of step, or any when step < 0) with every rank at once: each
 * verifies the files dealt to it (anvil_ckpt_verify_part) and all agree, so that a resume checksums
 * the checkpoint once over the job instead of once per rank. 0 when every part verified; -1 (an
 * older one may do) with the lowest bad rank's message on every rank; -2 when the ranks cannot
 * agree, or see different checkpoints. */
static int check_together(void *ctx, const char *dir, int64_t step) {
    anvil_run *r = ctx;
    int bad = anvil_ckpt_verify_part(dir, step, r->rank, r->world) != 0;
    if (r->world == 1) return bad ? -1 : 0;
    int64_t mine[2] = {bad, step}, *all = malloc(2 * sizeof(int64_t) * (size_t)r->world);
    size_t *counts = malloc(sizeof(size_t) * (size_t)r->world);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", bad ? anvil_errmsg() : "");
    int rc = all && counts ? 0 : anvil_fail("train: out of memory checking %s", dir), first = -1;
    for (int i = 0; !rc && i < r->world; i++) counts[i] = 2;
    if (!rc && anvil_allgather(anvil_dist_world(), mine, all, counts, ANVIL_I64, "checkpoint check")) rc = -1;
    for (int i = 0; !rc && i < r->world; i++) {
        if (all[2 * i + 1] != step)
            rc = anvil_fail("%s: rank %d checked step %lld meanwhile: the ranks do not see the same checkpoints", dir,
                            i, (long long)all[2 * i + 1]);
        if (all[2 * i] && first < 0) first = i;
    }
    free(all);
    free(counts);
    if (rc) return -2;
    if (first < 0) return 0;
    if (anvil_broadcast(anvil_dist_world(), msg, sizeof msg, ANVIL_U8, first, "checkpoint check")) return -2;
    msg[sizeof msg - 1] = 0;
    return anvil_fail("%s (rank %d's check)", msg, first);
}

/* Restores model, optimizer, loader and RNG from the checkpoint that
 * c->resume names; r->start receives its step (0 when "auto" finds none). */
static int resume_from(anvil_run *r) {
    const anvil_train_config *c = r->c;
    char dir[4096], warn[4096] = "";
    if (!strcmp(c->resume, "auto")) {
        int found = anvil_ckpt_find_latest_checked(c->out_dir, dir, sizeof dir, warn, sizeof warn, check_together, r);
        if (warn[0]) fprintf(c->log, "warning: %s", warn);
        if (found < 0) return -1;
        if (found == 0 && c->ckpt_uri && (found = fetch_remote(r)) > 0) {
            found = anvil_ckpt_find_latest_checked(c->out_dir, dir, sizeof dir, warn, sizeof warn, check_together, r);
            if (warn[0]) fprintf(c->log, "warning: %s", warn);
        }
        if (found < 0) return -1;
        if (found == 0) {
            fprintf(c->log, "resume: no checkpoint in %s yet; starting from step 0\n", c->out_dir);
            return 0;
        }
    } else {
        snprintf(dir, sizeof dir, "%s", c->resume);
        if (check_together(r, dir, -1)) return -1;
    }
    /* Every file was verified just now, by one rank or another: the load reads each once more. */
    anvil_ckpt_manifest man;
    if (r->L->ops->resume(r->L, dir, &man)) return -1;
    int rc = 0;
    if (r->train && anvil_loader_set_state(r->train, man.loader)) rc = -1;
    r->data_rng = man.rng;
    r->start = man.step;
    r->tokens_seen = man.tokens_seen;
    if (!rc) fprintf(c->log, "resumed from %s (step %lld)\n", dir, (long long)man.step);
    if (!rc && r->rank == 0) anvil_resume_check(man.train_config, c->B, c->T, c->steps, c->log);
    anvil_ckpt_manifest_free(&man);
    return rc;
}

/* A checkpoint of the state after `step` steps, through the checkpointer on every rank: the layout
 * says which parts each rank saves. */
static int save_checkpoint(anvil_run *r, int64_t step, int force_sync) {
    anvil_ckpt_state st = {NULL, NULL, {0}, r->data_rng, step, r->tokens_seen,
                           r->tok_name[0] ? r->tok_name : NULL, r->c->config_json, NULL};
    if (r->train) st.loader = anvil_loader_get_state(r->train);
    return r->L->ops->save_checkpoint(r->L, &st, r->ckpt, force_sync);
}

/* ---- open ---- */

/* The model state over the ranks (loaded or freshly initialized) and the step's shape. */
static int open_model(anvil_run *r) {
    const anvil_train_config *c = r->c;
    if (!(r->L = anvil_layout_new(c, r->k)) || r->L->ops->open(r->L)) return -1;
    const anvil_model_config *mc = &r->L->model.cfg;
    r->bt = (size_t)c->B * c->T;
    r->tokens_per_step = (double)r->bt * r->L->accum * r->L->data_ranks;
    r->flops_per_step = anvil_model_flops_per_token(mc, c->T) * r->tokens_per_step;
    r->res->params = (int64_t)anvil_model_num_params(mc);
    r->ckpt_policy = c->out_dir && (c->ckpt_every || c->ckpt_minutes > 0 || c->resume);
    return 0;
}

/* The tokenizer travels with the run: its rank file is copied into the run
 * folder, and its record goes into model.safetensors. A byte-level model is
 * recorded as such; a run on other ids without a tokenizer records none. */
static int keep_tokenizer(anvil_run *r) {
    const anvil_train_config *c = r->c;
    if (c->tokenizer && c->tokenizer_file) {
        if (anvil_model_tokenizer_of(c->tokenizer_file, anvil_tok_pattern_name(c->tokenizer), &r->tok_rec) ||
            anvil_model_tokenizer_keep(c->tokenizer_file, c->out_dir))
            return -1;
        snprintf(r->tok_name, sizeof r->tok_name, "%s crc32c %08x", r->tok_rec.pattern, r->tok_rec.crc32c);
    } else if (r->L->model.cfg.vocab_size == ANVIL_BYTETOK_VOCAB) {
        anvil_model_tokenizer_of(NULL, NULL, &r->tok_rec);
    }
    return 0;
}

static int data_layout(const anvil_train_config *c, const char *pattern, int shuffled) {
    if (c->data_layout >= 0) return c->data_layout;
    return anvil_s3_is_uri(pattern) && !shuffled ? ANVIL_LOADER_CONTIGUOUS : ANVIL_LOADER_STRIDED;
}

/* Loaders, the run folder and its metrics, the batch buffers. */
static int open_data(anvil_run *r) {
    const anvil_train_config *c = r->c;
    int vocab = r->L->model.cfg.vocab_size, dr = r->L->data_rank, drs = r->L->data_ranks;
    if (!c->synthetic) {
        size_t range = c->s3_range ? c->s3_range : ANVIL_S3_READ_RANGE;
        int inflight = c->s3_inflight ? c->s3_inflight : ANVIL_S3_READ_INFLIGHT;
        r->train = anvil_loader_open_s3(c->train_pattern, c->B, c->T, dr, drs, vocab, range, inflight);
        if (!r->train || anvil_loader_set_layout(r->train, data_layout(c, c->train_pattern, c->shuffle)) ||
            (c->shuffle && anvil_loader_set_shuffle(r->train, c->seed)))
            return bad_input(r);
        if (c->val_pattern &&
            (!(r->val = anvil_loader_open_s3(c->val_pattern, c->B, c->T, dr, drs, vocab, range, inflight)) ||
             anvil_loader_set_layout(r->val, data_layout(c, c->val_pattern, 0))))
            return bad_input(r);
    }
    /* Every rank writes the run folder (its checkpoint shards): a retry's fence waits until none is left. */
    if (c->out_dir && (anvil_mkdir_p(c->out_dir) || (r->ranks_fd = anvil_lock_shared(c->out_dir)) < 0)) return -1;
    if (c->out_dir && r->rank == 0) {
        /* Two runs writing one folder would interleave metrics and overwrite each other's checkpoints. */
        if ((r->lock_fd = anvil_lock_folder(c->out_dir, "run folder")) < 0) return -1;
        beat(r, "loading", 0);
        char path[4096];
        snprintf(path, sizeof path, "%s/metrics.jsonl", c->out_dir);
        if (!(r->metrics = anvil_metrics_open(path))) return -1;
        if (keep_tokenizer(r)) return -1;
    }
    /* A step reads all its micro-batches before it starts. */
    size_t tokens = r->bt * (size_t)r->L->accum;
    r->x = malloc(tokens * sizeof(int32_t));
    r->y = malloc(tokens * sizeof(int32_t));
    r->step_ms = malloc(sizeof(double) * (size_t)c->steps);
    if (!r->x || !r->y || !r->step_ms) return anvil_fail("train: out of memory");
    return 0;
}

/* --ckpt-uri: each host's lowest rank opens its host's uploader (collective: every rank learns its
 * host's, and rank 0's id of this run, which keeps another run's markers out of its commits). */
static int open_remote(anvil_run *r) {
    const anvil_train_config *c = r->c;
    if (!(r->host_leader = malloc((size_t)r->world * sizeof *r->host_leader)))
        return anvil_fail("train: out of memory for the host table");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t run_id = (int64_t)(((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40));
    if (anvil_dist_host_leaders(r->host_leader) ||
        (r->world > 1 && anvil_broadcast(anvil_dist_world(), &run_id, 1, ANVIL_I64, 0, "checkpoint run id")))
        return -1;
    if (r->host_leader[r->rank] != r->rank) return 0;
    char host[64];
    anvil_dist_host_key(host, sizeof host);
    anvil_ckpt_remote_config rc = {.uri = c->ckpt_uri,
                                   .run_dir = c->out_dir,
                                   .nprefixes = c->ckpt_prefixes ? c->ckpt_prefixes : ANVIL_CKPT_REMOTE_PREFIXES,
                                   .keep_last = c->keep_last,
                                   .keep_every = c->keep_every,
                                   .rank = r->rank,
                                   .host = host,
                                   .run_id = (uint64_t)run_id,
                                   .log = c->log};
    return (r->remote = anvil_ckpt_remote_open(&rc)) ? 0 : -1;
}

/* The checkpointer and the schedule. */
static int open_parallel(anvil_run *r) {
    const anvil_train_config *c = r->c;
    /* With a run folder every rank has a checkpointer: a stop signal saves even without a policy. */
    if (c->out_dir) {
        if (c->ckpt_uri && open_remote(r)) return -1;
        if (r->rank == 0 && anvil_ckpt_remote_clean(c->out_dir)) return -1;
        anvil_checkpointer_config cc = {.run_dir = c->out_dir,
                                        .every_steps = c->ckpt_every > 0 ? c->ckpt_every : 0,
                                        .every_minutes = c->ckpt_minutes,
                                        .keep_last = c->keep_last,
                                        .keep_every = c->keep_every,
                                        .async = !c->ckpt_sync,
                                        .log = c->log,
                                        .progress = c->progress,
                                        .remote = r->remote,
                                        .host_leader = r->host_leader};
        if (!(r->ckpt = anvil_checkpointer_new(&cc))) return -1;
        if (c->ckpt_every == ANVIL_CKPT_EVERY_AUTO) anvil_checkpointer_set_every(r->ckpt, ANVIL_CKPT_AUTO_FIRST, r->start);
    }
    r->sched = c->lr;
    if (!r->sched.total) r->sched.total = c->steps;
    return 0;
}

/* Telemetry, before anything is logged: with --metric definitions the run logs through its tap. */
static int open_telemetry(anvil_run *r) {
    const anvil_train_config *c = r->c;
    int bf16 = c->matmul_dtype == ANVIL_MATMUL_BF16;
    anvil_telemetry_config tc = {.metrics_port = c->metrics_port,
                                 .out_dir = c->out_dir,
                                 .log = c->log,
                                 .kernels = r->k->name,
                                 .dtype = bf16 ? "bf16" : "fp32",
                                 .cpu = c->device.kind == ANVIL_DEVICE_CPU,
                                 .bf16 = bf16 ? anvil_isa_bf16() : ANVIL_BF16_NONE,
                                 .steps = c->steps,
                                 .metric_names = c->metric_names,
                                 .metric_regexes = c->metric_regexes,
                                 .nmetrics = c->nmetrics,
                                 .profile_dir = c->profile_dir,
                                 .profile_first = c->profile_first,
                                 .profile_last = c->profile_last};
    if (!(r->tel = anvil_telemetry_open(&tc))) return -1;
    FILE *log = anvil_telemetry_log(r->tel);
    if (log != c->log) {
        if (r->c != &r->quiet) r->quiet = *c;
        r->quiet.log = log;
        r->c = &r->quiet;
    }
    return 0;
}

static void catch_stop_signals(anvil_run *r) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    sigaction(SIGTERM, &sa, &r->old_term);
    sigaction(SIGUSR1, &sa, &r->old_usr1);
    r->signals_set = 1;
}

/* The "start" record, where this process's part of the run's timeline begins: the step it resumed
 * from (0: none), and which attempt of which job of the job service it is (ANVIL_ATTEMPT "<job>.<n>";
 * 0 and 0 outside the service), whose accounting begins the attempt's training here. */
static int record_start(anvil_run *r) {
    if (!r->metrics) return 0;
    long long job = 0;
    int attempt = 0;
    const char *a = getenv("ANVIL_ATTEMPT");
    if (a && sscanf(a, "%lld.%d", &job, &attempt) != 2) job = attempt = 0;
    const char *keys[] = {"step", "t", "job", "attempt"};
    double vals[] = {(double)r->start, anvil_epoch_now(), (double)job, attempt};
    return anvil_metrics_write(r->metrics, "start", keys, vals, 4);
}

/* The "end" record of a run that finished (or stopped, checkpointed): what the time since the last
 * "train" record went to, the final model's save included. */
static int record_end(anvil_run *r, int stopped, double save_s) {
    if (!r->metrics) return 0;
    const char *keys[] = {"step", "t", "ckpt_ms", "eval_ms", "save_ms", "stopped"};
    double step = (double)(r->start > r->res->steps_done ? r->start : r->res->steps_done);
    double vals[] = {step, anvil_epoch_now(), r->ckpt_s * 1e3, r->eval_s * 1e3, save_s * 1e3, stopped};
    return anvil_metrics_write(r->metrics, "end", keys, vals, 6);
}

/* Everything up to the first step; r is safe to close whatever fails. */
static int run_open(anvil_run *r, const anvil_train_config *c, anvil_train_result *res) {
    memset(r, 0, sizeof *r);
    r->lock_fd = r->ranks_fd = -1;
    r->c = c;
    r->res = res;
    r->rank = anvil_dist_rank();
    if (anvil_train_check(c)) return bad_input(r);
    r->world = anvil_dist_world_size();
    /* Only rank 0 talks; the others log nowhere. */
    if (r->rank != 0) {
        if (!(r->devnull = fopen("/dev/null", "w"))) return anvil_fail("train: cannot open /dev/null");
        r->quiet = *c;
        r->quiet.log = r->devnull;
        r->c = c = &r->quiet;
    }
    memset(res, 0, sizeof *res);
    res->val_loss = NAN;
    if (!(r->k = anvil_kernels_for(c->device, c->matmul_dtype)) || open_telemetry(r)) return -1;
    if (c->profile_dir) r->k = anvil_profiled_kernels(r->k, &c->model);
    c = r->c;
    catch_stop_signals(r);
    if (open_model(r)) return bad_input(r);
    if (open_data(r)) return -1;
    const anvil_model_config *mc = &r->L->model.cfg;
    fprintf(c->log,
            "model: %d layers, %d heads, %d embd, block %d, vocab %d (padded %d), %.2fM parameters\n"
            "batch: %d x %d tokens x %d accumulation x %d data ranks = %.0f tokens/step, %d steps, %.3g FLOP/token\n"
            "kernels: %s, %d threads\n",
            mc->n_layer, mc->n_head, mc->n_embd, mc->block_size, mc->vocab_size, mc->padded_vocab,
            (double)res->params / 1e6, c->B, c->T, r->L->accum, r->L->data_ranks, r->tokens_per_step, c->steps,
            anvil_model_flops_per_token(mc, c->T), r->k->name, omp_get_max_threads());
    /* Synthetic tokens differ per rank; rank 0 draws what a single process would. */
    anvil_rng_seed(&r->data_rng,
                   c->seed ^ 0x5eedda7aULL ^ ((uint64_t)r->L->data_rank * 0x9e3779b97f4a7c15ULL));
    r->L->ops->describe(r->L, c->log);
    if (c->resume && resume_from(r)) return bad_input(r);
    if (r->L->ops->start(r->L) || open_parallel(r) || anvil_telemetry_start(r->tel, r->metrics)) return -1;
    r->t_start = anvil_now();
    return record_start(r);
}

/* ---- the step ---- */

/* One optimizer step: the micro-batches' gradients, the ranks' agreement,
 * and the update. */
static int run_step(anvil_run *r, int step) {
    const anvil_train_config *c = r->c;
    anvil_layout *L = r->L;
    if (anvil_telemetry_step_begin(r->tel, step + 1)) return -1;
    double t0 = anvil_now(), span = anvil_trace_begin() >= 0 ? t0 : -1;
    if (L->ops->zero_grads(L)) return -1;
    for (int micro = 0; micro < L->accum; micro++) {
        double wait = anvil_trace_begin();
        int32_t *x = r->x + micro * r->bt, *y = r->y + micro * r->bt;
        if (c->synthetic) fill_synthetic(&r->data_rng, x, y, r->bt, L->model.cfg.vocab_size);
        else if (anvil_loader_next(r->train, x, y)) return -1;
        anvil_trace_end(wait, "data", c->synthetic ? "synthetic batch" : "loader wait", -1, -1);
    }
    double loss_sum = 0.0;
    if (L->ops->micro_steps(L, r->x, r->y, &loss_sum)) return -1;
    r->agreed = (step_agreement){loss_sum, stop_signal != 0,
                                 r->rank == 0 && r->ckpt && anvil_checkpointer_due(r->ckpt, step + 1)};
    if (L->ops->finish_grads(L)) return -1;
    if (r->world > 1 && anvil_allreduce(anvil_dist_world(), &r->agreed, 3, ANVIL_F64, "loss and flags")) return -1;
    /* Every rank's loss is summed, tensor-parallel ranks' too (each holds its group's loss). */
    r->loss = (float)(r->agreed.loss_sum / L->accum / r->world);
    if (!isfinite(r->loss))
        return anvil_fail("train: step %d: the loss is %s; stopping (try a lower --lr)", step + 1,
                          isnan(r->loss) ? "NaN" : "infinite");
    double wait = anvil_now();
    int exchanged = anvil_checkpointer_before_update(r->ckpt);
    if (exchanged < 0) return -1;
    /* A step with no checkpoint open waited on none (the call's microsecond is no stall). */
    if (exchanged) r->ckpt_s += anvil_now() - wait;
    r->lr = anvil_lr_at(&r->sched, step);
    double opt = anvil_trace_begin();
    /* A device backend's kernels run asynchronously: the step is over, and its failures known, once it
     * has synchronized. */
    if (L->ops->step(L, r->lr, c->grad_clip, &r->norm) || r->k->sync()) return -1;
    anvil_trace_end(opt, "optimizer", "optimizer", -1, -1);
    r->dt = anvil_now() - t0;
    anvil_trace_record(span, t0 + r->dt, "step", "step", -1, -1);
    return 0;
}

/* ---- after the step ---- */

/* --ckpt-every auto: the interval again from the checkpoint just measured (train/ckpt_auto.h), said in
 * the log when it changes. Rank 0's alone counts: it decides when checkpoints are due. */
static void auto_interval(anvil_run *r, const anvil_checkpointer_report *rep) {
    int n = r->timed < 50 ? r->timed : 50;
    double recent[50];
    memcpy(recent, r->step_ms + r->timed - n, sizeof *recent * (size_t)n);
    double mtbf = r->c->mtbf_s > 0 ? r->c->mtbf_s : ANVIL_CKPT_AUTO_MTBF_S;
    char why[400];
    int every = anvil_ckpt_auto_every(rep->cost_ms, rep->write_ms, n ? median(recent, n) : 0, mtbf, r->c->steps, why,
                                      sizeof why);
    if (every == r->auto_every) return;
    r->auto_every = every;
    anvil_checkpointer_set_every(r->ckpt, every, r->start);
    if (r->c->progress) anvil_progress_end(r->c->log);
    fprintf(r->c->log, "%s\n", why);
}

/* The cost reports of completed checkpoints, into metrics.jsonl. */
static int ckpt_metrics(anvil_run *r) {
    anvil_checkpointer_report rep;
    while (anvil_checkpointer_next_report(r->ckpt, &rep)) {
        if (!r->metrics) continue;
        const char *keys[] = {"step",       "background", "write_ms", "writer_cpu_ms", "call_ms",  "waited_ms",
                              "cost_ms",    "cost_steps", "base_ms",  "sync_ms",       "sync_step", "cost_pct"};
        double vals[] = {(double)rep.step, rep.background, rep.write_ms, rep.writer_cpu_ms, rep.call_ms,
                         rep.waited_ms, rep.cost_ms, rep.cost_steps, rep.base_ms, rep.sync_ms, (double)rep.sync_step,
                         100.0 * rep.cost_ms / rep.sync_ms};
        if (anvil_metrics_write(r->metrics, "ckpt", keys, vals, 12)) return -1;
        if (r->c->ckpt_every == ANVIL_CKPT_EVERY_AUTO) auto_interval(r, &rep);
    }
    return 0;
}

/* For shards on S3, an "s3" record of the train loader's requests every log_every steps: counts,
 * rates by type since the last record, retries, bytes and latency percentiles. */
static int s3_metrics(anvil_run *r, int step) {
    const anvil_train_config *c = r->c;
    anvil_s3_stats st;
    if (!r->metrics || !r->train || !anvil_loader_s3_stats(r->train, &st)) return 0;
    if ((step + 1) % c->log_every && step + 1 != c->steps) return 0;
    double now = anvil_now(), dt = r->s3_last_t > 0 ? now - r->s3_last_t : now - r->t_start;
    if (dt <= 0) dt = 1e-9;
    const anvil_s3_stats *p = &r->s3_last;
    const char *keys[] = {"step", "get", "head", "list", "get_per_s", "head_per_s", "list_per_s", "retries",
                          "bytes_down", "mb_down_per_s", "p50_ms", "p99_ms"};
    double vals[] = {step + 1,
                     (double)st.requests[ANVIL_S3_GET],
                     (double)st.requests[ANVIL_S3_HEAD],
                     (double)st.requests[ANVIL_S3_LIST],
                     (double)(st.requests[ANVIL_S3_GET] - p->requests[ANVIL_S3_GET]) / dt,
                     (double)(st.requests[ANVIL_S3_HEAD] - p->requests[ANVIL_S3_HEAD]) / dt,
                     (double)(st.requests[ANVIL_S3_LIST] - p->requests[ANVIL_S3_LIST]) / dt,
                     (double)st.retries,
                     (double)st.bytes_down,
                     (double)(st.bytes_down - p->bytes_down) / dt / 1e6,
                     st.p50_ms,
                     st.p99_ms};
    r->s3_last = st;
    r->s3_last_t = now;
    return anvil_metrics_write(r->metrics, "s3", keys, vals, 12);
}

/* Timing, the result so far, metrics and the log line or progress bar. */
static int record_step(anvil_run *r, int step) {
    const anvil_train_config *c = r->c;
    double dt = r->dt;
    r->step_ms[r->timed++] = dt * 1e3;
    if (dt > r->slowest_step_s) r->slowest_step_s = dt;
    r->tokens_seen += (int64_t)r->tokens_per_step;
    r->res->final_loss = r->loss;
    r->res->steps_done = step + 1;
    double tok_s = r->tokens_per_step / dt, gflops = r->flops_per_step / dt / 1e9;
    double mfu = anvil_telemetry_mfu(r->tel, gflops * 1e9);
    if (r->metrics) {
        const char *keys[] = {"step", "loss", "lr", "grad_norm", "ms", "tokens_per_s", "gflops", "t", "ckpt_ms",
                              "eval_ms", "mfu"};
        double vals[] = {step + 1, r->loss, r->lr, r->norm, dt * 1e3, tok_s, gflops, anvil_epoch_now(),
                         r->ckpt_s * 1e3, r->eval_s * 1e3, mfu};
        if (anvil_metrics_write(r->metrics, "train", keys, vals, isnan(mfu) ? 10 : 11) || s3_metrics(r, step))
            return -1;
    }
    r->ckpt_s = r->eval_s = 0;
    if (anvil_checkpointer_step_done(r->ckpt, dt * 1e3, r->timed > c->timing_warmup) || ckpt_metrics(r)) return -1;
    char share[32] = "";
    if (!isnan(mfu)) snprintf(share, sizeof share, " | MFU %.1f%%", mfu * 100);
    if (c->progress) {
        char detail[160];
        snprintf(detail, sizeof detail, "loss %.4f | %.0f tok/s | %.1f GFLOP/s%s |", r->loss, tok_s, gflops, share);
        anvil_progress_draw(c->log, step + 1 - (int)r->start, c->steps - (int)r->start, anvil_now() - r->t_start,
                            detail);
    } else if ((step + 1) % c->log_every == 0 || step == 0 || step + 1 == c->steps) {
        fprintf(c->log, "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.0f ms | %.0f tok/s | %.1f GFLOP/s%s\n",
                step + 1, c->steps, r->loss, r->lr, r->norm, dt * 1e3, tok_s, gflops, share);
    }
    return 0;
}

/* Validation and a sample, when due. */
static int validate_and_sample(anvil_run *r, int step, int last) {
    const anvil_train_config *c = r->c;
    bool val = r->val && ((c->val_every && (step + 1) % c->val_every == 0) || last);
    bool sample = c->sample_every >= 0 && ((c->sample_every && (step + 1) % c->sample_every == 0) || last);
    if (!val && !sample) return 0;
    beat(r, "evaluating", step + 1);
    double eval0 = r->eval_s;
    if (val) {
        float vl;
        double span = anvil_trace_begin(), t0 = anvil_now();
        if (validate(c, r->L, r->val, r->x, r->y, &vl)) return -1;
        r->eval_s += anvil_now() - t0;
        anvil_trace_end(span, "validation", "validation", -1, -1);
        r->res->val_loss = vl;
        anvil_telemetry_validated(r->tel, step + 1, vl);
        if (c->progress) anvil_progress_end(c->log);
        fprintf(c->log, "step %d: val loss %.4f\n", step + 1, vl);
        if (r->metrics) {
            const char *keys[] = {"step", "val_loss"};
            double vals[] = {step + 1, vl};
            if (anvil_metrics_write(r->metrics, "val", keys, vals, 2)) return -1;
        }
    }
    if (sample) {
        if (c->progress && !r->val) anvil_progress_end(c->log);
        anvil_model whole;
        float *gathered;
        double t0 = anvil_now();
        if (r->L->ops->whole(r->L, &whole, &gathered)) return -1;
        int rc = r->rank == 0 ? print_sample(c, &whole, step + 1) : 0;
        r->k->free(gathered);
        r->eval_s += anvil_now() - t0;
        if (rc) return -1;
    }
    if (r->eval_s - eval0 > r->slowest_eval_s) r->slowest_eval_s = r->eval_s - eval0;
    return 0;
}

/* The checkpoint and the stop protocol: 0 to go on, ANVIL_TRAIN_STOPPED
 * once the checkpoint of a stop signal is complete, or -1. */
static int save_or_stop(anvil_run *r, int step, int last) {
    const anvil_train_config *c = r->c;
    /* Several ranks go by the agreed flag alone: a signal arriving after
     * the all-reduce waits for the next step on every rank alike. */
    int stopping = r->world > 1 ? r->agreed.stop > 0 : stop_signal != 0;
    int save = c->out_dir && ((last && r->ckpt_policy) || stopping || r->agreed.save > 0);
    if (stopping && !c->out_dir)
        return anvil_fail("train: stopped by a signal after step %d, but there is no --out to save a checkpoint "
                          "in; nothing to resume from",
                          step + 1);
    if (save) {
        if (c->progress) anvil_progress_end(c->log);
        beat(r, "checkpointing", step + 1);
        double t0 = anvil_now();
        if (save_checkpoint(r, step + 1, last || stopping) || ckpt_metrics(r)) return -1;
        double took = anvil_now() - t0;
        r->ckpt_s += took;
        if (took > r->slowest_ckpt_s) r->slowest_ckpt_s = took;
    }
    if (!stopping || last) return 0;
    /* mpirun stops the whole job when one rank exits nonzero, so no rank
     * leaves before the checkpoint is complete. */
    if (r->world > 1 && anvil_barrier(anvil_dist_world(), "stop")) return -1;
    if (stop_signal)
        fprintf(c->log, "stopped by signal %d after step %d; resume with --resume auto\n", (int)stop_signal, step + 1);
    else
        fprintf(c->log, "stopped by a signal to another rank after step %d; resume with --resume auto\n", step + 1);
    return ANVIL_TRAIN_STOPPED;
}

/* The step's figures to the telemetry, once everything the step logs is logged. */
static int telemetry_step(anvil_run *r, int step) {
    anvil_telemetry_step ts = {step + 1, r->loss, r->lr, r->norm, r->dt, r->tokens_per_step, r->flops_per_step,
                               r->tokens_seen, r->L->ops->comm_wait_s(r->L)};
    anvil_s3_stats st;
    if (r->train && anvil_loader_s3_stats(r->train, &st)) anvil_telemetry_s3(r->tel, "data", &st);
    if (r->remote) {
        anvil_ckpt_remote_stats(r->remote, &st);
        anvil_telemetry_s3(r->tel, "checkpoint", &st);
    }
    return anvil_telemetry_step_done(r->tel, &ts);
}

static int run_after_step(anvil_run *r, int step) {
    int last = step + 1 == r->c->steps;
    if (record_step(r, step)) return -1;
    /* After the step's timing, so that the beat of a retry's first step already carries it. */
    beat(r, "training", step + 1);
    if (validate_and_sample(r, step, last)) return -1;
    int rc = save_or_stop(r, step, last);
    return rc >= 0 && telemetry_step(r, step) ? -1 : rc;
}

/* ---- close ---- */

/* After the last step: the timing medians, the ranks' memory and waits,
 * and the trained model. */
static int run_finish(anvil_run *r) {
    const anvil_train_config *c = r->c;
    anvil_train_result *res = r->res;
    if (c->progress && !r->val && c->sample_every < 0) anvil_progress_end(c->log);
    int skip = r->timed > c->timing_warmup ? c->timing_warmup : 0;
    if (r->timed > skip) {
        res->ms_per_step_median = median(r->step_ms + skip, r->timed - skip);
        res->tokens_per_s_median = r->tokens_per_step / (res->ms_per_step_median / 1e3);
        res->gflops_median = r->flops_per_step / (res->ms_per_step_median / 1e3) / 1e9;
        res->mfu_median = anvil_telemetry_mfu(r->tel, res->gflops_median * 1e9);
    }
    res->peak_rss_mb = peak_rss_mb();
    if (r->L->ops->report(r->L, res->peak_rss_mb, anvil_now() - r->t_start, &res->comm_wait_share)) return -1;
    if (!c->out_dir) return 0;
    beat(r, "finishing", res->steps_done);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", c->out_dir);
    if (r->L->ops->save_model(r->L, path, &r->tok_rec)) return -1;
    if (r->rank == 0) fprintf(c->log, "saved %s\n", path);
    return 0;
}

/* Frees everything and returns rc, or -1 when a checkpoint write failed. */
static int run_close(anvil_run *r, int rc) {
    bool together = rc == 0; /* every rank finished the steps, so every rank is here */
    if (anvil_checkpointer_free(r->ckpt) && rc != -1) rc = -1;
    if (anvil_ckpt_remote_close(r->remote) && rc != -1) {
        fprintf(r->c->log, "error: %s\n", anvil_errmsg());
        rc = -1;
    }
    /* Rank 0 reads every host's upload marker before it can say which host failed; a rank that left
     * first, failing, would have mpirun end rank 0 at once, and that line with it. */
    if (together && r->c->ckpt_uri && r->world > 1 && anvil_barrier(anvil_dist_world(), "uploads") && rc != -1) rc = -1;
    free(r->host_leader);
    if (anvil_telemetry_close(r->tel, rc == -1) && rc != -1) rc = -1;
    anvil_layout_free(r->L);
    anvil_loader_close(r->train);
    anvil_loader_close(r->val);
    anvil_metrics_close(r->metrics);
    if (r->lock_fd >= 0) close(r->lock_fd);
    if (r->ranks_fd >= 0) close(r->ranks_fd);
    free(r->x);
    free(r->y);
    free(r->step_ms);
    if (r->devnull) fclose(r->devnull);
    /* Last, so that a stop signal arriving while the run is torn down still only sets stop_signal. */
    if (r->signals_set) {
        sigaction(SIGTERM, &r->old_term, NULL);
        sigaction(SIGUSR1, &r->old_usr1, NULL);
    }
    return rc;
}

int anvil_train(const anvil_train_config *c, anvil_train_result *res) {
    anvil_run r;
    int rc = run_open(&r, c, res);
    res->start_step = (int)r.start;
    for (int step = (int)r.start; !rc && step < r.c->steps; step++) {
        rc = run_step(&r, step);
        if (!rc) rc = run_after_step(&r, step);
    }
    double t_finish = anvil_now();
    if (!rc) rc = run_finish(&r);
    if ((rc == 0 || rc == ANVIL_TRAIN_STOPPED) && record_end(&r, rc == ANVIL_TRAIN_STOPPED, anvil_now() - t_finish))
        rc = -1;
    rc = run_close(&r, rc);
    /* Last: the run's own word that it finished (ckpt/completion.h), which an exit status is not. */
    if (!rc && r.rank == 0 && c->out_dir)
        rc = anvil_completion_write(c->out_dir, "train", r.start > res->steps_done ? r.start : res->steps_done, c->steps,
                                    (const char *const[]){"model.safetensors"}, 1);
    return rc == -1 && r.bad_input ? ANVIL_TRAIN_BAD_INPUT : rc;
}

#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/model_file.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/bytetok.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/dataparallel.h"
#include "kernels/isa.h"
#include "obs/metrics.h"
#include "sample/sampler.h"
#include "tok/tokenizer.h"
#include "train/checkpointer.h"

void anvil_train_defaults(anvil_train_config *c) {
    memset(c, 0, sizeof *c);
    anvil_gpt2_preset("tiny", &c->model);
    c->B = 4;
    c->T = 64;
    c->steps = 100;
    c->lr = (anvil_lr_schedule){ANVIL_LR_COSINE, 6e-4f, 6e-5f, 0, 0};
    c->adamw = (anvil_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f};
    c->grad_clip = 1.0f;
    c->val_batches = 8;
    c->sample_tokens = 128;
    c->seed = 1337;
    c->log_every = 10;
    c->keep_last = 3;
    c->timing_warmup = 1;
    c->log = stderr;
}

int anvil_train_check(const anvil_train_config *c) {
    anvil_gpt2_config m = c->model;
    if (anvil_gpt2_config_check(&m)) return -1;
    if (c->B < 1) return anvil_fail("train: --batch must be positive, got %d", c->B);
    if (c->T < 1 || c->T > m.block_size)
        return anvil_fail("train: --seq must be in 1..block_size (%d), got %d", m.block_size, c->T);
    if (anvil_gpt2_batch_check(&m, c->B, c->T)) return -1;
    if (c->matmul_dtype == ANVIL_MATMUL_BF16 && anvil_isa_check_bf16()) {
        char why[256];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        return anvil_fail("train: --dtype bf16: %s", why);
    }
    int world = anvil_dist_world_size();
    int64_t bt = (int64_t)c->B * c->T * world;
    if (c->total_batch_tokens < 0 || (c->total_batch_tokens && c->total_batch_tokens % bt)) {
        if (world > 1)
            return anvil_fail("train: --total-batch-tokens (%lld) must be a positive multiple of batch*seq*ranks "
                              "(%d*%d*%d = %lld)",
                              (long long)c->total_batch_tokens, c->B, c->T, world, (long long)bt);
        return anvil_fail("train: --total-batch-tokens (%lld) must be a positive multiple of batch*seq (%lld)",
                          (long long)c->total_batch_tokens, (long long)bt);
    }
    anvil_dp_config dc = {c->zero_stage, c->shard_group_size, c->adamw};
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
    if (c->ckpt_every < 0 || c->ckpt_minutes < 0 || c->keep_last < 1 || c->keep_every < 0)
        return anvil_fail("train: checkpoint intervals must be >= 0 and --keep-last >= 1");
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
static int validate(const anvil_train_config *c, anvil_gpt2 *m, anvil_loader *val, int32_t *x, int32_t *y,
                    float *out) {
    anvil_loader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < c->val_batches; i++) {
        float l;
        if (anvil_loader_next(val, x, y) || anvil_gpt2_forward(m, x, y, c->B, c->T, &l)) return -1;
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

/* A sample from the end-of-text token, printed as text when the tokenizer
 * is known (given, or bytes) and as ids otherwise. */
static int print_sample(const anvil_train_config *c, anvil_gpt2 *m, int step) {
    const anvil_tok *tk = c->tokenizer;
    int text = tk || m->cfg.vocab_size == ANVIL_BYTETOK_VOCAB;
    int32_t eot = tk ? anvil_tok_eot(tk) : text ? ANVIL_BYTETOK_EOT : -1;
    int32_t start = eot >= 0 ? eot : 0;
    anvil_sample_opts so = {1.0f, 0, 1.0f, eot};
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

/* Restores model, optimizer, loader and RNG from the checkpoint that
 * c->resume names; *start_step receives its step (0 when "auto" finds none). */
static int resume_from(const anvil_train_config *c, anvil_gpt2 *model, anvil_adamw *opt, anvil_loader *train,
                       anvil_rng *data_rng, int64_t *start_step, int64_t *tokens_seen) {
    char dir[4096], warn[4096] = "";
    if (!strcmp(c->resume, "auto")) {
        int found = anvil_ckpt_find_latest_valid(c->out_dir, dir, sizeof dir, warn, sizeof warn);
        if (warn[0]) fprintf(c->log, "warning: %s", warn);
        if (found < 0) return -1;
        if (found == 0) {
            fprintf(c->log, "resume: no checkpoint in %s yet; starting from step 0\n", c->out_dir);
            return 0;
        }
    } else {
        snprintf(dir, sizeof dir, "%s", c->resume);
    }
    anvil_ckpt_manifest man;
    if (anvil_ckpt_load(dir, model, opt, &man)) return -1;
    int rc = 0;
    if (train && anvil_loader_set_state(train, man.loader)) rc = -1;
    *data_rng = man.rng;
    *start_step = man.step;
    *tokens_seen = man.tokens_seen;
    if (!rc) fprintf(c->log, "resumed from %s (step %lld)\n", dir, (long long)man.step);
    anvil_ckpt_manifest_free(&man);
    return rc;
}

/* Stage 3 keeps no whole copy of the weights: sampling and saving gather
 * one for the moment (a collective, so every rank calls this). */
static float *gather_full_params(anvil_dp *dp, anvil_gpt2 *m) {
    float *full = m->k->alloc(m->nparams * sizeof(float));
    if (!full) {
        anvil_fail("train: out of memory gathering the parameters");
        return NULL;
    }
    if (anvil_dp_gather_params(dp, full)) {
        m->k->free(full);
        return NULL;
    }
    return full;
}

/* Runs fn on rank 0 with m->params whole, whatever the sharding. */
static int with_whole_model(anvil_dp *dp, anvil_gpt2 *m, int (*fn)(void *ctx, anvil_gpt2 *m), void *ctx) {
    if (!m->params) {
        float *full = gather_full_params(dp, m);
        if (!full) return -1;
        int rc = 0;
        if (anvil_dist_rank() == 0) {
            const anvil_gpt2_hooks *h = m->hooks;
            m->params = full;
            m->hooks = NULL;
            rc = fn(ctx, m);
            m->hooks = h;
            m->params = NULL;
        }
        m->k->free(full);
        return rc;
    }
    return anvil_dist_rank() == 0 ? fn(ctx, m) : 0;
}

typedef struct {
    const anvil_train_config *c;
    int step;
    const char *path;
} whole_job;

/* A checkpoint of the state after `step` steps, through the checkpointer on
 * every rank: replicated runs save rank 0's copy, sharded ones every shard. */
static int save_checkpoint(const anvil_train_config *c, anvil_checkpointer *ckpt, anvil_gpt2 *m, anvil_adamw *opt,
                           anvil_dp *dp, anvil_loader *train, anvil_rng rng, int64_t step, int64_t tokens_seen,
                           int force_sync) {
    int world = anvil_dist_world_size();
    /* Replicas: rank 0's copy is everyone's; the layout is recorded for information. */
    anvil_ckpt_layout lay = {world, 0, 1};
    anvil_ckpt_state st = {m, opt, {0}, rng, step, tokens_seen, NULL, c->config_json, world > 1 ? &lay : NULL};
    if (train) st.loader = anvil_loader_get_state(train);
    if (!c->zero_stage) return anvil_checkpointer_save(ckpt, &st, NULL, force_sync);
    anvil_checkpointer_shard sh;
    anvil_dp_shard_id(dp, &sh.g, &sh.k, &sh.writer);
    lay = (anvil_ckpt_layout){world, c->zero_stage, sh.k};
    st.opt = anvil_dp_optimizer(dp);
    st.layout = &lay;
    sh.nslices = anvil_dp_num_slices(dp);
    anvil_ckpt_slice *sl = calloc((size_t)sh.nslices + 1, sizeof *sl);
    if (!sl) return anvil_fail("train: out of memory for a checkpoint");
    for (int i = 0; i < sh.nslices; i++)
        anvil_dp_slice(dp, i, &sl[i].tensor, &sl[i].flat, &sl[i].len, &sl[i].m, &sl[i].v, &sl[i].p);
    sh.slices = sl;
    int rc = anvil_checkpointer_save(ckpt, &st, &sh, force_sync);
    free(sl);
    return rc;
}

static int do_sample(void *ctx, anvil_gpt2 *m) {
    whole_job *j = ctx;
    return print_sample(j->c, m, j->step);
}

static int do_save(void *ctx, anvil_gpt2 *m) {
    whole_job *j = ctx;
    if (anvil_model_save(j->path, m)) return -1;
    fprintf(j->c->log, "saved %s\n", j->path);
    return 0;
}

static double current_rss_mb(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

/* Rank 0 prints every rank's memory: the peak (which includes building the
 * whole model once, before sharding), the resident size after training, and
 * what the rank's share of parameters, gradients and moments takes. */
static int report_memory(const anvil_train_config *c, anvil_dp *dp, double rss_mb) {
    int world = anvil_dist_world_size(), rank = anvil_dist_rank();
    anvil_dp_info info;
    anvil_dp_get_info(dp, &info);
    double *v = calloc((size_t)world * 3, sizeof *v);
    if (!v) return anvil_fail("train: out of memory");
    v[3 * rank] = rss_mb;
    v[3 * rank + 1] = current_rss_mb();
    v[3 * rank + 2] = info.state_bytes / 1048576.0;
    int rc = anvil_allreduce(anvil_dist_world(), v, (size_t)world * 3, ANVIL_F64, "memory report");
    if (!rc) {
        fprintf(c->log, "memory (ZeRO-%d, shard group %d, %d replicas):", info.zero_stage, info.shard_group_size,
                info.replicas);
        for (int r = 0; r < world; r++)
            fprintf(c->log, " rank %d %.0f MB peak RSS, %.0f MB RSS now, %.0f MB model state;", r, v[3 * r],
                    v[3 * r + 1], v[3 * r + 2]);
        fprintf(c->log, "\n");
    }
    free(v);
    return rc;
}

int anvil_train(const anvil_train_config *c, anvil_train_result *res) {
    if (anvil_train_check(c)) return -1;
    /* Only rank 0 talks; the others log nowhere. */
    int rank = anvil_dist_rank(), world = anvil_dist_world_size();
    anvil_train_config quiet;
    FILE *devnull = NULL;
    if (rank != 0) {
        if (!(devnull = fopen("/dev/null", "w"))) return anvil_fail("train: cannot open /dev/null");
        quiet = *c;
        quiet.log = devnull;
        c = &quiet;
    }
    memset(res, 0, sizeof *res);
    res->val_loss = NAN;
    const anvil_kernels *k = anvil_kernels_cpu_for(c->matmul_dtype);
    if (!k) return -1;
    anvil_gpt2 model;
    anvil_adamw opt = {0};
    anvil_loader *train = NULL, *val = NULL;
    anvil_metrics *metrics = NULL;
    anvil_checkpointer *ckpt = NULL;
    anvil_dp *dp = NULL;
    int32_t *x = NULL, *y = NULL;
    double *step_ms = NULL;
    int rc = -1, timed = 0;
    int have_model = 0;
    struct sigaction old_term, old_usr1, sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1);

    if (c->init_model) {
        if (anvil_model_load(c->init_model, k, &model)) goto out;
        have_model = 1;
        if (model.cfg.vocab_size != c->model.vocab_size || c->T > model.cfg.block_size) {
            anvil_fail("train: %s does not fit this run (vocab %d, block %d)", c->init_model, model.cfg.vocab_size,
                       model.cfg.block_size);
            goto out;
        }
    } else {
        if (anvil_gpt2_init(&model, &c->model, k)) goto out;
        have_model = 1;
        anvil_gpt2_init_weights(&model, c->seed);
    }
    const anvil_gpt2_config *mc = &model.cfg;
    int B = c->B, T = c->T;
    size_t bt = (size_t)B * T;
    int accum = c->total_batch_tokens ? (int)(c->total_batch_tokens / ((int64_t)bt * world)) : 1;
    double tokens_per_step = (double)bt * accum * world;
    int sharded = c->zero_stage > 0;
    double flops_per_step = anvil_gpt2_flops_per_token(mc, T) * tokens_per_step;
    res->params = (int64_t)anvil_gpt2_num_params(mc);

    int ckpt_policy = c->out_dir && (c->ckpt_every || c->ckpt_minutes > 0 || c->resume);
    /* A sharded run restores whole moments from a checkpoint of any layout, then keeps its part. */
    if ((!sharded || c->resume) &&
        anvil_adamw_init_whole(&opt, k, &c->adamw, model.offsets, ANVIL_GPT2_NPARAM, anvil_gpt2_param_decays))
        goto out;
    if (!c->synthetic) {
        train = anvil_loader_open(c->train_pattern, B, T, rank, world, mc->vocab_size);
        if (!train || (c->shuffle && anvil_loader_set_shuffle(train, c->seed))) goto out;
        if (c->val_pattern) {
            val = anvil_loader_open(c->val_pattern, B, T, rank, world, mc->vocab_size);
            if (!val) goto out;
        }
    }
    if (c->out_dir && rank == 0) {
        if (mkdir(c->out_dir, 0755) && errno != EEXIST) {
            anvil_fail("%s: cannot create the run folder: %s", c->out_dir, strerror(errno));
            goto out;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/metrics.jsonl", c->out_dir);
        if (!(metrics = anvil_metrics_open(path))) goto out;
    }
    x = malloc(bt * sizeof(int32_t));
    y = malloc(bt * sizeof(int32_t));
    step_ms = malloc(sizeof(double) * (size_t)c->steps);
    if (!x || !y || !step_ms) {
        anvil_fail("train: out of memory");
        goto out;
    }

    fprintf(c->log,
            "model: %d layers, %d heads, %d embd, block %d, vocab %d (padded %d), %.2fM parameters\n"
            "batch: %d x %d tokens x %d accumulation x %d ranks = %.0f tokens/step, %d steps, %.3g FLOP/token\n"
            "kernels: %s, %d threads\n",
            mc->n_layer, mc->n_head, mc->n_embd, mc->block_size, mc->vocab_size, mc->padded_vocab,
            (double)res->params / 1e6, B, T, accum, world, tokens_per_step, c->steps,
            anvil_gpt2_flops_per_token(mc, T), k->name, omp_get_max_threads());

    /* Synthetic tokens differ per rank; rank 0 draws what a single process would. */
    anvil_rng data_rng;
    anvil_rng_seed(&data_rng, c->seed ^ 0x5eedda7aULL ^ ((uint64_t)rank * 0x9e3779b97f4a7c15ULL));
    int64_t start = 0, tokens_seen = 0;
    if (c->resume && resume_from(c, &model, &opt, train, &data_rng, &start, &tokens_seen)) goto out;
    if (world > 1 || sharded) {
        anvil_dp_config dc = {c->zero_stage, c->shard_group_size, c->adamw};
        if (!(dp = anvil_dp_new(&model, &dc))) goto out;
        if (sharded && opt.m) {
            anvil_dp_set_moments(dp, &opt);
            anvil_adamw_free(&opt);
        }
    }
    /* With a run folder every rank has a checkpointer: a stop signal saves even without a policy. */
    if (c->out_dir) {
        anvil_checkpointer_config cc = {c->out_dir, c->ckpt_every, c->ckpt_minutes, c->keep_last,
                                        c->keep_every, !c->ckpt_sync, c->log};
        if (!(ckpt = anvil_checkpointer_new(&cc))) goto out;
    }
    anvil_lr_schedule sched = c->lr;
    if (!sched.total) sched.total = c->steps;
    double t_start = anvil_now();
    for (int step = (int)start; step < c->steps; step++) {
        double t0 = anvil_now();
        if (dp) {
            if (anvil_dp_begin_step(dp)) goto out;
        } else {
            anvil_gpt2_zero_grad(&model);
        }
        double loss_sum = 0.0;
        for (int micro = 0; micro < accum; micro++) {
            if (c->synthetic) fill_synthetic(&data_rng, x, y, bt, mc->vocab_size);
            else if (anvil_loader_next(train, x, y)) goto out;
            float l;
            if (dp) anvil_dp_set_last_micro(dp, micro == accum - 1);
            if (anvil_gpt2_forward_backward(&model, x, y, B, T, 1.0f / ((float)accum * (float)world), &l)) goto out;
            loss_sum += l;
        }
        /* The stop flag rides along, so every rank stops after the same step. */
        /* So does rank 0's checkpoint decision, which depends on its clock. */
        double agreed[3] = {loss_sum, stop_signal != 0, rank == 0 && ckpt && anvil_checkpointer_due(ckpt, step + 1)};
        if (dp && (anvil_dp_finish_grads(dp) || (world > 1 && anvil_allreduce(anvil_dist_world(), agreed, 3,
                                                                              ANVIL_F64, "loss and flags"))))
            goto out;
        float loss = (float)(agreed[0] / accum / world);
        if (!isfinite(loss)) {
            anvil_fail("train: step %d: the loss is %s; stopping (try a lower --lr)", step + 1,
                       isnan(loss) ? "NaN" : "infinite");
            goto out;
        }
        if (anvil_checkpointer_before_update(ckpt)) goto out;
        float norm, lr = anvil_lr_at(&sched, step);
        if (sharded) {
            if (anvil_dp_step(dp, lr, c->grad_clip, &norm)) goto out;
        } else {
            norm = anvil_adamw_step(&opt, model.params, model.grads, anvil_adamw_grad_sumsq(&opt, model.grads),
                                    c->grad_clip, lr);
        }
        double dt = anvil_now() - t0;
        step_ms[timed++] = dt * 1e3;
        tokens_seen += (int64_t)tokens_per_step;
        res->final_loss = loss;
        res->steps_done = step + 1;

        double tok_s = tokens_per_step / dt, gflops = flops_per_step / dt / 1e9;
        if (metrics) {
            const char *keys[] = {"step", "loss", "lr", "grad_norm", "ms", "tokens_per_s", "gflops"};
            double vals[] = {step + 1, loss, lr, norm, dt * 1e3, tok_s, gflops};
            if (anvil_metrics_write(metrics, "train", keys, vals, 7)) goto out;
        }
        if (c->progress) {
            char detail[160];
            snprintf(detail, sizeof detail, "loss %.4f | %.0f tok/s | %.1f GFLOP/s |", loss, tok_s, gflops);
            anvil_progress_draw(c->log, step + 1 - (int)start, c->steps - (int)start, anvil_now() - t_start, detail);
        } else if ((step + 1) % c->log_every == 0 || step == 0 || step + 1 == c->steps) {
            fprintf(c->log, "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.0f ms | %.0f tok/s | %.1f GFLOP/s\n",
                    step + 1, c->steps, loss, lr, norm, dt * 1e3, tok_s, gflops);
        }

        int last = step + 1 == c->steps;
        if (val && ((c->val_every && (step + 1) % c->val_every == 0) || last)) {
            float vl;
            if (validate(c, &model, val, x, y, &vl)) goto out;
            res->val_loss = vl;
            if (c->progress) anvil_progress_end(c->log);
            fprintf(c->log, "step %d: val loss %.4f\n", step + 1, vl);
            if (metrics) {
                const char *keys[] = {"step", "val_loss"};
                double vals[] = {step + 1, vl};
                if (anvil_metrics_write(metrics, "val", keys, vals, 2)) goto out;
            }
        }
        if (c->sample_every >= 0 && ((c->sample_every && (step + 1) % c->sample_every == 0) || last)) {
            if (c->progress && !val) anvil_progress_end(c->log);
            whole_job job = {c, step + 1, NULL};
            if (with_whole_model(dp, &model, do_sample, &job)) goto out;
        }
        /* Several ranks go by the agreed flag alone: a signal arriving after
         * the all-reduce waits for the next step on every rank alike. */
        int stopping = world > 1 ? agreed[1] > 0 : stop_signal != 0;
        int save = c->out_dir && ((last && ckpt_policy) || stopping || agreed[2] > 0);
        if (stopping && !c->out_dir) {
            anvil_fail("train: stopped by a signal after step %d, but there is no --out to save a checkpoint in; "
                       "nothing to resume from",
                       step + 1);
            goto out;
        }
        if (save) {
            if (c->progress) anvil_progress_end(c->log);
            if (save_checkpoint(c, ckpt, &model, &opt, dp, train, data_rng, step + 1, tokens_seen, last || stopping))
                goto out;
        }
        if (stopping && !last) {
            /* mpirun stops the whole job when one rank exits nonzero, so no
             * rank leaves before the checkpoint is complete. */
            if (world > 1 && anvil_barrier(anvil_dist_world(), "stop")) goto out;
            if (stop_signal)
                fprintf(c->log, "stopped by signal %d after step %d; resume with --resume auto\n", (int)stop_signal,
                        step + 1);
            else
                fprintf(c->log, "stopped by a signal to another rank after step %d; resume with --resume auto\n",
                        step + 1);
            rc = ANVIL_TRAIN_STOPPED;
            goto out;
        }
    }
    if (c->progress && !val && c->sample_every < 0) anvil_progress_end(c->log);

    int skip = timed > c->timing_warmup ? c->timing_warmup : 0;
    if (timed > skip) {
        res->ms_per_step_median = median(step_ms + skip, timed - skip);
        res->tokens_per_s_median = tokens_per_step / (res->ms_per_step_median / 1e3);
        res->gflops_median = flops_per_step / (res->ms_per_step_median / 1e3) / 1e9;
    }
    res->peak_rss_mb = peak_rss_mb();
    if (dp) {
        anvil_dp_info info;
        anvil_dp_get_info(dp, &info);
        double total = anvil_now() - t_start;
        res->comm_wait_share = total > 0 ? info.comm_wait_s / total : 0.0;
        if (report_memory(c, dp, res->peak_rss_mb)) goto out;
        fprintf(c->log, "communication: %.1f%% of the training time waited on (not overlapped)\n",
                100.0 * res->comm_wait_share);
    }
    if (c->out_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/model.safetensors", c->out_dir);
        whole_job job = {c, 0, path};
        if (with_whole_model(dp, &model, do_save, &job)) goto out;
    }
    rc = 0;
out:
    if (anvil_checkpointer_free(ckpt) && rc != -1) rc = -1;
    anvil_dp_free(dp);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    if (have_model) {
        anvil_adamw_free(&opt);
        anvil_gpt2_free(&model);
    }
    anvil_loader_close(train);
    anvil_loader_close(val);
    anvil_metrics_close(metrics);
    free(x);
    free(y);
    free(step_ms);
    if (devnull) fclose(devnull);
    return rc;
}

/* anvil train: parse options into an anvil_train_config and run it. */
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/s3path.h"
#include "core/error.h"
#include "core/exit.h"
#include "core/fsutil.h"
#include "data/loader.h"
#include "data/prep.h"
#include "dist/comm.h"
#include "kernels/isa.h"
#include "obs/heartbeat.h"
#include "obs/logmetric.h"
#include "opts/tables.h"
#include "tok/tokenizer.h"
#include "train/ckpt_auto.h"
#include "train/ckpt_remote.h"
#include "train/trainer.h"

/* The command line as {"argv": [...], "kernels": ..., "batch", "seq", "steps"}, recorded in every
 * checkpoint so a run can be audited and repeated: bits repeat on the same
 * kernels (path, and bf16 kernel), whatever the thread count; a resume with
 * another batch, sequence length or step count is warned about (train/resume_check.h). */
static char *argv_json(int argc, char **argv, const anvil_train_config *c) {
    anvil_matmul_dtype dtype = c->matmul_dtype;
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "argv");
    for (int i = 0; i < argc; i++) cJSON_AddItemToArray(a, cJSON_CreateString(argv[i]));
    char kernels[64];
    snprintf(kernels, sizeof kernels, "%s%s%s", anvil_isa_name(anvil_isa_active()),
             dtype == ANVIL_MATMUL_BF16 ? "+" : "", dtype == ANVIL_MATMUL_BF16 ? anvil_isa_bf16_name(anvil_isa_bf16()) : "");
    cJSON_AddStringToObject(o, "kernels", kernels);
    cJSON_AddNumberToObject(o, "batch", c->B);
    cJSON_AddNumberToObject(o, "seq", c->T);
    cJSON_AddNumberToObject(o, "steps", c->steps);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}


_Static_assert(ANVIL_TRAIN_MAX_CKPT_PREFIXES == ANVIL_CKPT_REMOTE_MAX_PREFIXES, "--ckpt-prefixes' bound in its table");

/* What the options say beyond the trainer's configuration: the model's overrides and the choices
 * checked once every option is in. */
typedef struct {
    anvil_train_config *c;
    const char *preset, *data, *schedule, *dtype, *device, *profile_steps;
    int layers, heads, embd, block, vocab, seq, threads;
    bool summary, progress, health;
    int64_t seed;
    float min_lr;
    double coll_timeout;
    char metric_names[ANVIL_LOGMETRIC_MAX][ANVIL_LOGMETRIC_NAME_MAX + 1];
    const char *metric_name_ptrs[ANVIL_LOGMETRIC_MAX], *metric_regexes[ANVIL_LOGMETRIC_MAX];
    char shards_dir[4096]; /* --train's folder when it holds a prep manifest ("" else) */
    bool vocab_note;       /* --train without one, nor --vocab: say which vocabulary is in use */
} train_args;

static int take_metric(train_args *t, const char *v) {
    anvil_train_config *c = t->c;
    if (c->nmetrics == ANVIL_LOGMETRIC_MAX) return anvil_fail("--metric: at most %d definitions", ANVIL_LOGMETRIC_MAX);
    if (anvil_logmetric_parse(v, t->metric_names[c->nmetrics], sizeof t->metric_names[0],
                              &t->metric_regexes[c->nmetrics])) {
        char why[512];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        return anvil_fail("--metric: %s", why);
    }
    t->metric_name_ptrs[c->nmetrics] = t->metric_names[c->nmetrics];
    c->nmetrics++;
    return 0;
}

/* One option of train's table (opts/tables.h), in the order given. */
static int take(void *ctx, const anvil_opt_arg *a) {
    train_args *t = ctx;
    anvil_train_config *c = t->c;
    const char *v = a->text;
    int i = (int)a->i;
    float f = (float)a->d;
    switch ((enum anvil_train_opt)a->id) {
    case ANVIL_TRAIN_DATA: t->data = v; break;
    case ANVIL_TRAIN_TRAIN: c->train_pattern = v; break;
    case ANVIL_TRAIN_VAL: c->val_pattern = v; break;
    case ANVIL_TRAIN_S3_RANGE_MIB: c->s3_range = (size_t)i << 20; break;
    case ANVIL_TRAIN_S3_INFLIGHT: c->s3_inflight = i; break;
    case ANVIL_TRAIN_DATA_LAYOUT: c->data_layout = a->choice ? ANVIL_LOADER_CONTIGUOUS : ANVIL_LOADER_STRIDED; break;
    case ANVIL_TRAIN_SYNTHETIC: c->synthetic = 1; break;
    case ANVIL_TRAIN_SHUFFLE: c->shuffle = 1; break;
    case ANVIL_TRAIN_PRESET: t->preset = v; break;
    case ANVIL_TRAIN_LAYERS: t->layers = i; break;
    case ANVIL_TRAIN_HEADS: t->heads = i; break;
    case ANVIL_TRAIN_EMBD: t->embd = i; break;
    case ANVIL_TRAIN_BLOCK: t->block = i; break;
    case ANVIL_TRAIN_VOCAB: t->vocab = i; break;
    case ANVIL_TRAIN_INIT: c->init_model = v; break;
    case ANVIL_TRAIN_DTYPE: t->dtype = v; break;
    case ANVIL_TRAIN_DEVICE: t->device = v; break;
    case ANVIL_TRAIN_BATCH: c->B = i; break;
    case ANVIL_TRAIN_SEQ: t->seq = i; break;
    case ANVIL_TRAIN_TOTAL_BATCH_TOKENS: c->total_batch_tokens = a->i; break;
    case ANVIL_TRAIN_STEPS: c->steps = i; break;
    case ANVIL_TRAIN_LR: c->lr.lr = f; break;
    case ANVIL_TRAIN_MIN_LR: t->min_lr = f; break;
    case ANVIL_TRAIN_LR_WARMUP: c->lr.warmup = i; break;
    case ANVIL_TRAIN_SCHEDULE: t->schedule = v; break;
    case ANVIL_TRAIN_WEIGHT_DECAY: c->adamw.weight_decay = f; break;
    case ANVIL_TRAIN_BETA1: c->adamw.beta1 = f; break;
    case ANVIL_TRAIN_BETA2: c->adamw.beta2 = f; break;
    case ANVIL_TRAIN_EPS: c->adamw.eps = f; break;
    case ANVIL_TRAIN_GRAD_CLIP: c->grad_clip = f; break;
    case ANVIL_TRAIN_SEED: t->seed = a->i; break;
    case ANVIL_TRAIN_VAL_EVERY: c->val_every = i; break;
    case ANVIL_TRAIN_VAL_BATCHES: c->val_batches = i; break;
    case ANVIL_TRAIN_SAMPLE_EVERY: c->sample_every = i; break;
    case ANVIL_TRAIN_SAMPLE_TOKENS: c->sample_tokens = i; break;
    case ANVIL_TRAIN_OUT: c->out_dir = v; break;
    case ANVIL_TRAIN_METRICS_PORT: c->metrics_port = i; break;
    case ANVIL_TRAIN_METRIC: return take_metric(t, v);
    case ANVIL_TRAIN_PROFILE: c->profile_dir = v; break;
    case ANVIL_TRAIN_PROFILE_STEPS: t->profile_steps = v; break;
    case ANVIL_TRAIN_CKPT_EVERY: c->ckpt_every = a->choice >= 0 ? ANVIL_CKPT_EVERY_AUTO : i; break;
    case ANVIL_TRAIN_MTBF: c->mtbf_s = a->d; break;
    case ANVIL_TRAIN_CKPT_MINUTES: c->ckpt_minutes = a->d; break;
    case ANVIL_TRAIN_KEEP_LAST: c->keep_last = i; break;
    case ANVIL_TRAIN_KEEP_EVERY: c->keep_every = a->i; break;
    case ANVIL_TRAIN_CKPT_SYNC: c->ckpt_sync = 1; break;
    case ANVIL_TRAIN_RESUME: c->resume = v; break;
    case ANVIL_TRAIN_CKPT_URI: c->ckpt_uri = v; break;
    case ANVIL_TRAIN_CKPT_PREFIXES: c->ckpt_prefixes = i; break;
    case ANVIL_TRAIN_ZERO: c->zero_stage = i; break;
    case ANVIL_TRAIN_SHARD_GROUP_SIZE: c->shard_group_size = i; break;
    case ANVIL_TRAIN_TP: c->tensor_parallel = i; break;
    case ANVIL_TRAIN_PP: c->pipeline_parallel = i; break;
    /* Only gpipe changes the schedule: 1f1b is the default, and does not undo an earlier gpipe. */
    case ANVIL_TRAIN_PP_SCHEDULE: c->pipeline_gpipe |= a->choice == 1; break;
    case ANVIL_TRAIN_SEQUENCE_PARALLEL: c->sequence_parallel = 1; break;
    case ANVIL_TRAIN_COLLECTIVE_TIMEOUT: t->coll_timeout = a->d; break;
    case ANVIL_TRAIN_LOG_EVERY: c->log_every = i; break;
    case ANVIL_TRAIN_THREADS: t->threads = i; break;
    case ANVIL_TRAIN_WARMUP: c->timing_warmup = i; break;
    case ANVIL_TRAIN_SUMMARY_JSON: t->summary = true; break;
    case ANVIL_TRAIN_NO_PROGRESS: t->progress = false; break;
    case ANVIL_TRAIN_NO_HEALTH: t->health = false; break;
    case ANVIL_TRAIN_NOPTS: break;
    }
    return 0;
}

/* The profile's steps and the log metrics, once every option is in; 0 or the exit status. */
static int check_extras(train_args *t) {
    const char *cmd = "train";
    anvil_train_config *c = t->c;
    c->metric_names = t->metric_name_ptrs;
    c->metric_regexes = t->metric_regexes;
    if (anvil_logmetric_check_all(t->metric_name_ptrs, t->metric_regexes, c->nmetrics))
        return cli_usage_error(cmd, "--metric: %s", anvil_errmsg());
    if (t->profile_steps) {
        char end;
        if (!c->profile_dir) return cli_usage_error(cmd, "--profile-steps needs --profile DIR");
        if (sscanf(t->profile_steps, "%d-%d%c", &c->profile_first, &c->profile_last, &end) != 2)
            return cli_usage_error(cmd, "--profile-steps must be A-B (e.g. 5-7), got '%s'", t->profile_steps);
    } else if (c->profile_dir) {
        c->profile_first = c->steps < 5 ? c->steps : 5;
        c->profile_last = c->profile_first + 2 < c->steps ? c->profile_first + 2 : c->steps;
    }
    /* The job service measures the job's MTBF so far (its failures over its time) for each retry. */
    const char *mtbf = getenv("ANVIL_MTBF_S");
    if (!c->mtbf_s && mtbf && anvil_opt_double("ANVIL_MTBF_S", mtbf, &c->mtbf_s))
        return cli_usage_error(cmd, "%s", anvil_errmsg());
    return 0;
}

/* The model, the data and the choices checked after parsing, in the order they always were; 0 or the
 * exit status. globs: room for the --data folder's shard patterns. */
static int configure(train_args *t, s3path_stage *meta, char (*globs)[4096]) {
    const char *cmd = "train";
    anvil_train_config *c = t->c;
    int rc = check_extras(t);
    if (rc) return rc;
    /* A misspelt name is a usage error, as a misspelt option is (README: exit status). */
    if (anvil_model_preset(t->preset, &c->model)) return cli_usage_error(cmd, "%s", anvil_errmsg());
    if (t->data) {
        if (c->train_pattern || c->val_pattern) return cli_usage_error(cmd, "--data cannot be combined with --train/--val");
        int eot;
        if (s3path_in_meta(meta, t->data)) return cli_config_fail(cmd);
        if (anvil_data_manifest_vocab(meta->local, &c->model.vocab_size, &eot)) return cli_config_fail(cmd);
        /* DIR's own shards: a wildcard in its name is a character of the name, not one that reaches
         * other folders (which nobody checked: the job service checks the folder named). */
        char dir[sizeof globs[0] - 16];
        if (anvil_glob_escape(t->data, dir, sizeof dir)) return cli_usage_error(cmd, "--data: %s", anvil_errmsg());
        snprintf(globs[0], sizeof globs[0], "%s/train_*.bin", dir);
        snprintf(globs[1], sizeof globs[1], "%s/val_*.bin", dir);
        c->train_pattern = globs[0];
        c->val_pattern = globs[1];
    } else if (c->train_pattern && !t->vocab && !anvil_s3_is_uri(c->train_pattern)) {
        /* Shards that prep wrote sit beside their manifest, which knows the tokenizer's vocabulary:
         * the preset's 50257 would quietly make a model of the wrong size. */
        const char *slash = strrchr(c->train_pattern, '/');
        char probe[4096 + 16];
        snprintf(t->shards_dir, sizeof t->shards_dir, "%.*s", slash ? (int)(slash - c->train_pattern) : 1,
                 slash ? c->train_pattern : ".");
        snprintf(probe, sizeof probe, "%s/manifest.json", t->shards_dir);
        int eot;
        if (access(probe, F_OK)) t->shards_dir[0] = 0, t->vocab_note = true;
        else if (anvil_data_manifest_vocab(t->shards_dir, &c->model.vocab_size, &eot)) return cli_config_fail(cmd);
    }
    if (t->layers) c->model.n_layer = t->layers;
    if (t->heads) c->model.n_head = t->heads;
    if (t->embd) c->model.n_embd = t->embd;
    if (t->vocab) c->model.vocab_size = t->vocab;
    if (t->block) c->model.block_size = t->block;
    else if (t->seq > c->model.block_size) c->model.block_size = t->seq;
    c->T = t->seq ? t->seq : c->model.block_size;
    if (!strcmp(t->dtype, "fp32")) c->matmul_dtype = ANVIL_MATMUL_F32;
    else if (!strcmp(t->dtype, "bf16")) c->matmul_dtype = ANVIL_MATMUL_BF16;
    else return cli_usage_error(cmd, "--dtype must be fp32 or bf16, got '%s'", t->dtype);
    if (t->device && anvil_device_parse(t->device, &c->device)) return cli_usage_error(cmd, "%s", anvil_errmsg());
    if (!strcmp(t->schedule, "cosine")) c->lr.kind = ANVIL_LR_COSINE;
    else if (!strcmp(t->schedule, "constant")) c->lr.kind = ANVIL_LR_CONSTANT;
    else return cli_usage_error(cmd, "--schedule must be cosine or constant, got '%s'", t->schedule);
    c->lr.min_lr = t->min_lr >= 0.0f ? t->min_lr : c->lr.lr / 10.0f;
    c->seed = (uint64_t)t->seed;
    c->progress = t->progress && isatty(STDERR_FILENO);
    cli_set_threads(t->threads);
    if (!(t->coll_timeout > 0.0)) return cli_usage_error(cmd, "--collective-timeout must be positive");
    return 0;
}

/* The last line of a run that trained: its loss, speed and memory. */
static void report_line(const anvil_train_result *r, const char *meta_dir) {
    fprintf(stderr, "done: %d steps, final loss %.4f", r->steps_done, r->final_loss);
    if (r->val_loss == r->val_loss) fprintf(stderr, ", val loss %.4f", r->val_loss);
    /* Nats per token depend on the tokenizer; bits per byte of text do not. */
    int64_t val_tokens, val_bytes;
    if (r->val_loss == r->val_loss && meta_dir &&
        anvil_data_manifest_split(meta_dir, "val", &val_tokens, &val_bytes) == 0 && val_bytes > 0)
        fprintf(stderr, " (%.4f bits/byte at the val split's %.3f bytes/token)",
                r->val_loss / log(2.0) * (double)val_tokens / (double)val_bytes, (double)val_bytes / (double)val_tokens);
    fprintf(stderr, ", median %.1f ms/step, %.0f tok/s, %.1f GFLOP/s", r->ms_per_step_median, r->tokens_per_s_median,
            r->gflops_median);
    if (r->mfu_median > 0) fprintf(stderr, " (MFU %.1f%%)", r->mfu_median * 100);
    fprintf(stderr, ", peak RSS %.0f MB\n", r->peak_rss_mb);
}

/* The last line of a finished run on rank 0, and with --summary-json its JSON on stdout. */
static void report(const train_args *t, const anvil_train_result *r, const char *meta_dir, int world) {
    if (r->steps_done <= r->start_step)
        fprintf(stderr, "done: nothing to train, the run was at step %d of %d already\n", r->start_step, t->c->steps);
    else
        report_line(r, meta_dir);
    if (t->summary)
        printf("{\"impl\":\"anvil\",\"path\":\"%s\",\"dtype\":\"%s\",\"threads\":%d,\"ranks\":%d,\"params\":%lld,\"steps\":%d,\"final_loss\":%.6f,"
               "\"val_loss\":%.6f,\"ms_per_step_median\":%.3f,\"tokens_per_s_median\":%.2f,"
               "\"gflops_median\":%.3f,\"mfu_median\":%.4f,\"peak_rss_mb\":%.1f,\"comm_wait_share\":%.4f}\n",
               anvil_isa_name(anvil_isa_active()), t->dtype, omp_get_max_threads(), world, (long long)r->params,
               r->steps_done, r->final_loss, r->val_loss == r->val_loss ? r->val_loss : -1.0, r->ms_per_step_median,
               r->tokens_per_s_median, r->gflops_median, r->mfu_median > 0 ? r->mfu_median : -1.0, r->peak_rss_mb,
               r->comm_wait_share);
}

/* Brings up the ranks, checks them and trains; 0 or the exit status. */
static int run(train_args *t, int argc, char **argv, const char *data_meta) {
    const char *cmd = "train";
    anvil_train_config *c = t->c;
    /* The prep folder whose manifest and tokenizer the run uses: --data's, or the one beside --train's shards. */
    const char *meta_dir = t->data ? data_meta : t->shards_dir[0] ? t->shards_dir : NULL;
    if (anvil_dist_init(&(anvil_dist_config){.timeout_s = t->coll_timeout})) return cli_fail(cmd);
    /* A configuration that cannot work (a layout the world does not divide, say) fails before the
     * health check allocates anything. */
    if (anvil_train_check(c)) return cli_config_fail(cmd);
    /* The heartbeat says the health check is under way; a run folder that is not there yet has nobody
     * watching it. */
    bool several = anvil_dist_world_size() > 1;
    if (c->out_dir && anvil_dist_rank() == 0 && t->health && several && access(c->out_dir, F_OK) == 0 &&
        anvil_heartbeat_write(c->out_dir, "health", 0, anvil_heartbeat_allowance(0)))
        fprintf(stderr, "anvil %s: warning: heartbeat: %s\n", cmd, anvil_errmsg());
    if (t->health && several && cli_health_before_training(cmd)) return 1;
    anvil_tok *tok = NULL;
    char tok_file[4096] = "";
    if (meta_dir && anvil_data_manifest_tokenizer(meta_dir, &tok, tok_file, sizeof tok_file)) return cli_config_fail(cmd);
    if (t->vocab_note && anvil_dist_rank() == 0)
        fprintf(stderr, "anvil %s: note: no manifest.json beside --train's shards: the vocabulary is %d, the preset's; "
                "give --vocab N for a tokenizer of N ids\n", cmd, c->model.vocab_size);
    c->tokenizer = tok;
    c->tokenizer_file = tok_file[0] ? tok_file : NULL;
    char *config_json = argv_json(argc, argv, c);
    c->config_json = config_json;
    anvil_train_result r;
    int rc = anvil_train(c, &r);
    free(config_json);
    anvil_tok_free(tok);
    /* After a failure the other ranks may sit in a collective that will never
     * complete, so MPI is not finalized: exiting makes mpirun stop the job. */
    if (rc == ANVIL_TRAIN_BAD_INPUT) return cli_config_fail(cmd);
    if (rc != 0 && rc != ANVIL_TRAIN_STOPPED) return cli_fail(cmd);
    /* The run is over and its checkpoint written, so a stop signal has nothing left to stop; with its
     * default action it would kill this rank on its way out and turn exit 75 into a death by signal.
     * It comes late from a second stop request, or from srun --kill-on-bad-exit, which SIGTERMs the
     * ranks still finalizing as soon as a faster one has exited 75. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGUSR1, SIG_IGN);
    int rank = anvil_dist_rank(), world = anvil_dist_world_size();
    anvil_dist_finalize();
    if (rc == ANVIL_TRAIN_STOPPED) return ANVIL_EXIT_RESUMABLE;
    if (rank == 0) report(t, &r, meta_dir, world);
    return 0;
}

/* meta: where an s3:// --data prefix's manifest and tokenizer are staged, for the caller to remove. */
static int train_main(int argc, char **argv, s3path_stage *meta) {
    anvil_train_config c;
    anvil_train_defaults(&c);
    train_args t = {.c = &c, .preset = "tiny", .schedule = "cosine", .dtype = "fp32", .progress = true,
                    .health = true, .seed = 1337, .min_lr = -1.0f, .coll_timeout = 600.0};
    int rc = anvil_opts_parse(&anvil_train_cmdline, argc, argv, take, &t);
    if (rc == 1) {
        char *usage = anvil_opts_usage(&anvil_train_cmdline);
        fputs(usage ? usage : "anvil train: out of memory\n", stdout);
        free(usage);
        return usage ? 0 : 1;
    }
    if (rc) return cli_usage_error("train", "%s", anvil_errmsg());
    char globs[2][4096];
    if ((rc = configure(&t, meta, globs))) return rc;
    return run(&t, argc, argv, meta->local);
}

int cmd_train(int argc, char **argv) {
    s3path_stage meta;
    memset(&meta, 0, sizeof meta);
    int rc = train_main(argc, argv, &meta);
    s3path_done(&meta);
    return rc;
}

/* anvil train: parse options into an anvil_train_config and run it. */
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/s3path.h"
#include "core/error.h"
#include "core/exit.h"
#include "data/loader.h"
#include "data/prep.h"
#include "dist/comm.h"
#include "kernels/isa.h"
#include "obs/heartbeat.h"
#include "obs/logmetric.h"
#include "tok/tokenizer.h"
#include "train/ckpt_remote.h"
#include "train/trainer.h"

static const char *usage =
    "usage: anvil train [options]\n"
    "\n"
    "Trains a GPT-2 model on llm.c token shards (or on random tokens, for benchmarks).\n"
    "\n"
    "data:\n"
    "  --data DIR              a folder made by 'anvil prep' (train_*.bin, val_*.bin, manifest.json)\n"
    "  --train GLOB            train shards (instead of --data); --val GLOB for validation shards\n"
    "                          DIR and GLOB may be s3://bucket/prefix: shards stream in with ranged GETs,\n"
    "                          read ahead; credentials as 'anvil s3 --help' says\n"
    "  --s3-range-mib N        bytes per ranged GET of shards on S3, in MiB (default 16, at least 4)\n"
    "  --s3-inflight N         ranged GETs in flight per loader (default 4)\n"
    "  --data-layout L         how ranks share a global batch: strided (llm.c's: rank r reads the B x T\n"
    "                          tokens at r x B x T of each global batch, so N ranks see what one process\n"
    "                          with N x B sees) or contiguous (each rank reads its own stretch of the\n"
    "                          token stream front to back, one ranged GET per range, not one per step);\n"
    "                          default contiguous for shards on s3:// (unless --shuffle), else strided\n"
    "  --synthetic             uniform random tokens instead of shards\n"
    "  --shuffle               each epoch visits the train shards and their batches in a new order drawn\n"
    "                          from --seed (resumes bit-exactly; validation stays in order)\n"
    "model:\n"
    "  --preset NAME           gpt2 | gpt2-medium | gpt2-large | gpt2-xl | tiny | mini | small (default tiny)\n"
    "  --layers N --heads N --embd N --block N --vocab N   override the preset\n"
    "  --init FILE             start from a model.safetensors instead of a fresh init\n"
    "  --dtype fp32|bf16       what the matmuls multiply in (default fp32); bf16 rounds their inputs\n"
    "                          to bf16 and sums in fp32, with fp32 weights, gradients and AdamW state;\n"
    "                          on the CPU it needs AVX512_BF16\n"
    "  --device D              cpu (default), or cuda / cuda:N: the GPU to train on (a build with CUDA)\n"
    "batch and schedule:\n"
    "  --batch B               sequences per micro-batch (default 4)\n"
    "  --seq T                 tokens per sequence (default: the block size)\n"
    "  --total-batch-tokens N  tokens per optimizer step, by gradient accumulation (default B*T)\n"
    "  --steps N               optimizer steps (default 100)\n"
    "  --lr X                  peak learning rate (default 6e-4)\n"
    "  --min-lr X              floor of the cosine decay (default lr/10)\n"
    "  --lr-warmup N           linear warmup steps (default 0)\n"
    "  --schedule cosine|constant\n"
    "  --weight-decay X --beta1 X --beta2 X --eps X --grad-clip X (0.1, 0.9, 0.95, 1e-8, 1.0)\n"
    "  --seed N                initialization, data and sampling seed (default 1337)\n"
    "evaluation and output:\n"
    "  --val-every N           steps between validations (default: only at the end)\n"
    "  --val-batches N         batches per validation (default 8)\n"
    "  --sample-every N        steps between samples (default: only at the end; -1 never)\n"
    "  --sample-tokens N       tokens per sample (default 128)\n"
    "  --out DIR               run folder: metrics.jsonl, model.safetensors, ckpt/\n"
    "  --metrics-port P        serve Prometheus metrics at http://127.0.0.1:P/metrics from rank 0 while\n"
    "                          training (0: a free port, written to DIR/metrics.port): loss, throughput,\n"
    "                          MFU against the measured FMA peak, step times, and every rank's step time,\n"
    "                          communication wait, memory, CPU, disk, network and open files\n"
    "  --metric NAME=REGEX     a metric pulled from the log (repeatable, up to 32): each line the trainer\n"
    "                          logs (on every rank) that matches REGEX (PCRE2, exactly one capture group)\n"
    "                          sets NAME to the number captured: into metrics.jsonl ({\"kind\":\"log\"}),\n"
    "                          onto /metrics as anvil_log_NAME{rank}, and into 'anvil plot'\n"
    "  --profile DIR           write where the time of a few steps goes to DIR/trace_rank<R>.json (Chrome\n"
    "                          Trace Event Format: Perfetto, chrome://tracing; 'anvil profile summary'):\n"
    "                          each op per layer, forward and backward, the optimizer, collectives with\n"
    "                          their bytes, checkpoint snapshots and writes, data-loader waits\n"
    "  --profile-steps A-B     the steps profiled (default 5-7, or the last ones of a shorter run)\n"
    "checkpoints (in DIR/ckpt, one folder per step, written in the background):\n"
    "  --ckpt-every N          every N steps\n"
    "  --ckpt-minutes M        every M minutes of wall time\n"
    "  --keep-last K           keep the newest K (default 3) ...\n"
    "  --keep-every J          ... plus every J-th step for good\n"
    "  --ckpt-sync             write on the training thread instead\n"
    "  --resume auto|DIR       continue from the newest valid checkpoint of --out (auto), or from DIR\n"
    "  --ckpt-uri s3://B/P     upload each checkpoint to S3 too, in the background (the index\n"
    "                          P/step_N/manifest.json last); --resume auto downloads the newest one\n"
    "                          there, CRC-checked, when --out has none; --keep-last applies there too\n"
    "  --ckpt-prefixes N       spread the uploaded objects over N key prefixes P/00..P/NN (default 16)\n"
    "several processes (start them with 'anvil launch -n N -- train ...'):\n"
    "  --zero S                0: replicate everything, gradients all-reduced in buckets while the backward\n"
    "                          runs (default); 1: shard the AdamW moments (ZeRO-1); 2: also the gradients;\n"
    "                          3: also the parameters, gathered layer by layer\n"
    "  --shard-group-size K    MiCS: shard within groups of K ranks, replicate across groups (ZeRO 1-3)\n"
    "  --tp T                  tensor parallelism: each layer split over groups of T neighbouring ranks\n"
    "                          (heads and vocabulary split), data parallel over ranks / (T*P) replicas;\n"
    "                          checkpoints hold whole tensors, so any layout resumes them\n"
    "  --pp P                  pipeline parallelism: the layers split into P stages of tensor-parallel\n"
    "                          groups (TP innermost, then data parallel, then PP), the accumulation\n"
    "                          steps (--total-batch-tokens) flowing through as micro-batches\n"
    "  --pp-schedule S         1f1b (default: at most P micro-batches alive per stage) or gpipe\n"
    "  --sequence-parallel     with --tp: LayerNorms and the residual stream split by tokens over the TP\n"
    "                          group (batch*seq divisible by T), all-reduces become reduce-scatters and\n"
    "                          all-gathers: less activation memory per rank, the same bytes on a ring\n"
    "  --collective-timeout S  abort the job (exit 76) when a collective waits longer than S seconds,\n"
    "                          naming the ranks that did not answer (default 600)\n"
    "  --batch and --total-batch-tokens: the batch is per rank; the total counts all ranks\n"
    "  --log-every N           log-line period when not on a terminal (default 10)\n"
    "  --threads N             OpenMP threads (default: all cores)\n"
    "  --warmup N              steps left out of the timing medians (default 1)\n"
    "  --summary-json          print a JSON summary as the last line of stdout\n"
    "  --no-progress           log lines instead of a progress bar\n"
    "  --no-health             skip the quick health check (anvil health --quick) run before\n"
    "                          training when there is more than one rank\n"
    "\n"
    "Same seed, config, data and layout give bit-identical weights on one kernel path (see 'anvil\n"
    "info'), whatever the thread count, also across a resume that changes it.\n"
    "On SIGTERM or SIGUSR1 the current step finishes, a checkpoint is written into --out, and\n"
    "the exit status is 75 (stopped, resumable with --resume auto). Errors exit 1, usage errors 2;\n"
    "78 means the configuration or input cannot work (data, model, --init, the checkpoint to\n"
    "resume), so running it again unchanged would fail the same way; 76 means a collective timed\n"
    "out. With --out, rank 0 keeps OUT/heartbeat.json (step, phase, time) for supervisors.\n";

/* The command line as {"argv": [...], "kernels": ...}, recorded in every
 * checkpoint so a run can be audited and repeated: bits repeat on the same
 * kernels (path, and bf16 kernel), whatever the thread count. */
static char *argv_json(int argc, char **argv, anvil_matmul_dtype dtype) {
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "argv");
    for (int i = 0; i < argc; i++) cJSON_AddItemToArray(a, cJSON_CreateString(argv[i]));
    char kernels[64];
    snprintf(kernels, sizeof kernels, "%s%s%s", anvil_isa_name(anvil_isa_active()),
             dtype == ANVIL_MATMUL_BF16 ? "+" : "", dtype == ANVIL_MATMUL_BF16 ? anvil_isa_bf16_name(anvil_isa_bf16()) : "");
    cJSON_AddStringToObject(o, "kernels", kernels);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* meta: where an s3:// --data prefix's manifest and tokenizer are staged, for the caller to remove. */
static int train_main(int argc, char **argv, s3path_stage *meta) {
    const char *cmd = "train";
    anvil_train_config c;
    anvil_train_defaults(&c);
    const char *preset = "tiny", *data = NULL, *meta_dir = NULL, *schedule = "cosine", *dtype = "fp32";
    int layers = 0, heads = 0, embd = 0, block = 0, vocab = 0, seq = 0, threads = 0, summary = 0, progress = 1;
    int health = 1;
    int64_t seed = 1337;
    float min_lr = -1.0f;
    double coll_timeout = 600.0;
    const char *profile_steps = NULL;
    char metric_names[ANVIL_LOGMETRIC_MAX][ANVIL_LOGMETRIC_NAME_MAX + 1];
    const char *metric_name_ptrs[ANVIL_LOGMETRIC_MAX], *metric_regexes[ANVIL_LOGMETRIC_MAX];
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(o, "--synthetic")) { c.synthetic = 1; continue; }
        if (!strcmp(o, "--shuffle")) { c.shuffle = 1; continue; }
        if (!strcmp(o, "--summary-json")) { summary = 1; continue; }
        if (!strcmp(o, "--no-progress")) { progress = 0; continue; }
        if (!strcmp(o, "--no-health")) { health = 0; continue; }
        if (!strcmp(o, "--ckpt-sync")) { c.ckpt_sync = 1; continue; }
        if (!strcmp(o, "--sequence-parallel")) { c.sequence_parallel = 1; continue; }
        if (strncmp(o, "--", 2)) return cli_usage_error(cmd, "unexpected argument '%s'", o);
        if (!(v = arg_value(cmd, argc, argv, &i))) return 2;
        int bad = 0;
        if (!strcmp(o, "--data")) data = v;
        else if (!strcmp(o, "--s3-range-mib")) {
            int mib;
            bad = arg_int(cmd, o, v, ANVIL_S3_MIN_READ_RANGE >> 20, 1024, &mib);
            c.s3_range = (size_t)mib << 20;
        } else if (!strcmp(o, "--data-layout")) {
            if (!strcmp(v, "strided")) c.data_layout = ANVIL_LOADER_STRIDED;
            else if (!strcmp(v, "contiguous")) c.data_layout = ANVIL_LOADER_CONTIGUOUS;
            else return cli_usage_error(cmd, "--data-layout must be strided or contiguous, not '%s'", v);
        } else if (!strcmp(o, "--s3-inflight"))
            bad = arg_int(cmd, o, v, 1, 64, &c.s3_inflight);
        else if (!strcmp(o, "--train")) c.train_pattern = v;
        else if (!strcmp(o, "--val")) c.val_pattern = v;
        else if (!strcmp(o, "--preset")) preset = v;
        else if (!strcmp(o, "--init")) c.init_model = v;
        else if (!strcmp(o, "--schedule")) schedule = v;
        else if (!strcmp(o, "--dtype")) dtype = v;
        else if (!strcmp(o, "--device")) bad = anvil_device_parse(v, &c.device) ? cli_usage_error(cmd, "%s", anvil_errmsg()) : 0;
        else if (!strcmp(o, "--out")) c.out_dir = v;
        else if (!strcmp(o, "--resume")) c.resume = v;
        else if (!strcmp(o, "--ckpt-every")) bad = arg_int(cmd, o, v, 0, 1 << 30, &c.ckpt_every);
        else if (!strcmp(o, "--ckpt-minutes")) bad = arg_double(cmd, o, v, &c.ckpt_minutes);
        else if (!strcmp(o, "--keep-last")) bad = arg_int(cmd, o, v, 1, 1 << 30, &c.keep_last);
        else if (!strcmp(o, "--ckpt-uri")) c.ckpt_uri = v;
        else if (!strcmp(o, "--ckpt-prefixes")) bad = arg_int(cmd, o, v, 1, ANVIL_CKPT_REMOTE_MAX_PREFIXES, &c.ckpt_prefixes);
        else if (!strcmp(o, "--keep-every")) bad = arg_i64(cmd, o, v, 0, INT64_MAX, &c.keep_every);
        else if (!strcmp(o, "--layers")) bad = arg_int(cmd, o, v, 1, 1000, &layers);
        else if (!strcmp(o, "--heads")) bad = arg_int(cmd, o, v, 1, 4096, &heads);
        else if (!strcmp(o, "--embd")) bad = arg_int(cmd, o, v, 1, 16384, &embd);
        else if (!strcmp(o, "--block")) bad = arg_int(cmd, o, v, 1, 1 << 20, &block);
        else if (!strcmp(o, "--vocab")) bad = arg_int(cmd, o, v, 2, 1 << 24, &vocab);
        else if (!strcmp(o, "--batch")) bad = arg_int(cmd, o, v, 1, 1 << 20, &c.B);
        else if (!strcmp(o, "--seq")) bad = arg_int(cmd, o, v, 1, 1 << 20, &seq);
        else if (!strcmp(o, "--total-batch-tokens")) bad = arg_i64(cmd, o, v, 1, INT64_C(1) << 40, &c.total_batch_tokens);
        else if (!strcmp(o, "--steps")) bad = arg_int(cmd, o, v, 1, 1 << 30, &c.steps);
        else if (!strcmp(o, "--lr")) bad = arg_float(cmd, o, v, &c.lr.lr);
        else if (!strcmp(o, "--min-lr")) bad = arg_float(cmd, o, v, &min_lr);
        else if (!strcmp(o, "--lr-warmup")) bad = arg_int(cmd, o, v, 0, 1 << 30, &c.lr.warmup);
        else if (!strcmp(o, "--weight-decay")) bad = arg_float(cmd, o, v, &c.adamw.weight_decay);
        else if (!strcmp(o, "--beta1")) bad = arg_float(cmd, o, v, &c.adamw.beta1);
        else if (!strcmp(o, "--beta2")) bad = arg_float(cmd, o, v, &c.adamw.beta2);
        else if (!strcmp(o, "--eps")) bad = arg_float(cmd, o, v, &c.adamw.eps);
        else if (!strcmp(o, "--grad-clip")) bad = arg_float(cmd, o, v, &c.grad_clip);
        else if (!strcmp(o, "--seed")) bad = arg_i64(cmd, o, v, 0, INT64_MAX, &seed);
        else if (!strcmp(o, "--val-every")) bad = arg_int(cmd, o, v, 0, 1 << 30, &c.val_every);
        else if (!strcmp(o, "--val-batches")) bad = arg_int(cmd, o, v, 1, 1 << 20, &c.val_batches);
        else if (!strcmp(o, "--sample-every")) bad = arg_int(cmd, o, v, -1, 1 << 30, &c.sample_every);
        else if (!strcmp(o, "--sample-tokens")) bad = arg_int(cmd, o, v, 0, 1 << 20, &c.sample_tokens);
        else if (!strcmp(o, "--log-every")) bad = arg_int(cmd, o, v, 1, 1 << 30, &c.log_every);
        else if (!strcmp(o, "--threads")) bad = arg_int(cmd, o, v, 1, 4096, &threads);
        else if (!strcmp(o, "--warmup")) bad = arg_int(cmd, o, v, 0, 1 << 30, &c.timing_warmup);
        else if (!strcmp(o, "--zero")) bad = arg_int(cmd, o, v, 0, 3, &c.zero_stage);
        else if (!strcmp(o, "--shard-group-size")) bad = arg_int(cmd, o, v, 1, 1 << 20, &c.shard_group_size);
        else if (!strcmp(o, "--tp")) bad = arg_int(cmd, o, v, 1, 1 << 20, &c.tensor_parallel);
        else if (!strcmp(o, "--pp")) bad = arg_int(cmd, o, v, 1, 1 << 20, &c.pipeline_parallel);
        else if (!strcmp(o, "--pp-schedule")) {
            if (!strcmp(v, "gpipe")) c.pipeline_gpipe = 1;
            else if (strcmp(v, "1f1b")) return cli_usage_error(cmd, "--pp-schedule must be 1f1b or gpipe, got '%s'", v);
        }
        else if (!strcmp(o, "--collective-timeout")) bad = arg_double(cmd, o, v, &coll_timeout);
        else if (!strcmp(o, "--metrics-port")) bad = arg_int(cmd, o, v, 0, 65535, &c.metrics_port);
        else if (!strcmp(o, "--profile")) c.profile_dir = v;
        else if (!strcmp(o, "--profile-steps")) profile_steps = v;
        else if (!strcmp(o, "--metric")) {
            if (c.nmetrics == ANVIL_LOGMETRIC_MAX)
                return cli_usage_error(cmd, "--metric: at most %d definitions", ANVIL_LOGMETRIC_MAX);
            if (anvil_logmetric_parse(v, metric_names[c.nmetrics], sizeof metric_names[0], &metric_regexes[c.nmetrics]))
                return cli_usage_error(cmd, "--metric: %s", anvil_errmsg());
            metric_name_ptrs[c.nmetrics] = metric_names[c.nmetrics];
            c.nmetrics++;
        }
        else return cli_usage_error(cmd, "unknown option '%s'", o);
        if (bad) return 2;
    }

    c.metric_names = metric_name_ptrs;
    c.metric_regexes = metric_regexes;
    if (anvil_logmetric_check_all(metric_name_ptrs, metric_regexes, c.nmetrics))
        return cli_usage_error(cmd, "--metric: %s", anvil_errmsg());
    if (profile_steps) {
        char end;
        if (!c.profile_dir) return cli_usage_error(cmd, "--profile-steps needs --profile DIR");
        if (sscanf(profile_steps, "%d-%d%c", &c.profile_first, &c.profile_last, &end) != 2)
            return cli_usage_error(cmd, "--profile-steps must be A-B (e.g. 5-7), got '%s'", profile_steps);
    } else if (c.profile_dir) {
        c.profile_first = c.steps < 5 ? c.steps : 5;
        c.profile_last = c.profile_first + 2 < c.steps ? c.profile_first + 2 : c.steps;
    }
    if (anvil_model_preset(preset, &c.model)) return cli_config_fail(cmd);
    char train_glob[4096], val_glob[4096];
    if (data) {
        if (c.train_pattern || c.val_pattern) return cli_usage_error(cmd, "--data cannot be combined with --train/--val");
        int eot;
        if (s3path_in_meta(meta, data)) return cli_config_fail(cmd);
        meta_dir = meta->local;
        if (anvil_data_manifest_vocab(meta_dir, &c.model.vocab_size, &eot)) return cli_config_fail(cmd);
        snprintf(train_glob, sizeof train_glob, "%s/train_*.bin", data);
        snprintf(val_glob, sizeof val_glob, "%s/val_*.bin", data);
        c.train_pattern = train_glob;
        c.val_pattern = val_glob;
    }
    if (layers) c.model.n_layer = layers;
    if (heads) c.model.n_head = heads;
    if (embd) c.model.n_embd = embd;
    if (vocab) c.model.vocab_size = vocab;
    if (block) c.model.block_size = block;
    else if (seq > c.model.block_size) c.model.block_size = seq;
    c.T = seq ? seq : c.model.block_size;
    if (!strcmp(dtype, "fp32")) c.matmul_dtype = ANVIL_MATMUL_F32;
    else if (!strcmp(dtype, "bf16")) c.matmul_dtype = ANVIL_MATMUL_BF16;
    else return cli_usage_error(cmd, "--dtype must be fp32 or bf16, got '%s'", dtype);
    if (!strcmp(schedule, "cosine")) c.lr.kind = ANVIL_LR_COSINE;
    else if (!strcmp(schedule, "constant")) c.lr.kind = ANVIL_LR_CONSTANT;
    else return cli_usage_error(cmd, "--schedule must be cosine or constant, got '%s'", schedule);
    c.lr.min_lr = min_lr >= 0.0f ? min_lr : c.lr.lr / 10.0f;
    c.seed = (uint64_t)seed;
    c.progress = progress && isatty(STDERR_FILENO);
    cli_set_threads(threads);
    if (!(coll_timeout > 0.0)) return cli_usage_error(cmd, "--collective-timeout must be positive");
    anvil_dist_config dc = {coll_timeout};
    if (anvil_dist_init(&dc)) return cli_fail(cmd);
    /* A configuration that cannot work (a layout the world does not divide, say) fails before the
     * health check allocates anything. */
    if (anvil_train_check(&c)) return cli_config_fail(cmd);
    /* The heartbeat says the health check is under way; a run folder that is not there yet has nobody
     * watching it. */
    if (c.out_dir && anvil_dist_rank() == 0 && health && anvil_dist_world_size() > 1 && access(c.out_dir, F_OK) == 0 &&
        anvil_heartbeat_write(c.out_dir, "health", 0))
        fprintf(stderr, "anvil %s: warning: heartbeat: %s\n", cmd, anvil_errmsg());
    if (health && anvil_dist_world_size() > 1 && cli_health_before_training(cmd)) return 1;

    anvil_tok *tok = NULL;
    char tok_file[4096] = "";
    if (data && anvil_data_manifest_tokenizer(meta_dir, &tok, tok_file, sizeof tok_file)) return cli_config_fail(cmd);
    c.tokenizer = tok;
    c.tokenizer_file = tok_file[0] ? tok_file : NULL;
    char *config_json = argv_json(argc, argv, c.matmul_dtype);
    c.config_json = config_json;
    anvil_train_result r;
    int rc = anvil_train(&c, &r);
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
    if (rank != 0) return 0;
    fprintf(stderr, "done: %d steps, final loss %.4f", r.steps_done, r.final_loss);
    if (r.val_loss == r.val_loss) fprintf(stderr, ", val loss %.4f", r.val_loss);
    /* Nats per token depend on the tokenizer; bits per byte of text do not. */
    int64_t val_tokens, val_bytes;
    if (r.val_loss == r.val_loss && data && anvil_data_manifest_split(meta_dir, "val", &val_tokens, &val_bytes) == 0 &&
        val_bytes > 0)
        fprintf(stderr, " (%.4f bits/byte at the val split's %.3f bytes/token)",
                r.val_loss / log(2.0) * (double)val_tokens / (double)val_bytes, (double)val_bytes / (double)val_tokens);
    fprintf(stderr, ", median %.1f ms/step, %.0f tok/s, %.1f GFLOP/s, peak RSS %.0f MB\n", r.ms_per_step_median,
            r.tokens_per_s_median, r.gflops_median, r.peak_rss_mb);
    if (summary)
        printf("{\"impl\":\"anvil\",\"path\":\"%s\",\"dtype\":\"%s\",\"threads\":%d,\"ranks\":%d,\"params\":%lld,\"steps\":%d,\"final_loss\":%.6f,"
               "\"val_loss\":%.6f,\"ms_per_step_median\":%.3f,\"tokens_per_s_median\":%.2f,"
               "\"gflops_median\":%.3f,\"peak_rss_mb\":%.1f,\"comm_wait_share\":%.4f}\n",
               anvil_isa_name(anvil_isa_active()), dtype, omp_get_max_threads(), world, (long long)r.params,
               r.steps_done, r.final_loss,
               r.val_loss == r.val_loss ? r.val_loss : -1.0, r.ms_per_step_median, r.tokens_per_s_median,
               r.gflops_median, r.peak_rss_mb, r.comm_wait_share);
    return 0;
}

int cmd_train(int argc, char **argv) {
    s3path_stage meta;
    memset(&meta, 0, sizeof meta);
    int rc = train_main(argc, argv, &meta);
    s3path_done(&meta);
    return rc;
}

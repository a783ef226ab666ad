/* anvil train's options. */
#include <stdint.h>

#include "obs/logmetric.h"
#include "opts/tables.h"
#include "s3/s3.h"

#define N30 (INT64_C(1) << 30)
#define N20 (INT64_C(1) << 20)

static const anvil_opt train_opts[] = {
    [ANVIL_TRAIN_DATA] = {.name = "--data", .kind = ANVIL_OPT_URI_IN, .metavar = "DIR", .heading = "data:",
                          .help = "a folder made by 'anvil prep' (train_*.bin, val_*.bin, manifest.json)"},
    [ANVIL_TRAIN_TRAIN] = {.name = "--train", .kind = ANVIL_OPT_GLOB_IN, .metavar = "GLOB",
                           .help = "train shards (instead of --data)"},
    [ANVIL_TRAIN_VAL] = {.name = "--val", .kind = ANVIL_OPT_GLOB_IN, .metavar = "GLOB",
                         .help = "validation shards (instead of --data)\n"
                                 "DIR and GLOB may be s3://bucket/prefix: shards stream in with ranged GETs,\n"
                                 "read ahead; credentials as 'anvil s3 --help' says"},
    [ANVIL_TRAIN_S3_RANGE_MIB] = {.name = "--s3-range-mib", .kind = ANVIL_OPT_INT, .metavar = "N",
                                  .lo = ANVIL_S3_MIN_READ_RANGE >> 20, .hi = 1024,
                                  .help = "bytes per ranged GET of shards on S3, in MiB (default 16, at least 4)"},
    [ANVIL_TRAIN_S3_INFLIGHT] = {.name = "--s3-inflight", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = 64,
                                 .help = "ranged GETs in flight per loader (default 4)"},
    [ANVIL_TRAIN_DATA_LAYOUT] =
        {.name = "--data-layout", .kind = ANVIL_OPT_ENUM, .metavar = "L", .choices = "strided|contiguous",
         .invalid = "--data-layout must be strided or contiguous, not '%s'",
         .help = "how ranks share a global batch: strided (llm.c's: rank r reads the B x T\n"
                 "tokens at r x B x T of each global batch, so N ranks see what one process\n"
                 "with N x B sees) or contiguous (each rank reads its own stretch of the\n"
                 "token stream front to back, one ranged GET per range, not one per step);\n"
                 "default contiguous for shards on s3:// (unless --shuffle), else strided"},
    [ANVIL_TRAIN_SYNTHETIC] = {.name = "--synthetic", .kind = ANVIL_OPT_FLAG,
                               .help = "uniform random tokens instead of shards"},
    [ANVIL_TRAIN_SHUFFLE] = {.name = "--shuffle", .kind = ANVIL_OPT_FLAG,
                             .help = "each epoch visits the train shards and their batches in a new order drawn\n"
                                     "from --seed (resumes bit-exactly; validation stays in order)"},
    [ANVIL_TRAIN_PRESET] = {.name = "--preset", .kind = ANVIL_OPT_TEXT, .metavar = "NAME", .heading = "model:",
                            /* opts and model share a layer (scripts/check_layers.sh), so this table cannot
                             * ask the registry: test_opts holds the lines to anvil_model_preset_at's. */
                            .help = "the model, by family (default tiny; 'anvil info' shows the shapes):\n"
                                    "gpt2: gpt2, gpt2-medium, gpt2-large, gpt2-xl, tiny, mini, small\n"
                                    "llama: llama-tiny, llama-mini, llama-small, llama3.2-1b, llama3.2-3b, llama3-8b"},
    [ANVIL_TRAIN_LAYERS] = {.name = "--layers", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = 1000,
                            .help = "layers: overrides the preset"},
    [ANVIL_TRAIN_HEADS] = {.name = "--heads", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = 4096,
                           .help = "attention heads: overrides the preset"},
    [ANVIL_TRAIN_EMBD] = {.name = "--embd", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = 16384,
                          .help = "embedding width: overrides the preset"},
    [ANVIL_TRAIN_BLOCK] = {.name = "--block", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = N20,
                           .help = "block size (the longest context): overrides the preset"},
    [ANVIL_TRAIN_VOCAB] = {.name = "--vocab", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 2, .hi = INT64_C(1) << 24,
                           .help = "vocabulary size: overrides the preset"},
    [ANVIL_TRAIN_INIT] = {.name = "--init", .kind = ANVIL_OPT_PATH_IN, .metavar = "FILE",
                          .help = "start from a model.safetensors instead of a fresh init"},
    [ANVIL_TRAIN_DTYPE] = {.name = "--dtype", .kind = ANVIL_OPT_TEXT, .metavar = "fp32|bf16",
                           .help = "what the matmuls multiply in (default fp32); bf16 rounds their inputs\n"
                                   "to bf16 and sums in fp32, with fp32 weights, gradients and AdamW state;\n"
                                   "on the CPU it needs AVX512_BF16"},
    [ANVIL_TRAIN_DEVICE] = {.name = "--device", .kind = ANVIL_OPT_TEXT, .metavar = "D",
                            .help = "cpu (default), or cuda / cuda:N: the GPU to train on (a build with CUDA)"},
    [ANVIL_TRAIN_BATCH] = {.name = "--batch", .kind = ANVIL_OPT_INT, .metavar = "B", .lo = 1, .hi = N20,
                           .heading = "batch and schedule:", .help = "sequences per micro-batch (default 4)"},
    [ANVIL_TRAIN_SEQ] = {.name = "--seq", .kind = ANVIL_OPT_INT, .metavar = "T", .lo = 1, .hi = N20,
                         .help = "tokens per sequence (default: the block size)"},
    [ANVIL_TRAIN_TOTAL_BATCH_TOKENS] = {.name = "--total-batch-tokens", .kind = ANVIL_OPT_I64, .metavar = "N",
                                        .lo = 1, .hi = INT64_C(1) << 40,
                                        .help = "tokens per optimizer step, by gradient accumulation (default B*T)"},
    [ANVIL_TRAIN_STEPS] = {.name = "--steps", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = N30,
                           .help = "optimizer steps (default 100)"},
    [ANVIL_TRAIN_LR] = {.name = "--lr", .kind = ANVIL_OPT_FLOAT, .metavar = "X",
                        .help = "peak learning rate (default 6e-4)"},
    [ANVIL_TRAIN_MIN_LR] = {.name = "--min-lr", .kind = ANVIL_OPT_FLOAT, .metavar = "X",
                            .help = "floor of the cosine decay (default lr/10)"},
    [ANVIL_TRAIN_LR_WARMUP] = {.name = "--lr-warmup", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 0, .hi = N30,
                               .help = "linear warmup steps (default 0)"},
    [ANVIL_TRAIN_SCHEDULE] = {.name = "--schedule", .kind = ANVIL_OPT_TEXT, .metavar = "cosine|constant",
                              .help = "the learning rate's decay after the warmup (default cosine)"},
    [ANVIL_TRAIN_WEIGHT_DECAY] = {.name = "--weight-decay", .kind = ANVIL_OPT_FLOAT, .metavar = "X",
                                  .help = "AdamW's weight decay (default 0.1)"},
    [ANVIL_TRAIN_BETA1] = {.name = "--beta1", .kind = ANVIL_OPT_FLOAT, .metavar = "X",
                           .help = "AdamW's beta1 (default 0.9)"},
    [ANVIL_TRAIN_BETA2] = {.name = "--beta2", .kind = ANVIL_OPT_FLOAT, .metavar = "X",
                           .help = "AdamW's beta2 (default 0.95)"},
    [ANVIL_TRAIN_EPS] = {.name = "--eps", .kind = ANVIL_OPT_FLOAT, .metavar = "X", .help = "AdamW's eps (default 1e-8)"},
    [ANVIL_TRAIN_GRAD_CLIP] = {.name = "--grad-clip", .kind = ANVIL_OPT_FLOAT, .metavar = "X",
                               .help = "the gradient norm is clipped to X (default 1.0)"},
    [ANVIL_TRAIN_SEED] = {.name = "--seed", .kind = ANVIL_OPT_I64, .metavar = "N", .lo = 0, .hi = INT64_MAX,
                          .help = "initialization, data and sampling seed (default 1337)"},
    [ANVIL_TRAIN_VAL_EVERY] = {.name = "--val-every", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 0, .hi = N30,
                               .heading = "evaluation and output:",
                               .help = "steps between validations (default: only at the end)"},
    [ANVIL_TRAIN_VAL_BATCHES] = {.name = "--val-batches", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = N20,
                                 .help = "batches per validation (default 8)"},
    [ANVIL_TRAIN_SAMPLE_EVERY] = {.name = "--sample-every", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = -1,
                                  .hi = N30, .help = "steps between samples (default: only at the end; -1 never)"},
    [ANVIL_TRAIN_SAMPLE_TOKENS] = {.name = "--sample-tokens", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 0,
                                   .hi = N20, .help = "tokens per sample (default 128)"},
    [ANVIL_TRAIN_OUT] = {.name = "--out", .kind = ANVIL_OPT_PATH_OUT, .metavar = "DIR", .run_folder = true,
                         .help = "run folder: metrics.jsonl, model.safetensors, ckpt/"},
    [ANVIL_TRAIN_METRICS_PORT] =
        {.name = "--metrics-port", .kind = ANVIL_OPT_INT, .metavar = "P", .lo = 0, .hi = 65535,
         .help = "serve Prometheus metrics at http://127.0.0.1:P/metrics from rank 0 while\n"
                 "training (0: a free port, written to DIR/metrics.port): loss, throughput,\n"
                 "MFU against the measured FMA peak, step times, and every rank's step time,\n"
                 "communication wait, memory, CPU, disk, network and open files"},
    [ANVIL_TRAIN_METRIC] = {.name = "--metric", .kind = ANVIL_OPT_TEXT, .metavar = "NAME=REGEX",
                            .help = "a metric pulled from the log (repeatable, up to 32): each line the trainer\n"
                                    "logs (on every rank) that matches REGEX (PCRE2, exactly one capture group)\n"
                                    "sets NAME to the number captured: into metrics.jsonl ({\"kind\":\"log\"}),\n"
                                    "onto /metrics as anvil_log_NAME{rank}, and into 'anvil plot'"},
    [ANVIL_TRAIN_PROFILE] =
        {.name = "--profile", .kind = ANVIL_OPT_PATH_OUT, .metavar = "DIR",
         .help = "write where the time of a few steps goes to DIR/trace_rank<R>.json (Chrome\n"
                 "Trace Event Format: Perfetto, chrome://tracing; 'anvil profile summary'):\n"
                 "each op per layer, forward and backward, the optimizer, collectives with\n"
                 "their bytes, checkpoint snapshots and writes, data-loader waits"},
    [ANVIL_TRAIN_PROFILE_STEPS] = {.name = "--profile-steps", .kind = ANVIL_OPT_TEXT, .metavar = "A-B",
                                   .help = "the steps profiled (default 5-7, or the last ones of a shorter run)"},
    [ANVIL_TRAIN_CKPT_EVERY] = {.name = "--ckpt-every", .kind = ANVIL_OPT_INT, .metavar = "N|auto", .lo = 0,
                                .hi = N30, .choices = "auto",
                                .heading = "checkpoints (in DIR/ckpt, one folder per step, written in the background):",
                                .help = "every N steps; auto: every sqrt(2 x cost x MTBF) seconds (Young/Daly), the\n"
                                        "cost measured on the run's own checkpoints (the first after 10 steps), the\n"
                                        "interval it chose in the log"},
    [ANVIL_TRAIN_CKPT_MINUTES] = {.name = "--ckpt-minutes", .kind = ANVIL_OPT_DOUBLE, .metavar = "M",
                                  .help = "every M minutes of wall time"},
    [ANVIL_TRAIN_MTBF] = {.name = "--mtbf", .kind = ANVIL_OPT_DOUBLE, .metavar = "S",
                          .help = "the mean time between failures that --ckpt-every auto plans for (default: the\n"
                                  "job service's measure of the job so far, ANVIL_MTBF_S, else a day)"},
    [ANVIL_TRAIN_KEEP_LAST] = {.name = "--keep-last", .kind = ANVIL_OPT_INT, .metavar = "K", .lo = 1, .hi = N30,
                               .help = "keep the newest K (default 3) ..."},
    [ANVIL_TRAIN_KEEP_EVERY] = {.name = "--keep-every", .kind = ANVIL_OPT_I64, .metavar = "J", .lo = 0,
                                .hi = INT64_MAX, .help = "... plus every J-th step for good"},
    [ANVIL_TRAIN_CKPT_SYNC] = {.name = "--ckpt-sync", .kind = ANVIL_OPT_FLAG,
                               .help = "write on the training thread instead"},
    [ANVIL_TRAIN_RESUME] = {.name = "--resume", .kind = ANVIL_OPT_PATH_IN, .metavar = "auto|DIR", .choices = "auto",
                            .help = "continue from the newest valid checkpoint of --out (auto), or from DIR"},
    [ANVIL_TRAIN_CKPT_URI] = {.name = "--ckpt-uri", .kind = ANVIL_OPT_URI_OUT, .metavar = "s3://B/P",
                              .help = "upload each checkpoint to S3 too, in the background (the index\n"
                                      "P/step_N/manifest.json last); --resume auto downloads the newest one\n"
                                      "there, CRC-checked, when --out has none; --keep-last applies there too"},
    [ANVIL_TRAIN_CKPT_PREFIXES] = {.name = "--ckpt-prefixes", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1,
                                   .hi = ANVIL_TRAIN_MAX_CKPT_PREFIXES,
                                   .help = "spread the uploaded objects over N key prefixes P/00..P/NN (default 16)"},
    [ANVIL_TRAIN_ZERO] = {.name = "--zero", .kind = ANVIL_OPT_INT, .metavar = "S", .lo = 0, .hi = 3,
                          .heading = "several processes (start them with 'anvil launch -n N -- train ...'):",
                          .help = "0: replicate everything, gradients all-reduced in buckets while the backward\n"
                                  "runs (default); 1: shard the AdamW moments (ZeRO-1); 2: also the gradients;\n"
                                  "3: also the parameters, gathered layer by layer"},
    [ANVIL_TRAIN_SHARD_GROUP_SIZE] = {.name = "--shard-group-size", .kind = ANVIL_OPT_INT, .metavar = "K", .lo = 1,
                                      .hi = N20,
                                      .help = "MiCS: shard within groups of K ranks, replicate across groups (ZeRO 1-3)"},
    [ANVIL_TRAIN_TP] = {.name = "--tp", .kind = ANVIL_OPT_INT, .metavar = "T", .lo = 1, .hi = N20,
                        .help = "tensor parallelism: each layer split over groups of T neighbouring ranks\n"
                                "(heads and vocabulary split), data parallel over ranks / (T*P) replicas;\n"
                                "checkpoints hold whole tensors, so any layout resumes them"},
    [ANVIL_TRAIN_PP] = {.name = "--pp", .kind = ANVIL_OPT_INT, .metavar = "P", .lo = 1, .hi = N20,
                        .help = "pipeline parallelism: the layers split into P stages of tensor-parallel\n"
                                "groups (TP innermost, then data parallel, then PP), the accumulation\n"
                                "steps (--total-batch-tokens) flowing through as micro-batches"},
    [ANVIL_TRAIN_PP_SCHEDULE] = {.name = "--pp-schedule", .kind = ANVIL_OPT_ENUM, .metavar = "S",
                                 .choices = "1f1b|gpipe", .invalid = "--pp-schedule must be 1f1b or gpipe, got '%s'",
                                 .help = "1f1b (default: at most P micro-batches alive per stage) or gpipe"},
    [ANVIL_TRAIN_SEQUENCE_PARALLEL] =
        {.name = "--sequence-parallel", .kind = ANVIL_OPT_FLAG,
         .help = "with --tp: LayerNorms and the residual stream split by tokens over the TP\n"
                 "group (batch*seq divisible by T), all-reduces become reduce-scatters and\n"
                 "all-gathers: less activation memory per rank, the same bytes on a ring"},
    [ANVIL_TRAIN_COLLECTIVE_TIMEOUT] = {.name = "--collective-timeout", .kind = ANVIL_OPT_DOUBLE, .metavar = "S",
                                        .help = "abort the job (exit 76) when a collective waits longer than S seconds,\n"
                                                "naming the ranks that did not answer (default 600)",
                                        .note = "  --batch and --total-batch-tokens: the batch is per rank; the total "
                                                "counts all ranks"},
    [ANVIL_TRAIN_LOG_EVERY] = {.name = "--log-every", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = N30,
                               .help = "log-line period when not on a terminal (default 10)"},
    [ANVIL_TRAIN_THREADS] = {.name = "--threads", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = 4096,
                             .help = "OpenMP threads (default: all cores)"},
    [ANVIL_TRAIN_WARMUP] = {.name = "--warmup", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 0, .hi = N30,
                            .help = "steps left out of the timing medians (default 1)"},
    [ANVIL_TRAIN_SUMMARY_JSON] = {.name = "--summary-json", .kind = ANVIL_OPT_FLAG,
                                  .help = "print a JSON summary as the last line of stdout"},
    [ANVIL_TRAIN_NO_PROGRESS] = {.name = "--no-progress", .kind = ANVIL_OPT_FLAG,
                                 .help = "log lines instead of a progress bar"},
    [ANVIL_TRAIN_NO_HEALTH] = {.name = "--no-health", .kind = ANVIL_OPT_FLAG,
                               .help = "skip the quick health check (anvil health --quick) run before\n"
                                       "training when there is more than one rank"},
};

_Static_assert(sizeof train_opts / sizeof *train_opts == ANVIL_TRAIN_NOPTS, "every train option has an entry");
_Static_assert(ANVIL_LOGMETRIC_MAX == 32, "--metric's help says up to 32");

const anvil_optset anvil_train_cmdline = {
    .command = "train",
    .intro = "usage: anvil train [options]\n"
             "\n"
             "Trains a GPT-2 model on llm.c token shards (or on random tokens, for benchmarks).\n"
             "\n",
    .opts = train_opts,
    .nopts = ANVIL_TRAIN_NOPTS,
    .column = 26,
    .outro = "\n"
             "Same seed, config, data and layout give bit-identical weights on one kernel path (see 'anvil\n"
             "info'), whatever the thread count, also across a resume that changes it.\n"
             "On SIGTERM or SIGUSR1 the current step finishes, a checkpoint is written into --out, and\n"
             "the exit status is 75 (stopped, resumable with --resume auto). Errors exit 1, usage errors 2;\n"
             "78 means the configuration or input cannot work (data, model, --init, the checkpoint to\n"
             "resume), so running it again unchanged would fail the same way; 76 means a collective timed\n"
             "out. With --out, rank 0 keeps OUT/heartbeat.json (step, phase, time) for supervisors.\n",
};

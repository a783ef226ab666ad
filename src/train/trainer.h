/* The training loop: data in, optimizer steps, metrics, validation,
 * samples and the trained model out. The CLI's `anvil train` fills the
 * config; tests and benchmarks call it directly. */
#ifndef ANVIL_TRAIN_TRAINER_H
#define ANVIL_TRAIN_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "optim/optim.h"

typedef struct {
    anvil_model_config model;
    const char *init_model;    /* a model.safetensors to start from instead of a fresh init */
    anvil_device device;       /* where it computes (zeroed: the CPU) */
    anvil_matmul_dtype matmul_dtype; /* what the matmuls multiply in; all state stays fp32 */
    const char *train_pattern; /* glob of train shards */
    const char *val_pattern;   /* glob of val shards; NULL for no validation */
    int synthetic;             /* uniform random tokens instead of shards (benchmarks) */
    int shuffle;               /* 1: each epoch reads the train shards, and their batches, in an order drawn from seed */
    int B, T;                  /* micro-batch of each rank */
    size_t s3_range;           /* shards on S3: bytes per ranged GET (0: ANVIL_S3_READ_RANGE) */
    int s3_inflight;           /* shards on S3: GETs in flight per loader (0: ANVIL_S3_READ_INFLIGHT) */
    int data_layout;           /* ANVIL_LOADER_STRIDED or _CONTIGUOUS (data/loader.h); -1: contiguous for
                                * shards on S3 unless shuffled (one ranged GET per range per rank, not one
                                * per step), strided otherwise (llm.c's order, ranks = one process) */
    int64_t total_batch_tokens; /* tokens per optimizer step over all ranks; a multiple of B*T*ranks
                                 * (0 means B*T*ranks) */
    int steps;
    anvil_lr_schedule lr;
    anvil_adamw_config adamw;
    float grad_clip;   /* 0 disables clipping */
    int val_every;     /* steps between validations (0: only at the end) */
    int val_batches;   /* batches per validation */
    int sample_every;  /* steps between samples (0: only at the end, -1: never) */
    int sample_tokens;
    /* Decodes samples (the one the data was made with); NULL: byte-level
     * models (vocabulary 257) print text, others token ids. */
    const struct anvil_tok *tokenizer;
    /* The rank file tokenizer came from: copied into the run folder and recorded with the model,
     * so that sample and export find it (NULL: none). */
    const char *tokenizer_file;
    uint64_t seed;
    const char *out_dir; /* run folder: metrics.jsonl, model.safetensors, ckpt/; NULL for none */
    int ckpt_every;          /* checkpoint every N steps (0: not by steps; ANVIL_CKPT_EVERY_AUTO: train/ckpt_auto.h) */
    double mtbf_s;           /* --ckpt-every auto's mean time between failures (0: ANVIL_CKPT_AUTO_MTBF_S) */
    double ckpt_minutes;     /* checkpoint every M minutes of wall time (0: not by time) */
    int keep_last;           /* retention: the newest K checkpoints ... */
    int64_t keep_every;      /* ... plus every step that is a multiple of J, for good (0: none) */
    int ckpt_sync;           /* 1: write checkpoints on the training thread (for comparison) */
    int zero_stage;          /* data parallelism across the ranks of src/dist: 0 replicated, 1-3 ZeRO */
    int shard_group_size;    /* MiCS: shard model state within groups of this many ranks (0: all) */
    int tensor_parallel;     /* ranks per tensor-parallel group (0 or 1: none); data parallel over the rest */
    int pipeline_parallel;   /* pipeline stages (0 or 1: none); the accumulation steps are its micro-batches */
    int pipeline_gpipe;      /* 1: GPipe's schedule instead of 1F1B */
    int sequence_parallel;   /* 1: Megatron's sequence parallelism within the TP groups (needs tensor_parallel > 1) */
    const char *resume;      /* "auto": newest valid checkpoint of out_dir, if any; or a checkpoint folder */
    const char *ckpt_uri;    /* s3://bucket/prefix: checkpoints uploaded there too, and "auto" resumes from there
                              * when out_dir has none (NULL: local only) */
    int ckpt_prefixes;       /* key prefixes the uploaded objects spread over (0: ANVIL_CKPT_REMOTE_PREFIXES) */
    const char *config_json; /* the run's options as a JSON object, recorded in each checkpoint */
    int log_every;       /* log-line period when not on a terminal */
    int timing_warmup;   /* first steps left out of the timing medians */
    int progress;        /* 1: progress bar on log; 0: log lines */
    int metrics_port;    /* serve Prometheus metrics on 127.0.0.1:port from rank 0 (0: a free port; -1: none) */
    /* Metrics pulled from the log by regular expressions (obs/logmetric.h): into metrics.jsonl as
     * kind "log" records, and onto the metrics page. */
    const char *const *metric_names, *const *metric_regexes;
    int nmetrics;
    /* A profile of steps profile_first..profile_last (1-based) into profile_dir (NULL: none):
     * Chrome Trace Event Format, one file per rank (obs/trace.h). */
    const char *profile_dir;
    int profile_first, profile_last;
    FILE *log;           /* human-readable output */
} anvil_train_config;

/* anvil_train's return value when SIGTERM or SIGUSR1 stopped the run after writing a checkpoint. */
#define ANVIL_TRAIN_STOPPED 1
/* anvil_train's return value, after anvil_fail, when the configuration or the input cannot work
 * (a check of the config, the model or --init file, the data, the checkpoint to resume): running it
 * again unchanged fails the same way. */
#define ANVIL_TRAIN_BAD_INPUT 2

typedef struct {
    int start_step; /* the step it resumed from (0: a new run) */
    int steps_done; /* the step it ended at; 0 when it trained none (resumed at its last step) */
    float final_loss;
    float val_loss; /* NAN when never validated */
    double ms_per_step_median;
    double tokens_per_s_median;
    double gflops_median; /* achieved model FLOP/s (PaLM counting), in GFLOP/s */
    double mfu_median;    /* that over the peak of the kernel in use (NAN: no peak, a device run) */
    double peak_rss_mb;
    double comm_wait_share; /* of step time, waiting for communication that did not overlap (ranks > 1) */
    int64_t params;
} anvil_train_result;

/* Fills c with the defaults (nanoGPT-like hyperparameters, tiny model). */
void anvil_train_defaults(anvil_train_config *c);
/* Validates the whole configuration up front; one-line error naming the field. */
int anvil_train_check(const anvil_train_config *c);
/* Runs the loop: 0 when done, -1 or ANVIL_TRAIN_BAD_INPUT after anvil_fail, ANVIL_TRAIN_STOPPED
 * when a SIGTERM or SIGUSR1 arrived: the step in progress is finished and checkpointed first. A NaN
 * or infinite loss stops it with an error naming the step. With an out_dir, rank 0 keeps its
 * heartbeat (obs/heartbeat.h) there. */
int anvil_train(const anvil_train_config *c, anvil_train_result *res);

#endif

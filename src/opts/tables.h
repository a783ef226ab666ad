/* The option tables of the subcommands that the job service runs (opts/opts.h): train, prep and
 * export, and import, which shares export's parser. Each enum numbers its command's options in
 * the order of the table and of the usage text; an option's number is its index (anvil_opt_arg.id). */
#ifndef ANVIL_OPTS_TABLES_H
#define ANVIL_OPTS_TABLES_H

#include <stddef.h>

#include "opts/opts.h"

enum anvil_train_opt {
    ANVIL_TRAIN_DATA,
    ANVIL_TRAIN_TRAIN,
    ANVIL_TRAIN_VAL,
    ANVIL_TRAIN_S3_RANGE_MIB,
    ANVIL_TRAIN_S3_INFLIGHT,
    ANVIL_TRAIN_DATA_LAYOUT,
    ANVIL_TRAIN_SYNTHETIC,
    ANVIL_TRAIN_SHUFFLE,
    ANVIL_TRAIN_PRESET,
    ANVIL_TRAIN_LAYERS,
    ANVIL_TRAIN_HEADS,
    ANVIL_TRAIN_EMBD,
    ANVIL_TRAIN_BLOCK,
    ANVIL_TRAIN_VOCAB,
    ANVIL_TRAIN_INIT,
    ANVIL_TRAIN_DTYPE,
    ANVIL_TRAIN_DEVICE,
    ANVIL_TRAIN_BATCH,
    ANVIL_TRAIN_SEQ,
    ANVIL_TRAIN_TOTAL_BATCH_TOKENS,
    ANVIL_TRAIN_STEPS,
    ANVIL_TRAIN_LR,
    ANVIL_TRAIN_MIN_LR,
    ANVIL_TRAIN_LR_WARMUP,
    ANVIL_TRAIN_SCHEDULE,
    ANVIL_TRAIN_WEIGHT_DECAY,
    ANVIL_TRAIN_BETA1,
    ANVIL_TRAIN_BETA2,
    ANVIL_TRAIN_EPS,
    ANVIL_TRAIN_GRAD_CLIP,
    ANVIL_TRAIN_SEED,
    ANVIL_TRAIN_VAL_EVERY,
    ANVIL_TRAIN_VAL_BATCHES,
    ANVIL_TRAIN_SAMPLE_EVERY,
    ANVIL_TRAIN_SAMPLE_TOKENS,
    ANVIL_TRAIN_OUT,
    ANVIL_TRAIN_METRICS_PORT,
    ANVIL_TRAIN_METRIC,
    ANVIL_TRAIN_PROFILE,
    ANVIL_TRAIN_PROFILE_STEPS,
    ANVIL_TRAIN_CKPT_EVERY,
    ANVIL_TRAIN_CKPT_MINUTES,
    ANVIL_TRAIN_MTBF,
    ANVIL_TRAIN_KEEP_LAST,
    ANVIL_TRAIN_KEEP_EVERY,
    ANVIL_TRAIN_CKPT_SYNC,
    ANVIL_TRAIN_RESUME,
    ANVIL_TRAIN_CKPT_URI,
    ANVIL_TRAIN_CKPT_PREFIXES,
    ANVIL_TRAIN_ZERO,
    ANVIL_TRAIN_SHARD_GROUP_SIZE,
    ANVIL_TRAIN_TP,
    ANVIL_TRAIN_PP,
    ANVIL_TRAIN_PP_SCHEDULE,
    ANVIL_TRAIN_SEQUENCE_PARALLEL,
    ANVIL_TRAIN_COLLECTIVE_TIMEOUT,
    ANVIL_TRAIN_LOG_EVERY,
    ANVIL_TRAIN_THREADS,
    ANVIL_TRAIN_WARMUP,
    ANVIL_TRAIN_SUMMARY_JSON,
    ANVIL_TRAIN_NO_PROGRESS,
    ANVIL_TRAIN_NO_HEALTH,
    ANVIL_TRAIN_NOPTS
};
/* The most --ckpt-prefixes takes: train/ckpt_remote.h's ANVIL_CKPT_REMOTE_MAX_PREFIXES, which the
 * CLI asserts equal (this layer sits below train). */
#define ANVIL_TRAIN_MAX_CKPT_PREFIXES 256
extern const anvil_optset anvil_train_cmdline;

enum anvil_prep_opt {
    ANVIL_PREP_OUT,
    ANVIL_PREP_VAL_FRACTION,
    ANVIL_PREP_DELIMITER,
    ANVIL_PREP_SHARD_TOKENS,
    ANVIL_PREP_TOKENIZER,
    ANVIL_PREP_PATTERN,
    ANVIL_PREP_JSONL_FIELD,
    ANVIL_PREP_STRICT,
    ANVIL_PREP_WORKERS,
    ANVIL_PREP_MAX_DOC_BYTES,
    ANVIL_PREP_NO_PROGRESS,
    ANVIL_PREP_HELP,
    ANVIL_PREP_NOPTS
};
extern const anvil_optset anvil_prep_cmdline;

/* export and import: the model read (--model, --hf), the folder or file written, --no-progress. */
enum anvil_hf_opt { ANVIL_HF_IN, ANVIL_HF_OUT, ANVIL_HF_NO_PROGRESS, ANVIL_HF_NOPTS };
extern const anvil_optset anvil_export_cmdline, anvil_import_cmdline;

/* The table of a subcommand the job service can run (one whose --out is the run folder), or NULL. */
const anvil_optset *anvil_opts_job_command(const char *name);
/* Those subcommands' names, ", "-separated, into buf. */
void anvil_opts_job_commands(char *buf, size_t cap);

#endif

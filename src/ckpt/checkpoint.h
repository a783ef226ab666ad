/* Training checkpoints: everything a run needs to continue bit-exactly
 * (weights, AdamW moments and step count, data-loader position, RNG state,
 * step and token counters) in one directory per step:
 *
 *   RUN/ckpt/step_00001000/model.safetensors   weights, the model-file layout
 *                                             (anvil_model_load reads it)
 *   RUN/ckpt/step_00001000/optim.safetensors   AdamW m and v, named "m.<param>"
 *                                             and "v.<param>", wte without padding
 *   RUN/ckpt/step_00001000/manifest.json       everything else, plus each file's
 *                                             size and CRC32C (Castagnoli)
 *   RUN/ckpt/latest                            "step_00001000\n", updated last
 *
 * The manifest protects itself too: its last member, "manifest_crc32c", is
 * 8 lowercase hex digits, the CRC-32C of the file's exact bytes with those 8
 * digits read as "00000000". Readers check it on the raw bytes before parsing,
 * so any single flipped bit, in whitespace as much as in a value, fails with
 * "<path>: checksum mismatch". Format version 2 and later always have it;
 * version 1 manifests, written before it existed (and before shuffled data
 * orders), are still read, unprotected. Version 3 (this build) added block
 * slices to shard files and the shards of tensor and pipeline parallelism;
 * version 2 checkpoints read as before.
 *
 * Crash safety: a checkpoint is assembled in step_X.tmp-<pid>/, every file
 * and the folder are fsync'ed, the folder is renamed to step_X and the
 * parent fsync'ed; only then is `latest` replaced (temp file, fsync, rename,
 * fsync). Pruning renames a folder to a .tmp- name before deleting it. So a
 * crash at any moment never leaves a folder named step_<digits> that fails
 * verification; leftovers are .tmp- names, which readers ignore and
 * anvil_ckpt_prune removes. On any write error (ENOSPC, EFBIG, EIO, ...) the
 * temporary folder is removed, older checkpoints and `latest` are untouched,
 * and the message names the file.
 *
 * Asynchronous saving: anvil_ckpt_snapshot_take copies parameters and
 * moments into in-memory images of their files, owned by the snapshot;
 * anvil_ckpt_snapshot_write then writes the images past the page cache
 * (anvil_write_new_file_direct), from any thread. take copies on every
 * OpenMP thread and checksums each piece as it copies it. Thread safety: take
 * reads the model and optimizer, so call it on the training thread between
 * steps. A snapshot is immutable after take:
 * write may run on a background thread while training continues. Error
 * messages are per thread (core/error.h), so the writing thread must read
 * anvil_errmsg() itself. At most one write per run folder at a time (two
 * would race on `latest`); prune may run concurrently with a write of the
 * same process, because it never touches this process's .tmp- folders and
 * keeps the newest checkpoints. */
#ifndef ANVIL_CKPT_CHECKPOINT_H
#define ANVIL_CKPT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "data/loader.h"
#include "model/model.h"
#include "optim/optim.h"

#define ANVIL_CKPT_VERSION 3
#define ANVIL_CKPT_MAX_FILES 258 /* weights, moments and up to 256 shard files */

/* The process layout of the run that saves: recorded in the manifest's
 * "parallel" object. From ZeRO stage 1 on, the AdamW moments (and from stage
 * 3 the weights) are not whole on any rank, nor are the weights and moments
 * under tensor or pipeline parallelism: each shard's rank writes its own file
 * (anvil_ckpt_write_shard), and loading puts the pieces back together
 * whatever the layout of the run that reads them (resharding). The manifest
 * lists model.safetensors and optim.safetensors only when rank 0 held them
 * whole; readers go by that list. */
typedef struct {
    int world, zero_stage, shard_group;
    int tensor_parallel;   /* ranks per tensor-parallel group (0 or 1: none) */
    int pipeline_parallel; /* stages (0 or 1: none) */
} anvil_ckpt_layout;

/* What to save. step counts completed optimizer steps, so a resumed run
 * continues with step `step`. */
typedef struct {
    const anvil_model *model;
    const anvil_adamw *opt;
    anvil_loader_state loader;
    anvil_rng rng;
    int64_t step;
    int64_t tokens_seen;
    const char *tokenizer;         /* e.g. "bytes" or a rank-file hash; NULL means "bytes" */
    const char *train_config_json; /* a JSON object as text; NULL means {} */
    /* NULL: one process, or replicas that all hold the same state. With zero_stage >= 1, opt gives
     * the update count and hyperparameters only (its moments are a shard's, in the shard files), and
     * with 3, model->params is NULL. */
    const anvil_ckpt_layout *layout;
} anvil_ckpt_state;

typedef struct {
    char name[64];
    uint64_t bytes;
    uint32_t crc32c;
} anvil_ckpt_file;

/* The parsed manifest.json. */
typedef struct {
    int version;
    int64_t step, tokens_seen;
    anvil_model_config model; /* its family's, padded_vocab set */
    char tokenizer[256];
    anvil_loader_state loader;
    anvil_rng rng;
    int64_t adam_t;
    anvil_adamw_config adamw; /* the hyperparameters in use when saved, for information */
    int world, rank, zero_stage, shard_group;
    int tensor_parallel, pipeline_parallel; /* 1 in manifests written before these were recorded */
    int nfiles;
    anvil_ckpt_file files[ANVIL_CKPT_MAX_FILES];
    char *train_config; /* the training configuration as compact JSON text (owned) */
} anvil_ckpt_manifest;

/* Parses and validates manifest text (len bytes, need not be NUL-terminated),
 * its own checksum first; name labels the messages. Refuses a format version
 * newer than this build's.
 * On success the caller frees with anvil_ckpt_manifest_free. */
int anvil_ckpt_manifest_parse(const char *text, size_t len, const char *name, anvil_ckpt_manifest *out);
void anvil_ckpt_manifest_free(anvil_ckpt_manifest *m);
/* Recomputes the manifest checksum of text (len bytes) and writes it into its manifest_crc32c value,
 * for tools and tests that edit a manifest on purpose. -1 after anvil_fail when there is no such field. */
int anvil_ckpt_manifest_stamp(char *text, size_t len);
/* Reads DIR/manifest.json. */
int anvil_ckpt_read_manifest(const char *ckpt_dir, anvil_ckpt_manifest *out);

/* Snapshot + write + free. On success writes the checkpoint folder's path to
 * out (when out is not NULL). */
int anvil_ckpt_save(const char *run_dir, const anvil_ckpt_state *st, char *out, size_t cap);

typedef struct anvil_ckpt_snapshot anvil_ckpt_snapshot;
/* Copies everything st refers to. Passing the previous snapshot as reuse
 * recycles its buffers when the model size is unchanged (reuse is consumed
 * either way: do not use it after the call). NULL after anvil_fail. */
anvil_ckpt_snapshot *anvil_ckpt_snapshot_take(anvil_ckpt_snapshot *reuse, const anvil_ckpt_state *st);
/* Writes RUN/ckpt/step_<step>/ (replacing an existing one of the same step atomically) and then
 * `latest`; creates RUN and RUN/ckpt when missing. -1 after anvil_fail: nothing new named step_*
 * exists, except when only the final fsync of RUN/ckpt or the `latest` update failed, in which
 * case the step folder is already complete and valid. */
int anvil_ckpt_snapshot_write(const anvil_ckpt_snapshot *s, const char *run_dir, char *out, size_t cap);
int64_t anvil_ckpt_snapshot_step(const anvil_ckpt_snapshot *s);
void anvil_ckpt_snapshot_free(anvil_ckpt_snapshot *s);

/* A sharded checkpoint is written by every rank together: the caller (the
 * trainer, which owns the collectives) has one rank begin it, every shard's
 * rank write its shard file into the temporary folder, and the first rank
 * finish it with the other files' names, sizes and checksums. */

/* One slice of a rank's shard, in the flat layout of model/model.h, and where the slice's moments
 * (and, when the weights are sharded too, weights) are. With rows 0 or 1 it is elements
 * [flat, flat+len) of parameter tensor `tensor`; with more it is a block: rows runs of len elements,
 * the first at flat and each next one a row of the tensor further on (a row: the tensor's last
 * dimension, anvil_model_tensor_row), as a tensor-parallel rank holds the input columns of a
 * row-parallel matrix. The slice's own data is contiguous either way, rows * len floats. */
typedef struct {
    int tensor;
    size_t flat, len, rows;
    const float *m, *v, *p; /* p is NULL while the weights are whole on rank 0 */
} anvil_ckpt_slice;

/* Creates RUN/ckpt/step_<step>.tmp-<pid> (and RUN/ckpt) and writes its path to tmp. */
int anvil_ckpt_begin(const char *run_dir, int64_t step, char *tmp, size_t cap);
/* The file name of shard g of k, shard_<g>_of_<k>.safetensors, into out (room for
 * sizeof(anvil_ckpt_file.name)). */
void anvil_ckpt_shard_name(int g, int k, char *out, size_t cap);
/* Shard g of k's file shard_<g>_of_<k>.safetensors holds one tensor per slice and kind, named
 * "m.<param>.<first element within the parameter>" (and "v.", "p."), 1-D [len] for a run and 2-D
 * [rows, len] for a block, so that the file says where every value goes and a reader needs to know
 * nothing of the layout that wrote it. A shard snapshot is that file's image, copied from the slices: like
 * anvil_ckpt_snapshot_take (reuse, threads), and written from any thread. NULL after anvil_fail. */
typedef struct anvil_ckpt_shard_snapshot anvil_ckpt_shard_snapshot;
anvil_ckpt_shard_snapshot *anvil_ckpt_shard_take(anvil_ckpt_shard_snapshot *reuse, int g, int k,
                                                 const anvil_model *model, const anvil_ckpt_slice *slices, int n);
/* Writes the shard's file into the folder tmp, fsync'ed; out gets its name, size and CRC32C. */
int anvil_ckpt_shard_write(const anvil_ckpt_shard_snapshot *s, const char *tmp, anvil_ckpt_file *out);
void anvil_ckpt_shard_free(anvil_ckpt_shard_snapshot *s);
/* The three at once. */
int anvil_ckpt_write_shard(const char *tmp, int g, int k, const anvil_model *model, const anvil_ckpt_slice *slices,
                           int n, anvil_ckpt_file *out);
/* Removes a temporary folder from anvil_ckpt_begin after a failure elsewhere. */
void anvil_ckpt_abandon(const char *tmp);
/* Writes the snapshot's own files (weights and moments, when it holds them) and the manifest,
 * which also lists the shard files, then renames tmp into place and updates `latest`. On failure
 * tmp is removed and nothing named step_* appears. */
int anvil_ckpt_finish(const anvil_ckpt_snapshot *s, const char *run_dir, const char *tmp,
                      const anvil_ckpt_file *shards, int nshards, char *out, size_t cap);

/* Verifies the checkpoint folder (its manifest, then, when verify is set,
 * every listed file's size and checksum: a caller that has verified them
 * already, with anvil_ckpt_verify_part, passes 0, and reads the folder
 * once instead of twice), then restores weights into model and, when opt is not
 * NULL, the moments and step count into opt. Both must already be
 * initialized with the checkpoint's configuration: a difference is refused
 * with a message naming the field. A sharded checkpoint is put back
 * together from its shard files, whatever layout wrote it, so the whole
 * moments land in opt (and, when the weights were sharded too, at ZeRO-3
 * or under tensor or pipeline parallelism, the whole weights in model).
 * info (may be NULL) receives the manifest
 * (loader state, RNG, counters, tokenizer, training configuration); free it
 * with anvil_ckpt_manifest_free. Nothing is modified when a check fails; shard files are indexed
 * and checked before anything is copied, then read through a bounded buffer, so only an I/O error
 * in that last pass (the files were verified just before) can leave the destinations partly
 * written. */
int anvil_ckpt_load(const char *ckpt_dir, anvil_model *model, anvil_adamw *opt, anvil_ckpt_manifest *info, int verify);

/* A checkpoint read piece by piece, for a process that holds a shard of the model (tensor and
 * pipeline parallelism) and must never hold a whole tensor: opening verifies every file (size and
 * checksum, streamed; with verify 0, as for anvil_ckpt_load, the manifest alone), compares the
 * model with cfg, and checks the tables of the weights and moments files, or indexes the shard
 * files, from their headers alone (shard slices that leave a gap or overlap are refused); a read
 * then takes only the bytes asked for, whatever layout wrote them. info (may be NULL) receives the
 * manifest as for anvil_ckpt_load. NULL after anvil_fail. */
typedef struct anvil_ckpt_reader anvil_ckpt_reader;
anvil_ckpt_reader *anvil_ckpt_reader_open(const char *ckpt_dir, const anvil_model_config *cfg,
                                          anvil_ckpt_manifest *info, int verify);
/* Elements [off, off + n) of tensor i (the whole model's layout; padding rows read as zeros) of the
 * weights (kind 0), AdamW's m (1) or v (2), into host memory at dst. 0, or -1 after anvil_fail. */
int anvil_ckpt_reader_read(anvil_ckpt_reader *r, int kind, int i, size_t off, size_t n, float *dst);
void anvil_ckpt_reader_close(anvil_ckpt_reader *r);

/* 0 when every file listed in the manifest has its size and checksum;
 * -1 with a message naming the first bad file. */
int anvil_ckpt_verify(const char *ckpt_dir);
/* Told the bytes done of the total after each few MiB of a long operation. */
typedef void (*anvil_ckpt_progress_fn)(void *ctx, uint64_t done, uint64_t total);
/* anvil_ckpt_verify, telling progress (may be NULL) the bytes checksummed of all the listed files'. */
int anvil_ckpt_verify_progress(const char *ckpt_dir, anvil_ckpt_progress_fn progress, void *ctx);

/* Verifies the checkpoint folder's manifest (and, when step >= 0, that it is step's) and the listed
 * files dealt to part of nparts: largest first, each file goes to the part with the fewest bytes so
 * far, so that nparts processes sharing the folder each checksum about 1/nparts of it, together all
 * of it, where anvil_ckpt_verify would have each read the whole. 0, or -1 naming the first bad file. */
int anvil_ckpt_verify_part(const char *ckpt_dir, int64_t step, int part, int nparts);

/* How anvil_ckpt_find_latest_checked checks the candidate folder of step: 0 when it verifies, -1 to
 * go on to an older one, -2 to give up; either after anvil_fail. */
typedef int (*anvil_ckpt_check_fn)(void *ctx, const char *ckpt_dir, int64_t step);
/* anvil_ckpt_find_latest_valid with each candidate, newest first, checked by check alone (manifest
 * included), so that processes sharing the run folder can make the check a collective: each verifies
 * its part and they agree. -1 also when check gave up. */
int anvil_ckpt_find_latest_checked(const char *run_dir, char *out, size_t cap, char *warn, size_t warn_cap,
                                   anvil_ckpt_check_fn check, void *ctx);
/* For --resume auto: the newest RUN/ckpt/step_* folder that verifies.
 * Returns 1 with its path in out; 0 when the run has no checkpoint at all;
 * -1 when none verifies or on an error. Each newer folder skipped because it
 * failed verification adds a line to warn (NUL-terminated, may be NULL). */
int anvil_ckpt_find_latest_valid(const char *run_dir, char *out, size_t cap, char *warn, size_t warn_cap);

/* The step folders of RUN/ckpt, newest first, into *names (malloc'd, free it; each a name such as
 * "step_00001000" under RUN/ckpt): their number, 0 when the run has none (or no ckpt/), -1 after
 * anvil_fail. */
int anvil_ckpt_list(const char *run_dir, char (**names)[64]);

/* What a folder given by a user stands for: a checkpoint folder (it holds
 * manifest.json) is itself; a run folder (it holds ckpt/) is its newest
 * checkpoint that verifies, with warn as for anvil_ckpt_find_latest_valid.
 * Anything else is passed through unchanged. -1 when a run folder has no
 * checkpoint that verifies. */
int anvil_ckpt_resolve(const char *path, char *out, size_t cap, char *warn, size_t warn_cap);

/* Deletes checkpoints of RUN/ckpt except the keep_last newest (>= 1), those
 * whose step is a multiple of keep_every (0: none), and the one `latest`
 * names; also removes the .tmp- leftovers of every other process. The
 * caller must hold the run folder's lock (anvil_lock_folder), which is what
 * makes those leftovers dead: their writers cannot still be running. Returns
 * the number of folders removed, or -1. */
int anvil_ckpt_prune(const char *run_dir, int keep_last, int64_t keep_every);

#endif

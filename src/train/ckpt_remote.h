/* Checkpoints mirrored to S3 (train --ckpt-uri s3://bucket/prefix).
 *
 * Each checkpoint is written locally first, by the checkpointer; once its folder is committed,
 * rank 0 hard-links its files into a staging folder beside it (so local retention may remove the
 * folder meanwhile) and an uploader thread sends them: each file to
 * <prefix>/<hh>/step_<8 digits>/<file>, hh two hex digits of a hash of the file name modulo the
 * prefix count (requests spread over key prefixes), multipart above the part size. The index
 * <prefix>/step_<8 digits>/manifest.json, listing each object's key, size and CRC-32C, goes up
 * LAST: it is the commit point, and a checkpoint without it does not exist. Retention then deletes
 * the checkpoints beyond keep-last (sparing multiples of keep-every, as locally), index first.
 *
 * One uploader per run: every rank's shard file is already in rank 0's local checkpoint folder
 * (the checkpointer's design), so the ranks of a host hand their files over through that folder. */
#ifndef ANVIL_TRAIN_CKPT_REMOTE_H
#define ANVIL_TRAIN_CKPT_REMOTE_H

#include <stdint.h>
#include <stdio.h>

#include "s3/s3.h"

#define ANVIL_CKPT_REMOTE_PREFIXES 16
#define ANVIL_CKPT_REMOTE_MAX_PREFIXES 256

typedef struct anvil_ckpt_remote anvil_ckpt_remote;

/* Opens the S3 client and starts the uploader; NULL after anvil_fail (a malformed URI, no
 * credentials). log receives one line per uploaded checkpoint. */
anvil_ckpt_remote *anvil_ckpt_remote_open(const char *uri, int nprefixes, int keep_last, int64_t keep_every,
                                          FILE *log);
/* Queues the committed checkpoint folder ckpt_dir (of step) for upload; -1 after anvil_fail when
 * it cannot be staged. Called from the checkpointer's writer thread. */
int anvil_ckpt_remote_push(anvil_ckpt_remote *r, const char *ckpt_dir, int64_t step);
/* Removes the staging folders (run_dir/ckpt/upload-step_* and download-step_*) that a run killed
 * mid-upload or mid-download left; neither is ever read. -1 after anvil_fail when ckpt/ exists but
 * cannot be listed. Call before this run stages anything. */
int anvil_ckpt_remote_clean(const char *run_dir);
/* The uploader's S3 counters so far. */
void anvil_ckpt_remote_stats(anvil_ckpt_remote *r, anvil_s3_stats *st);
/* Waits for the queued uploads and stops; -1 when any upload failed (each was logged). */
int anvil_ckpt_remote_close(anvil_ckpt_remote *r);
/* The newest checkpoint on S3 whose index exists, downloaded into run_dir/ckpt/step_<8 digits>
 * with every object's CRC-32C checked before the folder is renamed into place: 1 with its folder
 * in out, 0 when S3 holds none, -1 after anvil_fail (a mismatch names the key). */
int anvil_ckpt_remote_fetch_latest(const char *uri, const char *run_dir, char *out, size_t cap);

#endif

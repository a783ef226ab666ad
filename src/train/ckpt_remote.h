/* Checkpoints mirrored to S3 (train --ckpt-uri s3://bucket/prefix).
 *
 * Each checkpoint is written locally first, by the checkpointer, then uploaded hierarchically: on
 * each host one uploader, the host's lowest rank, sends the files that host's ranks wrote (with
 * ZeRO each writer's shard file; a replicated run's rank 0 writes everything, so other hosts have
 * nothing). The files are hard-linked into a staging folder beside the checkpoint,
 * run/ckpt/upload-step_<8 digits>-host_<uploader rank> (so local retention may remove the
 * checkpoint meanwhile): a shard by its writer as soon as it is written, the rest by rank 0 once
 * the folder is committed. A thread per uploader sends each file to
 * <prefix>/<hh>/step_<8 digits>/<file>, hh two hex digits of a hash of the file name modulo the
 * prefix count (requests spread over key prefixes), multipart above the part size. An uploader
 * other than rank 0 then puts its host's marker <prefix>/step_<8 digits>/hosts/rank_<rank>.json,
 * listing its objects (or why it failed). Rank 0, after its own files, waits for the markers of
 * every host that wrote a file (polling with backoff, bounded), and puts the index
 * <prefix>/step_<8 digits>/manifest.json, listing every object's key, size and CRC-32C: it is the
 * commit point, and a checkpoint without it does not exist. Retention then deletes the
 * checkpoints beyond keep-last (sparing multiples of keep-every, as locally), index first, then
 * its objects and markers. The threads never call MPI: they coordinate through S3 objects, the
 * hosts' agreement on what to upload through the checkpointer's shard exchange. */
#ifndef ANVIL_TRAIN_CKPT_REMOTE_H
#define ANVIL_TRAIN_CKPT_REMOTE_H

#include <stdint.h>
#include <stdio.h>

#include "s3/s3.h"

#define ANVIL_CKPT_REMOTE_PREFIXES 16
#define ANVIL_CKPT_REMOTE_MAX_PREFIXES 256

typedef struct anvil_ckpt_remote anvil_ckpt_remote;

/* How long rank 0 waits for a host's marker, its own files uploaded, before it gives up the step. */
#define ANVIL_CKPT_REMOTE_MARKER_WAIT_S 600.0

typedef struct {
    const char *uri, *run_dir;
    int nprefixes, keep_last;
    int64_t keep_every;
    int rank;          /* this uploader's world rank, its host's lowest; rank 0 commits */
    const char *host;  /* its host key, recorded in its marker */
    uint64_t run_id;   /* the same on every rank, new each run: a marker of another run is never taken */
    FILE *log;         /* rank 0: one line per committed checkpoint; every uploader: its errors */
} anvil_ckpt_remote_config;

/* Opens the S3 client and starts the uploader; NULL after anvil_fail (a malformed URI, no
 * credentials). */
anvil_ckpt_remote *anvil_ckpt_remote_open(const anvil_ckpt_remote_config *cfg);
/* Links the file at path, written by this rank for step, into the staging folder of the host
 * whose uploader is rank uploader; -1 after anvil_fail. Called by a shard's writer before it
 * reports the shard written, so the folder is complete when the ranks agree it is. */
int anvil_ckpt_remote_stage(const char *run_dir, int64_t step, int uploader, const char *path);
/* Rank 0: stages the committed checkpoint folder ckpt_dir (of step) but the files named in skip
 * (those other hosts upload), and queues its upload and commit, after the markers of the uploader
 * ranks in hosts; -1 after anvil_fail. Called from the checkpointer's writer thread. */
int anvil_ckpt_remote_push(anvil_ckpt_remote *r, const char *ckpt_dir, int64_t step, const char *const *skip,
                           int nskip, const int *hosts, int nhosts);
/* An uploader other than rank 0: queues the upload of its host's staged files of step, once every
 * rank agreed the step's files are written; -1 after anvil_fail. */
int anvil_ckpt_remote_push_host(anvil_ckpt_remote *r, int64_t step);
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

/* The training data loader: reads batches of B sequences of T tokens from a
 * set of shards, in llm.c's order, sliced across the processes of a
 * data-parallel job.
 *
 * The shards (a glob, sorted by name) are read as one endless stream of
 * global batches. A global batch is world*B*T+1 contiguous tokens of one shard
 * starting at the loader's position; process `rank` takes the window of
 * B*T+1 tokens at position + rank*B*T (inputs are its first B*T tokens,
 * targets the same shifted by one). Each batch advances the position by
 * world*B*T. When the next global batch would not fit in the shard, the
 * loader moves to the start of the next shard, wrapping to the first after
 * the last (one epoch). Every process moves to the next shard on the same
 * step, so ranks never read from different shards. With one process, step i
 * of a shard reads tokens [i*B*T, i*B*T + B*T + 1). */
#ifndef ANVIL_DATA_LOADER_H
#define ANVIL_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "s3/s3.h"

typedef struct anvil_loader anvil_loader;

#define ANVIL_LOADER_S3_START_RATE 4000

/* Where the next global batch starts, and in which order the batches come.
 * The same on every rank, so rank 0's copy in a checkpoint restores all of
 * them. The order fields travel with the position because a position means
 * nothing without them: restoring it into a loader with another order would
 * silently read other batches, so set_state refuses that. */
typedef struct {
    int64_t shard;    /* index into the sorted shard list (the epoch's order when shuffled) */
    int64_t position; /* token offset of the next global batch in that shard (window slot * world*B*T when shuffled) */
    int64_t epoch;    /* completed passes over all shards */
    int64_t shuffled; /* 1: the order of anvil_loader_set_shuffle(shuffle_seed); 0: in order */
    uint64_t shuffle_seed; /* 0 when not shuffled */
    int64_t layout;        /* ANVIL_LOADER_STRIDED or ANVIL_LOADER_CONTIGUOUS */
} anvil_loader_state;

/* How a global batch is cut among the ranks.
 * STRIDED (llm.c's, the default): as above, rank r takes the B*T+1 tokens at
 * position + r*B*T, so world ranks see what one process with world*B sees.
 * CONTIGUOUS: the epoch's tokens, all shards read as one stream in order, are
 * cut into world stretches of S = (total-1)/world tokens; at step k of epoch
 * e, rank r reads the B*T+1 tokens at k*B*T of stretch (r+e) mod world. Each
 * rank then reads its own stretch front to back, so its object reads are
 * sequential (one ranged GET per range, not one per step), and at an epoch's
 * end every rank moves on to the next stretch, whose start follows its own
 * end, rather than jumping back. Each epoch has S/(B*T) steps, the global
 * batch of step k holds the same tokens in every epoch, and the state's
 * position is k*world*B*T (shard stays 0). Not with shuffling. */
enum { ANVIL_LOADER_STRIDED = 0, ANVIL_LOADER_CONTIGUOUS = 1 };

/* pattern may be s3://bucket/glob: the objects of one listing that match it, read with ranged GETs
 * of ANVIL_S3_READ_RANGE bytes, ANVIL_S3_READ_INFLIGHT at once (anvil_loader_open_s3 sets both),
 * credentials and endpoint as src/s3/s3.h takes them.
 * A job's ranks open their loaders at about the same moment, and read their first batches at the
 * same moment too; each time their first requests (the listing and shard 0's header block; then
 * the blocks of the first batch and those read ahead of it) would arrive at S3 together. On S3,
 * rank r waits r x N / ANVIL_LOADER_S3_START_RATE seconds (the env var of that name overrides the
 * rate, in requests per second) before its open's first request (N = 2) and again before its first
 * read (N = 2 + ANVIL_S3_READ_AHEAD), so that the job's first requests go out at that rate: 8,000
 * ranks open in 4 s and start reading over 6 s at the defaults; see ARCHITECTURE.md's request
 * rates at scale.
 * Validates every shard up front; a shard with fewer than world*B*T+1 tokens
 * cannot supply one batch and is an error naming it. Token ids are checked
 * against vocab_size on every read. */
anvil_loader *anvil_loader_open(const char *pattern, int B, int T, int rank, int world, int vocab_size);
/* anvil_loader_open with shards on S3 read by GETs of `range` bytes (at least
 * ANVIL_S3_MIN_READ_RANGE), `inflight` at once, reading ahead of the loader. */
anvil_loader *anvil_loader_open_s3(const char *pattern, int B, int T, int rank, int world, int vocab_size, size_t range,
                                   int inflight);
void anvil_loader_close(anvil_loader *L);

/* Fills B*T inputs and B*T targets (targets[i] is the token after inputs[i]). */
int anvil_loader_next(anvil_loader *L, int32_t *inputs, int32_t *targets);
/* On by default: a thread reads the next batch while the caller computes,
 * so next rarely waits for I/O. The batches and states are the same either
 * way; a read error of the thread is reported by the next call to next. Off
 * reads each batch in next itself. */
void anvil_loader_set_prefetch(anvil_loader *L, int on);
/* Off by default. On, each epoch visits the shards in a permuted order and
 * each shard's windows of world*B*T tokens in a permuted order, both drawn
 * from (seed, epoch) alone. The state then counts the epoch's shards and
 * windows done: shard is the slot in the epoch's shard order and position is
 * the window slot times world*B*T, so get/set_state still restore exactly,
 * given the same seed. Call before the first next or set_state. */
int anvil_loader_set_shuffle(anvil_loader *L, uint64_t seed);
/* Chooses the layout; call before the first next or set_state. CONTIGUOUS is
 * refused with shuffling. */
int anvil_loader_set_layout(anvil_loader *L, int layout);
/* "strided" or "contiguous" (for messages and the checkpoint manifest). */
const char *anvil_loader_layout_name(int layout);

/* Back to the first batch of the first shard, epoch 0 (the order stays). */
void anvil_loader_reset(anvil_loader *L);

/* The S3 client's counters: 1 and *st filled for shards on S3, else 0. */
int anvil_loader_s3_stats(anvil_loader *L, anvil_s3_stats *st);

anvil_loader_state anvil_loader_get_state(const anvil_loader *L);
/* Restores a state from get_state so the batches that follow are identical.
 * A state of another order (shuffled or not, another seed) or another layout
 * is refused with a message naming both. */
int anvil_loader_set_state(anvil_loader *L, anvil_loader_state st);

int anvil_loader_num_shards(const anvil_loader *L);
const char *anvil_loader_shard_path(const anvil_loader *L, int i);
int64_t anvil_loader_total_tokens(const anvil_loader *L);

#endif

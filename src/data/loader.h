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
} anvil_loader_state;

/* pattern may be s3://bucket/glob: the objects of one listing that match it, read with ranged GETs
 * of ANVIL_S3_READ_RANGE bytes, ANVIL_S3_READ_INFLIGHT at once (anvil_loader_open_s3 sets both),
 * credentials and endpoint as src/s3/s3.h takes them.
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
/* Back to the first batch of the first shard, epoch 0 (the order stays). */
void anvil_loader_reset(anvil_loader *L);

/* The S3 client's counters: 1 and *st filled for shards on S3, else 0. */
int anvil_loader_s3_stats(anvil_loader *L, anvil_s3_stats *st);

anvil_loader_state anvil_loader_get_state(const anvil_loader *L);
/* Restores a state from get_state so the batches that follow are identical.
 * A state of another order (shuffled or not, another seed) is refused with a
 * message naming both orders. */
int anvil_loader_set_state(anvil_loader *L, anvil_loader_state st);

int anvil_loader_num_shards(const anvil_loader *L);
const char *anvil_loader_shard_path(const anvil_loader *L, int i);
int64_t anvil_loader_total_tokens(const anvil_loader *L);

#endif

/* The read-ahead reader over one object: worker threads fetch its blocks with ranged GETs through
 * the client (s3.c), a few ahead of the reader, which copies from the blocks in order. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "s3/s3.h"

/* A slot holds one block: queued for a worker, being fetched, ready, or failed. */
enum { SLOT_FREE, SLOT_QUEUED, SLOT_LOADING, SLOT_READY, SLOT_FAILED };
typedef struct {
    int64_t block;
    int state;
    char *data;
    size_t len;
    char err[512];
} slot;

struct anvil_s3_reader {
    anvil_s3 *s3;
    char *bucket, *key;
    uint64_t size;
    size_t range;
    int inflight, nslots, nthreads, quit;
    int64_t nblocks, last; /* last: the block the previous read ended in, for read-ahead */
    int64_t reads;
    slot *slots;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
};

static void *reader_worker(void *arg) {
    anvil_s3_reader *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        slot *sl = NULL;
        while (!r->quit) {
            /* The lowest queued block first: the caller waits on the one nearest to it. */
            for (int i = 0; i < r->nslots; i++)
                if (r->slots[i].state == SLOT_QUEUED && (!sl || r->slots[i].block < sl->block)) sl = &r->slots[i];
            if (sl) break;
            pthread_cond_wait(&r->work, &r->mu);
        }
        if (r->quit) break;
        sl->state = SLOT_LOADING;
        int64_t b = sl->block;
        uint64_t off = (uint64_t)b * r->range;
        size_t want = r->size - off < r->range ? (size_t)(r->size - off) : r->range, got = 0;
        char *data = sl->data;
        pthread_mutex_unlock(&r->mu);
        int rc = anvil_s3_get_range(r->s3, r->bucket, r->key, off, want, data, &got);
        if (!rc && got != want)
            rc = anvil_fail("s3: GET s3://%s/%s: %zu bytes at offset %" PRIu64 ", %zu expected (the object changed?)",
                            r->bucket, r->key, got, off, want);
        pthread_mutex_lock(&r->mu);
        sl->len = got;
        sl->state = rc ? SLOT_FAILED : SLOT_READY;
        if (rc) snprintf(sl->err, sizeof sl->err, "%s", anvil_errmsg());
        pthread_cond_broadcast(&r->done);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

anvil_s3_reader *anvil_s3_reader_open(anvil_s3 *s3, const char *bucket, const char *key, uint64_t size, size_t range,
                                      int inflight) {
    if (range < ANVIL_S3_MIN_READ_RANGE || inflight < 1) {
        anvil_fail("s3: read range %zu bytes (at least %u) or %d requests in flight (at least 1) for s3://%s/%s", range,
                   ANVIL_S3_MIN_READ_RANGE, inflight, bucket, key);
        return NULL;
    }
    anvil_s3_reader *r = calloc(1, sizeof *r);
    if (!r) {
        anvil_fail("out of memory");
        return NULL;
    }
    r->s3 = s3;
    r->size = size;
    r->range = range;
    r->inflight = inflight;
    r->nblocks = (int64_t)((size + range - 1) / range);
    r->last = -1;
    /* The blocks being read ahead, plus the two a read across a boundary holds. */
    r->nslots = inflight + 2;
    r->bucket = strdup(bucket);
    r->key = strdup(key);
    r->slots = calloc((size_t)r->nslots, sizeof *r->slots);
    r->threads = calloc((size_t)inflight, sizeof *r->threads);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->work, NULL);
    pthread_cond_init(&r->done, NULL);
    if (!r->bucket || !r->key || !r->slots || !r->threads) {
        anvil_s3_reader_close(r);
        anvil_fail("out of memory");
        return NULL;
    }
    for (int i = 0; i < r->nslots; i++) r->slots[i].block = -1;
    return r;
}

void anvil_s3_reader_close(anvil_s3_reader *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->quit = 1;
    pthread_cond_broadcast(&r->work);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->nthreads; i++) pthread_join(r->threads[i], NULL);
    for (int i = 0; r->slots && i < r->nslots; i++) free(r->slots[i].data);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->work);
    pthread_cond_destroy(&r->done);
    free(r->slots);
    free(r->threads);
    free(r->bucket);
    free(r->key);
    free(r);
}

static slot *find_slot(anvil_s3_reader *r, int64_t b) {
    for (int i = 0; i < r->nslots; i++)
        if (r->slots[i].state != SLOT_FREE && r->slots[i].block == b) return &r->slots[i];
    return NULL;
}

/* Queues block b into a free slot, or one holding a block outside [lo, hi] that no worker is
 * fetching; 0 when every slot is in use (the read-ahead then waits for a later read). Workers fetch
 * at most `inflight` blocks, so the two a read needs always find a slot. */
static int queue_block(anvil_s3_reader *r, int64_t b, int64_t lo, int64_t hi) {
    if (b < 0 || b >= r->nblocks || find_slot(r, b)) return 1;
    slot *sl = NULL;
    for (int i = 0; i < r->nslots && !sl; i++) {
        slot *c = &r->slots[i];
        if (c->state == SLOT_FREE || (c->state != SLOT_LOADING && (c->block < lo || c->block > hi))) sl = c;
    }
    if (!sl) return 0;
    if (!sl->data && !(sl->data = malloc(r->range))) return 0;
    sl->block = b;
    sl->state = SLOT_QUEUED;
    pthread_cond_signal(&r->work);
    return 1;
}

int anvil_s3_reader_read(anvil_s3_reader *r, uint64_t off, size_t len, void *buf) {
    if (off > r->size || len > r->size - off)
        return anvil_fail("s3: s3://%s/%s: bytes [%" PRIu64 ", %" PRIu64 ") are outside its %" PRIu64 " bytes",
                          r->bucket, r->key, off, off + len, r->size);
    if (!len) return 0;
    pthread_mutex_lock(&r->mu);
    while (r->nthreads < r->inflight) {
        if (pthread_create(&r->threads[r->nthreads], NULL, reader_worker, r)) break;
        r->nthreads++;
    }
    if (!r->nthreads) {
        pthread_mutex_unlock(&r->mu);
        return anvil_fail("s3: cannot start a reader thread for s3://%s/%s", r->bucket, r->key);
    }
    int64_t first = (int64_t)(off / r->range), last = (int64_t)((off + len - 1) / r->range);
    /* Reading on from where the last read ended: keep ANVIL_S3_READ_AHEAD blocks past this one queued. A jump
     * (shuffled windows, or a rank's batches world x B x T tokens apart) reads only what it needs. The
     * first read (a shard's header) reads only its block, and the second, where the caller's reading
     * starts (for a rank's stretch, often far from the header), reads ahead wherever it lands. */
    int64_t ahead = r->reads == 1 || first == r->last || first == r->last + 1 ? ANVIL_S3_READ_AHEAD : 0;
    if (r->reads == 0) ahead = 0;
    r->reads++;
    r->last = last;
    int rc = 0;
    for (int64_t b = first; b <= last + ahead; b++)
        if (!queue_block(r, b, first, last + ahead) && b <= last) {
            rc = anvil_fail("s3: out of memory for a %zu-byte read block", r->range);
            break;
        }
    char *out = buf;
    for (int64_t b = first; !rc && b <= last; b++) {
        slot *sl;
        while ((sl = find_slot(r, b)) && (sl->state == SLOT_QUEUED || sl->state == SLOT_LOADING))
            pthread_cond_wait(&r->done, &r->mu);
        if (!sl) {
            rc = anvil_fail("s3: s3://%s/%s: block %" PRId64 " was dropped before it was read", r->bucket, r->key, b);
        } else if (sl->state == SLOT_FAILED) {
            rc = anvil_fail("%s", sl->err);
            /* Tried again on the next read rather than failing for good. */
            sl->state = SLOT_FREE;
        } else {
            uint64_t bstart = (uint64_t)b * r->range;
            uint64_t from = off > bstart ? off - bstart : 0;
            uint64_t to = off + len - bstart < sl->len ? off + len - bstart : sl->len;
            memcpy(out, sl->data + from, (size_t)(to - from));
            out += to - from;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

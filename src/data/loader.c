#include "data/loader.h"

#include <fnmatch.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/confine.h"
#include "core/error.h"
#include "data/shard.h"

/* The prefetch job: one window read by the worker thread into buf while the
 * trainer computes. Only the worker touches cur while a thread exists; the
 * caller only reads job fields under mu. */
typedef struct {
    anvil_loader_state st; /* the normalized state whose window is (being) read */
    int64_t file, offset;  /* where that window is (file -1: offset in the epoch's stream, CONTIGUOUS) */
    int queued, done, rc;
    char err[512];
} job_t;

struct anvil_loader {
    int B, T, rank, world, vocab_size;
    int64_t bt;     /* B*T: one process's tokens per batch */
    int64_t global; /* world*B*T: the position's step */
    int nshards;
    char **paths;
    int64_t *ntokens;
    anvil_shard cur; /* the open shard, cur_index < 0 when none */
    anvil_s3 *s3;    /* shards on S3: the client, the GET size and the GETs in flight */
    size_t s3_range;
    int s3_inflight;
    uint64_t *s3_sizes; /* from the listing */
    int64_t cur_index;
    anvil_loader_state st;
    int layout, started;
    int64_t stretch; /* CONTIGUOUS: tokens per stretch */
    int64_t *starts; /* CONTIGUOUS: each shard's first token in the stream, and the total last */
    int32_t *buf; /* B*T+1 */

    /* Shuffled order: slot -> file for epoch order_epoch, and window slot ->
     * window for (win_epoch, win_file); recomputed when the state moves on. */
    int shuffle;
    uint64_t seed;
    int64_t *order, order_epoch;
    int64_t *win, win_epoch, win_file;

    int prefetch; /* wanted; the thread starts on the first next */
    int have_thread, quit, have_job;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t job;
};

/* Waits until the requests of the ranks before this one, `requests` each, have gone out at the start rate. */
static void stagger(int rank, int requests) {
    const char *env = getenv("ANVIL_LOADER_S3_START_RATE");
    double rate = env ? atof(env) : ANVIL_LOADER_S3_START_RATE;
    if (rank <= 0 || !(rate > 0)) return;
    anvil_sleep((double)rank * requests / rate);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A shard on S3 takes its size from the listing: no HEAD of its own. */
static int open_shard(anvil_loader *L, anvil_shard *s, int64_t i) {
    return L->s3 ? anvil_shard_open_s3(s, L->s3, L->paths[i], L->s3_sizes[i], L->s3_range, L->s3_inflight)
                 : anvil_shard_open(s, L->paths[i]);
}

static int glob_match(void *pattern, const char *key) { return fnmatch(pattern, key, FNM_PATHNAME) == 0; }

/* The objects matching an s3://bucket/pattern glob, with their sizes: one listing of the prefix
 * before the first wildcard, matched as glob(3) would match paths. S3 lists keys in byte order,
 * the order of the loader's shards. */
static int expand_s3(anvil_loader *L, const char *pattern) {
    char *bucket, *key;
    if (anvil_s3_parse_uri(pattern, &bucket, &key)) return -1;
    size_t plen = strcspn(key, "*?[\\");
    char *prefix = strndup(key, plen);
    anvil_s3_list_page pg = {0};
    int rc = prefix ? anvil_s3_list_collect(L->s3, bucket, prefix, glob_match, key, &pg) : anvil_fail("out of memory");
    if (!rc && !pg.n) rc = anvil_fail("loader: no objects match '%s'", pattern);
    if (!rc && (!(L->paths = calloc(pg.n, sizeof *L->paths)) || !(L->s3_sizes = malloc(pg.n * sizeof *L->s3_sizes))))
        rc = anvil_fail("loader %s: out of memory", pattern);
    for (size_t i = 0; !rc && i < pg.n; i++, L->nshards++) {
        size_t len = strlen(bucket) + strlen(pg.objects[i].key) + 7;
        if (!(L->paths[i] = malloc(len))) rc = anvil_fail("loader %s: out of memory", pattern);
        else snprintf(L->paths[i], len, "s3://%s/%s", bucket, pg.objects[i].key);
        L->s3_sizes[i] = pg.objects[i].size;
    }
    anvil_s3_list_page_free(&pg);
    free(prefix);
    free(bucket);
    free(key);
    return rc;
}

static void stop_thread(anvil_loader *L) {
    if (!L->have_thread) return;
    pthread_mutex_lock(&L->mu);
    L->quit = 1;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
    pthread_join(L->thread, NULL);
    L->have_thread = 0;
    L->quit = 0;
    L->have_job = 0;
}

void anvil_loader_close(anvil_loader *L) {
    if (!L) return;
    stop_thread(L);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->cv);
    if (L->cur_index >= 0) anvil_shard_close(&L->cur);
    anvil_s3_close(L->s3);
    free(L->s3_sizes);
    for (int i = 0; i < L->nshards; i++) free(L->paths[i]);
    free(L->paths);
    free(L->ntokens);
    free(L->buf);
    free(L->order);
    free(L->win);
    free(L->starts);
    free(L);
}

/* The files matching a local glob. */
static int expand_local(anvil_loader *L, const char *pattern) {
    glob_t g;
    int rc = glob(pattern, GLOB_ERR, NULL, &g);
    if (rc != 0) {
        if (rc == GLOB_NOMATCH) anvil_fail("loader: no files match '%s'", pattern);
        else anvil_fail("loader: cannot expand '%s' (unreadable folder?)", pattern);
        globfree(&g);
        return -1;
    }
    if (!(L->paths = calloc(g.gl_pathc, sizeof *L->paths))) {
        globfree(&g);
        return anvil_fail("loader %s: out of memory", pattern);
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        if (anvil_confined(g.gl_pathv[i], "shard")) {
            globfree(&g);
            return -1;
        }
        L->paths[i] = strdup(g.gl_pathv[i]);
        if (!L->paths[i]) break;
        L->nshards++;
    }
    globfree(&g);
    if ((size_t)L->nshards != g.gl_pathc) return anvil_fail("loader %s: out of memory", pattern);
    return 0;
}

/* Reads shard i's token count. A shard on S3 is not read up front, which would cost a GET of each
 * beside the ones of its data: the first is opened (and stays open, its first blocks on the way for
 * the first batch), the others' counts follow from their listed sizes at the first one's token
 * width, and each header is checked when its shard is opened for reading. */
static int validate_shard(anvil_loader *L, int i) {
    if (L->s3 && i > 0) {
        uint64_t size = L->s3_sizes[i];
        int tb = L->cur.token_bytes;
        if (size < ANVIL_SHARD_HEADER_BYTES || (size - ANVIL_SHARD_HEADER_BYTES) % (uint64_t)tb)
            return anvil_fail("shard %s: %llu bytes is not a header and whole %d-byte tokens, as in %s", L->paths[i],
                              (unsigned long long)size, tb, L->paths[0]);
        L->ntokens[i] = (int64_t)((size - ANVIL_SHARD_HEADER_BYTES) / (uint64_t)tb);
        return 0;
    }
    anvil_shard s;
    if (open_shard(L, &s, i)) return -1;
    L->ntokens[i] = s.ntokens;
    if (L->s3) {
        L->cur = s;
        L->cur_index = 0;
    } else {
        anvil_shard_close(&s);
    }
    return 0;
}

anvil_loader *anvil_loader_open(const char *pattern, int B, int T, int rank, int world, int vocab_size) {
    return anvil_loader_open_s3(pattern, B, T, rank, world, vocab_size, ANVIL_S3_READ_RANGE, ANVIL_S3_READ_INFLIGHT);
}

anvil_loader *anvil_loader_open_s3(const char *pattern, int B, int T, int rank, int world, int vocab_size, size_t range,
                                   int inflight) {
    if (range < ANVIL_S3_MIN_READ_RANGE || inflight < 1) {
        anvil_fail("loader %s: S3 reads of %zu bytes (at least %u) with %d in flight (at least 1)", pattern, range,
                   ANVIL_S3_MIN_READ_RANGE, inflight);
        return NULL;
    }
    if (B <= 0 || T <= 0 || world <= 0 || rank < 0 || rank >= world || vocab_size <= 0) {
        anvil_fail("loader %s: bad geometry B=%d T=%d rank=%d world=%d vocab_size=%d", pattern, B, T, rank, world,
                   vocab_size);
        return NULL;
    }
    anvil_loader *L = calloc(1, sizeof *L);
    if (!L) {
        anvil_fail("loader %s: out of memory", pattern);
        return NULL;
    }
    L->B = B;
    L->T = T;
    L->rank = rank;
    L->world = world;
    L->vocab_size = vocab_size;
    L->bt = (int64_t)B * T;
    L->global = L->bt * world;
    L->cur_index = -1;
    L->prefetch = 1;
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->cv, NULL);

    L->buf = malloc((size_t)(L->bt + 1) * sizeof *L->buf);
    if (!L->buf) {
        anvil_fail("loader %s: out of memory", pattern);
        anvil_loader_close(L);
        return NULL;
    }
    if (anvil_s3_is_uri(pattern)) {
        stagger(rank, 2); /* the listing and shard 0's header block */
        L->s3_range = range;
        L->s3_inflight = inflight;
        if (!(L->s3 = anvil_s3_open()) || expand_s3(L, pattern)) {
            anvil_loader_close(L);
            return NULL;
        }
    } else if (expand_local(L, pattern)) {
        anvil_loader_close(L);
        return NULL;
    }
    if (!(L->ntokens = calloc((size_t)L->nshards, sizeof *L->ntokens))) {
        anvil_fail("loader %s: out of memory", pattern);
        anvil_loader_close(L);
        return NULL;
    }
    /* glob sorts by the locale's collation; the shard order must not depend on it. */
    if (!L->s3) qsort(L->paths, (size_t)L->nshards, sizeof *L->paths, cmp_str);

    for (int i = 0; i < L->nshards; i++) {
        if (validate_shard(L, i)) {
            anvil_loader_close(L);
            return NULL;
        }
        if (L->ntokens[i] < L->global + 1) {
            anvil_fail("shard %s: %lld tokens, too few for one batch of world*B*T+1 = %d*%d*%d+1 = %lld tokens",
                       L->paths[i], (long long)L->ntokens[i], world, B, T, (long long)(L->global + 1));
            anvil_loader_close(L);
            return NULL;
        }
    }
    return L;
}

static int open_file(anvil_loader *L, int64_t file) {
    if (L->cur_index == file) return 0;
    if (L->cur_index >= 0) anvil_shard_close(&L->cur);
    L->cur_index = -1;
    if (open_shard(L, &L->cur, file)) return -1;
    L->cur_index = file;
    if (L->cur.ntokens != L->ntokens[file])
        return anvil_fail("shard %s: now %lld tokens, %lld when the loader opened it", L->cur.path,
                          (long long)L->cur.ntokens, (long long)L->ntokens[file]);
    return 0;
}

/* B*T+1 tokens of the epoch's stream from token s on, across shard ends. */
static int read_stream(anvil_loader *L, int64_t s) {
    int32_t *out = L->buf;
    int64_t need = L->bt + 1;
    int64_t f = 0;
    while (need) {
        while (L->starts[f + 1] <= s) f++;
        int64_t n = L->starts[f + 1] - s < need ? L->starts[f + 1] - s : need;
        if (open_file(L, f) || anvil_shard_read(&L->cur, s - L->starts[f], n, out, L->vocab_size)) return -1;
        out += n;
        s += n;
        need -= n;
    }
    return 0;
}

static int read_window(anvil_loader *L, int64_t file, int64_t offset) {
    /* The ranks' first reads come when training starts, together: stagger them as the opens were. */
    if (L->s3 && !L->started) {
        stagger(L->rank, 2 + ANVIL_S3_READ_AHEAD); /* a header block, the batch's block, those read ahead */
        L->started = 1;
    }
    if (file < 0) return read_stream(L, offset);
    if (open_file(L, file)) return -1;
    return anvil_shard_read(&L->cur, offset, L->bt + 1, L->buf, L->vocab_size);
}

/* splitmix64: a stateless mix, so each permutation depends on its inputs alone. */
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* A Fisher-Yates permutation of 0..n-1 drawn from key alone. The multiply-shift
 * draw has a bias below n/2^64, irrelevant for data order. */
static void permute(int64_t *p, int64_t n, uint64_t key) {
    for (int64_t i = 0; i < n; i++) p[i] = i;
    uint64_t r = key;
    for (int64_t i = n - 1; i > 0; i--) {
        r = mix(r);
        int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
        int64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

/* The file at slot `slot` of epoch `epoch`'s shard order. */
static int64_t file_at(anvil_loader *L, int64_t epoch, int64_t slot) {
    if (!L->shuffle) return slot;
    if (L->order_epoch != epoch) {
        permute(L->order, L->nshards, mix(L->seed ^ mix((uint64_t)epoch * 2)));
        L->order_epoch = epoch;
    }
    return L->order[slot];
}

/* The window (in units of world*B*T tokens) at window slot k of file in epoch. */
static int64_t window_at(anvil_loader *L, int64_t epoch, int64_t file, int64_t k) {
    if (!L->shuffle) return k;
    if (L->win_epoch != epoch || L->win_file != file) {
        int64_t n = (L->ntokens[file] - 1) / L->global;
        permute(L->win, n, mix(L->seed ^ mix((uint64_t)epoch * 2 + 1) ^ mix((uint64_t)file + 0x5bd1e995)));
        L->win_epoch = epoch;
        L->win_file = file;
    }
    return L->win[k];
}

/* The state of the batch that next will return: st itself, or the start of
 * the following shard when st's batch would run past the end of its own. */
static anvil_loader_state normalize(anvil_loader *L, anvil_loader_state st) {
    if (L->layout == ANVIL_LOADER_CONTIGUOUS) {
        if ((st.position / L->global + 1) * L->bt > L->stretch) {
            st.position = 0;
            st.epoch++;
        }
        return st;
    }
    if (st.position + L->global + 1 > L->ntokens[file_at(L, st.epoch, st.shard)]) {
        st.position = 0;
        if (++st.shard == L->nshards) {
            st.shard = 0;
            st.epoch++;
        }
    }
    return st;
}

/* The file and token offset of this process's window for a normalized state. */
static void locate(anvil_loader *L, anvil_loader_state st, int64_t *file, int64_t *offset) {
    if (L->layout == ANVIL_LOADER_CONTIGUOUS) {
        *file = -1;
        *offset = (L->rank + st.epoch) % L->world * L->stretch + st.position / L->global * L->bt;
        return;
    }
    *file = file_at(L, st.epoch, st.shard);
    *offset = window_at(L, st.epoch, *file, st.position / L->global) * L->global + L->rank * L->bt;
}

static void *worker(void *arg) {
    anvil_loader *L = arg;
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->quit && !(L->have_job && L->job.queued)) pthread_cond_wait(&L->cv, &L->mu);
        if (L->quit) break;
        int64_t file = L->job.file, offset = L->job.offset;
        L->job.queued = 0;
        pthread_mutex_unlock(&L->mu);
        int rc = read_window(L, file, offset);
        pthread_mutex_lock(&L->mu);
        L->job.rc = rc;
        /* The message lives in this thread's error slot; the caller re-raises it in its own. */
        if (rc) snprintf(L->job.err, sizeof L->job.err, "%s", anvil_errmsg());
        L->job.done = 1;
        pthread_cond_broadcast(&L->cv);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

/* Waits for the job in flight, if any, so that buf and cur are the caller's. Called with mu held. */
static void wait_job(anvil_loader *L) {
    while (L->have_job && !L->job.done) pthread_cond_wait(&L->cv, &L->mu);
}

/* Queues the read of st's window (st normalized). Called with mu held and no job in flight. */
static void queue_job(anvil_loader *L, anvil_loader_state st) {
    L->job.st = st;
    locate(L, st, &L->job.file, &L->job.offset);
    L->job.queued = 1;
    L->job.done = 0;
    L->job.rc = 0;
    L->have_job = 1;
    pthread_cond_broadcast(&L->cv);
}

static int same_state(anvil_loader_state a, anvil_loader_state b) {
    return a.shard == b.shard && a.position == b.position && a.epoch == b.epoch;
}

/* Reads the window of normalized state `want` into buf through the thread,
 * then queues the read of the batch after it. */
static int next_prefetched(anvil_loader *L, anvil_loader_state want) {
    if (!L->have_thread) {
        if (pthread_create(&L->thread, NULL, worker, L) != 0)
            return anvil_fail("loader %s: cannot start the prefetch thread", L->paths[0]);
        L->have_thread = 1;
    }
    int64_t file, offset;
    locate(L, want, &file, &offset);
    pthread_mutex_lock(&L->mu);
    wait_job(L);
    if (!L->have_job || !same_state(L->job.st, want) || L->job.file != file || L->job.offset != offset) {
        /* set_state, reset or set_shuffle moved the loader since the last prefetch. */
        queue_job(L, want);
        wait_job(L);
    }
    int rc = L->job.rc;
    L->have_job = 0;
    pthread_mutex_unlock(&L->mu);
    if (rc) return anvil_fail("%s", L->job.err);
    return 0;
}

static void prefetch_after(anvil_loader *L) {
    pthread_mutex_lock(&L->mu);
    queue_job(L, normalize(L, L->st));
    pthread_mutex_unlock(&L->mu);
}

int anvil_loader_next(anvil_loader *L, int32_t *inputs, int32_t *targets) {
    /* The state only moves once the batch has been read, so a failed read can
     * be retried or checkpointed without skipping data. */
    anvil_loader_state want = normalize(L, L->st);
    int rc;
    if (L->prefetch) {
        rc = next_prefetched(L, want);
    } else {
        int64_t file, offset;
        locate(L, want, &file, &offset);
        rc = read_window(L, file, offset);
    }
    if (rc) return -1;
    memcpy(inputs, L->buf, (size_t)L->bt * sizeof *inputs);
    memcpy(targets, L->buf + 1, (size_t)L->bt * sizeof *targets);
    L->st = want;
    L->st.position += L->global;
    if (L->prefetch) prefetch_after(L);
    return 0;
}

void anvil_loader_set_prefetch(anvil_loader *L, int on) {
    if (!on) stop_thread(L);
    L->prefetch = on != 0;
}

int anvil_loader_set_shuffle(anvil_loader *L, uint64_t seed) {
    if (L->layout != ANVIL_LOADER_STRIDED)
        return anvil_fail("loader %s: shuffling needs the strided layout, not contiguous", L->paths[0]);
    if (!L->order) {
        int64_t maxwin = 0;
        for (int i = 0; i < L->nshards; i++)
            if ((L->ntokens[i] - 1) / L->global > maxwin) maxwin = (L->ntokens[i] - 1) / L->global;
        L->order = malloc((size_t)L->nshards * sizeof *L->order);
        L->win = malloc((size_t)maxwin * sizeof *L->win);
        if (!L->order || !L->win) {
            free(L->order);
            free(L->win);
            L->order = L->win = NULL;
            return anvil_fail("loader %s: out of memory for the shuffled order", L->paths[0]);
        }
    }
    L->shuffle = 1;
    L->seed = seed;
    L->order_epoch = L->win_epoch = L->win_file = -1;
    return 0;
}

const char *anvil_loader_layout_name(int layout) {
    return layout == ANVIL_LOADER_CONTIGUOUS ? "contiguous" : "strided";
}

int anvil_loader_set_layout(anvil_loader *L, int layout) {
    if (layout != ANVIL_LOADER_STRIDED && layout != ANVIL_LOADER_CONTIGUOUS)
        return anvil_fail("loader %s: unknown layout %d", L->paths[0], layout);
    if (layout == ANVIL_LOADER_CONTIGUOUS) {
        if (L->shuffle) return anvil_fail("loader %s: shuffling needs the strided layout, not contiguous", L->paths[0]);
        if (!L->starts && !(L->starts = malloc((size_t)(L->nshards + 1) * sizeof *L->starts)))
            return anvil_fail("loader %s: out of memory", L->paths[0]);
        L->starts[0] = 0;
        for (int i = 0; i < L->nshards; i++) L->starts[i + 1] = L->starts[i] + L->ntokens[i];
        L->stretch = (L->starts[L->nshards] - 1) / L->world;
    }
    L->layout = layout;
    return 0;
}

void anvil_loader_reset(anvil_loader *L) { L->st = (anvil_loader_state){0}; }

/* L->st keeps the position only; the order is L's own. */
anvil_loader_state anvil_loader_get_state(const anvil_loader *L) {
    anvil_loader_state st = L->st;
    st.shuffled = L->shuffle;
    st.shuffle_seed = L->shuffle ? L->seed : 0;
    st.layout = L->layout;
    return st;
}

static void describe_order(char *buf, size_t cap, int shuffled, uint64_t seed) {
    if (shuffled)
        snprintf(buf, cap, "shuffled with seed %llu", (unsigned long long)seed);
    else
        snprintf(buf, cap, "in order (not shuffled)");
}

int anvil_loader_set_state(anvil_loader *L, anvil_loader_state st) {
    if ((st.shuffled != 0) != (L->shuffle != 0) || (L->shuffle && st.shuffle_seed != L->seed)) {
        char saved[64], mine[64];
        describe_order(saved, sizeof saved, st.shuffled != 0, st.shuffle_seed);
        describe_order(mine, sizeof mine, L->shuffle, L->seed);
        return anvil_fail("loader %s: the state's batches are %s, this loader's are %s", L->paths[0], saved, mine);
    }
    if (st.layout != L->layout)
        return anvil_fail("loader %s: the state's batches are laid out %s, this loader's %s", L->paths[0],
                          anvil_loader_layout_name((int)st.layout), anvil_loader_layout_name(L->layout));
    if (L->layout == ANVIL_LOADER_CONTIGUOUS) {
        if (st.shard != 0 || st.position < 0 || st.position % L->global || st.epoch < 0 ||
            st.position / L->global > L->stretch / L->bt)
            return anvil_fail("loader: contiguous state shard=%lld position=%lld epoch=%lld does not fit %lld steps of "
                              "world*B*T = %lld tokens",
                              (long long)st.shard, (long long)st.position, (long long)st.epoch,
                              (long long)(L->stretch / L->bt), (long long)L->global);
    } else {
        if (st.shard < 0 || st.shard >= L->nshards || st.position < 0 || st.epoch < 0)
            return anvil_fail("loader: state shard=%lld position=%lld epoch=%lld does not fit its %d shards",
                              (long long)st.shard, (long long)st.position, (long long)st.epoch, L->nshards);
        int64_t file = file_at(L, st.epoch, st.shard);
        if (st.position > L->ntokens[file])
            return anvil_fail("loader: state position %lld is past the end of shard %s (%lld tokens)",
                              (long long)st.position, L->paths[file], (long long)L->ntokens[file]);
    }
    /* Shuffled, a position counts whole windows; another one would read a window twice. */
    if (L->shuffle && st.position % L->global != 0)
        return anvil_fail("loader: state position %lld is not a multiple of world*B*T = %lld, as a shuffled order needs",
                          (long long)st.position, (long long)L->global);
    L->st = st;
    L->st.shuffled = 0;
    L->st.shuffle_seed = 0;
    return 0;
}

int anvil_loader_num_shards(const anvil_loader *L) { return L->nshards; }

const char *anvil_loader_shard_path(const anvil_loader *L, int i) {
    return i >= 0 && i < L->nshards ? L->paths[i] : NULL;
}

int64_t anvil_loader_total_tokens(const anvil_loader *L) {
    int64_t n = 0;
    for (int i = 0; i < L->nshards; i++) n += L->ntokens[i];
    return n;
}

int anvil_loader_s3_stats(anvil_loader *L, anvil_s3_stats *st) {
    if (!L->s3) return 0;
    anvil_s3_get_stats(L->s3, st);
    return 1;
}

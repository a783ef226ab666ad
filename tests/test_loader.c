/* The loader's prefetch thread and shuffled order: the same batches and
 * states with the thread as without, errors reported by the call that would
 * have read the bad batch, and a shuffled epoch that is a reproducible
 * permutation of the unshuffled one, different in every epoch, whose state
 * is refused by a loader with another order; the contiguous layout against
 * the token stream computed by hand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "data/loader.h"
#include "data/shard.h"
#include "testutil.h"

enum { B = 2, T = 4, BT = 8, NSHARD = 3 };
/* Token k of shard i is i*1000 + k, so a window shows where it came from. */
static const int sizes[NSHARD] = {50, 37, 64};
static char dir[256], pattern[300];

static void make_shards(void) {
    snprintf(dir, sizeof dir, "/tmp/anvil_test_loader_%d", (int)getpid());
    mkdir(dir, 0700);
    snprintf(pattern, sizeof pattern, "%s/part_*.bin", dir);
    int32_t tok[64];
    for (int i = 0; i < NSHARD; i++) {
        for (int k = 0; k < sizes[i]; k++) tok[k] = i * 1000 + k;
        char path[320];
        snprintf(path, sizeof path, "%s/part_%03d.bin", dir, i);
        CHECK(anvil_shard_write(path, tok, sizes[i], ANVIL_SHARD_V16) == 0);
    }
}

static void remove_shards(void) {
    for (int i = 0; i < NSHARD; i++) {
        char path[320];
        snprintf(path, sizeof path, "%s/part_%03d.bin", dir, i);
        unlink(path);
    }
    rmdir(dir);
}

typedef struct {
    int32_t in[BT], tg[BT];
    anvil_loader_state st; /* after the batch */
} batch;

static int same_state(anvil_loader_state a, anvil_loader_state b) {
    return a.shard == b.shard && a.position == b.position && a.epoch == b.epoch;
}

/* n batches from a fresh loader, with a set_state to the current state every
 * `restate` steps (0: never) to move the loader under a prefetch in flight. */
static void run_seed(batch *out, int n, int rank, int world, int prefetch, int restate, int64_t seed) {
    anvil_loader *L = anvil_loader_open(pattern, B, T, rank, world, 3000);
    CHECK(L != NULL);
    if (!L) return;
    anvil_loader_set_prefetch(L, prefetch);
    if (seed >= 0) CHECK(anvil_loader_set_shuffle(L, (uint64_t)seed) == 0);
    for (int i = 0; i < n; i++) {
        if (restate && i % restate == 0) CHECK(anvil_loader_set_state(L, anvil_loader_get_state(L)) == 0);
        CHECK(anvil_loader_next(L, out[i].in, out[i].tg) == 0);
        out[i].st = anvil_loader_get_state(L);
    }
    anvil_loader_close(L);
}

static void run(batch *out, int n, int rank, int world, int prefetch, int restate) {
    run_seed(out, n, rank, world, prefetch, restate, -1);
}

static void test_prefetch_same_batches(void) {
    enum { N = 200 };
    batch *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b);
    for (int world = 1; world <= 2; world++)
        for (int rank = 0; rank < world; rank++)
            for (int restate = 0; restate <= 7; restate += 7) {
                run(a, N, rank, world, 0, restate);
                run(b, N, rank, world, 1, restate);
                for (int i = 0; i < N; i++)
                    if (memcmp(a[i].in, b[i].in, sizeof a[i].in) || memcmp(a[i].tg, b[i].tg, sizeof a[i].tg) ||
                        !same_state(a[i].st, b[i].st)) {
                        t_fail(__FILE__, __LINE__, "world %d rank %d restate %d: step %d differs with prefetch", world,
                               rank, restate, i);
                        break;
                    }
                /* 200 batches of 17 (world 1) or 8 (world 2) per epoch cross many shard ends and wraps. */
                CHECK(a[N - 1].st.epoch >= 10);
            }
    free(a);
    free(b);
}

/* The state after k batches restores the same continuation, with and without
 * the thread, however it was produced. */
static void test_prefetch_state_restore(void) {
    enum { N = 40, K = 23 };
    batch ref[N], got[N];
    run(ref, N, 0, 1, 0, 0);
    for (int prefetch = 0; prefetch <= 1; prefetch++) {
        anvil_loader *L = anvil_loader_open(pattern, B, T, 0, 1, 3000);
        CHECK(L != NULL);
        if (!L) return;
        anvil_loader_set_prefetch(L, prefetch);
        /* Read past K so a prefetch for a later batch is in flight, then move back. */
        for (int i = 0; i < K + 3; i++) CHECK(anvil_loader_next(L, got[0].in, got[0].tg) == 0);
        CHECK(anvil_loader_set_state(L, ref[K - 1].st) == 0);
        CHECK(same_state(anvil_loader_get_state(L), ref[K - 1].st));
        for (int i = K; i < N; i++) {
            CHECK(anvil_loader_next(L, got[i].in, got[i].tg) == 0);
            CHECK(memcmp(got[i].in, ref[i].in, sizeof got[i].in) == 0);
            CHECK(same_state(anvil_loader_get_state(L), ref[i].st));
        }
        anvil_loader_reset(L);
        CHECK(anvil_loader_next(L, got[0].in, got[0].tg) == 0 && memcmp(got[0].in, ref[0].in, sizeof ref[0].in) == 0);
        anvil_loader_close(L);
    }
}

/* A bad id in the second shard: the batch that holds it fails with the same
 * message either way, leaves the state alone, and fails again on a retry. */
static void test_prefetch_errors(void) {
    char path[320];
    snprintf(path, sizeof path, "%s/part_001.bin", dir);
    int32_t tok[37];
    for (int k = 0; k < 37; k++) tok[k] = 1000 + k;
    tok[10] = 4000; /* >= vocab_size 3000, in shard 1's second window */
    CHECK(anvil_shard_write(path, tok, 37, ANVIL_SHARD_V16) == 0);
    char msg[2][512];
    for (int prefetch = 0; prefetch <= 1; prefetch++) {
        anvil_loader *L = anvil_loader_open(pattern, B, T, 0, 1, 3000);
        CHECK(L != NULL);
        if (!L) return;
        anvil_loader_set_prefetch(L, prefetch);
        int32_t in[BT], tg[BT];
        for (int i = 0; i < 7; i++) CHECK(anvil_loader_next(L, in, tg) == 0);
        anvil_loader_state before = anvil_loader_get_state(L);
        CHECK(anvil_loader_next(L, in, tg) == -1);
        snprintf(msg[prefetch], sizeof msg[prefetch], "%s", anvil_errmsg());
        CHECK(strstr(msg[prefetch], "part_001.bin") && strstr(msg[prefetch], "token offset 10"));
        CHECK(same_state(anvil_loader_get_state(L), before));
        CHECK(anvil_loader_next(L, in, tg) == -1);
        CHECK(strcmp(anvil_errmsg(), msg[prefetch]) == 0);
        /* Skipping the bad shard goes on normally. */
        CHECK(anvil_loader_set_state(L, (anvil_loader_state){.shard = 2}) == 0);
        CHECK(anvil_loader_next(L, in, tg) == 0 && in[0] == 2000);
        anvil_loader_close(L);
    }
    CHECK(strcmp(msg[0], msg[1]) == 0);
    for (int k = 0; k < 37; k++) tok[k] = 1000 + k;
    CHECK(anvil_shard_write(path, tok, 37, ANVIL_SHARD_V16) == 0);
}

/* Closing with a prefetch in flight, or before any read, must not hang or leak. */
static void test_close(void) {
    anvil_loader *L = anvil_loader_open(pattern, B, T, 0, 1, 3000);
    CHECK(L != NULL);
    anvil_loader_close(L);
    L = anvil_loader_open(pattern, B, T, 0, 1, 3000);
    CHECK(L != NULL);
    int32_t in[BT], tg[BT];
    CHECK(anvil_loader_next(L, in, tg) == 0);
    anvil_loader_set_prefetch(L, 0);
    CHECK(anvil_loader_next(L, in, tg) == 0 && in[0] == 8);
    anvil_loader_set_prefetch(L, 1);
    CHECK(anvil_loader_next(L, in, tg) == 0 && in[0] == 16);
    anvil_loader_close(L);
}

/* Each epoch visits every window of every shard exactly once, for every rank,
 * and the order is a real shuffle, the same with or without the thread. */
static void test_shuffle_epoch(void) {
    enum { N = 200 };
    batch *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b);
    for (int world = 1; world <= 2; world++) {
        int64_t global = (int64_t)world * BT, per_epoch = 0;
        for (int i = 0; i < NSHARD; i++) per_epoch += (sizes[i] - 1) / global;
        for (int rank = 0; rank < world; rank++) {
            run_seed(a, N, rank, world, 0, 0, 42);
            run_seed(b, N, rank, world, 1, 5, 42);
            CHECK(memcmp(a, b, N * sizeof *a) == 0);
            int shuffled = 0;
            for (int e = 0; e * per_epoch + per_epoch <= N; e++) {
                int seen[NSHARD][8] = {{0}};
                for (int64_t i = e * per_epoch; i < (e + 1) * per_epoch; i++) {
                    int shard = a[i].in[0] / 1000, off = a[i].in[0] % 1000 - rank * BT;
                    int ok = off % global == 0 && off / global < (sizes[shard] - 1) / global;
                    for (int j = 0; ok && j < BT; j++)
                        ok = a[i].in[j] == a[i].in[0] + j && a[i].tg[j] == a[i].in[0] + j + 1;
                    if (!ok) {
                        t_fail(__FILE__, __LINE__, "world %d rank %d step %lld: bad window at %d", world, rank,
                               (long long)i, a[i].in[0]);
                        continue;
                    }
                    seen[shard][off / global]++;
                    if (i > e * per_epoch && a[i].in[0] != a[i - 1].in[0] + global) shuffled = 1;
                    CHECK(a[i].st.epoch == e || (a[i].st.epoch == e + 1 && i == (e + 1) * per_epoch - 1));
                }
                for (int s = 0; s < NSHARD; s++)
                    for (int w = 0; w < (sizes[s] - 1) / global; w++)
                        if (seen[s][w] != 1)
                            t_fail(__FILE__, __LINE__, "world %d rank %d epoch %d: shard %d window %d read %d times",
                                   world, rank, e, s, w, seen[s][w]);
            }
            CHECK(shuffled);
        }
    }
    free(a);
    free(b);
}

/* The order is a function of (seed, epoch): the same seed repeats it, another
 * seed changes it, and a state saved mid-epoch restores the continuation. */
static void test_shuffle_restore(void) {
    enum { N = 60 };
    batch ref[N], other[N], got;
    run_seed(ref, N, 0, 1, 1, 0, 7);
    run_seed(other, N, 0, 1, 0, 0, 7);
    CHECK(memcmp(ref, other, sizeof ref) == 0);
    run_seed(other, N, 0, 1, 0, 0, 8);
    CHECK(memcmp(ref, other, sizeof ref) != 0);
    static const int ks[] = {1, 9, 16, 17, 30, 45};
    for (int prefetch = 0; prefetch <= 1; prefetch++)
        for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
            int k = ks[t];
            anvil_loader *L = anvil_loader_open(pattern, B, T, 0, 1, 3000);
            CHECK(L != NULL);
            if (!L) return;
            anvil_loader_set_prefetch(L, prefetch);
            CHECK(anvil_loader_set_shuffle(L, 7) == 0);
            CHECK(anvil_loader_set_state(L, ref[k - 1].st) == 0);
            for (int i = k; i < N; i++) {
                CHECK(anvil_loader_next(L, got.in, got.tg) == 0);
                if (memcmp(got.in, ref[i].in, sizeof got.in) != 0 ||
                    !same_state(anvil_loader_get_state(L), ref[i].st)) {
                    t_fail(__FILE__, __LINE__, "shuffled restore at %d, prefetch %d: step %d differs", k, prefetch, i);
                    break;
                }
            }
            /* A position inside a window would read part of it twice. */
            anvil_loader_state bad = ref[k - 1].st;
            bad.position += 1;
            CHECK(anvil_loader_set_state(L, bad) == -1 && strstr(anvil_errmsg(), "multiple"));
            anvil_loader_close(L);
        }
}

/* Epochs wrap into a new order each time: ten epochs of one seed are ten different orders, the
 * same ten again for the same seed; the state names its order, and a loader with another order
 * (in order, or another seed) refuses it rather than read other batches. */
static void test_shuffle_epochs_differ(void) {
    enum { PER_EPOCH = 6 + 4 + 7, EPOCHS = 10, N = PER_EPOCH * EPOCHS };
    batch *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b);
    run_seed(a, N, 0, 1, 1, 0, 1234);
    run_seed(b, N, 0, 1, 0, 0, 1234);
    CHECK(memcmp(a, b, N * sizeof *a) == 0);
    for (int e = 0; e < EPOCHS; e++) {
        CHECK(a[e * PER_EPOCH].st.epoch == e);
        for (int f = 0; f < e; f++) {
            int same = 1;
            for (int i = 0; same && i < PER_EPOCH; i++) same = a[e * PER_EPOCH + i].in[0] == a[f * PER_EPOCH + i].in[0];
            if (same) t_fail(__FILE__, __LINE__, "epochs %d and %d have the same order", f, e);
        }
    }
    CHECK(a[N - 1].st.epoch == EPOCHS - 1); /* the wrap happens on the next read */
    for (int i = 0; i < N; i++)
        if (a[i].st.shuffled != 1 || a[i].st.shuffle_seed != 1234) {
            t_fail(__FILE__, __LINE__, "step %d: the state does not name its order", i);
            break;
        }

    anvil_loader_state mid = a[PER_EPOCH + 5].st;
    anvil_loader *L = anvil_loader_open(pattern, B, T, 0, 1, 3000);
    CHECK(L != NULL);
    if (!L) return;
    CHECK(anvil_loader_get_state(L).shuffled == 0 && anvil_loader_get_state(L).shuffle_seed == 0);
    CHECK(anvil_loader_set_state(L, mid) == -1);
    CHECK(strstr(anvil_errmsg(), "shuffled with seed 1234") && strstr(anvil_errmsg(), "in order (not shuffled)"));
    anvil_loader_state plain = {.shard = 1};
    CHECK(anvil_loader_set_shuffle(L, 99) == 0);
    CHECK(anvil_loader_set_state(L, plain) == -1 && strstr(anvil_errmsg(), "shuffled with seed 99"));
    CHECK(anvil_loader_set_state(L, mid) == -1 && strstr(anvil_errmsg(), "seed 1234"));
    CHECK(anvil_loader_set_shuffle(L, 1234) == 0);
    CHECK(anvil_loader_set_state(L, mid) == 0);
    int32_t in[BT], tg[BT];
    for (int i = PER_EPOCH + 6; i < N; i++) {
        CHECK(anvil_loader_next(L, in, tg) == 0);
        if (memcmp(in, a[i].in, sizeof in)) {
            t_fail(__FILE__, __LINE__, "restored shuffled loader differs at step %d", i);
            break;
        }
    }
    anvil_loader_close(L);
    free(a);
    free(b);
}

/* Token s of the stream of all shards in order. */
static int32_t stream_token(int64_t s) {
    for (int i = 0; i < NSHARD; i++) {
        if (s < sizes[i]) return (int32_t)(i * 1000 + s);
        s -= sizes[i];
    }
    return -1;
}

static anvil_loader *open_contiguous(int rank, int world, int prefetch) {
    anvil_loader *L = anvil_loader_open(pattern, B, T, rank, world, 3000);
    CHECK(L != NULL);
    if (!L) return NULL;
    anvil_loader_set_prefetch(L, prefetch);
    CHECK(anvil_loader_set_layout(L, ANVIL_LOADER_CONTIGUOUS) == 0);
    return L;
}

/* The contiguous layout against the stream computed here: rank r reads stretch (r+e) mod world of
 * S = (151-1)/world tokens in epoch e, S/(B*T) steps per epoch, across shard ends, with and without
 * the prefetch thread, for three epochs; then a state taken mid-run restores the batches after it. */
static void test_contiguous(void) {
    int64_t total = 0;
    for (int i = 0; i < NSHARD; i++) total += sizes[i];
    for (int world = 1; world <= 3; world++) {
        int64_t stretch = (total - 1) / world, steps = stretch / BT, n = 3 * steps + 1;
        for (int rank = 0; rank < world; rank++) {
            for (int prefetch = 0; prefetch <= 1; prefetch++) {
                anvil_loader *L = open_contiguous(rank, world, prefetch);
                if (!L) return;
                int bad = 0;
                anvil_loader_state mid = {0};
                int32_t in[BT], tg[BT];
                for (int64_t i = 0; i < n && !bad; i++) {
                    if (i == steps + 2) mid = anvil_loader_get_state(L);
                    CHECK(anvil_loader_next(L, in, tg) == 0);
                    int64_t e = i / steps, k = i % steps, s0 = (rank + e) % world * stretch + k * BT;
                    for (int j = 0; j < BT; j++)
                        if (in[j] != stream_token(s0 + j) || tg[j] != stream_token(s0 + j + 1)) bad = 1;
                    anvil_loader_state st = anvil_loader_get_state(L);
                    if (st.shard != 0 || st.epoch != e || st.position != (k + 1) * BT * world ||
                        st.layout != ANVIL_LOADER_CONTIGUOUS)
                        bad = 1;
                    if (bad) fprintf(stderr, "contiguous world %d rank %d: batch %lld wrong\n", world, rank, (long long)i);
                }
                CHECK(!bad);
                anvil_loader_close(L);

                /* The batch after mid is batch steps+2: epoch 1, step 2. */
                L = open_contiguous(rank, world, prefetch);
                if (!L) return;
                CHECK(anvil_loader_set_state(L, mid) == 0);
                CHECK(anvil_loader_next(L, in, tg) == 0);
                int64_t s0 = (rank + 1) % world * stretch + 2 * BT;
                CHECK(in[0] == stream_token(s0) && tg[BT - 1] == stream_token(s0 + BT));
                anvil_loader_close(L);
            }
        }
    }
    /* The layout travels with the state, and shuffling needs the strided one. */
    anvil_loader *S = anvil_loader_open(pattern, B, T, 0, 2, 3000), *C = open_contiguous(0, 2, 0);
    CHECK(S && C);
    if (!S || !C) return;
    CHECK(anvil_loader_set_state(C, anvil_loader_get_state(S)) == -1 && strstr(anvil_errmsg(), "laid out strided"));
    CHECK(anvil_loader_set_state(S, anvil_loader_get_state(C)) == -1 && strstr(anvil_errmsg(), "laid out contiguous"));
    CHECK(anvil_loader_set_shuffle(C, 7) == -1 && strstr(anvil_errmsg(), "shuffling needs the strided layout"));
    anvil_loader_state odd = anvil_loader_get_state(C);
    odd.position = 3;
    CHECK(anvil_loader_set_state(C, odd) == -1 && strstr(anvil_errmsg(), "does not fit"));
    anvil_loader_close(S);
    anvil_loader_close(C);
}

int main(void) {
    make_shards();
    test_prefetch_same_batches();
    test_prefetch_state_restore();
    test_prefetch_errors();
    test_close();
    test_shuffle_epoch();
    test_shuffle_restore();
    test_shuffle_epochs_differ();
    test_contiguous();
    remove_shards();
    return t_done("test_loader");
}

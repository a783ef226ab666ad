/* The collectives of src/dist against sums computed here. Run alone it
 * checks the world-of-one backend; CTest also runs it under mpirun with 4
 * ranks (shared memory) and 3 ranks forced onto TCP. Every value is an
 * integer small enough to be exact in float, so any order of summation must
 * give exactly the expected result. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/comm.h"
#include "testutil.h"

static int R, W;

static void test_allreduce(void) {
    size_t n = 1000003; /* odd and larger than any internal chunking of the transport */
    float *f = malloc(n * sizeof *f);
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) {
        f[i] = (float)(R + (int)(i % 1000));
        d[i] = R * 0.5 + (double)i;
    }
    CHECK(anvil_allreduce(anvil_dist_world(), f, n, ANVIL_F32, "test f32") == 0);
    CHECK(anvil_allreduce(anvil_dist_world(), d, n, ANVIL_F64, "test f64") == 0);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad += f[i] != (float)(W * (W - 1) / 2 + W * (int)(i % 1000));
        bad += d[i] != W * (W - 1) / 2 * 0.5 + (double)W * (double)i;
    }
    CHECK(bad == 0);
    int64_t v[3] = {R, (int64_t)1 << 40, -R};
    CHECK(anvil_allreduce(anvil_dist_world(), v, 3, ANVIL_I64, "test i64") == 0);
    CHECK(v[0] == W * (W - 1) / 2 && v[1] == (int64_t)W << 40 && v[2] == -(W * (W - 1) / 2));
    free(f);
    free(d);
}

/* Uneven blocks: rank r owns 1000 + 7r elements. */
static void uneven_counts(size_t *counts, size_t *offs, int n) {
    size_t off = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = 1000 + 7 * (size_t)r;
        offs[r] = off;
        off += counts[r];
    }
}

static void test_reduce_scatter_allgather(anvil_group *g) {
    int n = anvil_group_size(g), me = anvil_group_rank(g);
    size_t *counts = malloc((size_t)n * sizeof *counts), *offs = malloc((size_t)n * sizeof *offs);
    uneven_counts(counts, offs, n);
    size_t total = offs[n - 1] + counts[n - 1];
    float *send = malloc(total * sizeof *send), *recv = malloc(counts[me] * sizeof *recv);
    for (size_t j = 0; j < total; j++) send[j] = (float)(me * 100000 + (int)j);
    CHECK(anvil_reduce_scatter(g, send, recv, counts, ANVIL_F32, "test reduce-scatter") == 0);
    size_t bad = 0;
    for (size_t k = 0; k < counts[me]; k++)
        bad += recv[k] != (float)(n * (n - 1) / 2 * 100000 + n * (int)(offs[me] + k));
    CHECK(bad == 0);

    float *all = malloc(total * sizeof *all), *mine = malloc(counts[me] * sizeof *mine);
    for (size_t k = 0; k < counts[me]; k++) mine[k] = (float)(me * 10000 + (int)k);
    CHECK(anvil_allgather(g, mine, all, counts, ANVIL_F32, "test all-gather") == 0);
    bad = 0;
    for (int r = 0; r < n; r++)
        for (size_t k = 0; k < counts[r]; k++) bad += all[offs[r] + k] != (float)(r * 10000 + (int)k);
    CHECK(bad == 0);
    /* In place: this rank's block already sits in the output. */
    memset(all, 0, total * sizeof *all);
    memcpy(all + offs[me], mine, counts[me] * sizeof *all);
    CHECK(anvil_allgather(g, all + offs[me], all, counts, ANVIL_F32, "test all-gather in place") == 0);
    bad = 0;
    for (int r = 0; r < n; r++)
        for (size_t k = 0; k < counts[r]; k++) bad += all[offs[r] + k] != (float)(r * 10000 + (int)k);
    CHECK(bad == 0);
    free(send);
    free(recv);
    free(all);
    free(mine);
    free(counts);
    free(offs);
}

static void test_broadcast_split(void) {
    char msg[32] = {0};
    if (R == W - 1) snprintf(msg, sizeof msg, "from the last rank");
    CHECK(anvil_broadcast(anvil_dist_world(), msg, sizeof msg, ANVIL_U8, W - 1, "test broadcast") == 0);
    CHECK(strcmp(msg, "from the last rank") == 0);

    /* Two groups by parity, ranked in reverse order of world rank. */
    anvil_group *g = anvil_group_split(anvil_dist_world(), R % 2, -R, "parity");
    CHECK(g != NULL);
    if (!g) return;
    int members = (W - R % 2 + 1) / 2;
    CHECK(anvil_group_size(g) == members);
    int above = 0;
    for (int r = R + 2; r < W; r += 2) above++;
    CHECK(anvil_group_rank(g) == above);
    int64_t s = R;
    CHECK(anvil_allreduce(g, &s, 1, ANVIL_I64, "test group sum") == 0);
    int64_t want = 0;
    for (int r = R % 2; r < W; r += 2) want += r;
    CHECK(s == want);
    test_reduce_scatter_allgather(g);
    CHECK(strcmp(anvil_group_name(g), "parity") == 0);
    anvil_group_free(g);
}

/* Requests complete in submission order whatever order they are waited in. */
static void test_nonblocking(void) {
    enum { N = 8, LEN = 4096 };
    float *bufs = malloc(N * LEN * sizeof *bufs);
    anvil_req *reqs[N];
    for (int b = 0; b < N; b++) {
        for (int i = 0; i < LEN; i++) bufs[b * LEN + i] = (float)(b + R);
        reqs[b] = anvil_iallreduce(anvil_dist_world(), bufs + b * LEN, LEN, ANVIL_F32, "test bucket");
        CHECK(reqs[b] != NULL);
    }
    anvil_req *bar = anvil_ibarrier(anvil_dist_world(), "test barrier");
    CHECK(anvil_wait(bar) == 0);
    size_t bad = 0;
    for (int b = N - 1; b >= 0; b--) {
        CHECK(anvil_wait(reqs[b]) == 0);
        for (int i = 0; i < LEN; i++) bad += bufs[b * LEN + i] != (float)(W * b + W * (W - 1) / 2);
    }
    CHECK(bad == 0);
    free(bufs);
}

int main(void) {
    anvil_dist_config cfg = {.timeout_s = 60};
    if (anvil_dist_init(&cfg)) {
        fprintf(stderr, "%s\n", anvil_errmsg());
        return 1;
    }
    R = anvil_dist_rank();
    W = anvil_dist_world_size();
    CHECK(W >= 1 && R >= 0 && R < W);
    CHECK(anvil_dist_is_mpi() == (getenv("OMPI_COMM_WORLD_SIZE") != NULL));
    test_allreduce();
    test_reduce_scatter_allgather(anvil_dist_world());
    test_broadcast_split();
    test_nonblocking();
    CHECK(anvil_wait(NULL) == -1);
    char name[32];
    snprintf(name, sizeof name, "test_dist rank %d/%d", R, W);
    int rc = t_done(name);
    anvil_dist_finalize();
    return rc;
}

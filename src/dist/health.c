#include "dist/health.h"

#include <math.h>
#include <stdarg.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "kernels/gemm.h"

/* What a rank contributes to the all-gather, as doubles: the local checks,
 * then (median time, exact) per all-reduce size. */
enum { REC_GEMM_OK, REC_GEMM_ERR, REC_GEMM_GFLOPS, REC_MEM_OK, REC_MEM_MB_S, REC_AR_BUFFER, REC_FIXED };

/* A slowed rank does this many SGEMMs per timed one: far enough below any
 * sensible slow factor that the test hook is named whatever the noise. */
#define SLOW_GEMM_REPEAT 20

void anvil_health_defaults(anvil_health_config *c) {
    memset(c, 0, sizeof *c);
    c->mem_bytes = (size_t)256 << 20;
    c->gemm_n = 512;
    c->min_bytes = 4096;
    c->max_bytes = (size_t)64 << 20;
    c->iters = 10;
    c->slow_factor = 0.5;
    c->fault_rank = -1;
}

void anvil_health_quick(anvil_health_config *c) {
    anvil_health_defaults(c);
    c->mem_bytes = (size_t)16 << 20;
    c->gemm_n = 256;
    c->max_bytes = (size_t)1 << 20;
    c->iters = 5;
}

int anvil_health_parse_fault(const char *spec, anvil_health_config *c) {
    static const struct {
        const char *name;
        anvil_health_fault_kind kind;
    } kinds[] = {{"slow-gemm", ANVIL_HEALTH_FAULT_SLOW_GEMM},
                 {"bad-gemm", ANVIL_HEALTH_FAULT_BAD_GEMM},
                 {"bad-allreduce", ANVIL_HEALTH_FAULT_BAD_ALLREDUCE},
                 {"bad-memory", ANVIL_HEALTH_FAULT_BAD_MEMORY}};
    char *end;
    long r = strtol(spec, &end, 10);
    if (end == spec || *end != ':' || r < 0 || r > 1 << 24)
        return anvil_fail("health fault '%s': expected RANK:KIND, the rank a non-negative integer", spec);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(end + 1, kinds[i].name)) {
            c->fault_rank = (int)r;
            c->fault = kinds[i].kind;
            return 0;
        }
    return anvil_fail("health fault '%s': unknown kind '%s' (slow-gemm, bad-gemm, bad-allreduce, bad-memory)", spec,
                      end + 1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    if (n <= 0) return 0.0;
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s) return v[0];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

static int faulty(const anvil_health_config *c, anvil_health_fault_kind k) {
    return c->fault == k && c->fault_rank == anvil_dist_rank();
}

/* Worst |C - reference| / bound over a few shapes covering every transpose.
 * The bound is the standard one for a dot product of length K summed in
 * float in any order: (K + 2) u sum_k |a_ik b_kj|, u = 2^-24, so a correct
 * kernel can never exceed it and a ratio above 1 is a wrong result. */
static double gemm_error_ratio(const anvil_health_config *c, int *oom) {
    static const struct {
        int M, N, K, ta, tb;
    } shapes[] = {{64, 64, 64, 0, 0}, {128, 96, 200, 1, 0}, {77, 130, 65, 0, 1}, {160, 48, 300, 1, 1}};
    anvil_rng rng;
    anvil_rng_seed(&rng, 0x6e61);
    double worst = 0.0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s].M, N = shapes[s].N, K = shapes[s].K, ta = shapes[s].ta, tb = shapes[s].tb;
        float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N),
              *C = malloc(sizeof(float) * (size_t)M * N);
        if (!A || !B || !C) {
            free(A), free(B), free(C);
            *oom = 1;
            return INFINITY;
        }
        for (long i = 0; i < (long)M * K; i++) A[i] = 2.0f * anvil_rng_uniform(&rng) - 1.0f;
        for (long i = 0; i < (long)K * N; i++) B[i] = 2.0f * anvil_rng_uniform(&rng) - 1.0f;
        /* Stored as op(A) is M x K: A is K x M when transposed. */
        int lda = ta ? M : K, ldb = tb ? K : N;
        anvil_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
        if (faulty(c, ANVIL_HEALTH_FAULT_BAD_GEMM)) C[(size_t)M * N / 2] += 1.0f;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double ref = 0.0, mag = 0.0;
                for (int k = 0; k < K; k++) {
                    double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                    double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                    ref += a * b;
                    mag += fabs(a * b);
                }
                double bound = (K + 2) * 0x1p-24 * mag + 0x1p-126;
                double r = fabs((double)C[(size_t)i * N + j] - ref) / bound;
                if (!(r <= worst)) worst = r; /* also catches NaN */
            }
        free(A), free(B), free(C);
    }
    return worst;
}

/* Best of five n^3 multiplies: the best run is the one least disturbed by
 * whatever else shares the cores, and a slow rank is slow in all of them. */
static double gemm_gflops(const anvil_health_config *c, int *oom) {
    int n = c->gemm_n;
    size_t nn = (size_t)n * n;
    float *A = malloc(sizeof(float) * nn), *B = malloc(sizeof(float) * nn), *C = malloc(sizeof(float) * nn);
    if (!A || !B || !C) {
        free(A), free(B), free(C);
        *oom = 1;
        return 0.0;
    }
    for (size_t i = 0; i < nn; i++) {
        A[i] = (float)(i % 7) * 0.125f;
        B[i] = (float)(i % 5) * 0.25f;
    }
    int repeat = faulty(c, ANVIL_HEALTH_FAULT_SLOW_GEMM) ? SLOW_GEMM_REPEAT : 1;
    anvil_sgemm(false, false, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
    double best = INFINITY;
    for (int r = 0; r < 5; r++) {
        double t0 = anvil_now();
        for (int k = 0; k < repeat; k++) anvil_sgemm(false, false, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        double t = anvil_now() - t0;
        if (t < best) best = t;
    }
    free(A), free(B), free(C);
    return 2.0 * n * (double)nn / best / 1e9;
}

/* Allocates and touches the memory, then writes a pattern that differs in
 * every word, pass and run, and reads it back, five times. The touch is
 * left out of the rate (page faults in a virtual machine cost more, and
 * vary more, than the memory itself) and the rate is the best pass's, as
 * for the GEMM. */
static int memory_check(const anvil_health_config *c, double *mb_s) {
    size_t words = c->mem_bytes / sizeof(uint64_t);
    *mb_s = 0.0;
    if (words == 0) return 1;
    uint64_t *p = malloc(words * sizeof(uint64_t));
    if (!p) return 0;
    memset(p, 0xa5, words * sizeof(uint64_t));
    const uint64_t mul = 0x9e3779b97f4a7c15u;
    size_t bad = 0;
    double best = INFINITY;
    for (int pass = 0; pass < 5; pass++) {
        const uint64_t salt = (uint64_t)(anvil_now() * 1e9) + (uint64_t)pass;
        double t0 = anvil_now();
        for (size_t i = 0; i < words; i++) p[i] = (i + salt) * mul;
        if (faulty(c, ANVIL_HEALTH_FAULT_BAD_MEMORY)) p[words / 2] ^= 1;
        for (size_t i = 0; i < words; i++) bad += p[i] != (i + salt) * mul;
        double t = anvil_now() - t0;
        if (t < best) best = t;
    }
    free(p);
    *mb_s = 2.0 * (double)(words * sizeof(uint64_t)) / best / 1e6;
    return bad == 0;
}

/* Rank r sends r + 1 + (i % 13) at element i, so the sum over n ranks is
 * n(n+1)/2 + n (i % 13): small integers, exact in float whatever the
 * reduction order. */
static void fill(float *x, size_t n, int rank) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(rank + 1 + (int)(i % 13));
}

static int exact(const float *x, size_t n, int world) {
    const double base = world * (world + 1) / 2.0;
    for (size_t i = 0; i < n; i++)
        if ((double)x[i] != base + (double)world * (double)(i % 13)) return 0;
    return 1;
}

/* min_bytes, 4x, 16x, ... and max_bytes itself if the steps miss it. */
static int size_list(const anvil_health_config *c, size_t *out, int cap) {
    int n = 0;
    size_t s = c->min_bytes;
    for (; s <= c->max_bytes && n < cap; s *= 4) out[n++] = s;
    if (n > 0 && n < cap && out[n - 1] != c->max_bytes) out[n++] = c->max_bytes;
    return n;
}

static int add_line(char ***lines, int *n, const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    char **p = realloc(*lines, sizeof(char *) * (size_t)(*n + 1));
    if (!p) return anvil_fail("health: out of memory");
    *lines = p;
    if (!(p[*n] = strdup(line))) return anvil_fail("health: out of memory");
    (*n)++;
    return 0;
}

static int problem(anvil_health_report *rep, const char *fmt, ...) ANVIL_PRINTF(2, 3);
static int problem(anvil_health_report *rep, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = add_line(&rep->problems, &rep->nproblems, fmt, ap);
    va_end(ap);
    return rc;
}

static int slow(anvil_health_report *rep, const char *fmt, ...) ANVIL_PRINTF(2, 3);
static int slow(anvil_health_report *rep, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = add_line(&rep->slow, &rep->nslow, fmt, ap);
    va_end(ap);
    return rc;
}

/* The verdict, from gathered data only, so every rank reaches the same one. */
static int judge(const anvil_health_config *c, anvil_health_report *rep) {
    int n = rep->world;
    double *g = malloc(sizeof(double) * (size_t)n), *m = malloc(sizeof(double) * (size_t)n);
    if (!g || !m) {
        free(g), free(m);
        return anvil_fail("health: out of memory");
    }
    for (int r = 0; r < n; r++) {
        g[r] = rep->ranks[r].gemm_gflops;
        m[r] = rep->ranks[r].mem_mb_s;
    }
    rep->gemm_median_gflops = median(g, n);
    rep->mem_median_mb_s = median(m, n);
    free(g), free(m);
    double f = c->slow_factor;
    int rc = 0;
    for (int r = 0; r < n && !rc; r++) {
        const anvil_health_rank *k = &rep->ranks[r];
        if (!k->gemm_ok && k->gemm_err_ratio < 0)
            rc = problem(rep, "rank %d (%s) GEMM check could not allocate its matrices", r, k->host);
        else if (!k->gemm_ok)
            rc = problem(rep, "rank %d (%s) GEMM is wrong: error %.3g times the float rounding bound", r, k->host,
                         k->gemm_err_ratio);
        else if (f > 0 && k->gemm_gflops < f * rep->gemm_median_gflops)
            rc = slow(rep, "rank %d (%s) GEMM %.1f GFLOP/s is %.2fx the median %.1f", r, k->host, k->gemm_gflops,
                      k->gemm_gflops / rep->gemm_median_gflops, rep->gemm_median_gflops);
        if (!rc && !k->mem_ok)
            rc = problem(rep, "rank %d (%s) memory check failed: %zu MB %s", r, k->host, c->mem_bytes >> 20,
                         k->mem_mb_s > 0 ? "read back wrong" : "could not be allocated");
        else if (!rc && f > 0 && k->mem_mb_s < f * rep->mem_median_mb_s)
            rc = slow(rep, "rank %d (%s) memory %.0f MB/s is %.2fx the median %.0f", r, k->host, k->mem_mb_s,
                      k->mem_mb_s / rep->mem_median_mb_s, rep->mem_median_mb_s);
        if (!rc && !k->allreduce_ok && k->allreduce_bad_bytes)
            rc = problem(rep, "rank %d (%s) all-reduce result is wrong (first at %zu bytes per rank)", r,
                         k->host, k->allreduce_bad_bytes);
        else if (!rc && !k->allreduce_ok)
            rc = problem(rep, "rank %d (%s) could not allocate the %zu-byte all-reduce buffer", r, k->host,
                         c->max_bytes);
    }
    return rc;
}

/* One run's shared state: the world, the TP groups' group, the sizes swept, every rank's host, and the
 * per-rank records (the fixed fields, then a median time and a correctness flag per size). */
typedef struct {
    const anvil_health_config *cfg;
    anvil_health_report *rep;
    anvil_group *w, *g;
    int n, me, gs, ns;
    size_t sizes[64], *counts, reclen;
    char *hosts;
    double *mine, *all, *times;
    float *buf;
    int64_t missing; /* a rank could not get the sweep's buffer: no rank sweeps */
} health_run;

/* Every rank's host; the ranks of one host take turns at the speed checks, which share its cores. */
static int host_turns(health_run *h, int *local, int *local_max) {
    for (int r = 0; r < h->n; r++) h->counts[r] = 64;
    char myhost[64] = {0};
    snprintf(myhost, sizeof myhost, "%s", anvil_dist_host());
    if (anvil_allgather(h->w, myhost, h->hosts, h->counts, ANVIL_U8, "health: hosts")) return -1;
    *local = *local_max = 0;
    for (int r = 0; r < h->n; r++) {
        int same = 0;
        for (int q = 0; q < h->n; q++) same += !strncmp(h->hosts + 64 * (size_t)r, h->hosts + 64 * (size_t)q, 64);
        if (same > *local_max) *local_max = same;
        if (r < h->me && !strncmp(h->hosts + 64 * (size_t)r, myhost, 64)) (*local)++;
    }
    return 0;
}

/* The GEMM's correctness, then, in this rank's turn on its host, its speed and the memory check. */
static int local_checks(health_run *h) {
    const anvil_health_config *cfg = h->cfg;
    int local, local_max, oom = 0;
    if (host_turns(h, &local, &local_max)) return -1;
    double err = gemm_error_ratio(cfg, &oom);
    h->mine[REC_GEMM_OK] = !oom && err <= 1.0;
    h->mine[REC_GEMM_ERR] = err;
    for (int turn = 0; turn < local_max; turn++) {
        if (anvil_barrier(h->w, "health: speed turn")) return -1;
        if (turn != local) continue;
        h->mine[REC_GEMM_GFLOPS] = gemm_gflops(cfg, &oom);
        h->mine[REC_MEM_OK] = memory_check(cfg, &h->mine[REC_MEM_MB_S]);
    }
    if (oom) {
        h->mine[REC_GEMM_OK] = 0;
        h->mine[REC_GEMM_ERR] = -1.0; /* ratios are >= 0: this marks "not run" */
    }
    return 0;
}

/* The all-reduce sweep over the sizes, within the groups. Every rank must take part in every
 * all-reduce, so a rank that cannot get the buffer says so first and all of them skip the sweep. */
static int allreduce_sweep(health_run *h) {
    const anvil_health_config *cfg = h->cfg;
    size_t maxn = h->sizes[h->ns - 1] / sizeof(float);
    h->buf = malloc(maxn * sizeof(float));
    h->missing = h->buf == NULL;
    h->mine[REC_AR_BUFFER] = h->buf != NULL;
    if (anvil_allreduce(h->w, &h->missing, 1, ANVIL_I64, "health: buffers")) return -1;
    for (int s = 0; s < h->ns && h->missing == 0; s++) {
        size_t cnt = h->sizes[s] / sizeof(float);
        int ok = 1;
        if (anvil_barrier(h->w, "health: all-reduce sweep")) return -1;
        for (int it = -1; it < cfg->iters; it++) {
            fill(h->buf, cnt, anvil_group_rank(h->g));
            double t0 = anvil_now();
            if (anvil_allreduce(h->g, h->buf, cnt, ANVIL_F32, "health: all-reduce")) return -1;
            double t = anvil_now() - t0;
            if (faulty(cfg, ANVIL_HEALTH_FAULT_BAD_ALLREDUCE)) h->buf[cnt / 2] += 1.0f;
            ok &= exact(h->buf, cnt, h->gs);
            if (it >= 0) h->times[it] = t;
        }
        h->mine[REC_FIXED + 2 * s] = median(h->times, cfg->iters);
        h->mine[REC_FIXED + 2 * s + 1] = ok;
    }
    return 0;
}

/* Every rank's records gathered into the report: each rank's checks, each size's slowest time and
 * bandwidths, and each group's bus bandwidth at the largest size. */
static int gather_report(health_run *h) {
    anvil_health_report *rep = h->rep;
    int n = h->n, ns = h->ns, gs = h->gs;
    size_t reclen = h->reclen;
    for (int r = 0; r < n; r++) h->counts[r] = reclen;
    if (anvil_allgather(h->w, h->mine, h->all, h->counts, ANVIL_F64, "health: results")) return -1;
    for (int r = 0; r < n; r++) {
        const double *a = h->all + reclen * (size_t)r;
        anvil_health_rank *k = &rep->ranks[r];
        memcpy(k->host, h->hosts + 64 * (size_t)r, 63);
        k->gemm_ok = a[REC_GEMM_OK] != 0.0;
        k->gemm_err_ratio = a[REC_GEMM_ERR];
        k->gemm_gflops = a[REC_GEMM_GFLOPS];
        k->mem_ok = a[REC_MEM_OK] != 0.0;
        k->mem_mb_s = a[REC_MEM_MB_S];
        k->allreduce_ok = a[REC_AR_BUFFER] != 0.0;
        for (int s = ns - 1; s >= 0 && h->missing == 0; s--)
            if (a[REC_FIXED + 2 * s + 1] == 0.0) {
                k->allreduce_ok = 0;
                k->allreduce_bad_bytes = h->sizes[s];
            }
    }
    for (int s = 0; s < ns; s++) {
        anvil_health_size *z = &rep->sizes[s];
        z->bytes = h->sizes[s];
        z->ok = h->missing == 0;
        for (int r = 0; r < n; r++) {
            const double *a = h->all + reclen * (size_t)r;
            if (a[REC_FIXED + 2 * s] > z->time_s) z->time_s = a[REC_FIXED + 2 * s];
            if (a[REC_FIXED + 2 * s + 1] == 0.0) z->ok = 0;
        }
        if (z->time_s > 0) {
            z->algbw_gb_s = (double)z->bytes / z->time_s / 1e9;
            z->busbw_gb_s = z->algbw_gb_s * 2.0 * (gs - 1) / gs;
        }
    }
    /* Each group at the largest size: its slowest rank's median. */
    for (int q = 0; q < rep->ngroups && h->missing == 0; q++) {
        double t = 0.0;
        for (int r = q * gs; r < (q + 1) * gs; r++) {
            double tr = h->all[reclen * (size_t)r + REC_FIXED + 2 * (size_t)(ns - 1)];
            t = tr > t ? tr : t;
        }
        rep->group_busbw_gb_s[q] = t > 0 ? (double)h->sizes[ns - 1] / t / 1e9 * 2.0 * (gs - 1) / gs : 0.0;
    }
    if (h->missing) rep->nsizes = 0;
    return 0;
}

/* The buffers, and the TP groups' group when the ranks form groups. */
static int run_setup(health_run *h) {
    anvil_health_report *rep = h->rep;
    int n = h->n;
    h->ns = size_list(h->cfg, h->sizes, 64);
    h->g = h->w;
    h->counts = malloc(sizeof(size_t) * (size_t)n);
    h->hosts = calloc((size_t)n, 64);
    h->reclen = REC_FIXED + 2 * (size_t)h->ns;
    h->mine = calloc(h->reclen, sizeof(double));
    h->all = calloc(h->reclen * (size_t)n, sizeof(double));
    h->times = calloc((size_t)h->cfg->iters, sizeof(double));
    rep->ranks = calloc((size_t)n, sizeof *rep->ranks);
    rep->sizes = calloc((size_t)h->ns, sizeof *rep->sizes);
    if (!h->counts || !h->hosts || !h->mine || !h->all || !h->times || !rep->ranks || !rep->sizes)
        return anvil_fail("health: out of memory");
    rep->nsizes = h->ns;
    if (h->gs == n) return 0;
    char name[32];
    snprintf(name, sizeof name, "tp group %d", h->me / h->gs);
    if (!(h->g = anvil_group_split(h->w, h->me / h->gs, h->me % h->gs, name))) {
        h->g = h->w;
        return -1;
    }
    rep->group_size = h->gs;
    rep->ngroups = n / h->gs;
    if (!(rep->group_busbw_gb_s = calloc((size_t)rep->ngroups, sizeof(double))))
        return anvil_fail("health: out of memory");
    return 0;
}

int anvil_health_run(const anvil_health_config *cfg, anvil_health_report *rep) {
    memset(rep, 0, sizeof *rep);
    double t_start = anvil_now();
    health_run h = {.cfg = cfg, .rep = rep, .w = anvil_dist_world()};
    h.n = anvil_dist_world_size();
    h.me = anvil_dist_rank();
    rep->world = h.n;
    rep->gemm_threads = omp_get_max_threads();
    rep->gemm_impl = anvil_sgemm_impl();
    if (cfg->min_bytes < sizeof(float) || cfg->max_bytes < cfg->min_bytes || cfg->iters < 1 || cfg->gemm_n < 1)
        return anvil_fail("health: bad configuration (sizes %zu..%zu bytes, %d iterations, GEMM %d)", cfg->min_bytes,
                          cfg->max_bytes, cfg->iters, cfg->gemm_n);
    h.gs = cfg->group_size > 1 ? cfg->group_size : h.n;
    if (h.n % h.gs) return anvil_fail("health: --tp %d does not divide the %d ranks into groups", cfg->group_size, h.n);
    int rc = run_setup(&h) || local_checks(&h) || allreduce_sweep(&h) || gather_report(&h) ? -1 : judge(cfg, rep);
    if (!rc) rep->elapsed_s = anvil_now() - t_start;
    if (h.g != h.w) anvil_group_free(h.g);
    free(h.buf);
    free(h.counts);
    free(h.hosts);
    free(h.mine);
    free(h.all);
    free(h.times);
    if (rc) anvil_health_report_free(rep);
    return rc;
}

void anvil_health_report_free(anvil_health_report *rep) {
    for (int i = 0; i < rep->nproblems; i++) free(rep->problems[i]);
    free(rep->problems);
    for (int i = 0; i < rep->nslow; i++) free(rep->slow[i]);
    free(rep->slow);
    free(rep->ranks);
    free(rep->sizes);
    free(rep->group_busbw_gb_s);
    memset(rep, 0, sizeof *rep);
}

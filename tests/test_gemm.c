/* anvil_sgemm against a double-precision reference, for every transpose
 * combination, edge-tile sizes, padded leading dimensions, alpha and beta;
 * plus bit-identity across thread counts and concurrent serial calls. CTest
 * runs it once per kernel path (ANVIL_ISA), and with --bf16 for
 * anvil_sgemm_bf16, whose reference is the same sum over the inputs
 * rounded to bf16 (alpha * a rounded, as the kernel packs it).
 *
 * Tolerance, from the error analysis of a dot product: each C element goes
 * through at most K + 3 float roundings (alpha * a, K multiply-adds, the beta
 * term and the final add), so with u = 2^-24
 *   |got - exact| <= gamma_{K+3} * (|alpha| * sum_k |a_ik||b_kj| + |beta * c_ij|),
 *   gamma_n = n*u / (1 - n*u).
 * The reference is computed in double (its own error is ~1e-16 relative to
 * the same sum, far below this bound). */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "testutil.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

typedef struct {
    bool ta, tb;
    int M, N, K, lda, ldb, ldc;
    float alpha, beta;
    float *A, *B, *C0;
} Problem;

/* Allocates and fills a problem; padding elements hold a sentinel so reads
 * outside op(A)/op(B) would show up as wrong results. */
static Problem make(bool ta, bool tb, int M, int N, int K, int pad, float alpha, float beta) {
    Problem p = {ta, tb, M, N, K, 0, 0, 0, alpha, beta, NULL, NULL, NULL};
    int arows = ta ? K : M, acols = ta ? M : K;
    int brows = tb ? N : K, bcols = tb ? K : N;
    p.lda = acols + pad;
    p.ldb = bcols + 2 * pad;
    p.ldc = N + 3 * pad;
    size_t na = (size_t)arows * p.lda, nb = (size_t)brows * p.ldb, nc = (size_t)M * p.ldc;
    p.A = malloc(na * sizeof(float));
    p.B = malloc(nb * sizeof(float));
    p.C0 = malloc(nc * sizeof(float));
    for (size_t i = 0; i < na; i++) p.A[i] = (i % p.lda) < (size_t)acols ? frand() : 1e30f;
    for (size_t i = 0; i < nb; i++) p.B[i] = (i % p.ldb) < (size_t)bcols ? frand() : 1e30f;
    for (size_t i = 0; i < nc; i++) p.C0[i] = beta == 0.0f ? NAN : frand();
    return p;
}

static void release(Problem *p) {
    free(p->A);
    free(p->B);
    free(p->C0);
}

/* Set for the bf16 runs: the reference then multiplies bf16-rounded inputs. */
static bool bf16_inputs;

/* fp32 -> bf16 -> fp32, rounding to nearest even (finite inputs only here). */
static double bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float a_raw(const Problem *p, int i, int k) {
    return p->ta ? p->A[(size_t)k * p->lda + i] : p->A[(size_t)i * p->lda + k];
}
static float b_raw(const Problem *p, int k, int j) {
    return p->tb ? p->B[(size_t)j * p->ldb + k] : p->B[(size_t)k * p->ldb + j];
}
/* alpha * op(A)(i,k) and op(B)(k,j) as the kernel multiplies them. */
static double a_at(const Problem *p, int i, int k) {
    return bf16_inputs ? bf16_round(p->alpha * a_raw(p, i, k)) : (double)p->alpha * a_raw(p, i, k);
}
static double b_at(const Problem *p, int k, int j) {
    return bf16_inputs ? bf16_round(b_raw(p, k, j)) : (double)b_raw(p, k, j);
}

typedef void (*GemmFn)(bool, bool, int, int, int, float, const float *, int, const float *, int, float,
                       float *, int);

static float *run(const Problem *p, GemmFn fn) {
    size_t nc = (size_t)p->M * p->ldc;
    float *C = malloc(nc * sizeof(float));
    memcpy(C, p->C0, nc * sizeof(float));
    fn(p->ta, p->tb, p->M, p->N, p->K, p->alpha, p->A, p->lda, p->B, p->ldb, p->beta, C, p->ldc);
    return C;
}

/* Checks C against the reference within the bound above; the padding columns
 * of C must be untouched. Returns 1 when all is well. */
static int verify(const char *what, const Problem *p, const float *C) {
    const double u = ldexp(1.0, -24), n = p->K + 3.0, gamma = n * u / (1.0 - n * u);
    long bad = 0;
    double worst = 0.0;
    for (int i = 0; i < p->M; i++) {
        for (int j = 0; j < p->ldc; j++) {
            size_t at = (size_t)i * p->ldc + j;
            if (j >= p->N) {
                if (memcmp(&C[at], &p->C0[at], sizeof(float)) != 0) bad++;
                continue;
            }
            double s = 0.0, sabs = 0.0;
            for (int k = 0; k < p->K; k++) {
                double prod = a_at(p, i, k) * b_at(p, k, j);
                s += prod;
                sabs += fabs(prod);
            }
            double c0 = p->beta == 0.0f ? 0.0 : (double)p->beta * p->C0[at];
            double want = s + c0;
            double bound = gamma * (sabs + fabs(c0)); /* the rounding-error bound derived at the top */
            double err = fabs((double)C[at] - want);
            if (!(err <= bound)) {
                bad++;
                double rel = isnan(err) ? INFINITY : err / (bound > 0 ? bound : 1e-300);
                if (rel > worst) worst = rel;
            }
        }
    }
    if (bad) {
        t_fail(__FILE__, __LINE__,
               "%s: ta=%d tb=%d M=%d N=%d K=%d lda=%d ldb=%d ldc=%d alpha=%g beta=%g: %ld bad elements "
               "(worst %.3g x bound)",
               what, p->ta, p->tb, p->M, p->N, p->K, p->lda, p->ldb, p->ldc, p->alpha, p->beta, bad, worst);
        return 0;
    }
    return 1;
}

static const int sizes[] = {1, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 100, 257};
enum { NSIZES = sizeof(sizes) / sizeof(sizes[0]) };
static const float betas[] = {0.0f, 1.0f, 0.5f};
static const float alphas[] = {1.0f, -0.75f, 1.5f};

/* Each size appears three times in each of M, N, K, in varied company. */
static void correctness_sweep(const char *what, GemmFn fn) {
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        for (int idx = 0; idx < 3 * NSIZES; idx++) {
            int M = sizes[idx % NSIZES], N = sizes[(idx * 5 + 3) % NSIZES], K = sizes[(idx * 7 + 1) % NSIZES];
            int pad = idx % 3 == 0 ? 0 : idx % 5 + 1;
            Problem p = make(ta, tb, M, N, K, pad, alphas[idx % 3], betas[(idx / 3) % 3]);
            float *C = run(&p, fn);
            verify(what, &p, C);
            free(C);
            release(&p);
        }
    }
}

/* Shapes that cross the kernel's K, M and N cache blocks and its tile edges. */
static void blocking_sweep(const char *what, GemmFn fn) {
    static const int shapes[][3] = {{1600, 45, 70}, {37, 500, 1100}, {29, 1030, 40}, {130, 97, 1537}};
    for (int t = 0; t < 4; t++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            Problem p = make(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], (int)s, alphas[s % 3],
                             betas[(s + t) % 3]);
            float *C = run(&p, fn);
            verify(what, &p, C);
            free(C);
            release(&p);
        }
}

/* K == 0 or alpha == 0: C = beta * C, and beta == 0 clears NaNs. */
static void degenerate(void) {
    for (int kzero = 0; kzero < 2; kzero++)
        for (int b = 0; b < 3; b++) {
            Problem p = make(false, true, 5, 19, kzero ? 0 : 8, 2, kzero ? 1.0f : 0.0f, betas[b]);
            float *C = run(&p, anvil_sgemm);
            verify("degenerate", &p, C);
            free(C);
            release(&p);
        }
}

static int same_bits(const Problem *p, const float *x, const float *y) {
    return memcmp(x, y, (size_t)p->M * p->ldc * sizeof(float)) == 0;
}

/* The same bits with 1, 2 and 3 threads, and from the serial entry point
 * when there is one. The shapes cross every tile's K blocks (512 to 1024). */
static void thread_independence(const char *what, GemmFn fn, GemmFn serial) {
    static const int shapes[][3] = {{300, 200, 700}, {20, 1000, 300},  {1111, 65, 129},
                                    {96, 96, 1024},  {300, 200, 1100}, {96, 96, 2049}};
    for (int t = 0; t < 4; t++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            Problem p = make(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2], 1, 0.5f, betas[s % 3]);
            omp_set_num_threads(1);
            float *c1 = run(&p, fn);
            omp_set_num_threads(2);
            float *c2 = run(&p, fn);
            omp_set_num_threads(3);
            float *c3 = run(&p, fn);
            omp_set_num_threads(2);
            float *c2b = run(&p, fn);
            CHECK(same_bits(&p, c1, c2));
            CHECK(same_bits(&p, c1, c3));
            CHECK(same_bits(&p, c2, c2b));
            if (serial) {
                float *cs = run(&p, serial);
                CHECK(same_bits(&p, c1, cs));
                free(cs);
            }
            verify(what, &p, c2);
            free(c1);
            free(c2);
            free(c3);
            free(c2b);
            release(&p);
        }
}

/* anvil_sgemm_serial from many threads at once, on distinct problems, gives
 * the bits of the same calls made one after another. */
static void concurrent_serial(void) {
    enum { NP = 24 };
    Problem ps[NP];
    float *seq[NP], *par[NP];
    for (int i = 0; i < NP; i++) {
        int N = i % 3 == 0 ? 256 : 64, K = i % 2 ? 64 : 256;
        ps[i] = make(i & 1, i & 2, 64 + 7 * i, N, K, i % 4, 1.0f, betas[i % 3]);
        seq[i] = run(&ps[i], anvil_sgemm_serial);
    }
    omp_set_num_threads(4);
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < NP; i++) par[i] = run(&ps[i], anvil_sgemm_serial);
    omp_set_num_threads(2);
    for (int i = 0; i < NP; i++) {
        CHECK(same_bits(&ps[i], seq[i], par[i]));
        verify("concurrent", &ps[i], par[i]);
        free(seq[i]);
        free(par[i]);
        release(&ps[i]);
    }
}

/* anvil_sgemm_bf16 in the GemmFn shape; a refusal counts as a failure. */
static void bf16_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc) {
    if (anvil_sgemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        t_fail(__FILE__, __LINE__, "anvil_sgemm_bf16 refused: %s", anvil_errmsg());
}

static int bf16_tests(void) {
    if (anvil_isa_check_bf16()) {
        printf("test_gemm --bf16: SKIP: %s\n", anvil_errmsg());
        return 77;
    }
    bf16_inputs = true;
    correctness_sweep("bf16", bf16_gemm);
    blocking_sweep("bf16", bf16_gemm);
    thread_independence("bf16 threads", bf16_gemm, NULL);
    return t_done("test_gemm --bf16");
}

int main(int argc, char **argv) {
    const char *path = t_path("test_gemm");
    if (argc > 1 && !strcmp(argv[1], "--bf16")) return bf16_tests();
    /* On a path without bf16, the bf16 entry refuses and leaves C alone. */
    if (anvil_isa_check_bf16()) {
        float c = 1.0f, a = 2.0f;
        CHECK(anvil_sgemm_bf16(false, false, 1, 1, 1, 1.0f, &a, 1, &a, 1, 0.0f, &c, 1) == -1 && c == 1.0f);
    }
    CHECK(strcmp(anvil_sgemm_impl(), path) == 0);
    correctness_sweep("sgemm", anvil_sgemm);
    correctness_sweep("sgemm_serial", anvil_sgemm_serial);
    blocking_sweep("sgemm", anvil_sgemm);
    degenerate();
    thread_independence("threads", anvil_sgemm, anvil_sgemm_serial);
    concurrent_serial();
    return t_done("test_gemm");
}

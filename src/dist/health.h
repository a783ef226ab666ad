/* Health check of a job's ranks, run before trusting them with training.
 *
 * On each rank: SGEMM correctness on a few shapes (every transpose) against
 * a double-precision reference, SGEMM speed, and a memory check (allocate,
 * write a pattern, read it back). Across ranks: in-place float32 all-reduce
 * sums over a range of sizes, each checked element by element against the
 * exactly known sum and timed, reported in the nccl-tests convention:
 * algbw = bytes / time and busbw = algbw * 2(n-1)/n, which for a ring
 * all-reduce is the bandwidth each link must sustain.
 *
 * It lives beside the collectives because it is itself collective: every
 * rank must call anvil_health_run between anvil_dist_init and
 * anvil_dist_finalize with the same configuration, and every rank gets the
 * same report (gathered with an all-gather), so all ranks agree on the
 * verdict and leave together, healthy or not.
 *
 * Ranks on one host take turns for the speed checks, so that ranks sharing
 * cores are not measured against each other's load; hosts run at once. */
#ifndef ANVIL_DIST_HEALTH_H
#define ANVIL_DIST_HEALTH_H

#include <stddef.h>

typedef enum {
    ANVIL_HEALTH_FAULT_NONE,
    ANVIL_HEALTH_FAULT_SLOW_GEMM,     /* the rank runs each timed SGEMM 20 times */
    ANVIL_HEALTH_FAULT_BAD_GEMM,      /* one element of its SGEMM results is off by 1 */
    ANVIL_HEALTH_FAULT_BAD_ALLREDUCE, /* one element of what it receives is off by 1 */
    ANVIL_HEALTH_FAULT_BAD_MEMORY,    /* one word of its memory pattern reads back wrong */
} anvil_health_fault_kind;

typedef struct {
    size_t mem_bytes;           /* memory check size per rank */
    int gemm_n;                 /* the timed SGEMM is gemm_n^3 */
    size_t min_bytes, max_bytes; /* all-reduce sizes per rank: min_bytes, x4, ... up to max_bytes */
    int iters;                  /* timed all-reduces per size (after one warm-up) */
    double slow_factor;         /* a rank below slow_factor x the median speed is named; 0 disables */
    /* 0 or 1: the all-reduce runs over the world. Otherwise over groups of this many consecutive
     * ranks, the tensor-parallel groups of dist/grid.h ("tp group G"), all groups at once, and the
     * report gives each group's bandwidth as well. */
    int group_size;
    /* Test hook: rank fault_rank misbehaves as fault says. */
    int fault_rank;
    anvil_health_fault_kind fault;
} anvil_health_config;

/* The full check (256 MB, 512^3, 4 KB..64 MB, 10 iterations, factor 0.5). */
void anvil_health_defaults(anvil_health_config *c);
/* The check run before training: well under two seconds on a small job. */
void anvil_health_quick(anvil_health_config *c);
/* Parses "RANK:KIND" (KIND slow-gemm, bad-gemm, bad-allreduce or
 * bad-memory) into c; -1 with a message naming the bad part. */
int anvil_health_parse_fault(const char *spec, anvil_health_config *c);

typedef struct {
    char host[64];
    int gemm_ok;
    double gemm_err_ratio; /* worst |error| / its bound over the shapes: <= 1 passes; -1: out of memory */
    double gemm_gflops;    /* best of the timed runs */
    int mem_ok;
    double mem_mb_s;       /* writing and verifying touched memory: bytes written and read per second, best of 5 */
    int allreduce_ok;      /* every size came back exact on this rank */
    size_t allreduce_bad_bytes; /* the first size that did not (0 when none) */
} anvil_health_rank;

typedef struct {
    size_t bytes;   /* per rank */
    double time_s;  /* the slowest rank's median */
    double algbw_gb_s, busbw_gb_s;
    int ok;         /* exact on every rank */
} anvil_health_size;

typedef struct {
    int world;
    int gemm_threads;
    const char *gemm_impl;
    anvil_health_rank *ranks; /* world entries */
    anvil_health_size *sizes;
    int nsizes;
    double gemm_median_gflops, mem_median_mb_s;
    /* One line each, naming the rank and its host: failed checks, and ranks
     * below the slow factor (kept apart: on shared cores slowness can be
     * noise, a wrong result cannot). */
    char **problems;
    int nproblems;
    char **slow;
    int nslow;
    double elapsed_s;
    /* With group_size > 1: the groups' bus bandwidth at the largest size (busbw counts the group's
     * ranks), group g being ranks g*group_size onwards. */
    int group_size, ngroups;
    double *group_busbw_gb_s;
} anvil_health_report;

/* Collective over the world. Returns 0 with rep filled (healthy when
 * rep->nproblems + rep->nslow == 0), or -1 after anvil_fail when the check itself could
 * not run (a collective failed). */
int anvil_health_run(const anvil_health_config *cfg, anvil_health_report *rep);
void anvil_health_report_free(anvil_health_report *rep);

#endif

/* anvil health: check every rank's GEMM and memory and the all-reduce
 * between them; also run, quickly, before multi-process training. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "dist/comm.h"
#include "dist/health.h"

static const char *usage =
    "usage: anvil health [options]\n"
    "       anvil launch -n N [launch options] -- health [options]\n"
    "\n"
    "On every rank: SGEMM correctness (4 shapes, every transpose, against a double-precision\n"
    "reference within the float rounding bound (K+2)*2^-24*sum|a*b|), SGEMM speed (best of 5),\n"
    "and a memory check (allocate, write a pattern, read it back). Across ranks: in-place float32\n"
    "all-reduce sums of sizes MIN, 4*MIN, ... MAX bytes per rank, checked exactly, with the median\n"
    "time, algbw = bytes/time and busbw = algbw*2(n-1)/n (the nccl-tests convention). Ranks on one\n"
    "host take turns for the speed checks. Rank 0 prints the table; a rank that fails a check, or\n"
    "whose GEMM or memory speed is below the slow factor times the median, is named with its host.\n"
    "  --quick                 the check run before training (16 MB, 256^3, up to 1 MB, 5 iterations)\n"
    "  --mem-mb N              memory to check per rank, MB (default 256)\n"
    "  --gemm-n N              the timed SGEMM is N x N x N (default 512)\n"
    "  --min-bytes N           smallest all-reduce per rank (default 4096)\n"
    "  --max-bytes N           largest all-reduce per rank (default 67108864)\n"
    "  --iters N               timed all-reduces per size, after one warm-up (default 10)\n"
    "  --slow-factor F         name ranks slower than F x the median; 0 disables (default 0.5)\n"
    "  --threads N             OpenMP threads (default: cores / ranks on this host)\n"
    "  --collective-timeout S  give up on a collective after S seconds, exit 76 (default 60)\n"
    "  --json                  print the report as one JSON object instead of the table\n"
    "  --tp T                  all-reduce within groups of T consecutive ranks (the tensor-parallel\n"
    "                          groups of train --tp), all groups at once, and report each group\n"
    "\n"
    "Exit status: 0 healthy; 1 unhealthy (one line per problem on stderr) or the check failed;\n"
    "2 bad usage. anvil train runs the --quick check when it has more than one rank: a failed\n"
    "check stops it, a slow rank is a warning (--no-health skips it).\n"
    "Test hook: ANVIL_HEALTH_FAULT=RANK:KIND makes RANK misbehave, KIND one of\n"
    "slow-gemm (each timed SGEMM runs 20 times), bad-gemm, bad-allreduce, bad-memory (one\n"
    "element off); RANK:KIND@NODE only where SLURMD_NODENAME (else the host name) is NODE.\n";

/* RANK:KIND, or RANK:KIND@NODE for the process on that Slurm node (SLURMD_NODENAME, else the host
 * name) alone: how the Slurm backend's per-node pre-flight check is made to fail on one node. */
static int fault_from_env(anvil_health_config *c) {
    const char *f = getenv("ANVIL_HEALTH_FAULT");
    if (!f || !*f) return 0;
    char spec[128], here[256];
    snprintf(spec, sizeof spec, "%s", f);
    char *at = strchr(spec, '@');
    if (at) {
        *at++ = 0;
        const char *node = getenv("SLURMD_NODENAME");
        if (!node || !*node) node = gethostname(here, sizeof here) ? "" : here;
        if (strcmp(at, node)) return 0;
    }
    return anvil_health_parse_fault(spec, c);
}

static void print_table(const anvil_health_report *r, FILE *out) {
    fprintf(out, "anvil health: %d rank%s, SGEMM %s with %d thread%s per rank\n", r->world, r->world > 1 ? "s" : "",
            r->gemm_impl, r->gemm_threads, r->gemm_threads > 1 ? "s" : "");
    fprintf(out, "%5s  %-20s %11s %12s %12s %5s\n", "rank", "host", "GEMM GFLOP/s", "GEMM err/bnd", "memory MB/s",
            "ok");
    for (int i = 0; i < r->world; i++) {
        const anvil_health_rank *k = &r->ranks[i];
        fprintf(out, "%5d  %-20s %11.1f %12.2g %12.0f %5s\n", i, k->host, k->gemm_gflops, k->gemm_err_ratio,
                k->mem_mb_s, k->gemm_ok && k->mem_ok && k->allreduce_ok ? "yes" : "NO");
    }
    if (r->nsizes == 0) return;
    fprintf(out, "all-reduce, float32 sum in place, median time (slowest rank), busbw = algbw*2(n-1)/n\n");
    fprintf(out, "%12s %11s %11s %11s %8s\n", "bytes", "time us", "algbw GB/s", "busbw GB/s", "correct");
    for (int s = 0; s < r->nsizes; s++) {
        const anvil_health_size *z = &r->sizes[s];
        fprintf(out, "%12zu %11.1f %11.3f %11.3f %8s\n", z->bytes, z->time_s * 1e6, z->algbw_gb_s, z->busbw_gb_s,
                z->ok ? "yes" : "NO");
    }
}

/* cJSON writes non-finite numbers as null, which is what they mean here. */
static void print_json(const anvil_health_report *r, FILE *out) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "ranks", r->world);
    cJSON_AddStringToObject(o, "gemm_impl", r->gemm_impl);
    cJSON_AddNumberToObject(o, "threads_per_rank", r->gemm_threads);
    cJSON_AddBoolToObject(o, "healthy", r->nproblems + r->nslow == 0);
    cJSON *ranks = cJSON_AddArrayToObject(o, "per_rank");
    for (int i = 0; i < r->world; i++) {
        const anvil_health_rank *k = &r->ranks[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rank", i);
        cJSON_AddStringToObject(e, "host", k->host);
        cJSON_AddBoolToObject(e, "gemm_ok", k->gemm_ok);
        cJSON_AddNumberToObject(e, "gemm_error_over_bound", k->gemm_err_ratio);
        cJSON_AddNumberToObject(e, "gemm_gflops", k->gemm_gflops);
        cJSON_AddBoolToObject(e, "memory_ok", k->mem_ok);
        cJSON_AddNumberToObject(e, "memory_mb_s", k->mem_mb_s);
        cJSON_AddBoolToObject(e, "allreduce_ok", k->allreduce_ok);
        cJSON_AddItemToArray(ranks, e);
    }
    cJSON *sizes = cJSON_AddArrayToObject(o, "allreduce");
    for (int s = 0; s < r->nsizes; s++) {
        const anvil_health_size *z = &r->sizes[s];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "bytes", (double)z->bytes);
        cJSON_AddNumberToObject(e, "time_us", z->time_s * 1e6);
        cJSON_AddNumberToObject(e, "algbw_gb_s", z->algbw_gb_s);
        cJSON_AddNumberToObject(e, "busbw_gb_s", z->busbw_gb_s);
        cJSON_AddBoolToObject(e, "correct", z->ok);
        cJSON_AddItemToArray(sizes, e);
    }
    cJSON *p = cJSON_AddArrayToObject(o, "problems");
    for (int i = 0; i < r->nproblems; i++) cJSON_AddItemToArray(p, cJSON_CreateString(r->problems[i]));
    for (int i = 0; i < r->nslow; i++) cJSON_AddItemToArray(p, cJSON_CreateString(r->slow[i]));
    char *s = cJSON_PrintUnformatted(o);
    if (s) fprintf(out, "%s\n", s);
    free(s);
    cJSON_Delete(o);
}

static void print_problems(const char *cmd, const anvil_health_report *r, const char *slow_label) {
    for (int i = 0; i < r->nproblems; i++) fprintf(stderr, "anvil %s: unhealthy: %s\n", cmd, r->problems[i]);
    for (int i = 0; i < r->nslow; i++) fprintf(stderr, "anvil %s: %s: %s\n", cmd, slow_label, r->slow[i]);
}

/* Only wrong results stop training here: a rank slower than the others is
 * named, but on shared or oversubscribed cores that can be noise. */
int cli_health_before_training(const char *cmd) {
    anvil_health_config c;
    anvil_health_quick(&c);
    if (fault_from_env(&c)) return cli_fail(cmd);
    anvil_health_report r;
    if (anvil_health_run(&c, &r)) return cli_fail(cmd);
    int rc = r.nproblems ? 1 : 0;
    if (anvil_dist_rank() == 0) {
        print_problems(cmd, &r, "warning: slow");
        if (rc) {
            fprintf(stderr, "anvil %s: error: the health check before training failed (--no-health skips it)\n", cmd);
        } else {
            const anvil_health_size *big = r.nsizes ? &r.sizes[r.nsizes - 1] : NULL;
            fprintf(stderr, "health: %d ranks ok in %.1f s: GEMM median %.1f GFLOP/s, memory %.0f MB/s", r.world,
                    r.elapsed_s, r.gemm_median_gflops, r.mem_median_mb_s);
            if (big) fprintf(stderr, ", all-reduce of %zu bytes busbw %.2f GB/s", big->bytes, big->busbw_gb_s);
            fprintf(stderr, " (--no-health skips this)\n");
        }
    }
    anvil_health_report_free(&r);
    return rc;
}

int cmd_health(int argc, char **argv) {
    const char *cmd = "health";
    anvil_health_config c;
    anvil_health_defaults(&c);
    bool json = false, quick = false;
    int threads = 0, mem_mb = -1, gemm_n = 0, iters = 0, tp = 0;
    int64_t min_bytes = 0, max_bytes = 0;
    bool have_slow = false;
    double slow = 0.0, timeout = 60.0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(o, "--json")) { json = true; continue; }
        if (!strcmp(o, "--quick")) { quick = true; continue; }
        if (strncmp(o, "--", 2)) return cli_usage_error(cmd, "unexpected argument '%s'", o);
        if (!(v = arg_value(cmd, argc, argv, &i))) return 2;
        int bad = 0;
        if (!strcmp(o, "--mem-mb")) bad = arg_int(cmd, o, v, 0, 1 << 20, &mem_mb);
        else if (!strcmp(o, "--gemm-n")) bad = arg_int(cmd, o, v, 1, 8192, &gemm_n);
        else if (!strcmp(o, "--min-bytes")) bad = arg_i64(cmd, o, v, 4, INT64_C(1) << 40, &min_bytes);
        else if (!strcmp(o, "--max-bytes")) bad = arg_i64(cmd, o, v, 4, INT64_C(1) << 40, &max_bytes);
        else if (!strcmp(o, "--iters")) bad = arg_int(cmd, o, v, 1, 1 << 20, &iters);
        else if (!strcmp(o, "--slow-factor")) bad = arg_double(cmd, o, v, &slow), have_slow = true;
        else if (!strcmp(o, "--threads")) bad = arg_int(cmd, o, v, 1, 4096, &threads);
        else if (!strcmp(o, "--collective-timeout")) bad = arg_double(cmd, o, v, &timeout);
        else if (!strcmp(o, "--tp")) bad = arg_int(cmd, o, v, 1, 1 << 20, &tp);
        else return cli_usage_error(cmd, "unknown option '%s'", o);
        if (bad) return 2;
    }
    if (quick) anvil_health_quick(&c);
    if (mem_mb >= 0) c.mem_bytes = (size_t)mem_mb << 20;
    if (gemm_n) c.gemm_n = gemm_n;
    if (min_bytes) c.min_bytes = (size_t)min_bytes;
    if (max_bytes) c.max_bytes = (size_t)max_bytes;
    if (iters) c.iters = iters;
    c.group_size = tp;
    if (have_slow && !(slow >= 0.0 && slow < 1.0))
        return cli_usage_error(cmd, "--slow-factor must be in [0, 1), got %g", slow);
    if (have_slow) c.slow_factor = slow;
    if (c.max_bytes < c.min_bytes)
        return cli_usage_error(cmd, "--max-bytes %zu is below --min-bytes %zu", c.max_bytes, c.min_bytes);
    if (!(timeout > 0.0)) return cli_usage_error(cmd, "--collective-timeout must be positive");
    if (fault_from_env(&c)) return cli_fail(cmd);

    cli_set_threads(threads);
    anvil_dist_config dc = {.timeout_s = timeout};
    if (anvil_dist_init(&dc)) return cli_fail(cmd);
    anvil_health_report r;
    if (anvil_health_run(&c, &r)) return cli_fail(cmd);
    if (anvil_dist_rank() == 0) {
        if (json) print_json(&r, stdout);
        else print_table(&r, stdout);
        for (int q = 0; !json && q < r.ngroups && r.nsizes; q++)
            printf("tp group %d (ranks %d-%d): all-reduce of %zu bytes busbw %.2f GB/s\n", q, q * r.group_size,
                   (q + 1) * r.group_size - 1, r.sizes[r.nsizes - 1].bytes, r.group_busbw_gb_s[q]);
        fflush(stdout);
        if (r.nproblems + r.nslow) print_problems(cmd, &r, "unhealthy");
        else if (!json) printf("healthy: %d rank%s in %.1f s\n", r.world, r.world > 1 ? "s" : "", r.elapsed_s);
    }
    int rc = r.nproblems + r.nslow ? 1 : 0;
    anvil_health_report_free(&r);
    /* Every rank reached the same verdict, so all of them get here. */
    anvil_dist_finalize();
    return rc;
}

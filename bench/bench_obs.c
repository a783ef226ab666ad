/* What watching a run costs it, per step, measured in process (noise on a
 * shared machine hides sub-percent differences in whole training runs; see
 * bench_obs.sh for those):
 *   - the telemetry after a step with --metrics-port (the snapshot under the
 *     mutex, the histogram), against the same call without it, and reading
 *     the /proc figures, which it does once a second;
 *   - a kernel call through the profiled table while no profile is on,
 *     against the plain table, times the kernel calls of a step;
 *   - a span hook compiled in but off (the model's, the collectives').
 * usage: bench_obs [--calls-per-step N] (default 103: the kernel calls of a
 * mini-preset step, counted in its profile). Prints microseconds per step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "dist/comm.h"
#include "kernels/kernels.h"
#include "obs/sysstat.h"
#include "obs/trace.h"
#include "train/profile.h"
#include "train/telemetry.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* out = the median over 9 rounds of the mean time of one stmt, in microseconds. */
#define TIME_US(out, reps, stmt)                                                                                     \
    do {                                                                                                             \
        double r_[9];                                                                                                \
        for (int k_ = 0; k_ < 9; k_++) {                                                                             \
            double t_ = anvil_now();                                                                                 \
            for (long i_ = 0; i_ < (reps); i_++) {                                                                   \
                stmt;                                                                                                \
            }                                                                                                        \
            r_[k_] = (anvil_now() - t_) / (reps) * 1e6;                                                              \
        }                                                                                                            \
        qsort(r_, 9, sizeof(double), cmp);                                                                           \
        out = r_[4];                                                                                                 \
    } while (0)

static volatile float nothing_sink;
static void __attribute__((noinline)) copy_nothing(float *dst, const float *src, size_t n) {
    (void)dst;
    nothing_sink = n ? src[0] : 0;
}

static double telemetry_us(int port) {
    anvil_telemetry_config c = {.metrics_port = port, .log = fopen("/dev/null", "w"), .kernels = "cpu", .dtype = "fp32",
                                .steps = 1 << 30};
    anvil_telemetry *t = anvil_telemetry_open(&c);
    if (!t || anvil_telemetry_start(t, NULL)) {
        fprintf(stderr, "bench_obs: telemetry: failed\n");
        exit(1);
    }
    anvil_telemetry_step s = {1, 5.5, 6e-4, 1.0, 0.1, 1024, 6e9, 1024, 0};
    double us;
    TIME_US(us, 20000, s.step++; anvil_telemetry_step_done(t, &s));
    anvil_telemetry_close(t, 0);
    fclose(c.log);
    return us;
}

int main(int argc, char **argv) {
    int calls = 103;
    if (argc == 3 && !strcmp(argv[1], "--calls-per-step")) calls = atoi(argv[2]);
    anvil_dist_config dc = {0};
    if (anvil_dist_init(&dc)) return 1;
    double off = telemetry_us(-1), on = telemetry_us(0), sys;
    anvil_sysstat st;
    TIME_US(sys, 2000, anvil_sysstat_read(&st));

    /* A kernel that does nothing, so the difference is the wrapper's alone. */
    anvil_kernels fake = *anvil_kernels_cpu();
    fake.copy = copy_nothing;
    anvil_model_config mc;
    if (anvil_model_preset("tiny", &mc)) return 1;
    const anvil_kernels *k = &fake, *p = anvil_profiled_kernels(k, &mc);
    float x[8] = {0}, w[64] = {0}, out[8];
    volatile double sink = 0;
    double plain, traced, hook, bare;
    TIME_US(plain, 2000000, k->copy(out, x, 8); sink += out[0]);
    TIME_US(traced, 2000000, p->copy(out, x, 8); sink += out[0]);
    TIME_US(hook, 2000000, double t0 = anvil_trace_begin(); sink += w[0]; anvil_trace_end(t0, "op", "x", -1, -1));
    TIME_US(bare, 2000000, sink += w[0]);
    printf("telemetry per step: %.3f us with --metrics-port, %.3f us without (difference %.3f us), and once a "
           "second the /proc figures: %.1f us\n", on, off, on - off, sys);
    printf("profiled kernel table, no profile on: %.4f us a call of an empty kernel against %.4f us, x %d calls = "
           "%.3f us a step\n", traced, plain, calls, (traced - plain) * calls);
    printf("a span hook compiled in, off: %.4f us against %.4f us for the bare statement\n", hook, bare);
    anvil_dist_finalize();
    return 0;
}

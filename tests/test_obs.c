/* src/obs: the Prometheus page builder (escaping, value spelling, histogram
 * buckets cumulative), and the /proc figures against what the test itself
 * did: descriptors it opened, bytes it wrote and synced, CPU it burnt. The
 * page's format is checked by promtool in tests/cli_metrics.sh. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "obs/prom.h"
#include "obs/sysstat.h"
#include "testutil.h"

static void test_page(void) {
    anvil_prom *p = anvil_prom_new();
    anvil_prom_family(p, "x_total", ANVIL_PROM_COUNTER, "a \\ help\nline");
    anvil_prom_label l[] = {{"a", "q\"u\\o\nte"}, {"b", ""}};
    anvil_prom_sample(p, "x_total", l, 2, 3);
    anvil_prom_family(p, "g", ANVIL_PROM_GAUGE, "values");
    anvil_prom_sample(p, "g", NULL, 0, 0.1);
    anvil_prom_sample(p, "g", NULL, 0, NAN);
    anvil_prom_sample(p, "g", NULL, 0, -INFINITY);
    anvil_prom_sample(p, "g", NULL, 0, 1e300);
    anvil_prom_sample(p, "g", NULL, 0, (double)5.50123453f);
    size_t len;
    const char *t = anvil_prom_text(p, &len);
    const char *want = "# HELP x_total a \\\\ help\\nline\n# TYPE x_total counter\n"
                       "x_total{a=\"q\\\"u\\\\o\\nte\",b=\"\"} 3\n"
                       "# HELP g values\n# TYPE g gauge\ng 0.1\ng NaN\ng -Inf\ng 1e+300\n"
                       "g 5.501234531402588\n";
    CHECK(t && !strcmp(t, want) && len == strlen(want));
    if (t && strcmp(t, want)) printf("got:\n%s\nwant:\n%s\n", t, want);
    anvil_prom_free(p);
}

static void test_histogram(void) {
    anvil_prom_histogram h;
    anvil_prom_histogram_exponential(&h, 0.25, 2, 3); /* 0.25, 0.5, 1 */
    double obs[] = {0.1, 0.25, 0.3, 0.9, 1.0, 7};
    for (int i = 0; i < 6; i++) anvil_prom_histogram_observe(&h, obs[i]);
    anvil_prom *p = anvil_prom_new();
    anvil_prom_label l = {"rank", "0"};
    anvil_prom_histogram_samples(p, "s", &l, 1, &h);
    const char *want = "s_bucket{rank=\"0\",le=\"0.25\"} 2\ns_bucket{rank=\"0\",le=\"0.5\"} 3\n"
                       "s_bucket{rank=\"0\",le=\"1\"} 5\ns_bucket{rank=\"0\",le=\"+Inf\"} 6\n"
                       "s_sum{rank=\"0\"} 9.55\ns_count{rank=\"0\"} 6\n";
    const char *t = anvil_prom_text(p, NULL);
    CHECK(t && !strcmp(t, want));
    if (t && strcmp(t, want)) printf("got:\n%s\nwant:\n%s\n", t, want);
    anvil_prom_free(p);
}

static void test_names(void) {
    CHECK(anvil_prom_valid_name("anvil_train_loss"));
    CHECK(anvil_prom_valid_name("a:b_9"));
    CHECK(!anvil_prom_valid_name("9a"));
    CHECK(!anvil_prom_valid_name("a-b"));
    CHECK(!anvil_prom_valid_name(""));
}

static void test_sysstat(void) {
    anvil_sysstat a, b;
    CHECK(anvil_sysstat_read(&a) == 0);
    CHECK(a.rss_bytes > 0 && a.peak_rss_bytes >= a.rss_bytes && a.cpus >= 1 && a.open_fds >= 3);
    CHECK(a.net_rx_bytes >= 0 && a.net_tx_bytes >= 0);
    /* Three more descriptors, a synced MiB and a tenth of a second of CPU. */
    int fds[3];
    for (int i = 0; i < 3; i++) fds[i] = open("/dev/null", O_RDONLY);
    const char *path = "test_obs.tmp";
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    size_t mib = 1 << 20;
    char *buf = calloc(1, mib);
    CHECK(fd >= 0 && buf && write(fd, buf, mib) == (ssize_t)mib && fsync(fd) == 0);
    close(fd);
    unlink(path);
    free(buf);
    struct timespec t0, t1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    volatile double x = 0;
    do {
        for (int i = 0; i < 100000; i++) x += sqrt((double)i);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    } while ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9 < 0.1);
    CHECK(anvil_sysstat_read(&b) == 0);
    CHECK(b.open_fds == a.open_fds + 3);
    CHECK(b.write_bytes - a.write_bytes >= (double)mib);
    double cpu = (t1.tv_sec + t1.tv_nsec / 1e9);
    /* /proc/self/stat counts in clock ticks (1/100 s here): three ticks of slack. */
    double tick = 1.0 / (double)sysconf(_SC_CLK_TCK);
    CHECK(fabs(b.cpu_seconds - cpu) <= 3 * tick);
    if (fabs(b.cpu_seconds - cpu) > 3 * tick) printf("cpu: /proc %.3f s, clock %.3f s\n", b.cpu_seconds, cpu);
    for (int i = 0; i < 3; i++) close(fds[i]);
}

int main(void) {
    test_page();
    test_histogram();
    test_names();
    test_sysstat();
    return t_done("test_obs");
}

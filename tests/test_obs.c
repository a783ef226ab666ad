/* src/obs: the Prometheus page builder (escaping, value spelling, histogram
 * buckets cumulative); the /proc figures against what the test itself did:
 * descriptors it opened, bytes it wrote and synced, CPU it burnt; log
 * metrics: definitions refused with PCRE2's offset, numbers captured, lines
 * split at newlines and carriage returns through the tap, control sequences
 * removed. The page's format is checked by promtool in tests/cli_metrics.sh. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "obs/logmetric.h"
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

static void test_logmetric_defs(void) {
    char name[ANVIL_LOGMETRIC_NAME_MAX + 1];
    const char *re;
    CHECK(anvil_logmetric_parse("loss=loss ([0-9.]+)", name, sizeof name, &re) == 0 && !strcmp(name, "loss") &&
          !strcmp(re, "loss ([0-9.]+)"));
    /* "tok/s (\\d+" (10 bytes) is unterminated: PCRE2 reports the end of the pattern, offset 10. */
    CHECK(anvil_logmetric_parse("t=tok/s (\\d+", name, sizeof name, &re) != 0 &&
          strstr(anvil_errmsg(), "missing closing parenthesis at offset 10"));
    CHECK(anvil_logmetric_check("t", "loss [0-9]+") != 0 && strstr(anvil_errmsg(), "0 capture groups"));
    CHECK(anvil_logmetric_check("t", "(a)|(b)") != 0 && strstr(anvil_errmsg(), "2 capture groups"));
    CHECK(anvil_logmetric_check("t", "(?:a)(?<n>b)") == 0);
    CHECK(anvil_logmetric_check("a-b", "(1)") != 0 && strstr(anvil_errmsg(), "metric 'a-b'"));
    CHECK(anvil_logmetric_check("kind", "(1)") != 0 && strstr(anvil_errmsg(), "reserved"));
    CHECK(anvil_logmetric_parse("noequals", name, sizeof name, &re) != 0);
    char longdef[200];
    memset(longdef, 'n', 100);
    snprintf(longdef + 100, sizeof longdef - 100, "=(1)");
    CHECK(anvil_logmetric_parse(longdef, name, sizeof name, &re) != 0 && strstr(anvil_errmsg(), "longer than 64"));
    const char *names[] = {"a", "b", "a"}, *res[] = {"(1)", "(2)", "(3)"};
    CHECK(anvil_logmetric_check_all(names, res, 2) == 0);
    CHECK(anvil_logmetric_check_all(names, res, 3) != 0 && strstr(anvil_errmsg(), "'a' is defined twice"));
}

static void test_logmetric_feed(void) {
    const char *names[] = {"loss", "word", "ms"};
    const char *res[] = {"\\| loss ([0-9.]+)", "^say (\\S+)", "(\\d+) ms"};
    anvil_logmetrics *lm = anvil_logmetrics_new(names, res, 3);
    CHECK(lm && anvil_logmetrics_count(lm) == 3 && !strcmp(anvil_logmetrics_name(lm, 1), "word"));
    if (!lm) return;
    double v[3];
    int up[3];
    anvil_logmetrics_take(lm, v, up);
    CHECK(isnan(v[0]) && isnan(v[1]) && isnan(v[2]) && !up[0] && !up[1] && !up[2]);
    const char *l1 = "step 3/9 | loss 4.125 | 27 ms";
    CHECK(anvil_logmetrics_feed(lm, l1, strlen(l1)) == 2);
    CHECK(anvil_logmetrics_feed(lm, "say hello", 9) == 0); /* not a number: nothing */
    CHECK(anvil_logmetrics_feed(lm, "say -2.5e3", 10) == 1);
    anvil_logmetrics_take(lm, v, up);
    CHECK(v[0] == 4.125 && v[1] == -2500 && v[2] == 27 && up[0] && up[1] && up[2]);
    anvil_logmetrics_take(lm, v, up);
    CHECK(v[0] == 4.125 && !up[0] && !up[1] && !up[2]);

    /* Through the tap: the bytes reach the log unchanged; lines end at \n and \r; ESC [ K goes. */
    char *logged = NULL;
    size_t loggedn = 0;
    FILE *under = open_memstream(&logged, &loggedn);
    FILE *tap = anvil_logtap_open(under, lm);
    CHECK(tap != NULL);
    if (!tap) return;
    const char *text = "| loss 1.5 | 3 ms\r\033[K| loss 2.5 | 4 ms\n| loss 3.5 | 5";
    fputs(text, tap);
    anvil_logmetrics_take(lm, v, up);
    CHECK(v[0] == 2.5 && v[2] == 4);
    fclose(tap);
    anvil_logmetrics_take(lm, v, up);
    CHECK(v[0] == 3.5 && up[0] && !up[2]);
    fclose(under);
    CHECK(loggedn == strlen(text) && !memcmp(logged, text, loggedn));
    free(logged);
    anvil_logmetrics_free(lm);

    /* Nested quantifiers on a line that never matches: the match limit ends it with no value. */
    const char *bn[] = {"x"}, *br[] = {"^((?:a+)+)b"};
    anvil_logmetrics *bad = anvil_logmetrics_new(bn, br, 1);
    char as[64];
    memset(as, 'a', 40);
    as[40] = 'c';
    CHECK(bad && anvil_logmetrics_feed(bad, as, 41) == 0);
    anvil_logmetrics_free(bad);
}

int main(void) {
    test_page();
    test_histogram();
    test_names();
    test_sysstat();
    test_logmetric_defs();
    test_logmetric_feed();
    return t_done("test_obs");
}

#include "obs/sysstat.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

/* The whole of a small /proc file, NUL-terminated; -1 when it cannot be read. */
static int slurp(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    ssize_t k = 0;
    while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)k;
    close(fd);
    buf[n] = 0;
    return k < 0 ? -1 : 0;
}

/* The number after "key" at the start of a line of text, or NAN. */
static double field_after(const char *text, const char *key) {
    size_t kl = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (!strncmp(l, key, kl)) return strtod(l + kl, NULL);
    return NAN;
}

/* utime and stime are fields 14 and 15 of /proc/self/stat, counted after the command name,
 * which is parenthesised and may itself hold spaces and parentheses. */
static double cpu_seconds(void) {
    char buf[1024];
    if (slurp("/proc/self/stat", buf, sizeof buf)) return NAN;
    const char *p = strrchr(buf, ')');
    if (!p) return NAN;
    p++;
    for (int field = 3; field < 14 && p; field++) p = strchr(p + 1, ' ');
    if (!p) return NAN;
    char *end;
    double ut = strtod(p, &end), st = strtod(end, NULL);
    return (ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Sums the receive (first) and transmit (ninth) byte counters of every interface. */
static void net_bytes(double *rx, double *tx) {
    char buf[16384];
    *rx = *tx = NAN;
    if (slurp("/proc/self/net/dev", buf, sizeof buf)) return;
    double r = 0, t = 0;
    for (char *l = buf; (l = strchr(l, '\n')); ) {
        l++;
        char *colon = strchr(l, ':');
        char *eol = strchr(l, '\n');
        if (!colon || (eol && colon > eol)) continue;
        char *p = colon + 1;
        double v[9];
        int i;
        for (i = 0; i < 9; i++) {
            char *end;
            v[i] = strtod(p, &end);
            if (end == p) break;
            p = end;
        }
        if (i < 9) continue;
        r += v[0];
        t += v[8];
    }
    *rx = r;
    *tx = t;
}

static double open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return NAN;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory stream's own descriptor */
}

int anvil_sysstat_read(anvil_sysstat *s) {
    char buf[4096];
    if (slurp("/proc/self/status", buf, sizeof buf)) return anvil_fail("sysstat: cannot read /proc/self/status");
    s->rss_bytes = field_after(buf, "VmRSS:") * 1024.0;
    s->peak_rss_bytes = field_after(buf, "VmHWM:") * 1024.0;
    s->cpu_seconds = cpu_seconds();
    if (slurp("/proc/self/io", buf, sizeof buf) == 0) {
        s->read_bytes = field_after(buf, "read_bytes:");
        s->write_bytes = field_after(buf, "write_bytes:");
    } else {
        s->read_bytes = s->write_bytes = NAN;
    }
    net_bytes(&s->net_rx_bytes, &s->net_tx_bytes);
    s->open_fds = open_fds();
    s->cpus = (double)sysconf(_SC_NPROCESSORS_ONLN);
    return 0;
}

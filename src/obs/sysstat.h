/* What the operating system says about this process, read from /proc: the
 * figures a rank reports on /metrics beside its training metrics. */
#ifndef ANVIL_OBS_SYSSTAT_H
#define ANVIL_OBS_SYSSTAT_H

typedef struct {
    double cpu_seconds;     /* user + system time of all threads (/proc/self/stat) */
    double rss_bytes;       /* resident set now (VmRSS) */
    double peak_rss_bytes;  /* its high-water mark (VmHWM) */
    double read_bytes;      /* bytes this process made the block layer read (/proc/self/io read_bytes) */
    double write_bytes;     /* ... and write (write_bytes); page-cache hits count in neither */
    /* Bytes through every interface of the process's network namespace (/proc/self/net/dev): Linux
     * keeps no count per process, so ranks sharing a host report the same figure. */
    double net_rx_bytes, net_tx_bytes;
    double open_fds;        /* entries of /proc/self/fd */
    double cpus;            /* online CPUs, the denominator of a utilisation */
} anvil_sysstat;

/* Fills s; a file that cannot be read leaves its fields NAN (e.g. /proc/self/io under a
 * restricted ptrace policy). Returns 0, or -1 after anvil_fail when /proc is not there at all. */
int anvil_sysstat_read(anvil_sysstat *s);

#endif

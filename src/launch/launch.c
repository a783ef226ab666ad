#include "launch/launch.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/exit.h"
#include "core/strbuf.h"
#include "core/fsutil.h"

/* A rank that never ends a line still reaches the terminal in pieces this big. */
#define MAX_LINE (64 * 1024)

/* ---- hosts ---- */

void anvil_launch_free_hosts(anvil_launch_host *hosts, int nhosts) {
    for (int i = 0; i < nhosts; i++) free(hosts[i].name);
    free(hosts);
}

static bool host_char(char c) { return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_'; }

int anvil_launch_parse_hosts(const char *spec, anvil_launch_host **hosts, int *nhosts) {
    *hosts = NULL;
    *nhosts = 0;
    anvil_launch_host *h = NULL;
    int n = 0;
    const char *p = spec;
    for (int idx = 1;; idx++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        size_t nlen = colon ? (size_t)(colon - p) : len;
        bool ok = nlen > 0 && nlen < 256;
        for (size_t i = 0; ok && i < nlen; i++) ok = host_char(p[i]);
        long slots = 1;
        if (ok && colon) {
            char digits[16];
            size_t dlen = len - nlen - 1;
            ok = dlen > 0 && dlen < sizeof digits;
            if (ok) {
                memcpy(digits, colon + 1, dlen);
                digits[dlen] = 0;
                for (size_t i = 0; ok && i < dlen; i++) ok = isdigit((unsigned char)digits[i]);
                slots = ok ? strtol(digits, NULL, 10) : 0;
                ok = ok && slots >= 1 && slots <= 1000000;
            }
        }
        if (!ok) {
            anvil_launch_free_hosts(h, n);
            return anvil_fail("--hosts entry %d '%.*s' is not NAME or NAME:SLOTS (SLOTS a whole number >= 1)", idx,
                              (int)len, p);
        }
        anvil_launch_host *g = realloc(h, sizeof *h * (size_t)(n + 1));
        char *name = g ? strndup(p, nlen) : NULL;
        if (!g || !name) {
            free(name);
            anvil_launch_free_hosts(g ? g : h, n);
            return anvil_fail("launch: out of memory");
        }
        h = g;
        h[n].name = name;
        h[n].slots = (int)slots;
        n++;
        if (!end) break;
        p = end + 1;
    }
    *hosts = h;
    *nhosts = n;
    return 0;
}

/* ---- this machine ---- */

static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long v = -1;
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

int anvil_launch_local_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set)) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n > 0 ? (int)n : 1;
    }
    /* Open MPI counts cores, not hardware threads, as slots; SMT siblings share a core id. */
    long seen[CPU_SETSIZE][2];
    int cores = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        char path[128];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        long core = read_long(path);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        long pkg = read_long(path);
        if (core < 0 || pkg < 0) return CPU_COUNT(&set);
        bool dup = false;
        for (int i = 0; i < cores && !dup; i++) dup = seen[i][0] == pkg && seen[i][1] == core;
        if (!dup) {
            seen[cores][0] = pkg;
            seen[cores][1] = core;
            cores++;
        }
    }
    return cores > 0 ? cores : 1;
}

/* ---- the mpirun command line ---- */

/* Whether env has a variable of this "NAME=" prefix: the user's own MCA setting wins over anvil's. */
static bool env_sets(char *const *env, const char *prefix) {
    for (char *const *e = env; *e; e++)
        if (!strncmp(*e, prefix, strlen(prefix))) return true;
    return false;
}

char *anvil_launch_default_log_dir(const anvil_launch_spec *spec) {
    if (!spec->exec && spec->argc > 0 && !strcmp(spec->argv[0], "train"))
        for (int i = 1; i + 1 < spec->argc; i++)
            if (!strcmp(spec->argv[i], "--out")) {
                size_t n = strlen(spec->argv[i + 1]) + sizeof "/logs";
                char *d = malloc(n);
                if (d) snprintf(d, n, "%s/logs", spec->argv[i + 1]);
                return d;
            }
    char stamp[32], *d = malloc(64);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    if (d) snprintf(d, 64, "anvil-logs/%s", stamp);
    return d;
}

static int check_spec(const anvil_launch_spec *spec, anvil_launch_host **hosts, int *nhosts) {
    *hosts = NULL;
    *nhosts = 0;
    if (spec->nranks < 1) return anvil_fail("-n must be at least 1, got %d", spec->nranks);
    if (!spec->exec && spec->argc < 1) return anvil_fail("no command: put the anvil subcommand after '--'");
    if (!spec->exec && !strcmp(spec->argv[0], "launch")) return anvil_fail("the ranks cannot run 'launch' itself");
    if (spec->exec && !*spec->exec) return anvil_fail("--exec needs a program");
    if (spec->log_dir && !*spec->log_dir) return anvil_fail("--log-dir needs a folder name");
    if (!spec->hosts) return 0;
    if (anvil_launch_parse_hosts(spec->hosts, hosts, nhosts)) return -1;
    long slots = 0;
    for (int i = 0; i < *nhosts; i++) slots += (*hosts)[i].slots;
    if (spec->nranks > slots && !spec->oversubscribe) {
        anvil_launch_free_hosts(*hosts, *nhosts);
        *hosts = NULL;
        *nhosts = 0;
        return anvil_fail("-n %d is more than the %ld slots of --hosts '%s' (add --oversubscribe to allow it)",
                          spec->nranks, slots, spec->hosts);
    }
    return 0;
}

int anvil_launch_check(const anvil_launch_spec *spec) {
    anvil_launch_host *hosts;
    int nhosts;
    if (check_spec(spec, &hosts, &nhosts)) return -1;
    anvil_launch_free_hosts(hosts, nhosts);
    return 0;
}

typedef struct {
    char **v;
    int n, cap;
} argv_t;

static int argv_add(argv_t *a, const char *s) {
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? a->cap * 2 : 32;
        char **v = realloc(a->v, sizeof *v * (size_t)cap);
        if (!v) return anvil_fail("launch: out of memory");
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = strdup(s))) return anvil_fail("launch: out of memory");
    a->v[++a->n] = NULL;
    return 0;
}

void anvil_launch_free_argv(char **argv) {
    if (!argv) return;
    for (char **p = argv; *p; p++) free(*p);
    free(argv);
}

static bool forwarded(const char *var) {
    static const char *prefixes[] = {"OMP_", "GOMP_", "OPENBLAS_", "ANVIL_"};
    static const char *names[] = {"PATH", "LD_LIBRARY_PATH"};
    size_t len = strcspn(var, "=");
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (!strncmp(var, prefixes[i], strlen(prefixes[i])) && len > strlen(prefixes[i])) return true;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (len == strlen(names[i]) && !strncmp(var, names[i], len)) return true;
    return false;
}

int anvil_launch_build_argv(const anvil_launch_spec *spec, const char *self, const char *output_dir, int local_cores,
                            bool root, char *const *env, char ***argv_out) {
    *argv_out = NULL;
    if (strchr(output_dir, ':')) return anvil_fail("the log folder '%s' has a ':', which mpirun cannot take", output_dir);
    anvil_launch_host *hosts;
    int nhosts;
    if (check_spec(spec, &hosts, &nhosts)) return -1;
    argv_t a = {0};
    char num[64];
    snprintf(num, sizeof num, "%d", spec->nranks);
    size_t olen = strlen(output_dir) + sizeof ":nocopy";
    char *output = malloc(olen);
    if (!output) {
        anvil_launch_free_hosts(hosts, nhosts);
        return anvil_fail("launch: out of memory");
    }
    snprintf(output, olen, "%s:nocopy", output_dir);
    /* --bind-to none: mpirun binds each of up to two ranks to a single core,
     * which would squeeze a rank's OpenMP threads onto it. --stdin none: a
     * backgrounded mpirun reading the terminal would be stopped by SIGTTIN. */
    const char *fixed[] = {"mpirun", "--output-filename", output, "--stdin", "none", "--bind-to", "none", "-n", num};
    int rc = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed && !rc; i++) rc = argv_add(&a, fixed[i]);
    if (!rc && (spec->oversubscribe || (!hosts && spec->nranks > local_cores))) rc = argv_add(&a, "--oversubscribe");
    if (!rc && root) rc = argv_add(&a, "--allow-run-as-root");
    if (!rc && hosts) {
        anvil_strbuf h = {0};
        for (int i = 0; i < nhosts && !rc; i++) {
            snprintf(num, sizeof num, ":%d", hosts[i].slots);
            if (i) rc = anvil_strbuf_putc(&h, ',');
            if (!rc) rc = anvil_strbuf_put(&h, hosts[i].name, strlen(hosts[i].name));
            if (!rc) rc = anvil_strbuf_put(&h, num, strlen(num));
        }
        if (!rc) rc = argv_add(&a, "--host");
        if (!rc) rc = argv_add(&a, h.s);
        free(h.s);
        /* Without these, ssh to a host that drops packets waits minutes, and one
         * that wants a password waits forever. */
        const char *rsh[] = {"--mca", "plm_rsh_args", "-o BatchMode=yes -o ConnectTimeout=15"};
        for (size_t i = 0; i < 3 && !rc && !env_sets(env, "OMPI_MCA_plm_rsh_args="); i++) rc = argv_add(&a, rsh[i]);
    }
    /* Once a rank has died, Open MPI gives each survivor a grace of this many seconds between its SIGTERM
     * and its SIGKILL (default 1, spent twice: 2 s of every rank failure's detection, measured). The
     * survivors hold nothing worth it: the attempt is over, and a checkpoint is complete before any rank
     * exits (the trainer's barrier). */
    const char *kill_now[] = {"--mca", "odls_base_sigkill_timeout", "0"};
    for (size_t i = 0; i < 3 && !rc && !env_sets(env, "OMPI_MCA_odls_base_sigkill_timeout="); i++)
        rc = argv_add(&a, kill_now[i]);
    if (!rc && spec->tcp) {
        /* btl alone is ignored when the ucx pml is picked, so pin ob1 too. */
        const char *tcp[] = {"--mca", "pml", "ob1", "--mca", "btl", "tcp,self"};
        for (size_t i = 0; i < 6 && !rc; i++) rc = argv_add(&a, tcp[i]);
    }
    bool have_omp = false;
    for (char *const *e = env; *e && !rc; e++) {
        have_omp |= !strncmp(*e, "OMP_NUM_THREADS=", 16);
        if (!forwarded(*e)) continue;
        char name[256];
        size_t len = strcspn(*e, "=");
        if (len >= sizeof name) continue;
        memcpy(name, *e, len);
        name[len] = 0;
        rc = argv_add(&a, "-x");
        if (!rc) rc = argv_add(&a, name);
    }
    if (!rc && !have_omp && !hosts) {
        /* Ranks sharing this machine split its cores instead of each taking all of them. */
        int threads = local_cores / spec->nranks;
        snprintf(num, sizeof num, "OMP_NUM_THREADS=%d", threads > 0 ? threads : 1);
        rc = argv_add(&a, "-x");
        if (!rc) rc = argv_add(&a, num);
    }
    if (!rc) rc = argv_add(&a, spec->exec ? spec->exec : self);
    for (int i = 0; i < spec->argc && !rc; i++) rc = argv_add(&a, spec->argv[i]);
    anvil_launch_free_hosts(hosts, nhosts);
    free(output);
    if (rc) {
        anvil_launch_free_argv(a.v);
        return -1;
    }
    *argv_out = a.v;
    return 0;
}

/* ---- merging the ranks' output ---- */

struct anvil_launch_merger {
    int nranks, out_fd, err_fd;
    char *log_dir;
    int *log_fd;       /* per rank, -1 until the rank writes */
    anvil_strbuf *line;       /* per rank: [2r] stdout, [2r+1] stderr */
    anvil_strbuf mp_line[2];  /* mpirun's own stdout and stderr */
    anvil_strbuf text;
    int mp_log;
    bool log_failed;
    anvil_strbuf scratch;
};

static void write_quiet(int fd, const char *p, size_t n) {
    /* The terminal may be gone (a closed pipe); the ranks and the logs carry on. */
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static int open_log(anvil_launch_merger *m, const char *name) {
    if (!m->log_dir) return -1;
    size_t n = strlen(m->log_dir) + strlen(name) + 2;
    char *path = malloc(n);
    if (!path) return -1;
    snprintf(path, n, "%s/%s", m->log_dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) anvil_fail("cannot open log %s: %s", path, strerror(errno));
    free(path);
    return fd;
}

static int log_write(anvil_launch_merger *m, int fd, const char *p, size_t n) {
    if (fd < 0 || m->log_failed) return 0;
    if (anvil_write_all(fd, p, n, "rank log")) {
        m->log_failed = true;
        return -1;
    }
    return 0;
}

static int rank_log_fd(anvil_launch_merger *m, int r) {
    if (m->log_fd[r] < 0 && m->log_dir && !m->log_failed) {
        char name[32];
        snprintf(name, sizeof name, "rank_%d.log", r);
        m->log_fd[r] = open_log(m, name);
        if (m->log_fd[r] < 0) m->log_failed = true;
    }
    return m->log_fd[r];
}

static int emit_rank_line(anvil_launch_merger *m, int r, bool err, anvil_strbuf *b) {
    char prefix[32];
    int pn = snprintf(prefix, sizeof prefix, "[rank %d] ", r);
    m->scratch.len = 0;
    if (anvil_strbuf_put(&m->scratch, prefix, (size_t)pn) ||
        anvil_strbuf_put(&m->scratch, anvil_strbuf_text(b), b->len) || anvil_strbuf_putc(&m->scratch, '\n'))
        return -1;
    /* One write per line: lines from different ranks can never interleave. */
    write_quiet(err ? m->err_fd : m->out_fd, m->scratch.s, m->scratch.len);
    int rc = log_write(m, rank_log_fd(m, r), m->scratch.s + pn, m->scratch.len - (size_t)pn);
    b->len = 0;
    return rc;
}

static int emit_mpirun_line(anvil_launch_merger *m, anvil_strbuf *b) {
    if (m->mp_log < 0 && m->log_dir && !m->log_failed && (m->mp_log = open_log(m, "mpirun.log")) < 0)
        m->log_failed = true;
    int rc = anvil_strbuf_put(&m->text, anvil_strbuf_text(b), b->len);
    if (!rc) rc = anvil_strbuf_putc(&m->text, '\n');
    if (!rc) rc = log_write(m, m->mp_log, m->text.s + m->text.len - b->len - 1, b->len + 1);
    b->len = 0;
    return rc;
}

anvil_launch_merger *anvil_launch_merger_new(int nranks, const char *log_dir, int out_fd, int err_fd) {
    anvil_launch_merger *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->nranks = nranks;
    m->out_fd = out_fd;
    m->err_fd = err_fd;
    m->mp_log = -1;
    m->log_fd = malloc(sizeof(int) * (size_t)nranks);
    m->line = calloc(2 * (size_t)nranks, sizeof(anvil_strbuf));
    m->log_dir = log_dir ? strdup(log_dir) : NULL;
    if (!m->log_fd || !m->line || (log_dir && !m->log_dir)) {
        anvil_launch_merger_free(m);
        anvil_fail("launch: out of memory");
        return NULL;
    }
    for (int r = 0; r < nranks; r++) m->log_fd[r] = -1;
    return m;
}

int anvil_launch_merger_feed_rank(anvil_launch_merger *m, int rank, bool err, const char *buf, size_t n) {
    if (rank < 0 || rank >= m->nranks) return anvil_fail("launch: output from rank %d of a %d-rank job", rank, m->nranks);
    anvil_strbuf *b = &m->line[2 * rank + err];
    for (const char *p = buf, *end = buf + n; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t k = (size_t)((nl ? nl : end) - p);
        if (k > MAX_LINE - b->len) k = MAX_LINE - b->len;
        if (anvil_strbuf_put(b, p, k)) return -1;
        p += k;
        if (p < end && *p == '\n') {
            p++;
            if (emit_rank_line(m, rank, err, b)) return -1;
        } else if (b->len >= MAX_LINE && emit_rank_line(m, rank, err, b)) {
            return -1;
        }
    }
    return 0;
}

int anvil_launch_merger_feed_mpirun(anvil_launch_merger *m, bool err, const char *buf, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int rc = buf[i] == '\n' ? emit_mpirun_line(m, &m->mp_line[err])
                                 : anvil_strbuf_putc(&m->mp_line[err], buf[i]);
        if (rc) return -1;
    }
    return 0;
}

int anvil_launch_merger_finish(anvil_launch_merger *m) {
    int rc = 0;
    for (int r = 0; r < m->nranks; r++) {
        for (int s = 0; s < 2; s++)
            if (m->line[2 * r + s].len && emit_rank_line(m, r, s, &m->line[2 * r + s])) rc = -1;
        /* A rank that printed nothing still gets its (empty) file. */
        int fd = rank_log_fd(m, r);
        if (fd >= 0) close(fd);
        m->log_fd[r] = -1;
    }
    for (int s = 0; s < 2; s++)
        if (m->mp_line[s].len && emit_mpirun_line(m, &m->mp_line[s])) rc = -1;
    if (m->mp_log >= 0) close(m->mp_log);
    m->mp_log = -1;
    return rc || m->log_failed ? -1 : 0;
}

const char *anvil_launch_merger_mpirun_text(const anvil_launch_merger *m) { return anvil_strbuf_text(&m->text); }

void anvil_launch_merger_free(anvil_launch_merger *m) {
    if (!m) return;
    if (m->log_fd)
        for (int r = 0; r < m->nranks; r++)
            if (m->log_fd[r] >= 0) close(m->log_fd[r]);
    if (m->line)
        for (int i = 0; i < 2 * m->nranks; i++) free(m->line[i].s);
    if (m->mp_log >= 0) close(m->mp_log);
    free(m->log_fd);
    free(m->line);
    free(m->mp_line[0].s);
    free(m->mp_line[1].s);
    free(m->text.s);
    free(m->scratch.s);
    free(m->log_dir);
    free(m);
}

/* ---- the exit status ---- */

/* The rest of the line after the first occurrence of key, trimmed, into out. */
static bool line_after(const char *text, const char *key, char *out, size_t cap) {
    const char *p = strstr(text, key);
    if (!p) return false;
    p += strlen(key);
    while (*p == ' ') p++;
    size_t n = strcspn(p, "\n");
    while (n > 0 && isspace((unsigned char)p[n - 1])) n--;
    snprintf(out, cap, "%.*s", (int)n, p);
    return true;
}

/* mpirun's first sentence: its non-blank lines up to the first blank or ruler line. */
static void first_paragraph(const char *text, char *out, size_t cap) {
    out[0] = 0;
    size_t used = 0;
    for (const char *p = text; *p && used + 1 < cap; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] == '\n')) {
        int n = (int)strcspn(p, "\n");
        /* Our own relaying of a stop signal is no explanation of a failure. */
        if (!strncmp(p, "mpirun: Forwarding signal", 25)) continue;
        bool rule = n > 0 && (int)strspn(p, "-") >= n, blank = (int)strspn(p, " \t") >= n;
        if (rule || blank) {
            if (used) break;
            continue;
        }
        int w = snprintf(out + used, cap - used, "%s%.*s", used ? " " : "", n, p);
        used = w < 0 ? cap : used + (size_t)w;
    }
}

int anvil_launch_decode_exit(int wait_status, const char *text, char *line, size_t cap) {
    line[0] = 0;
    if (WIFSIGNALED(wait_status)) {
        int s = WTERMSIG(wait_status);
        snprintf(line, cap, "mpirun was killed by signal %d (%s)", s, strsignal(s));
        return 128 + s;
    }
    int code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 1;
    if (code == 0) return 0;
    char a[256], b[256];
    const char *sig = strstr(text, "exited on signal ");
    int rank, pid, signo, ec;
    char host[128], name[64];
    if (sig) {
        const char *p = sig;
        while (p > text && p[-1] != '\n') p--;
        p = strstr(p, "process rank ");
        if (p && sscanf(p, "process rank %d with PID %d on node %127s exited on signal %d (%63[^)])", &rank, &pid, host,
                        &signo, name) == 5) {
            snprintf(line, cap, "rank %d on host %s was killed by signal %d (%s); the other ranks were stopped", rank,
                     host, signo, name);
            return 128 + signo;
        }
    }
    if (line_after(text, "Process name:", a, sizeof a) && line_after(text, "Exit code:", b, sizeof b)) {
        const char *r = strrchr(a, ',');
        int rk = r ? atoi(r + 1) : -1;
        ec = atoi(b);
        if (ec == ANVIL_EXIT_RESUMABLE)
            snprintf(line, cap, "rank %d stopped with status %d (resumable); the job stopped", rk, ec);
        else
            snprintf(line, cap, "rank %d exited with status %d; the other ranks were stopped", rk, ec);
        return ec ? ec : code;
    }
    const char *ab = strstr(text, "MPI_ABORT was invoked on rank ");
    if (ab &&
        sscanf(ab, "MPI_ABORT was invoked on rank %d in communicator %127s with errorcode %d", &rank, host, &ec) == 3) {
        snprintf(line, cap, "rank %d called MPI_Abort (error code %d); the other ranks were stopped", rank, ec);
        return code;
    }
    if (strstr(text, "non-zero exit code")) {
        /* Ranks failing together can make mpirun 4.1.4 skip the report naming the first. */
        if (code == ANVIL_EXIT_RESUMABLE)
            snprintf(line, cap, "the ranks stopped with status %d (resumable)", code);
        else
            snprintf(line, cap, "a rank exited with status %d; the other ranks were stopped", code);
        return code;
    }
    if (strstr(text, "unable to reliably start one or more daemons")) {
        const char *ssh = strstr(text, "ssh:");
        if (ssh && line_after(ssh, "ssh:", a, sizeof a))
            snprintf(line, cap, "could not start Open MPI on the remote hosts: ssh: %s", a);
        else
            snprintf(line, cap, "could not start Open MPI on the remote hosts (check ssh to them and that Open MPI is "
                                "installed there)");
        return 1;
    }
    if (strstr(text, "unable to launch the specified application") && line_after(text, "Executable:", a, sizeof a)) {
        if (!line_after(text, "Node:", b, sizeof b)) snprintf(b, sizeof b, "?");
        snprintf(line, cap, "cannot execute '%s' on host %s", a, b);
        return 1;
    }
    first_paragraph(text, a, sizeof a);
    if (a[0])
        snprintf(line, cap, "mpirun failed (status %d): %s", code, a);
    else
        snprintf(line, cap, "mpirun exited with status %d", code);
    return code;
}

/* ---- running the job ---- */

static char *find_in_path(const char *prog) {
    const char *path = getenv("PATH");
    if (!path) return NULL;
    for (const char *p = path;;) {
        size_t n = strcspn(p, ":");
        size_t len = n + strlen(prog) + 2;
        char *cand = malloc(len);
        if (!cand) return NULL;
        snprintf(cand, len, "%.*s/%s", (int)n, n ? p : ".", prog);
        struct stat st;
        if (!stat(cand, &st) && S_ISREG(st.st_mode) && !access(cand, X_OK)) return cand;
        free(cand);
        if (!p[n]) return NULL;
        p += n + 1;
    }
}

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    int saved = errno;
    unsigned char s = (unsigned char)sig;
    if (write(sig_pipe[1], &s, 1) < 0) {
        /* Full pipe: enough signals are already queued. */
    }
    errno = saved;
}

static const int relayed[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

static void set_signals(bool on, struct sigaction *old) {
    for (size_t i = 0; i < sizeof relayed / sizeof *relayed; i++) {
        if (on) {
            struct sigaction sa = {0};
            sa.sa_handler = on_signal;
            sigemptyset(&sa.sa_mask);
            sa.sa_flags = SA_RESTART;
            sigaction(relayed[i], &sa, &old[i]);
        } else {
            sigaction(relayed[i], &old[i], NULL);
        }
    }
}

static int resolve_hosts(const char *spec) {
    anvil_launch_host *hosts;
    int n;
    if (anvil_launch_parse_hosts(spec, &hosts, &n)) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        struct addrinfo hints = {0}, *res;
        hints.ai_socktype = SOCK_STREAM;
        int e = getaddrinfo(hosts[i].name, NULL, &hints, &res);
        if (e) rc = anvil_fail("host '%s' (--hosts) cannot be resolved: %s", hosts[i].name, gai_strerror(e));
        else freeaddrinfo(res);
    }
    anvil_launch_free_hosts(hosts, n);
    return rc;
}

static void drain(int *fd, anvil_launch_merger *m, bool err, int *rc) {
    char buf[65536];
    ssize_t r = read(*fd, buf, sizeof buf);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (r <= 0) {
        close(*fd);
        *fd = -1;
        return;
    }
    if (anvil_launch_merger_feed_mpirun(m, err, buf, (size_t)r)) *rc = -1;
}

/* The files mpirun writes for --output-filename DIR:nocopy,
 * DIR/<job>/rank.<R, zero-padded>/{stdout,stderr}, read as they grow. */
typedef struct {
    char *dir;
    int nranks, open;
    int *fd;  /* [2r] stdout, [2r+1] stderr; -1 until the file exists */
    int seen; /* ranks with a file */
} rank_files;

static void rank_files_scan(rank_files *t) {
    if (t->open == 2 * t->nranks) return;
    DIR *d = opendir(t->dir);
    if (!d) return;
    struct dirent *job;
    while ((job = readdir(d))) {
        if (job->d_name[0] == '.') continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", t->dir, job->d_name);
        DIR *jd = opendir(path);
        if (!jd) continue;
        struct dirent *e;
        while ((e = readdir(jd))) {
            char *end;
            long r = strncmp(e->d_name, "rank.", 5) ? -1 : strtol(e->d_name + 5, &end, 10);
            if (r < 0 || r >= t->nranks || *end || end == e->d_name + 5) continue;
            int had = t->fd[2 * r] >= 0 || t->fd[2 * r + 1] >= 0;
            for (int s = 0; s < 2; s++) {
                if (t->fd[2 * r + s] >= 0) continue;
                char f[PATH_MAX + 300];
                snprintf(f, sizeof f, "%s/%s/%s", path, e->d_name, s ? "stderr" : "stdout");
                if ((t->fd[2 * r + s] = open(f, O_RDONLY | O_CLOEXEC)) >= 0) t->open++;
            }
            if (!had && (t->fd[2 * r] >= 0 || t->fd[2 * r + 1] >= 0)) t->seen++;
        }
        closedir(jd);
    }
    closedir(d);
}

static int rank_files_read(rank_files *t, anvil_launch_merger *m) {
    char buf[65536];
    for (int i = 0; i < 2 * t->nranks; i++) {
        ssize_t r;
        while (t->fd[i] >= 0 && (r = read(t->fd[i], buf, sizeof buf)) > 0)
            if (anvil_launch_merger_feed_rank(m, i / 2, i % 2, buf, (size_t)r)) return -1;
    }
    return 0;
}

static void tell_started(const anvil_launch_spec *spec, const rank_files *t, int *told) {
    if (t->seen == *told) return;
    *told = t->seen;
    if (spec->started) spec->started(spec->started_ctx, t->seen, spec->nranks);
}

int anvil_launch_preflight(const anvil_launch_spec *spec) {
    if (anvil_launch_check(spec)) return -1;
    char *mpirun = find_in_path("mpirun");
    if (!mpirun) return anvil_fail("mpirun not found in PATH: install Open MPI (scripts/deps.sh installs openmpi-bin)");
    free(mpirun);
    return spec->hosts ? resolve_hosts(spec->hosts) : 0;
}

/* One run of mpirun: what anvil_launch_run sets up, watches and tears down. */
typedef struct {
    const anvil_launch_spec *spec;
    char self[PATH_MAX], abs_log[PATH_MAX], raw[PATH_MAX + 64];
    char **argv, *mpirun, *log_dir;
    rank_files files;
    anvil_launch_merger *m;
    int out[2], err[2];
    pid_t pid;
    int told; /* ranks reported started */
} launch_run;

/* The log folder, mpirun's command line, the merger and the pipes: 0, or -1 after anvil_fail. */
static int run_prepare(launch_run *L) {
    const anvil_launch_spec *spec = L->spec;
    ssize_t sn = readlink("/proc/self/exe", L->self, sizeof L->self - 1);
    if (sn <= 0) return anvil_fail("cannot find the anvil binary (/proc/self/exe): %s", strerror(errno));
    L->self[sn] = 0;
    L->log_dir = spec->log_dir ? strdup(spec->log_dir) : anvil_launch_default_log_dir(spec);
    if (!L->log_dir || !(L->files.fd = malloc(sizeof(int) * 2 * (size_t)spec->nranks)))
        return anvil_fail("launch: out of memory");
    for (int i = 0; i < 2 * spec->nranks; i++) L->files.fd[i] = -1;
    if (anvil_launch_preflight(spec) || !(L->mpirun = find_in_path("mpirun")) || anvil_mkdir_p(L->log_dir)) return -1;
    /* Absolute, because the daemons on other hosts do not start in this folder. */
    if (!realpath(L->log_dir, L->abs_log)) return anvil_fail("log folder %s: %s", L->log_dir, strerror(errno));
    snprintf(L->raw, sizeof L->raw, "%s/.mpirun-output-%d", L->abs_log, (int)getpid());
    if (anvil_launch_build_argv(spec, L->self, L->raw, anvil_launch_local_cores(), geteuid() == 0, environ, &L->argv))
        return -1;
    if (!(L->m = anvil_launch_merger_new(spec->nranks, L->log_dir, STDOUT_FILENO, STDERR_FILENO))) return -1;
    if (pipe2(L->out, O_CLOEXEC) || pipe2(L->err, O_CLOEXEC) ||
        (sig_pipe[0] < 0 && pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK)))
        return anvil_fail("launch: pipe: %s", strerror(errno));
    return 0;
}

/* Forks mpirun, its output into the pipes: 0, or -1 after anvil_fail. */
static int run_spawn(launch_run *L) {
    pid_t parent = getpid();
    L->pid = fork();
    if (L->pid < 0) return anvil_fail("launch: fork: %s", strerror(errno));
    if (L->pid == 0) {
        /* Its own process group, so a terminal's Ctrl-C reaches only the
         * launcher, which decides what the job gets; and it dies with the launcher. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(1);
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0) dup2(null, STDIN_FILENO);
        dup2(L->out[1], STDOUT_FILENO);
        dup2(L->err[1], STDERR_FILENO);
        execv(L->mpirun, L->argv);
        dprintf(STDERR_FILENO, "cannot run %s: %s\n", L->mpirun, strerror(errno));
        _exit(127);
    }
    close(L->out[1]);
    close(L->err[1]);
    L->out[1] = L->err[1] = -1;
    return 0;
}

/* Merges the ranks' and mpirun's output and relays stop signals until mpirun has exited and its pipes
 * are closed or quiet: mpirun's wait status into *status, the signal of a second stop (0: none) into
 * *hard_stop, and -1 into *merge_rc when some output could not be kept. */
static void run_pump(launch_run *L, int *status, int *hard_stop, int *merge_rc) {
    const anvil_launch_spec *spec = L->spec;
    int stops = 0, quiet = 0;
    bool exited = false;
    while (L->out[0] >= 0 || L->err[0] >= 0) {
        struct pollfd p[3] = {{L->out[0], POLLIN, 0}, {L->err[0], POLLIN, 0}, {sig_pipe[0], POLLIN, 0}};
        /* The rank files cannot be polled; 100 ms is their latency. */
        int pr = poll(p, 3, 100);
        if (pr < 0 && errno != EINTR) break;
        if (!exited && waitpid(L->pid, status, WNOHANG) == L->pid) exited = true;
        rank_files_scan(&L->files);
        tell_started(spec, &L->files, &L->told);
        if (rank_files_read(&L->files, L->m)) *merge_rc = -1;
        /* mpirun is gone and whatever still holds its pipes (an ssh) has been quiet for 2 s. */
        if (pr == 0 && exited && ++quiet >= 20) break;
        if (pr <= 0) continue;
        quiet = 0;
        if (p[0].revents) drain(&L->out[0], L->m, false, merge_rc);
        if (p[1].revents) drain(&L->err[0], L->m, true, merge_rc);
        unsigned char s;
        while (p[2].revents && read(sig_pipe[0], &s, 1) == 1) {
            int fwd = s;
            if (s == SIGINT || s == SIGTERM || s == SIGHUP) {
                fwd = stops++ ? SIGTERM : SIGUSR1;
                if (fwd == SIGTERM && !*hard_stop) *hard_stop = s;
            }
            if (!exited) kill(L->pid, fwd);
        }
    }
    if (!exited) waitpid(L->pid, status, 0);
}

/* What the ranks wrote after the last look, and their unterminated last lines. */
static void run_collect_rest(launch_run *L, int *merge_rc) {
    rank_files_scan(&L->files);
    tell_started(L->spec, &L->files, &L->told);
    if (rank_files_read(&L->files, L->m) || anvil_launch_merger_finish(L->m)) *merge_rc = -1;
}

/* The launcher's exit status and line from how mpirun ended and what reached the logs. */
static int run_verdict(const launch_run *L, int status, int hard_stop, int merge_rc, char *line, size_t cap) {
    const anvil_launch_spec *spec = L->spec;
    int rc = anvil_launch_decode_exit(status, anvil_launch_merger_mpirun_text(L->m), line, cap);
    if (hard_stop && rc != 0 && rc != ANVIL_EXIT_RESUMABLE) {
        snprintf(line, cap, "stopped at once by a second stop signal (%s): the ranks were terminated",
                 strsignal(hard_stop));
        rc = 128 + hard_stop;
    }
    if (merge_rc && !line[0])
        snprintf(line, cap, "the job succeeded but its logs in %s are incomplete: %s", L->log_dir, anvil_errmsg());
    int unseen = 0, first_unseen = -1;
    for (int r = 0; r < spec->nranks; r++)
        if (L->files.fd[2 * r] < 0 && !unseen++) first_unseen = r;
    if (unseen && !line[0])
        snprintf(line, cap, "no output reached %s from %d rank(s), the first rank %d: with --hosts it must be on a "
                 "filesystem the hosts share", L->log_dir, unseen, first_unseen);
    return rc;
}

static void run_cleanup(launch_run *L) {
    for (int i = 0; i < 2; i++) {
        if (L->out[i] >= 0) close(L->out[i]);
        if (L->err[i] >= 0) close(L->err[i]);
    }
    if (L->files.fd)
        for (int i = 0; i < 2 * L->spec->nranks; i++)
            if (L->files.fd[i] >= 0) close(L->files.fd[i]);
    /* Everything in there has been copied into rank_<R>.log. A leftover is
     * harmless and must not replace the message of a failed launch. */
    if (L->raw[0]) {
        char why[1024];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        if (anvil_remove_tree(L->raw)) anvil_fail("%s", why);
    }
    free(L->files.fd);
    anvil_launch_merger_free(L->m);
    free(L->log_dir);
    free(L->mpirun);
    anvil_launch_free_argv(L->argv);
}

int anvil_launch_run(const anvil_launch_spec *spec, char *line, size_t cap) {
    line[0] = 0;
    launch_run L = {.spec = spec, .out = {-1, -1}, .err = {-1, -1}, .pid = -1};
    L.files = (rank_files){.nranks = spec->nranks, .dir = L.raw};
    int rc = -1;
    if (!run_prepare(&L) && !run_spawn(&L)) {
        struct sigaction old[sizeof relayed / sizeof *relayed];
        set_signals(true, old);
        signal(SIGPIPE, SIG_IGN);
        int status = 0, hard_stop = 0, merge_rc = 0;
        run_pump(&L, &status, &hard_stop, &merge_rc);
        set_signals(false, old);
        run_collect_rest(&L, &merge_rc);
        rc = run_verdict(&L, status, hard_stop, merge_rc, line, cap);
    }
    run_cleanup(&L);
    return rc;
}

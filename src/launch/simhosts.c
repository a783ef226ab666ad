/* Simulated hosts (launch/simhosts.h): made and removed with iproute2's ip, entered with setns. */
#include "launch/simhosts.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "core/strbuf.h"

#define NETNS_DIR "/run/netns"

void anvil_simhosts_init(anvil_simhosts *s, const char *state_dir, int n) {
    /* FNV-1a: a stable hash of the path, the same in every daemon of the folder. */
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)state_dir; *p; p++) h = (h ^ *p) * 16777619u;
    uint32_t mixed = h * 2654435761u;
    s->n = n;
    s->tag = h & 0xffffff;
    /* 10.64.0.0 to 10.127.255.0: clear of the 10.0.x and 10.1.x nets that tools pick first. */
    s->net[0] = (unsigned char)(64 + (h >> 24) % 64);
    s->net[1] = (unsigned char)(mixed >> 24);
}

void anvil_simhosts_netns(const anvil_simhosts *s, int k, char *name, size_t cap) {
    snprintf(name, cap, "anvil-%06x-%d", s->tag, k);
}

void anvil_simhosts_link(const anvil_simhosts *s, int k, char *name, size_t cap) {
    snprintf(name, cap, "av%06xh%d", s->tag, k);
}

static void bridge_name(const anvil_simhosts *s, char *name, size_t cap) { snprintf(name, cap, "av%06xbr", s->tag); }

void anvil_simhosts_addr(const anvil_simhosts *s, int k, char *addr, size_t cap) {
    snprintf(addr, cap, "10.%u.%u.%d", s->net[0], s->net[1], k + 1);
}

void anvil_simhosts_prefix(const anvil_simhosts *s, char *prefix, size_t cap) {
    snprintf(prefix, cap, "anvil-%06x", s->tag);
}

void anvil_simhosts_subnet(const anvil_simhosts *s, char *cidr, size_t cap) {
    snprintf(cidr, cap, "10.%u.%u.0/24", s->net[0], s->net[1]);
}

/* Everything ip says on fd, read to its end (so that ip never blocks on a full pipe), its first line
 * kept in said. */
static void first_line(int fd, char *said, size_t cap) {
    char buf[4096];
    size_t len = 0;
    for (ssize_t got; (got = read(fd, buf, sizeof buf)) != 0;) {
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) break;
        size_t keep = (size_t)got < cap - 1 - len ? (size_t)got : cap - 1 - len;
        memcpy(said + len, buf, keep);
        len += keep;
    }
    said[len] = 0;
    said[strcspn(said, "\n")] = 0;
}

/* Runs `ip [-n netns] [-force] -batch -` on the commands in batch: 0, or -1 after anvil_fail with ip's
 * first line. With force, ip goes on past a failed command (removals of what is already gone) and
 * its failures are no error. */
static int ip_batch(const char *netns, const char *batch, bool force, const char *what) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC)) return anvil_fail("%s: pipe: %s", what, strerror(errno));
    if (pipe2(out, O_CLOEXEC)) {
        int e = errno;
        close(in[0]);
        close(in[1]);
        return anvil_fail("%s: pipe: %s", what, strerror(e));
    }
    const char *argv[8];
    int n = 0;
    argv[n++] = "ip";
    if (netns) {
        argv[n++] = "-n";
        argv[n++] = netns;
    }
    if (force) argv[n++] = "-force";
    argv[n++] = "-batch";
    argv[n++] = "-";
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDERR_FILENO);
    pid_t pid;
    int e = posix_spawnp(&pid, "ip", &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    /* The batches are a few hundred bytes: the pipe takes them whole before ip reads. */
    bool wrote = !e && !anvil_write_all(in[1], batch, strlen(batch), "ip -batch");
    close(in[1]);
    char said[512];
    first_line(out[0], said, sizeof said);
    close(out[0]);
    if (e) return anvil_fail("%s: cannot run ip (iproute2): %s", what, strerror(e));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if ((status || !wrote) && !force)
        return anvil_fail("%s: ip -batch%s%s: %s", what, netns ? " in " : "", netns ? netns : "",
                          said[0] ? said : "failed without a word");
    return 0;
}

/* k when name is prefix followed by a host index alone, else -1. */
static int index_after(const char *name, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) || !name[n]) return -1;
    char *end;
    long k = strtol(name + n, &end, 10);
    return *end || k < 0 || k >= ANVIL_SIMHOSTS_MAX || name[n] == '+' || name[n] == '-' ? -1 : (int)k;
}

/* Appends to b, for ip -batch, the removal of the namespaces (from /run/netns) and links (from
 * /sys/class/net) of this T's hosts numbered from on, and of the bridge when from is 0. */
static void put_removals(const anvil_simhosts *s, int from, anvil_strbuf *b) {
    char netns[32], link[32];
    snprintf(netns, sizeof netns, "anvil-%06x-", s->tag);
    snprintf(link, sizeof link, "av%06xh", s->tag);
    const char *dirs[] = {NETNS_DIR, "/sys/class/net"}, *prefixes[] = {netns, link};
    const char *verbs[] = {"netns del", "link del"};
    for (int i = 0; i < 2; i++) {
        DIR *d = opendir(dirs[i]);
        for (struct dirent *e; d && (e = readdir(d));)
            if (index_after(e->d_name, prefixes[i]) >= from) anvil_strbuf_printf(b, "%s %s\n", verbs[i], e->d_name);
        if (d) closedir(d);
    }
    bridge_name(s, link, sizeof link);
    if (!from && if_nametoindex(link)) anvil_strbuf_printf(b, "link del %s\n", link);
}

void anvil_simhosts_down(const anvil_simhosts *s) {
    anvil_strbuf b = {0};
    put_removals(s, 0, &b);
    if (b.len) ip_batch(NULL, b.s, true, "removing the simulated hosts");
    anvil_strbuf_free(&b);
}

/* Whether the bridge and every host's namespace and link exist. */
static bool whole(const anvil_simhosts *s) {
    char name[32], path[64];
    bridge_name(s, name, sizeof name);
    bool ok = if_nametoindex(name) != 0;
    for (int k = 0; ok && k < s->n; k++) {
        anvil_simhosts_link(s, k, name, sizeof name);
        ok = if_nametoindex(name) != 0;
        anvil_simhosts_netns(s, k, name, sizeof name);
        snprintf(path, sizeof path, NETNS_DIR "/%s", name);
        ok = ok && !access(path, F_OK);
    }
    return ok;
}

/* The bridge, then each host's namespace and veth pair (from the daemon's namespace), then each
 * host's address (inside its namespace). */
static int make(const anvil_simhosts *s) {
    char br[32], netns[32], link[32], addr[32];
    bridge_name(s, br, sizeof br);
    anvil_strbuf b = {0};
    anvil_strbuf_printf(&b, "link add %s type bridge\naddr add 10.%u.%u.254/24 dev %s\nlink set %s up\n", br,
                        s->net[0], s->net[1], br, br);
    for (int k = 0; k < s->n; k++) {
        anvil_simhosts_netns(s, k, netns, sizeof netns);
        anvil_simhosts_link(s, k, link, sizeof link);
        anvil_strbuf_printf(&b, "netns add %s\nlink add %s type veth peer name eth0 netns %s\nlink set %s master %s up\n",
                            netns, link, netns, link, br);
    }
    int rc = b.oom ? -1 : ip_batch(NULL, b.s, false, "making the simulated hosts");
    for (int k = 0; !rc && k < s->n; k++) {
        anvil_simhosts_netns(s, k, netns, sizeof netns);
        anvil_simhosts_addr(s, k, addr, sizeof addr);
        b.len = 0;
        anvil_strbuf_printf(&b, "addr add %s/24 dev eth0\nlink set eth0 up\nlink set lo up\n", addr);
        rc = b.oom ? -1 : ip_batch(netns, b.s, false, "making the simulated hosts");
    }
    anvil_strbuf_free(&b);
    return rc;
}

int anvil_simhosts_up(const anvil_simhosts *s, bool *kept) {
    *kept = false;
    anvil_strbuf b = {0};
    put_removals(s, s->n, &b);
    if (b.len) ip_batch(NULL, b.s, true, "removing the simulated hosts past --sim-hosts");
    anvil_strbuf_free(&b);
    if (whole(s)) {
        *kept = true;
        return 0;
    }
    /* Half of them (a daemon killed while it made them): made anew. */
    anvil_simhosts_down(s);
    if (!make(s)) return 0;
    char why[1024];
    snprintf(why, sizeof why, "%s", anvil_errmsg());
    anvil_simhosts_down(s);
    return anvil_fail("%s", why);
}

int anvil_simhosts_set_link(const char *link, bool up) {
    if (!if_nametoindex(link)) return 1;
    char batch[64];
    snprintf(batch, sizeof batch, "link set %s %s\n", link, up ? "up" : "down");
    return ip_batch(NULL, batch, false, up ? "bringing a simulated host's link up" : "cutting a simulated host's link");
}

int anvil_simhosts_rsh(const char *prefix, const char *address, const char *command) {
    unsigned a, b, c, d;
    char end;
    if (sscanf(address, "%u.%u.%u.%u%c", &a, &b, &c, &d, &end) != 4 || a != 10 || b > 255 || c > 255 || d < 1 ||
        d > ANVIL_SIMHOSTS_MAX)
        return anvil_fail("'%s' is not a simulated host's address (10.X.Y.K, K in 1..%d)", address,
                          ANVIL_SIMHOSTS_MAX);
    char path[PATH_MAX];
    snprintf(path, sizeof path, NETNS_DIR "/%s-%u", prefix, d - 1);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return anvil_fail("no simulated host at %s: %s: %s", address, path, strerror(errno));
    int rc = setns(fd, CLONE_NEWNET);
    int e = errno;
    close(fd);
    if (rc) return anvil_fail("cannot enter %s: %s", path, strerror(e));
    execl("/bin/sh", "sh", "-c", command, (char *)NULL);
    return anvil_fail("/bin/sh: %s", strerror(errno));
}

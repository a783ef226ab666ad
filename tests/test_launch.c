/* The launcher's pure parts, without running mpirun: --hosts parsing, the
 * exact mpirun command line, the default log folder, the merger (ranks'
 * output cut at every size and interleaved must give each rank's lines
 * whole, prefixed and in order, and the same per-rank logs), and the exit
 * decoding of mpirun 4.1.4's recorded messages. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "core/rng.h"
#include "launch/launch.h"
#include "testutil.h"

static void test_hosts(void) {
    anvil_launch_host *h;
    int n;
    CHECK(anvil_launch_parse_hosts("node-1.example:4,node_2,10.0.0.3:16", &h, &n) == 0);
    CHECK(n == 3);
    if (n == 3) {
        CHECK(!strcmp(h[0].name, "node-1.example") && h[0].slots == 4);
        CHECK(!strcmp(h[1].name, "node_2") && h[1].slots == 1);
        CHECK(!strcmp(h[2].name, "10.0.0.3") && h[2].slots == 16);
    }
    anvil_launch_free_hosts(h, n);
    static const struct {
        const char *spec, *named;
    } bad[] = {{"", "entry 1 ''"},         {"a:", "'a:'"},         {":2", "':2'"},     {"a:0", "'a:0'"},
               {"a:2,,b", "entry 2 ''"},   {"a:2,", "entry 2"},    {"a:-1", "'a:-1'"}, {"a:2:3", "'a:2:3'"},
               {"a b:2", "'a b:2'"},       {"a:1x", "'a:1x'"},     {"a:99999999999", "'a:99999999999'"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        h = (anvil_launch_host *)1;
        if (anvil_launch_parse_hosts(bad[i].spec, &h, &n) == 0) {
            t_fail(__FILE__, __LINE__, "hosts '%s' accepted", bad[i].spec);
            anvil_launch_free_hosts(h, n);
        } else if (!strstr(anvil_errmsg(), bad[i].named) || h != NULL || n != 0) {
            t_fail(__FILE__, __LINE__, "hosts '%s': message '%s' does not name %s", bad[i].spec, anvil_errmsg(),
                   bad[i].named);
        }
    }
}

static char *join(char **argv) {
    size_t len = 1;
    for (char **p = argv; *p; p++) len += strlen(*p) + 3;
    char *s = calloc(len, 1);
    for (char **p = argv; *p; p++) {
        if (p != argv) strcat(s, " ");
        bool quote = strchr(*p, ' ') != NULL;
        if (quote) strcat(s, "'");
        strcat(s, *p);
        if (quote) strcat(s, "'");
    }
    return s;
}

static void expect_argv(int line, const anvil_launch_spec *spec, int cores, bool root, char *const *env,
                        const char *want) {
    char **argv;
    if (anvil_launch_build_argv(spec, "/opt/anvil", "/logs/.out", cores, root, env, &argv)) {
        t_fail(__FILE__, line, "build_argv failed: %s", anvil_errmsg());
        return;
    }
    char *got = join(argv);
    if (strcmp(got, want)) t_fail(__FILE__, line, "mpirun argv\n  got:  %s\n  want: %s", got, want);
    free(got);
    anvil_launch_free_argv(argv);
}

static void test_argv(void) {
    char *cmd[] = {"train", "--preset", "tiny", "--out", "runs/x"};
    char *env[] = {"PATH=/usr/bin", "HOME=/root", "OMP_NUM_THREADS=3", "OPENBLAS_CORETYPE=Haswell", "ANVIL_DEBUG=1",
                   "OMPI_MCA_btl=self", "LD_LIBRARY_PATH=/l", "ANVIL_=empty-suffix", "PATHX=no", NULL};
    anvil_launch_spec s = {.nranks = 4, .argc = 5, .argv = cmd};
    expect_argv(__LINE__, &s, 2, true, env,
                "mpirun --output-filename /logs/.out:nocopy --stdin none --bind-to none -n 4 --oversubscribe --allow-run-as-root --mca odls_base_sigkill_timeout 0 -x PATH -x "
                "OMP_NUM_THREADS -x OPENBLAS_CORETYPE -x ANVIL_DEBUG -x LD_LIBRARY_PATH /opt/anvil train --preset "
                "tiny --out runs/x");
    /* Fewer ranks than cores: no oversubscription; not root; the threads split the cores. */
    char *env2[] = {"PATH=/usr/bin", NULL};
    s.nranks = 2;
    expect_argv(__LINE__, &s, 8, false, env2,
                "mpirun --output-filename /logs/.out:nocopy --stdin none --bind-to none -n 2 --mca odls_base_sigkill_timeout 0 -x PATH -x OMP_NUM_THREADS=4 /opt/anvil train --preset "
                "tiny --out runs/x");
    s.nranks = 3;
    expect_argv(__LINE__, &s, 2, false, env2,
                "mpirun --output-filename /logs/.out:nocopy --stdin none --bind-to none -n 3 --oversubscribe --mca odls_base_sigkill_timeout 0 -x PATH -x OMP_NUM_THREADS=1 /opt/anvil "
                "train --preset tiny --out runs/x");
    /* Hosts: their slots decide, ssh cannot hang, and the thread count is left to the user. */
    s.nranks = 8;
    s.hosts = "h1:4,h2:4";
    s.tcp = true;
    expect_argv(__LINE__, &s, 2, false, env2,
                "mpirun --output-filename /logs/.out:nocopy --stdin none --bind-to none -n 8 --host h1:4,h2:4 --mca plm_rsh_args '-o BatchMode=yes -o "
                "ConnectTimeout=15' --mca odls_base_sigkill_timeout 0 --mca pml ob1 --mca btl tcp,self -x PATH /opt/anvil train --preset tiny --out "
                "runs/x");
    /* The user's own MCA settings win over anvil's. */
    char *env3[] = {"OMPI_MCA_plm_rsh_args=-p 2222", "OMPI_MCA_odls_base_sigkill_timeout=3", NULL};
    s.nranks = 9;
    s.oversubscribe = true;
    s.tcp = false;
    s.hosts = "h1";
    expect_argv(__LINE__, &s, 2, false, env3,
                "mpirun --output-filename /logs/.out:nocopy --stdin none --bind-to none -n 9 --oversubscribe --host h1:1 /opt/anvil train --preset "
                "tiny --out runs/x");
    /* --exec: the program replaces the anvil binary; its arguments may be empty. */
    anvil_launch_spec e = {.nranks = 1, .exec = "./job.sh"};
    expect_argv(__LINE__, &e, 2, false, env2,
                "mpirun --output-filename /logs/.out:nocopy --stdin none --bind-to none -n 1 --mca odls_base_sigkill_timeout 0 -x PATH -x OMP_NUM_THREADS=2 ./job.sh");

    char *launch[] = {"launch", "-n", "2"};
    anvil_launch_spec bad[] = {
        {.nranks = 0, .argc = 5, .argv = cmd},
        {.nranks = 2},
        {.nranks = 2, .argc = 3, .argv = launch},
        {.nranks = 9, .hosts = "h1:4,h2:4", .argc = 5, .argv = cmd},
        {.nranks = 2, .hosts = "h1:4,", .argc = 5, .argv = cmd},
        {.nranks = 2, .exec = ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char **argv = (char **)1;
        CHECK(anvil_launch_check(&bad[i]) == -1);
        CHECK(anvil_launch_build_argv(&bad[i], "/opt/anvil", "/logs/.out", 2, false, env2, &argv) == -1 && argv == NULL);
    }
    CHECK(strstr(anvil_errmsg(), "--exec") != NULL);
    char **argv = (char **)1;
    CHECK(anvil_launch_build_argv(&e, "/opt/anvil", "/logs:x/.out", 2, false, env2, &argv) == -1 && argv == NULL);
    CHECK(strstr(anvil_errmsg(), "/logs:x/.out") != NULL);
}

static void test_log_dir(void) {
    char *cmd[] = {"train", "--steps", "5", "--out", "runs/a b"};
    anvil_launch_spec s = {.nranks = 2, .argc = 5, .argv = cmd};
    char *d = anvil_launch_default_log_dir(&s);
    CHECK(d && !strcmp(d, "runs/a b/logs"));
    free(d);
    char *info[] = {"info", "--out", "x"};
    anvil_launch_spec t = {.nranks = 2, .argc = 3, .argv = info};
    d = anvil_launch_default_log_dir(&t);
    CHECK(d && !strncmp(d, "anvil-logs/", 11) && strlen(d) == strlen("anvil-logs/20260101-120000"));
    free(d);
    anvil_launch_spec x = {.nranks = 2, .exec = "train", .argc = 5, .argv = cmd};
    d = anvil_launch_default_log_dir(&x);
    CHECK(d && !strncmp(d, "anvil-logs/", 11));
    free(d);
}

/* What the ranks and mpirun write: escapes, tabs and UTF-8 pass through,
 * rank 1 never ends its last line, rank 2 says nothing. */
static const struct {
    int rank; /* -1: mpirun */
    bool err;
    const char *text;
} streams[] = {
    {0, false, "out <&> 0\npartial 0\n"},
    {0, true, "err 0\n"},
    {1, false, "out 1\ntab\t\"q\" \xc3\xa9\n\ntwo\nunterminated"},
    {-1, true,
     "--------------------------------------------------------------------------\n"
     "Primary job  terminated normally, but 1 process returned\n"
     "ssh: Could not resolve hostname nosuchhost: Name or service not known"},
};
static const char *want_rank[3] = {"[rank 0] out <&> 0\n[rank 0] partial 0\n",
                                   ("[rank 1] out 1\n[rank 1] tab\t\"q\" \xc3\xa9\n[rank 1] \n[rank 1] two\n"
                                    "[rank 1] unterminated\n"),
                                   ""};
static const char *want_err = "[rank 0] err 0\n";
static const char *want_log1 = "out 1\ntab\t\"q\" \xc3\xa9\n\ntwo\nunterminated\n";
static const char *want_mpirun =
    "--------------------------------------------------------------------------\n"
    "Primary job  terminated normally, but 1 process returned\n"
    "ssh: Could not resolve hostname nosuchhost: Name or service not known\n";

static char *slurp(const char *path) {
    char *d;
    size_t n;
    if (anvil_read_file(path, &d, &n)) return strdup("<missing>");
    char *s = malloc(n + 1);
    memcpy(s, d, n);
    s[n] = 0;
    free(d);
    return s;
}

static void check_text(int line, const char *what, const char *got, const char *want) {
    if (strcmp(got, want)) t_fail(__FILE__, line, "%s:\n--- got\n%s--- want\n%s", what, got, want);
}

static void check_file(int line, const char *what, const char *path, const char *want) {
    char *got = slurp(path);
    check_text(line, what, got, want);
    free(got);
}

/* The lines of text that start with prefix, in order. */
static char *lines_with(const char *text, const char *prefix) {
    char *out = calloc(strlen(text) + 1, 1);
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n") + 1;
        if (!strncmp(p, prefix, strlen(prefix))) strncat(out, p, n);
        p += n;
    }
    return out;
}

/* Feeds every stream round-robin, `piece` bytes at a time (0: random sizes),
 * so the ranks' lines arrive cut and interleaved, and checks every output. */
static void merge_once(const char *dir, size_t piece, anvil_rng *rng) {
    char path[512];
    snprintf(path, sizeof path, "%s/out", dir);
    int out = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    snprintf(path, sizeof path, "%s/err", dir);
    int err = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    for (const char *f = "rank_0.log\0rank_1.log\0rank_2.log\0mpirun.log\0"; *f; f += strlen(f) + 1) {
        snprintf(path, sizeof path, "%s/logs/%s", dir, f);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/logs", dir);
    anvil_launch_merger *m = anvil_launch_merger_new(3, path, out, err);
    CHECK(m != NULL);
    if (!m) return;
    enum { NS = sizeof streams / sizeof *streams };
    size_t at[NS] = {0};
    for (bool more = true; more;) {
        more = false;
        for (int i = 0; i < NS; i++) {
            size_t len = strlen(streams[i].text), k = piece ? piece : 1 + anvil_rng_u64(rng) % 40;
            if (k > len - at[i]) k = len - at[i];
            const char *p = streams[i].text + at[i];
            if (streams[i].rank < 0) CHECK(anvil_launch_merger_feed_mpirun(m, streams[i].err, p, k) == 0);
            else CHECK(anvil_launch_merger_feed_rank(m, streams[i].rank, streams[i].err, p, k) == 0);
            at[i] += k;
            more |= at[i] < len;
        }
    }
    CHECK(anvil_launch_merger_feed_rank(m, 3, false, "x\n", 2) == -1);
    CHECK(anvil_launch_merger_finish(m) == 0);
    check_text(__LINE__, "mpirun text", anvil_launch_merger_mpirun_text(m), want_mpirun);
    anvil_launch_merger_free(m);
    close(out);
    close(err);
    snprintf(path, sizeof path, "%s/out", dir);
    char *got = slurp(path);
    CHECK(strlen(got) == strlen(want_rank[0]) + strlen(want_rank[1]));
    for (int r = 0; r < 3; r++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "[rank %d] ", r);
        char *mine = lines_with(got, prefix);
        check_text(__LINE__, prefix, mine, want_rank[r]);
        free(mine);
    }
    free(got);
    snprintf(path, sizeof path, "%s/err", dir);
    check_file(__LINE__, "merged stderr", path, want_err);
    snprintf(path, sizeof path, "%s/logs/rank_0.log", dir);
    got = slurp(path);
    CHECK(!strcmp(got, "out <&> 0\npartial 0\nerr 0\n") || !strcmp(got, "out <&> 0\nerr 0\npartial 0\n") ||
          !strcmp(got, "err 0\nout <&> 0\npartial 0\n"));
    free(got);
    snprintf(path, sizeof path, "%s/logs/rank_1.log", dir);
    check_file(__LINE__, "rank_1.log", path, want_log1);
    snprintf(path, sizeof path, "%s/logs/rank_2.log", dir);
    check_file(__LINE__, "rank_2.log (a silent rank)", path, "");
    snprintf(path, sizeof path, "%s/logs/mpirun.log", dir);
    check_file(__LINE__, "mpirun.log", path, want_mpirun);
}

static void test_merger(void) {
    char dir[] = "/tmp/anvil_test_launch_XXXXXX", logs[64];
    if (!mkdtemp(dir)) {
        t_fail(__FILE__, __LINE__, "mkdtemp");
        return;
    }
    snprintf(logs, sizeof logs, "%s/logs", dir);
    mkdir(logs, 0700);
    anvil_rng rng;
    anvil_rng_seed(&rng, 7);
    int before = t_failures;
    for (size_t piece = 1; piece <= 64 && t_failures == before; piece++) merge_once(dir, piece, &rng);
    merge_once(dir, 1000, &rng);
    for (int i = 0; i < 20 && t_failures == before; i++) merge_once(dir, 0, &rng);

    /* A line longer than the cap reaches the terminal in pieces, none lost. */
    char path[128];
    snprintf(path, sizeof path, "%s/out", dir);
    int out = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    anvil_launch_merger *m = anvil_launch_merger_new(1, NULL, out, out);
    char xs[1000];
    memset(xs, 'x', sizeof xs);
    for (int i = 0; i < 200; i++) CHECK(anvil_launch_merger_feed_rank(m, 0, false, xs, sizeof xs) == 0);
    CHECK(anvil_launch_merger_feed_rank(m, 0, false, "\n", 1) == 0);
    CHECK(anvil_launch_merger_finish(m) == 0);
    anvil_launch_merger_free(m);
    close(out);
    char *got = slurp(path);
    size_t xcount = 0, lines = 0;
    for (char *p = got; *p; p++) {
        xcount += *p == 'x';
        lines += *p == '\n';
    }
    CHECK(xcount == 200000 && lines == 4 && !strncmp(got, "[rank 0] xxx", 12));
    free(got);

    for (const char *f = "out\0err\0logs/rank_0.log\0logs/rank_1.log\0logs/rank_2.log\0logs/mpirun.log\0"; *f;
         f += strlen(f) + 1) {
        snprintf(path, sizeof path, "%s/%s", dir, f);
        unlink(path);
    }
    rmdir(logs);
    rmdir(dir);
}

static int exited(int code) { return code << 8; }

static void expect_exit(int line, int status, const char *text, int want, const char *want_line) {
    char got[512];
    int rc = anvil_launch_decode_exit(status, text, got, sizeof got);
    if (rc != want || strcmp(got, want_line))
        t_fail(__FILE__, line, "decode: got %d '%s', want %d '%s'", rc, got, want, want_line);
}

static void test_decode(void) {
    const char *rule = "--------------------------------------------------------------------------\n";
    char nonzero[1024], named75[1024], sig[1024], daemons[2048], noexec[1024], bare[1024];
    const char *first =
        "%sPrimary job  terminated normally, but 1 process returned\na non-zero exit code. Per user-direction, "
        "the job has been aborted.\n%s%smpirun detected that one or more processes exited with non-zero "
        "status, thus causing\nthe job to be terminated. The first process to do so was:\n\n  Process name: "
        "[[13814,1],2]\n  Exit code:    %d\n%s";
    snprintf(nonzero, sizeof nonzero, first, rule, rule, rule, 3, rule);
    snprintf(named75, sizeof named75, first, rule, rule, rule, 75, rule);
    snprintf(sig, sizeof sig,
             "%sPrimary job  terminated normally, but 1 process returned\na non-zero exit code. Per user-direction, "
             "the job has been aborted.\n%s%smpirun noticed that process rank 1 with PID 0 on node vm exited on "
             "signal 9 (Killed).\n%s",
             rule, rule, rule, rule);
    snprintf(daemons, sizeof daemons,
             "ssh: Could not resolve hostname nosuchhost: Name or service not known\n%sORTE was unable to reliably "
             "start one or more daemons.\nThis usually is caused by:\n\n* not finding the required libraries\n%s",
             rule, rule);
    snprintf(noexec, sizeof noexec,
             "%smpirun was unable to launch the specified application as it could not access\nor execute an "
             "executable:\n\nExecutable: ./nope\nNode: vm\n\nwhile attempting to start process rank 0.\n%s2 total "
             "processes failed to start\n",
             rule, rule);
    snprintf(bare, sizeof bare,
             "%sPrimary job  terminated normally, but 1 process returned\na non-zero exit code. Per user-direction, "
             "the job has been aborted.\n%s",
             rule, rule);
    expect_exit(__LINE__, exited(0), "", 0, "");
    expect_exit(__LINE__, exited(3), nonzero, 3, "rank 2 exited with status 3; the other ranks were stopped");
    expect_exit(__LINE__, exited(137), sig, 137,
                "rank 1 on host vm was killed by signal 9 (Killed); the other ranks were stopped");
    expect_exit(__LINE__, exited(255), daemons, 1,
                "could not start Open MPI on the remote hosts: ssh: Could not resolve hostname nosuchhost: Name or "
                "service not known");
    expect_exit(__LINE__, exited(132), noexec, 1, "cannot execute './nope' on host vm");
    expect_exit(__LINE__, exited(75), bare, 75, "the ranks stopped with status 75 (resumable)");
    expect_exit(__LINE__, exited(4), bare, 4, "a rank exited with status 4; the other ranks were stopped");
    expect_exit(__LINE__, exited(75), named75, 75, "rank 2 stopped with status 75 (resumable); the job stopped");
    char abort[1024];
    snprintf(abort, sizeof abort,
             "mpirun: Forwarding signal 10 to job\n%sMPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\n"
             "with errorcode 76.\n\nNOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\n%s",
             rule, rule);
    expect_exit(__LINE__, exited(76), abort, 76, "rank 1 called MPI_Abort (error code 76); the other ranks were stopped");
    expect_exit(__LINE__, exited(1), "", 1, "mpirun exited with status 1");
    expect_exit(__LINE__, exited(1), "\nSomething odd happened\nto mpirun\n\ndetails\n", 1,
                "mpirun failed (status 1): Something odd happened to mpirun");
    expect_exit(__LINE__, SIGKILL, "", 128 + SIGKILL, "mpirun was killed by signal 9 (Killed)");
}

int main(void) {
    test_hosts();
    test_argv();
    test_log_dir();
    test_merger();
    test_decode();
    return t_done("test_launch");
}

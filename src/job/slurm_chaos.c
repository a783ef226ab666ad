/* The Slurm backend's faults (anvil chaos, job/chaos.h; slurm_internal.h): ranks signalled on their node
 * through Slurm, the attempt killed as the backend's kill does it, and a host lost: its ranks frozen and
 * its slurmd killed, then started again once the job has left the node out. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "core/proc_image.h"
#include "job/chaos.h"
#include "job/slurm_internal.h"

extern char **environ;

/* How long a host-lost's slurmd stays down at most when the job never leaves its node out (the job ended
 * otherwise, or Slurm never saw the node go): the cluster heals whatever becomes of the job. */
#define SLURMD_BACK_S 300

/* Run on the node, in a step of its own that overlaps the attempt's (sh -c SCRIPT sh JOB FIRST LAST SIG):
 * the node's slurmd lists every process of the job's steps there with the task (global rank) each one is,
 * the step's own and its children ("-") aside; the ranks in [FIRST, LAST] get SIG, their pids printed.
 * Exit 3 when no such rank runs there. */
static const char signal_script[] =
    "p=$(scontrol listpids \"$1\" \"$SLURMD_NODENAME\" | awk -v me=\"$SLURM_STEP_ID\" -v lo=\"$2\" -v hi=\"$3\" "
    "'$3 ~ /^[0-9]+$/ && $3 != me && $5 ~ /^[0-9]+$/ && $5 >= lo && $5 <= hi {print $1}')\n"
    "[ -n \"$p\" ] || exit 3\nkill -s \"$4\" $p && echo $p\n";

/* Sends sig ("KILL", "STOP") to ranks [first, last] of Slurm job jobid on node, through Slurm (srun
 * --overlap: also where the node is another machine). 0 with their pids in pids; 1 when none runs there
 * or the step could not start (why in pids); -1 after anvil_fail. */
static int signal_on_node(const char *jobid, const char *node, int first, int last, const char *sig, char *pids,
                          size_t cap) {
    char job_arg[64], node_arg[160], lo[16], hi[16], *out;
    snprintf(job_arg, sizeof job_arg, "--jobid=%s", jobid);
    snprintf(node_arg, sizeof node_arg, "--nodelist=%s", node);
    snprintf(lo, sizeof lo, "%d", first);
    snprintf(hi, sizeof hi, "%d", last);
    /* A step cannot start on a node whose slurmd is gone: srun would wait for it. */
    int rc = anvil_slurm_run((char *[]){"timeout", "60", "srun", job_arg, "--overlap", node_arg, "--nodes=1",
                                        "--ntasks=1", "--mpi=none", "--quiet", "--job-name=anvil-chaos", "sh", "-c",
                                        (char *)signal_script, "sh", (char *)jobid, lo, hi, (char *)sig, NULL},
                             environ, &out);
    if (rc < 0) return -1;
    if (rc == 3) snprintf(pids, cap, "no rank %d to %d of Slurm job %s runs on %s", first, last, jobid, node);
    else if (rc) snprintf(pids, cap, "srun on %s exited %d: %.200s", node, rc, anvil_slurm_first_line(out));
    else snprintf(pids, cap, "%.*s", (int)strcspn(out, "\n"), out);
    free(out);
    return rc ? 1 : 0;
}

/* The attempt's node at index i of its node list, into node: 0, 1 when it has none (yet), -1. */
static int node_at(const slurm_backend *sb, const anvil_attempt_ref *r, int i, char *node, size_t cap) {
    char *names;
    int rc = anvil_slurm_attempt_nodes(sb, r, &names);
    if (rc) return rc;
    char *save, *line = strtok_r(names, "\n", &save);
    for (int k = 0; line && k < i; k++) line = strtok_r(NULL, "\n", &save);
    if (line) snprintf(node, cap, "%s", line);
    free(names);
    return line ? 0 : 1;
}

/* The value of "KEY = VALUE" in scontrol show config, malloc'd; NULL when absent (or after anvil_fail). */
static char *config_value(const char *key) {
    char *out, *v = NULL;
    int rc = anvil_slurm_run((char *[]){"scontrol", "show", "config", NULL}, environ, &out);
    for (char *save, *line = rc ? NULL : strtok_r(out, "\n", &save); line && !v; line = strtok_r(NULL, "\n", &save)) {
        size_t n = strlen(key);
        if (strncmp(line, key, n) || line[n] != ' ') continue;
        char *eq = strchr(line, '=');
        if (eq) v = strdup(eq + 1 + strspn(eq + 1, " "));
    }
    if (rc > 0) anvil_fail("scontrol show config: %s", anvil_slurm_first_line(out));
    free(out);
    return v;
}

/* The pid of node's slurmd when it runs on this machine (its NodeHostName this machine's name, its
 * SlurmdPidFile, %n and %h replaced, naming a live slurmd): 0 with *pid; 1 when it runs elsewhere (why in
 * why); -1 after anvil_fail. */
static int local_slurmd(const char *node, pid_t *pid, char *why, size_t cap) {
    char *info, here[256] = "", path[PATH_MAX] = "", *text = NULL;
    size_t len;
    if (anvil_slurm_run((char *[]){"scontrol", "-o", "show", "node", (char *)node, NULL}, environ, &info) < 0) return -1;
    char *host = anvil_slurm_field(info, "NodeHostName", false), *pattern = config_value("SlurmdPidFile");
    free(info);
    gethostname(here, sizeof here - 1);
    int rc = 1;
    if (!host || !pattern || strcmp(host, here)) {
        snprintf(why, cap, "host-lost kills the node's slurmd, which it can only where that runs on the daemon's "
                 "machine (a test cluster): %s is on %s, not %s", node, host ? host : "an unknown host", here);
    } else {
        anvil_strbuf t = {0};
        for (const char *p = pattern; *p; p++) {
            if (p[0] == '%' && (p[1] == 'n' || p[1] == 'h')) anvil_strbuf_puts(&t, *++p == 'n' ? node : host);
            else anvil_strbuf_put(&t, p, 1);
        }
        snprintf(path, sizeof path, "%s", t.oom ? "" : t.s);
        anvil_strbuf_free(&t);
        long v = anvil_read_file_max(path, 32, &text, &len) ? 0 : atol(text);
        *pid = (pid_t)v;
        if (v > 1 && !anvil_proc_gone(*pid)) rc = 0;
        else snprintf(why, cap, "%.400s names no live slurmd of %s", path, node);
    }
    free(text);
    free(host);
    free(pattern);
    return rc;
}

/* Starts the slurmd of node captured in img again, detached, once the job has left the node out for
 * attempt a (its line in STATE/jobs/<id>/excluded), or after SLURMD_BACK_S. */
static int respawn_when_excluded(const slurm_backend *sb, const anvil_attempt_ref *a, const char *node,
                                 const anvil_proc_image *img) {
    char dir[PATH_MAX];
    anvil_slurm_job_dir(sb, a->job_id, dir, sizeof dir);
    anvil_strbuf t = {0};
    anvil_strbuf_printf(&t, "i=0\nwhile [ $i -lt %d ] && ! grep -qs '^%s\t%d\t' ", SLURMD_BACK_S * 2, node, a->attempt);
    anvil_slurm_put_quoted(&t, dir);
    anvil_strbuf_puts(&t, "/excluded; do sleep 0.5; i=$((i + 1)); done");
    int rc = t.oom ? anvil_fail("out of memory") : anvil_proc_respawn(img, t.s);
    anvil_strbuf_free(&t);
    return rc;
}

/* Host-lost: the node's ranks frozen (a host gone takes its processes with it, and its peers' connections
 * to them hang: a frozen rank is both), then its slurmd killed with SIGKILL, so that Slurm finds the node
 * not responding, marks it down and ends or requeues the job, as on a real host's loss. What is left of
 * the attempt there stays frozen until the node is back: then its slurmd ends it, as a repaired host's
 * does. The slurmd is started again, as it was (its command line, environment and folder read before the
 * kill), once the job has left the node out (its line for this attempt in STATE/jobs/<id>/excluded), or
 * after SLURMD_BACK_S. Killing and starting a slurmd is done on this machine: it needs the node's slurmd
 * here (a test cluster whose nodes share it); on another machine the fault is refused. */
static int host_lost(const slurm_backend *sb, const anvil_attempt_ref *a, const anvil_attempt_ref *r, int host,
                     int per_host, char *done, size_t cap) {
    char node[128], pids[400], why[600];
    int rc = node_at(sb, r, host, node, sizeof node);
    if (rc) return rc < 0 ? -1 : (snprintf(done, cap, "attempt %d has no host %d (yet)", a->attempt, host), 1);
    pid_t slurmd;
    if ((rc = local_slurmd(node, &slurmd, why, sizeof why))) return rc < 0 ? -1 : (snprintf(done, cap, "%s", why), 2);
    anvil_proc_image img;
    if (anvil_proc_capture(slurmd, &img)) return -1;
    /* Debian's slurmd is /usr/sbin/slurmd-wlm, run by its link's name. */
    const char *base = strrchr(img.argv_text, '/');
    if (strcmp(base ? base + 1 : img.argv_text, "slurmd")) {
        snprintf(done, cap, "pid %d of %s's pid file runs %.200s, not slurmd", (int)slurmd, node, img.argv_text);
        anvil_proc_image_free(&img);
        return 2;
    }
    int first = host * per_host, last = first + per_host - 1;
    rc = signal_on_node(r->handle, node, first, last, "STOP", pids, sizeof pids);
    if (!rc && kill(slurmd, SIGKILL)) rc = anvil_fail("cannot kill %s's slurmd (pid %d): %s", node, (int)slurmd,
                                                       strerror(errno));
    if (!rc) rc = respawn_when_excluded(sb, a, node, &img);
    anvil_proc_image_free(&img);
    if (rc == 1) snprintf(done, cap, "%s", pids);
    else if (!rc)
        snprintf(done, cap, "host %d (%s) lost: rank(s) %d to %d frozen (SIGSTOP, pid(s) %s there), its slurmd (pid %d) "
                 "killed (SIGKILL); it starts again once the job has left %s out (at most %d s)",
                 host, node, first, last, pids, (int)slurmd, node, SLURMD_BACK_S);
    return rc;
}

/* Kill-attempt: the backend's own kill (scancel --signal=KILL --full, a warm attempt's step alone), which
 * marks the attempt killed_<n>: every node got the same SIGKILL, so none is to blame for it. The
 * supervisor did not ask for it, so the attempt reads as lost (its script killed before its exit file)
 * or failed, and is retried. */
static int kill_attempt(anvil_backend *b, const anvil_attempt_ref *a, const anvil_attempt_ref *r, char *done,
                        size_t cap) {
    pid_t warm = anvil_slurm_warm_pid(a);
    bool running = warm && !kill(warm, 0);
    if (!warm) {
        char *info;
        int gone = anvil_slurm_show_job(r->handle, &info);
        if (gone < 0) return -1;
        running = !gone && anvil_slurm_field_is(info, "JobState", "RUNNING");
        free(info);
    }
    if (!running) {
        snprintf(done, cap, "Slurm job %s does not run attempt %d", r->handle, a->attempt);
        return 1;
    }
    if (b->ops->kill(b, a)) return -1;
    if (warm)
        snprintf(done, cap, "every process of its step anvil-%lld.%d in warm pool %s killed (scancel --signal=KILL)",
                 (long long)a->job_id, a->attempt, r->handle);
    else snprintf(done, cap, "every process of Slurm job %s killed (scancel --signal=KILL --full)", r->handle);
    return 0;
}

int anvil_slurm_inject(anvil_backend *b, const anvil_attempt_ref *a, int kind, int target, int per_host, char *done,
                       size_t cap) {
    slurm_backend *sb = (slurm_backend *)b;
    char id[32], node[128], pids[400];
    anvil_attempt_ref r = anvil_slurm_ref(a, id, sizeof id);
    if (kind == ANVIL_FAULT_KILL_ATTEMPT) return kill_attempt(b, a, &r, done, cap);
    if (kind == ANVIL_FAULT_HOST_LOST) return host_lost(sb, a, &r, target, per_host, done, cap);
    if (kind == ANVIL_FAULT_NET_CUT) {
        snprintf(done, cap, "net-cut strikes jobs on simulated hosts (the local backend's anvil serve --sim-hosts), "
                            "not a Slurm cluster's nodes");
        return 2;
    }
    int rc = node_at(sb, &r, target / per_host, node, sizeof node);
    if (rc) return rc < 0 ? -1 : (snprintf(done, cap, "attempt %d has no nodes (yet)", a->attempt), 1);
    bool stop = kind == ANVIL_FAULT_STOP_RANK;
    rc = signal_on_node(r.handle, node, target, target, stop ? "STOP" : "KILL", pids, sizeof pids);
    if (rc) snprintf(done, cap, "%s", pids);
    else snprintf(done, cap, "rank %d %s (%s, pid %s on %s)", target, stop ? "frozen" : "killed",
                  stop ? "SIGSTOP" : "SIGKILL", pids, node);
    return rc;
}

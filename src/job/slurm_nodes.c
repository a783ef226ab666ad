/* The Slurm backend's bad nodes (slurm_internal.h): which node an attempt's end blames, and why, kept in
 * STATE/jobs/<id>/excluded and left out of every later attempt (--exclude). A rank's own nonzero exit
 * blames no node (that is the program failing), and neither does a signal that anvil or Slurm sent on
 * their own: a stop's SIGUSR1, a relayed SIGTERM, the SIGKILL of a kill the daemon asked for, or what
 * Slurm's time limit and cancel send. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "job/slurm_internal.h"

extern char **environ;

static void excluded_path(const slurm_backend *sb, int64_t id, char *path, size_t cap) {
    anvil_slurm_job_dir(sb, id, path, cap);
    snprintf(path + strlen(path), cap - strlen(path), "/excluded");
}

char *anvil_slurm_excluded_text(const slurm_backend *sb, int64_t id) {
    char path[PATH_MAX + 16], *data;
    size_t len;
    excluded_path(sb, id, path, sizeof path);
    if (anvil_read_file_max(path, 1 << 20, &data, &len)) return strdup("");
    return data;
}

/* One line of the excluded file: the node's name, the attempt that marked it (0 for a line of an older
 * daemon's, which had none) and why, each pointing into line (not NUL-terminated: their lengths). */
typedef struct {
    const char *node, *why;
    size_t node_len, why_len;
    int attempt;
} excluded_line;

static const char *next_excluded(const char *line, excluded_line *e) {
    size_t end = strcspn(line, "\n"), n = strcspn(line, "\t\n");
    e->node = line;
    e->node_len = n;
    e->attempt = 0;
    const char *rest = line + n + (line[n] == '\t');
    size_t digits = strspn(rest, "0123456789");
    if (digits && rest[digits] == '\t') {
        e->attempt = atoi(rest);
        rest += digits + 1;
    }
    e->why = rest;
    e->why_len = (size_t)(line + end - rest);
    return line + end + (line[end] != 0);
}

int anvil_slurm_excluded_json(const slurm_backend *sb, int64_t id, int attempt, cJSON *array) {
    char *text = anvil_slurm_excluded_text(sb, id);
    if (!text) return anvil_fail("out of memory");
    int rc = 0;
    excluded_line e;
    for (const char *line = text; !rc && *line;) {
        line = next_excluded(line, &e);
        if (attempt && e.attempt != attempt) continue;
        cJSON *o = cJSON_CreateObject();
        if (o && !cJSON_AddItemToArray(array, o)) {
            cJSON_Delete(o);
            o = NULL;
        }
        char *node = strndup(e.node, e.node_len), *why = strndup(e.why, e.why_len);
        if (!o || !node || !why || !cJSON_AddStringToObject(o, "node", node) ||
            !cJSON_AddNumberToObject(o, "attempt", e.attempt) || !cJSON_AddStringToObject(o, "why", why))
            rc = anvil_fail("out of memory");
        free(node);
        free(why);
    }
    free(text);
    return rc;
}

/* Adds node to the job's bad nodes, marked by attempt, unless it is there already. */
static int exclude_node(const slurm_backend *sb, const anvil_attempt_ref *a, const char *node, const char *why) {
    char *old = anvil_slurm_excluded_text(sb, a->job_id);
    if (!old) return anvil_fail("out of memory");
    excluded_line e;
    for (const char *line = old; *line;) {
        line = next_excluded(line, &e);
        if (e.node_len == strlen(node) && !strncmp(e.node, node, e.node_len)) {
            free(old);
            return 0;
        }
    }
    anvil_strbuf t = {0};
    anvil_strbuf_puts(&t, old);
    free(old);
    anvil_strbuf_printf(&t, "%s\t%d\t%.900s\n", node, a->attempt, why);
    char path[PATH_MAX + 16];
    excluded_path(sb, a->job_id, path, sizeof path);
    int rc = t.oom ? anvil_fail("out of memory") : anvil_write_file_atomic(path, t.s, t.len);
    free(t.s);
    return rc;
}

static const char output_key[] = "\n# output=";

void anvil_slurm_put_output_line(anvil_strbuf *t, const char *run_dir) {
    anvil_strbuf_printf(t, "%s%s/logs/launcher.log\n", output_key + 1, run_dir);
}

/* Where the attempt's output went, the run's launcher.log, as its script names it (its output line).
 * 0 with path, or -1 when unknown. */
static int attempt_log(const slurm_backend *sb, const anvil_attempt_ref *a, char *path, size_t cap) {
    static const char *const kinds[] = {"slurm", "warm"};
    char file[PATH_MAX + 32], *script = NULL;
    size_t len;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds && !script; k++) {
        anvil_slurm_attempt_file(sb, a, kinds[k], file, sizeof file);
        strcat(file, ".sh");
        if (anvil_read_file_max(file, 1 << 20, &script, &len)) script = NULL;
    }
    if (!script) return -1;
    char *p = strstr(script, output_key);
    int rc = -1;
    if (p) {
        p += strlen(output_key);
        size_t n = strcspn(p, "\n");
        if (n < cap) {
            memcpy(path, p, n);
            path[n] = 0;
            rc = 0;
        }
    }
    free(script);
    return rc;
}

/* Whether a signal srun names ("Killed", "User defined signal 1") ended a rank because of its machine:
 * not when it was anvil's or Slurm's own doing. The stop's SIGUSR1 (and SIGUSR2), the SIGTERM a launcher
 * relays or srun and Slurm send to end a step, SIGINT and SIGHUP are never a machine's; a SIGKILL is
 * not either once the daemon stopped or killed the attempt (its marks stopped_<n>, killed_<n>) or
 * Slurm ended it at its time limit or by a cancel (the state poll kept, end_<n>). */
static bool signal_counts(const slurm_backend *sb, const anvil_attempt_ref *a, const char *name) {
    static const char *const own[] = {"User defined signal 1", "User defined signal 2", "Terminated", "Interrupt",
                                      "Hangup"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (!strcmp(name, own[i])) return false;
    char path[PATH_MAX + 64], *end;
    size_t len;
    anvil_slurm_attempt_file(sb, a, "stopped", path, sizeof path);
    if (!access(path, F_OK)) return false;
    anvil_slurm_attempt_file(sb, a, "killed", path, sizeof path);
    if (!access(path, F_OK)) return false;
    anvil_slurm_attempt_file(sb, a, "end", path, sizeof path);
    if (anvil_read_file_max(path, 1 << 16, &end, &len)) return true;
    static const char *const ended_by_slurm[] = {"TIMEOUT", "CANCELLED", "PREEMPTED", "DEADLINE"};
    bool counts = true;
    for (size_t i = 0; i < sizeof ended_by_slurm / sizeof *ended_by_slurm; i++)
        counts = counts && !anvil_slurm_field_is(end, "state", ended_by_slurm[i]);
    free(end);
    return counts;
}

/* A node srun reported failed in line: "Node failure on n1", or the step's tasks that could not start
 * there, "Task launch for StepId=5.0 failed on node n2: ...". */
static void failed_node(const char *line, anvil_slurm_log_facts *f) {
    const char *p = strstr(line, "Node failure on "), *q = strstr(line, "Task launch for ");
    char node[128];
    if (p && sscanf(p, "Node failure on %127[^ ,:]", node) == 1) {
    } else if (q && (q = strstr(q, " failed on node ")) && sscanf(q, " failed on node %127[^ ,:]", node) == 1) {
    } else {
        return;
    }
    size_t n = strlen(f->failed_nodes);
    for (const char *s = f->failed_nodes; *s; s += strcspn(s, ",") + (s[strcspn(s, ",")] == ','))
        if (strcspn(s, ",") == strlen(node) && !strncmp(s, node, strlen(node))) return;
    if (!f->failed_nodes[0]) snprintf(f->failed_why, sizeof f->failed_why, "%.600s", strstr(line, "srun: "));
    snprintf(f->failed_nodes + n, sizeof f->failed_nodes - n, "%s%s", n ? "," : "", node);
}

/* "srun: error: NODE: task 1: Killed", "NODE: tasks 0-1: Terminated": the first rank ended by a signal.
 * Only the first counts: with --kill-on-bad-exit srun itself then ends the ranks on the other nodes,
 * and says so in the same words. An exit code is the program's own. */
static void killed_rank(const slurm_backend *sb, const anvil_attempt_ref *a, const char *line,
                        anvil_slurm_log_facts *f, bool *seen) {
    const char *p = strstr(line, "srun: error: ");
    if (!p || *seen) return;
    p += strlen("srun: error: ");
    char node[128], task[64];
    int used = 0;
    if (sscanf(p, "%127[^: ]: %63[^:]:%n", node, task, &used) != 2 || strncmp(task, "task", 4) ||
        !strncmp(p + used, " Exited with exit code", 22))
        return;
    *seen = true;
    if (!signal_counts(sb, a, p + used + strspn(p + used, " "))) return;
    snprintf(f->killed_node, sizeof f->killed_node, "%s", node);
    snprintf(f->killed_why, sizeof f->killed_why, "%s of attempt %d (Slurm job %s) was ended by a signal there:%.500s",
             task, a->attempt, a->handle, p + used);
}

void anvil_slurm_scan_log(const slurm_backend *sb, const anvil_attempt_ref *a, anvil_slurm_log_facts *f) {
    memset(f, 0, sizeof *f);
    char path[PATH_MAX], marker[96];
    if (attempt_log(sb, a, path, sizeof path)) return;
    FILE *in = fopen(path, "r");
    if (!in) return;
    /* The attempts' logs follow one another in the file; only the last 4 MiB can hold this one's end. */
    if (fseek(in, -(4L << 20), SEEK_END)) rewind(in);
    snprintf(marker, sizeof marker, "anvil: job %lld attempt %d:", (long long)a->job_id, a->attempt);
    char line[2048];
    bool mine = false, seen = false;
    while (fgets(line, sizeof line, in)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!strncmp(line, "anvil: job ", 11) && strstr(line, " attempt ")) {
            /* A later attempt's part ends this one's; this one's first line starts it afresh. */
            mine = !strncmp(line, marker, strlen(marker));
            if (mine) {
                memset(f, 0, sizeof *f);
                seen = false;
            }
            continue;
        }
        if (!mine) continue;
        failed_node(line, f);
        killed_rank(sb, a, line, f, &seen);
    }
    fclose(in);
}

int anvil_slurm_attempt_nodes(const slurm_backend *sb, const anvil_attempt_ref *a, char **names) {
    char path[PATH_MAX + 32], *list;
    size_t len;
    *names = NULL;
    anvil_slurm_attempt_file(sb, a, "nodes", path, sizeof path);
    if (anvil_read_file_max(path, 65536, &list, &len)) return 1;
    list[strcspn(list, "\n")] = 0;
    int rc = anvil_slurm_run((char *[]){"scontrol", "show", "hostnames", list, NULL}, environ, names);
    free(list);
    if (rc) {
        free(*names);
        *names = NULL;
    }
    return rc < 0 ? -1 : rc ? 1 : 0;
}

int anvil_slurm_node_lost(const char *node, char *why, size_t cap) {
    char *info;
    why[0] = 0;
    int rc = anvil_slurm_run((char *[]){"scontrol", "-o", "show", "node", (char *)node, NULL}, environ, &info);
    if (rc) {
        free(info);
        return rc < 0 ? -1 : 0;
    }
    char *state = anvil_slurm_field(info, "State", false), *reason = anvil_slurm_field(info, "Reason", true);
    bool lost = state && (strstr(state, "NOT_RESPONDING") || strstr(state, "DOWN") || strstr(state, "FAIL"));
    if (lost) snprintf(why, cap, "%s%s%.300s", state, reason ? ", reason: " : "", reason ? reason : "");
    free(state);
    free(reason);
    free(info);
    return lost;
}

/* The nodes of this attempt that Slurm now reports down, not responding, drained or failed, marked bad. */
static int exclude_down_nodes(const slurm_backend *sb, const anvil_attempt_ref *a) {
    char *names;
    int rc = anvil_slurm_attempt_nodes(sb, a, &names);
    if (rc) return rc < 0 ? -1 : 0;
    for (char *save, *node = strtok_r(names, "\n", &save); node && !rc; node = strtok_r(NULL, "\n", &save)) {
        char *info;
        if (anvil_slurm_run((char *[]){"scontrol", "-o", "show", "node", node, NULL}, environ, &info)) {
            free(info);
            continue;
        }
        char *state = anvil_slurm_field(info, "State", false), *reason = anvil_slurm_field(info, "Reason", true);
        if (state && (strstr(state, "DOWN") || strstr(state, "NOT_RESPONDING") || strstr(state, "DRAIN") ||
                      strstr(state, "FAIL"))) {
            char why[1024];
            snprintf(why, sizeof why, "Slurm reported it %s%s%s after attempt %d (Slurm job %s)", state,
                     reason ? ", reason: " : "", reason ? reason : "", a->attempt, a->handle);
            rc = exclude_node(sb, a, node, why);
        }
        free(state);
        free(reason);
        free(info);
    }
    free(names);
    return rc;
}

/* The first line anvil health wrote to a node's .err, without its "anvil health: " (malloc'd text in
 * *err, to free). */
static const char *health_said(const char *dir, const char *node, int n, char **err) {
    char path[PATH_MAX + 256];
    size_t len;
    snprintf(path, sizeof path, "%s/%.*s.err", dir, n, node);
    *err = NULL;
    if (anvil_read_file_max(path, 1 << 20, err, &len) || !(*err)[strspn(*err, " \n")])
        return "no report from anvil health there";
    char *said = *err + strspn(*err, " \n");
    said[strcspn(said, "\n")] = 0;
    return strncmp(said, "anvil health: ", 14) ? said : said + 14;
}

int anvil_slurm_exclude_unhealthy(const slurm_backend *sb, const anvil_attempt_ref *a) {
    char *names;
    int rc = anvil_slurm_attempt_nodes(sb, a, &names);
    if (rc) return rc < 0 ? -1 : 0;
    char dir[PATH_MAX + 64], path[PATH_MAX + 256];
    anvil_slurm_attempt_file(sb, a, "health", dir, sizeof dir);
    int reports = 0, bad = 0;
    /* A node with no report fails it too, unless no node has one: then srun could not run the check at
     * all, which says nothing of any node. */
    for (int pass = 0; pass < 2 && !rc; pass++) {
        for (char *node = names; *node && !rc; node += strcspn(node, "\n") + (node[strcspn(node, "\n")] != 0)) {
            int n = (int)strcspn(node, "\n");
            char *report = NULL, *err, why[700];
            size_t len;
            snprintf(path, sizeof path, "%s/%.*s.json", dir, n, node);
            bool has = !anvil_read_file_max(path, 1 << 20, &report, &len);
            bool healthy = has && strstr(report, "\"healthy\":true");
            free(report);
            if (!pass) {
                reports += has;
                continue;
            }
            if (healthy || !reports) continue;
            snprintf(why, sizeof why, "health: %.600s (attempt %d, before training)", health_said(dir, node, n, &err),
                     a->attempt);
            free(err);
            char *name = strndup(node, (size_t)n);
            rc = name ? exclude_node(sb, a, name, why) : anvil_fail("out of memory");
            free(name);
            bad++;
        }
    }
    free(names);
    return rc ? -1 : bad;
}

int anvil_slurm_exclude_bad_nodes(const slurm_backend *sb, const anvil_attempt_ref *a) {
    anvil_slurm_log_facts f;
    anvil_slurm_scan_log(sb, a, &f);
    if (f.killed_node[0] && exclude_node(sb, a, f.killed_node, f.killed_why)) return -1;
    char *save, why[1024];
    for (char *node = strtok_r(f.failed_nodes, ",", &save); node; node = strtok_r(NULL, ",", &save)) {
        snprintf(why, sizeof why, "srun reported it failed in attempt %d (Slurm job %s): %.600s", a->attempt, a->handle,
                 f.failed_why);
        if (exclude_node(sb, a, node, why)) return -1;
    }
    return exclude_down_nodes(sb, a);
}

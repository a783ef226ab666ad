#include "obs/trace.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"

atomic_int anvil_trace_on;
atomic_long anvil_trace_open;

/* A profile of a few steps holds a few thousand events; this bounds a profile left on. */
#define MAX_EVENTS 1000000
#define MAX_THREADS 64

typedef struct {
    double t0, t1, bytes;
    int tid, layer;
    const char *pass; /* static */
    char cat[16];
    char name[80];
} event;

static struct {
    pthread_mutex_t mu;
    event *ev;
    long n, cap, dropped;
    double origin;
    int nthreads;
    const char *thread_names[MAX_THREADS];
} T = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int my_tid = -1;
static _Thread_local const char *my_name;
static _Thread_local int my_layer = -1;
static _Thread_local const char *my_pass;

double anvil_trace_clock(void) { return anvil_now(); }

/* Under T.mu. */
static int thread_id(void) {
    if (my_tid < 0) {
        my_tid = T.nthreads++;
        if (my_tid < MAX_THREADS) T.thread_names[my_tid] = my_name;
    }
    return my_tid;
}

void anvil_trace_thread_name(const char *name) {
    my_name = name;
    pthread_mutex_lock(&T.mu);
    if (my_tid >= 0 && my_tid < MAX_THREADS) T.thread_names[my_tid] = name;
    pthread_mutex_unlock(&T.mu);
}

void anvil_trace_record(double t0, double t1, const char *cat, const char *name, int layer, double bytes) {
    if (t0 < 0) return;
    pthread_mutex_lock(&T.mu);
    atomic_fetch_sub_explicit(&anvil_trace_open, 1, memory_order_relaxed);
    if (T.n == T.cap) {
        long cap = T.cap ? 2 * T.cap : 4096;
        event *ev = cap <= MAX_EVENTS ? realloc(T.ev, (size_t)cap * sizeof *ev) : NULL;
        if (!ev) {
            T.dropped++;
            pthread_mutex_unlock(&T.mu);
            return;
        }
        T.ev = ev;
        T.cap = cap;
    }
    event *e = &T.ev[T.n++];
    e->t0 = t0;
    e->t1 = t1;
    e->bytes = bytes;
    e->tid = thread_id();
    e->layer = layer;
    e->pass = my_pass;
    snprintf(e->cat, sizeof e->cat, "%s", cat);
    snprintf(e->name, sizeof e->name, "%s", name);
    pthread_mutex_unlock(&T.mu);
}

double anvil_trace_layer_begin(int layer, const char *pass) {
    double t0 = anvil_trace_begin();
    if (t0 >= 0) {
        my_layer = layer;
        my_pass = pass;
    }
    return t0;
}

void anvil_trace_layer_end(double t0) {
    if (t0 < 0) return;
    anvil_trace_record(t0, anvil_trace_clock(), my_pass ? my_pass : "", "layer", my_layer, -1);
    my_layer = -1;
    my_pass = NULL;
}

int anvil_trace_layer(void) { return my_layer; }

void anvil_trace_start(void) {
    pthread_mutex_lock(&T.mu);
    T.n = T.dropped = 0;
    atomic_store(&anvil_trace_open, 0);
    T.origin = anvil_trace_clock();
    pthread_mutex_unlock(&T.mu);
    atomic_store(&anvil_trace_on, 1);
}

void anvil_trace_stop(void) { atomic_store(&anvil_trace_on, 0); }

long anvil_trace_open_spans(void) { return atomic_load(&anvil_trace_open); }

static cJSON *metadata(const char *what, int pid, int tid, const char *name) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", what);
    cJSON_AddStringToObject(m, "ph", "M");
    cJSON_AddNumberToObject(m, "pid", pid);
    cJSON_AddNumberToObject(m, "tid", tid);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "args"), "name", name);
    return m;
}

long anvil_trace_write(const char *path, int pid, const char *process) {
    pthread_mutex_lock(&T.mu);
    cJSON *root = cJSON_CreateObject(), *evs = cJSON_AddArrayToObject(root, "traceEvents");
    cJSON_AddItemToArray(evs, metadata("process_name", pid, 0, process));
    for (int t = 0; t < T.nthreads && t < MAX_THREADS; t++) {
        char fallback[32];
        snprintf(fallback, sizeof fallback, "thread %d", t);
        cJSON_AddItemToArray(evs, metadata("thread_name", pid, t, T.thread_names[t] ? T.thread_names[t] : fallback));
    }
    for (long i = 0; i < T.n; i++) {
        const event *e = &T.ev[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", e->name);
        cJSON_AddStringToObject(o, "cat", e->cat);
        cJSON_AddStringToObject(o, "ph", "X");
        /* Microseconds from the start of the profile, to the nanosecond. */
        cJSON_AddNumberToObject(o, "ts", round((e->t0 - T.origin) * 1e9) / 1e3);
        cJSON_AddNumberToObject(o, "dur", round((e->t1 - e->t0) * 1e9) / 1e3);
        cJSON_AddNumberToObject(o, "pid", pid);
        cJSON_AddNumberToObject(o, "tid", e->tid);
        cJSON *args = cJSON_AddObjectToObject(o, "args");
        if (e->layer >= 0) cJSON_AddNumberToObject(args, "layer", e->layer);
        if (e->pass) cJSON_AddStringToObject(args, "pass", e->pass);
        if (e->bytes >= 0) cJSON_AddNumberToObject(args, "bytes", e->bytes);
        cJSON_AddItemToArray(evs, o);
    }
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(root, "otherData"), "dropped_events", (double)T.dropped);
    long n = T.n;
    T.n = 0;
    pthread_mutex_unlock(&T.mu);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) return anvil_fail("%s: out of memory writing the profile", path);
    int rc = anvil_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc ? -1 : n;
}

/* ---- reading a trace back ---- */

typedef struct {
    double ts, dur, child;
    int pid, tid;
    const char *name, *cat;
} span;

typedef struct {
    int pid, tid;
    const char *name;
    double self;
    long count;
} row;

static int by_thread_time(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->dur < y->dur) - (x->dur > y->dur); /* the enclosing span first */
}

static int by_thread_self(const void *a, const void *b) {
    const row *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    return (x->self < y->self) - (x->self > y->self);
}

static int as_int(const cJSON *v, int *out) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 1e9) return -1;
    *out = (int)v->valuedouble;
    return 0;
}

/* Checks event i and, for a complete event, fills s; 1 when it is one, 0 for another phase. */
static int read_event(const char *file, long i, const cJSON *e, span *s) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
    if (!cJSON_IsObject(e) || !cJSON_IsString(ph))
        return anvil_fail("%s: event %ld is not an object with a string \"ph\"", file, i);
    if (strcmp(ph->valuestring, "X")) return 0;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name"), *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts"), *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
    if (!cJSON_IsString(name)) return anvil_fail("%s: event %ld has no string \"name\"", file, i);
    if (!cJSON_IsNumber(ts) || !isfinite(ts->valuedouble))
        return anvil_fail("%s: event %ld (%.60s): \"ts\" is not a number", file, i, name->valuestring);
    if (!cJSON_IsNumber(dur) || !(dur->valuedouble >= 0) || !isfinite(dur->valuedouble))
        return anvil_fail("%s: event %ld (%.60s): \"dur\" is not a number >= 0", file, i, name->valuestring);
    if (as_int(cJSON_GetObjectItemCaseSensitive(e, "pid"), &s->pid) ||
        as_int(cJSON_GetObjectItemCaseSensitive(e, "tid"), &s->tid))
        return anvil_fail("%s: event %ld (%.60s): \"pid\" and \"tid\" must be integers", file, i, name->valuestring);
    s->name = name->valuestring;
    s->cat = cJSON_IsString(cat) ? cat->valuestring : "";
    s->ts = ts->valuedouble;
    s->dur = dur->valuedouble;
    s->child = 0;
    return 1;
}

/* The name the trace's metadata gives a thread, or NULL. */
static const char *thread_name(const cJSON *evs, int pid, int tid) {
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph"), *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        int p, t;
        if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "M") || !cJSON_IsString(nm) ||
            strcmp(nm->valuestring, "thread_name") || as_int(cJSON_GetObjectItemCaseSensitive(e, "pid"), &p) ||
            as_int(cJSON_GetObjectItemCaseSensitive(e, "tid"), &t) || p != pid || t != tid)
            continue;
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
        if (cJSON_IsString(n)) return n->valuestring;
    }
    return NULL;
}

/* Self times: each span less the spans directly inside it, on its own thread. */
static void self_times(span *s, long n) {
    qsort(s, (size_t)n, sizeof *s, by_thread_time);
    long *stack = malloc(((size_t)n + 1) * sizeof *stack);
    if (!stack) return;
    long depth = 0;
    for (long i = 0; i < n; i++) {
        if (i > 0 && (s[i].pid != s[i - 1].pid || s[i].tid != s[i - 1].tid)) depth = 0;
        while (depth && s[stack[depth - 1]].ts + s[stack[depth - 1]].dur <= s[i].ts) depth--;
        if (depth) {
            span *p = &s[stack[depth - 1]];
            double end = fmin(s[i].ts + s[i].dur, p->ts + p->dur);
            p->child += end - s[i].ts;
        }
        stack[depth++] = i;
    }
    free(stack);
}

static long aggregate(const span *s, long n, row *rows) {
    long nr = 0;
    for (long i = 0; i < n; i++) {
        long j = nr - 1;
        /* Rows of one thread are contiguous (spans are sorted by thread): search back within it. */
        while (j >= 0 && rows[j].pid == s[i].pid && rows[j].tid == s[i].tid && strcmp(rows[j].name, s[i].name)) j--;
        if (j < 0 || rows[j].pid != s[i].pid || rows[j].tid != s[i].tid) {
            j = nr++;
            rows[j] = (row){s[i].pid, s[i].tid, s[i].name, 0, 0};
        }
        rows[j].self += fmax(0, s[i].dur - s[i].child);
        rows[j].count++;
    }
    return nr;
}

int anvil_trace_summary_text(const char *file, const char *text, size_t len, FILE *out, int top) {
    const char *at = NULL;
    cJSON *root = anvil_json_parse(text, len, &at);
    if (!root) {
        return anvil_fail("%s: not JSON (at byte %ld)", file, at && at >= text ? (long)(at - text) : 0L);
    }
    const cJSON *evs = cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    if (!cJSON_IsArray(evs)) {
        cJSON_Delete(root);
        return anvil_fail("%s: no \"traceEvents\" array: not a Chrome trace", file);
    }
    long total = cJSON_GetArraySize(evs), n = 0, i = 0;
    span *s = malloc(((size_t)total + 1) * sizeof *s);
    row *rows = malloc(((size_t)total + 1) * sizeof *rows);
    int rc = s && rows ? 0 : anvil_fail("%s: out of memory", file);
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        if (rc) break;
        int k = read_event(file, i++, e, &s[n]);
        if (k < 0) rc = -1;
        n += k > 0;
    }
    if (!rc) {
        double steps = 0;
        long nsteps = 0;
        for (long j = 0; j < n; j++)
            if (!strcmp(s[j].cat, "step")) {
                steps += s[j].dur;
                nsteps++;
            }
        self_times(s, n);
        long nr = aggregate(s, n, rows);
        qsort(rows, (size_t)nr, sizeof *rows, by_thread_self);
        if (nsteps) fprintf(out, "%s: %ld steps, %.3f ms (%.3f ms a step)\n", file, nsteps, steps / 1e3,
                            steps / 1e3 / (double)nsteps);
        else fprintf(out, "%s: no step spans; shares are of the thread's total\n", file);
        for (long j = 0; j < nr;) {
            long k = j;
            double thread_total = 0;
            while (k < nr && rows[k].pid == rows[j].pid && rows[k].tid == rows[j].tid) thread_total += rows[k++].self;
            const char *tn = thread_name(evs, rows[j].pid, rows[j].tid);
            fprintf(out, "\nthread %s (pid %d, tid %d)\n%12s %9s %8s  %s\n", tn ? tn : "?", rows[j].pid, rows[j].tid,
                    "self ms", nsteps ? "of steps" : "of all", "count", "span");
            double base = nsteps ? steps : thread_total;
            for (long r = j; r < k && r < j + top; r++) {
                int is_step = !strcmp(rows[r].name, "step");
                fprintf(out, "%12.3f %8.1f%% %8ld  %s%s\n", rows[r].self / 1e3, base > 0 ? 100 * rows[r].self / base : 0,
                        rows[r].count, rows[r].name, is_step ? " (in a step, outside every span)" : "");
            }
            if (k - j > top) fprintf(out, "%12s %9s %8s  ... %ld more\n", "", "", "", k - j - top);
            j = k;
        }
    }
    free(s);
    free(rows);
    cJSON_Delete(root);
    return rc;
}

int anvil_trace_summary(const char *path, FILE *out, int top) {
    char *text;
    size_t len;
    /* A profile of a few steps of a large model is tens of megabytes. */
    if (anvil_read_file_max(path, (size_t)1 << 30, &text, &len)) return -1;
    int rc = anvil_trace_summary_text(path, text, len, out, top);
    free(text);
    return rc;
}

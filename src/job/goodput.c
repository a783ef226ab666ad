/* The goodput accounting (job/goodput.h): the job's timeline walked once, from its submission to its
 * end, each interval given to one part as a cursor moves over it. The cursor only moves forward and
 * each interval is clipped to the attempt it belongs to, so clocks that disagree a little (a rank's
 * record a few milliseconds after the service saw the attempt end) shift time between neighbouring
 * parts but never make the sum differ from the wall time. */
#include "job/goodput.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/json.h"

static const char *const part_names[ANVIL_GP_NPARTS] = {"productive", "recomputed", "detection", "restart",
                                                        "checkpoint", "eval",       "queue"};

const char *anvil_gp_part_name(anvil_gp_part p) { return part_names[p]; }

/* One line of metrics.jsonl that the accounting reads. */
typedef enum { REC_OTHER, REC_START, REC_TRAIN, REC_END, REC_CKPT } rec_kind;
typedef struct {
    rec_kind kind;
    int64_t step, job;
    int attempt;
    double t, ckpt_s, eval_s, save_s, loss;
} record;

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

/* A record of line, REC_OTHER for anything the accounting does not read (or cannot: a damaged line
 * is skipped, as plot skips it). */
static record parse_record(const char *line) {
    record r = {0};
    cJSON *o = anvil_json_parse_str(line);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    if (cJSON_IsString(kind)) {
        static const char *const names[] = {"", "start", "train", "end", "ckpt"};
        for (int k = 1; k < 5; k++)
            if (!strcmp(kind->valuestring, names[k])) r.kind = (rec_kind)k;
        r.step = (int64_t)num(o, "step");
        r.job = (int64_t)num(o, "job");
        r.attempt = (int)num(o, "attempt");
        r.t = num(o, "t");
        r.ckpt_s = num(o, "ckpt_ms") / 1e3;
        r.eval_s = num(o, "eval_ms") / 1e3;
        r.save_s = num(o, "save_ms") / 1e3;
        r.loss = num(o, "loss");
        /* Records from before the timeline (no time) say nothing of where time went. */
        if (r.kind != REC_CKPT && !(r.t > 0)) r.kind = REC_OTHER;
    }
    cJSON_Delete(o);
    return r;
}

/* The files a cache keeps, and the bytes of a file's last parsed line it keeps to know the file is
 * still the one it parsed. */
#define CACHE_FILES 32
#define CACHE_TAIL 256

typedef struct {
    char *path; /* NULL: a free slot */
    dev_t dev;
    ino_t ino;
    off_t parsed; /* bytes parsed: whole lines */
    char tail[CACHE_TAIL];
    size_t ntail;
    record *recs;
    size_t n, cap;
    uint64_t used;
} cached_file;

struct anvil_goodput_cache {
    pthread_mutex_t mu;
    cached_file files[CACHE_FILES];
    uint64_t clock;
};

anvil_goodput_cache *anvil_goodput_cache_new(void) {
    anvil_goodput_cache *c = calloc(1, sizeof *c);
    if (c) pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void forget(cached_file *f) {
    free(f->path);
    free(f->recs);
    memset(f, 0, sizeof *f);
}

void anvil_goodput_cache_free(anvil_goodput_cache *c) {
    if (!c) return;
    for (int i = 0; i < CACHE_FILES; i++) forget(&c->files[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* path's slot: its own, else a free one or the least recently used, emptied. */
static cached_file *slot(anvil_goodput_cache *c, const char *path) {
    cached_file *pick = &c->files[0];
    for (int i = 0; i < CACHE_FILES; i++) {
        cached_file *f = &c->files[i];
        if (f->path && !strcmp(f->path, path)) return f;
        if (pick->path && (!f->path || f->used < pick->used)) pick = f;
    }
    forget(pick);
    return pick;
}

/* Whether fd still holds, before f->parsed, the file f parsed. */
static bool same_file(const cached_file *f, int fd, const struct stat *st) {
    if (f->dev != st->st_dev || f->ino != st->st_ino || st->st_size < f->parsed) return false;
    char buf[CACHE_TAIL];
    return pread(fd, buf, f->ntail, f->parsed - (off_t)f->ntail) == (ssize_t)f->ntail && !memcmp(buf, f->tail, f->ntail);
}

/* Parses the whole lines of in after f->parsed into f; -1 after anvil_fail. A last line without its
 * newline is left out: the run is still writing it. */
static int parse_more(cached_file *f, FILE *in, const char *path) {
    if (fseeko(in, f->parsed, SEEK_SET)) return anvil_fail("%s: cannot seek: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while (!rc && (len = getline(&line, &cap, in)) > 0 && line[len - 1] == '\n') {
        record r = parse_record(line);
        if (r.kind != REC_OTHER) {
            if (f->n == f->cap) {
                size_t cap2 = f->cap ? 2 * f->cap : 1024;
                record *grown = realloc(f->recs, cap2 * sizeof *grown);
                if (!grown) {
                    rc = anvil_fail("goodput: out of memory for %s's records", path);
                    break;
                }
                f->recs = grown;
                f->cap = cap2;
            }
            f->recs[f->n++] = r;
        }
        f->parsed += len;
        f->ntail = (size_t)len < CACHE_TAIL ? (size_t)len : CACHE_TAIL;
        memcpy(f->tail, line + len - (ssize_t)f->ntail, f->ntail);
    }
    free(line);
    return rc;
}

/* The records of a metrics file, for as long as an accounting walks them: the cache's entry (its lock
 * held until records_done), or without a cache the file parsed into own. */
typedef struct {
    const record *r;
    size_t n;
    anvil_goodput_cache *locked;
    cached_file own;
} records;

/* The records of the file at path (none when it is missing), through the cache when there is one; -1
 * after anvil_fail. */
static int records_of(anvil_goodput_cache *c, const char *path, records *out) {
    memset(out, 0, sizeof *out);
    FILE *in = fopen(path, "r");
    if (!in) return errno == ENOENT ? 0 : anvil_fail("%s: cannot open: %s", path, strerror(errno));
    if (!c) {
        int rc = parse_more(&out->own, in, path);
        fclose(in);
        out->r = out->own.recs;
        out->n = out->own.n;
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    cached_file *f = slot(c, path);
    struct stat st;
    int rc = 0;
    if (fstat(fileno(in), &st)) rc = anvil_fail("%s: cannot stat: %s", path, strerror(errno));
    else if (!f->path || !same_file(f, fileno(in), &st)) {
        char *copy = strdup(path);
        forget(f);
        if (!copy) rc = anvil_fail("goodput: out of memory");
        f->path = copy;
        f->dev = st.st_dev;
        f->ino = st.st_ino;
    }
    if (!rc) rc = parse_more(f, in, path);
    fclose(in);
    if (rc) {
        forget(f);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    f->used = ++c->clock;
    out->r = f->recs;
    out->n = f->n;
    out->locked = c;
    return 0;
}

static void records_done(records *rs) {
    if (rs->locked) pthread_mutex_unlock(&rs->locked->mu);
    forget(&rs->own);
}

/* A step as the walk saw it: when it ended, its time less its evaluation's, whether it checkpointed,
 * of which attempt (index): what a fault's stall is measured on. */
typedef struct {
    double t, len;
    int attempt;
    bool ckpt;
} step_rec;

/* The walk over the job's timeline. */
typedef struct {
    const anvil_goodput_input *in;
    anvil_goodput *g;
    double cursor;
    int cur;            /* the attempt whose records are being read, its index; -1: none */
    int next;           /* the first attempt not yet opened */
    bool clean;         /* the current attempt wrote its end record */
    int64_t *start_step; /* per attempt: the step its start record names; -1: none */
    double *start_t;
    int64_t ckpt_step;  /* the newest checkpoint of the job seen so far (first pass) */
    step_rec *steps;
    int nsteps, spans_cap, loss_cap, steps_cap;
    bool spans_lost, loss_lost, steps_lost;
} walk;

/* arr, of n elements of size, with room for one more (its capacity doubled from first when full);
 * arr itself, *lost set, when there is no memory for it. */
static void *with_room(void *arr, int n, int *cap, int first, size_t size, bool *lost) {
    if (n < *cap) return arr;
    int grown_cap = *cap ? 2 * *cap : first;
    void *grown = realloc(arr, size * (size_t)grown_cap);
    if (!grown) {
        *lost = true;
        return arr;
    }
    *cap = grown_cap;
    return grown;
}

/* Appends [t0, t0 + s) of part p to the timeline, merged into the stretch before when that one is of
 * the same part and attempt; a timeline out of memory is dropped (the sums do not need it). */
static void span(walk *w, anvil_gp_part p, double t0, double s, int attempt) {
    anvil_goodput *g = w->g;
    int number = attempt >= 0 ? w->in->attempts[attempt].attempt : 0;
    double a = t0 - w->in->submitted_at;
    anvil_gp_span *last = g->nspans ? &g->spans[g->nspans - 1] : NULL;
    if (last && last->part == p && last->attempt == number && fabs(last->t1 - a) < 1e-9) {
        last->t1 = a + s;
        return;
    }
    if (w->spans_lost) return;
    g->spans = with_room(g->spans, g->nspans, &w->spans_cap, 64, sizeof *g->spans, &w->spans_lost);
    if (w->spans_lost) return;
    g->spans[g->nspans++] = (anvil_gp_span){a, a + s, number, p};
}

/* Gives s seconds from t0 to part p. */
static void add(walk *w, anvil_gp_part p, double t0, double s, int attempt) {
    if (!(s > 0)) return;
    w->g->total.s[p] += s;
    if (attempt >= 0) w->g->attempts[attempt].parts.s[p] += s;
    span(w, p, t0, s, attempt);
}

/* Moves the cursor to t (clipped to hi), giving the interval to p. */
static void advance(walk *w, anvil_gp_part p, double t, double hi, int attempt) {
    if (t > hi) t = hi;
    if (t <= w->cursor) return;
    add(w, p, w->cursor, t - w->cursor, attempt);
    w->cursor = t;
}

static int index_of(const anvil_goodput_input *in, int attempt) {
    for (int i = 0; i < in->nattempts; i++)
        if (in->attempts[i].attempt == attempt) return i;
    return -1;
}

static double ended(const walk *w, int i) {
    double e = w->in->attempts[i].ended_at;
    return e > 0 ? e : w->in->end;
}

/* First pass: where each attempt's training began, and the newest checkpoint. */
static void scan_start(walk *w, const record *r) {
    if (r->kind == REC_CKPT && r->step > w->ckpt_step) w->ckpt_step = r->step;
    if (r->kind != REC_START || r->job != w->in->job_id) return;
    int i = index_of(w->in, r->attempt);
    if (i >= 0 && w->start_step[i] < 0) {
        w->start_step[i] = r->step;
        w->start_t[i] = r->t;
    }
}

/* Which steps of attempt i count: up to the step the next attempt that trained resumed from; for the
 * last one, all of a job that completed, stopped or runs, else up to its newest checkpoint. */
static int64_t kept_through(const walk *w, int i) {
    for (int k = i + 1; k < w->in->nattempts; k++)
        if (w->start_step[k] >= 0) return w->start_step[k];
    bool last = i == w->in->nattempts - 1;
    return last && !w->in->failed ? INT64_MAX : w->ckpt_step;
}

/* The latest fault recorded in attempt i after the cursor (its last sign of life), or NULL. */
static const anvil_job_fault *fault_in(const walk *w, int i) {
    const anvil_job_fault *f = NULL;
    for (int k = 0; k < w->in->nfaults; k++) {
        const anvil_job_fault *c = &w->in->faults[k];
        if (c->attempt == w->in->attempts[i].attempt && c->at >= w->cursor && c->at <= ended(w, i)) f = c;
    }
    return f;
}

/* Ends attempt i: the time after its last record, by how it ended. */
static void close_attempt(walk *w, int i) {
    double e = ended(w, i);
    bool running = w->in->attempts[i].ended_at == 0;
    const anvil_job_fault *f = !w->clean ? fault_in(w, i) : NULL;
    if (w->start_step[i] < 0) {
        /* It never trained: its start up to the fault that ended it, if one did. */
        advance(w, ANVIL_GP_RESTART, f ? f->at : e, e, i);
        advance(w, ANVIL_GP_DETECTION, e, e, i);
    } else if (f) {
        advance(w, ANVIL_GP_RECOMPUTED, f->at, e, i);
        advance(w, ANVIL_GP_DETECTION, e, e, i);
    } else {
        advance(w, running && !w->clean ? ANVIL_GP_PRODUCTIVE : ANVIL_GP_DETECTION, e, e, i);
    }
}

/* Opens attempt i: the restart from the cursor to its first record (all of it, if it has none). */
static void open_attempt(walk *w, int i) {
    const anvil_job_attempt *a = &w->in->attempts[i];
    anvil_gp_attempt *ga = &w->g->attempts[i];
    ga->attempt = a->attempt;
    ga->started_at = a->started_at;
    ga->ended_at = ended(w, i);
    ga->resumed_from = w->start_step[i];
    ga->kept_through = kept_through(w, i);
    w->clean = false;
    advance(w, ANVIL_GP_RESTART, a->started_at, ended(w, i), i);
    if (w->start_step[i] >= 0) advance(w, ANVIL_GP_RESTART, w->start_t[i], ended(w, i), i);
}

/* Closes the current attempt and opens every one up to index to. */
static void move_to(walk *w, int to) {
    if (w->cur >= 0) close_attempt(w, w->cur);
    w->cur = -1;
    while (w->next <= to && w->next < w->in->nattempts) {
        int i = w->next++;
        open_attempt(w, i);
        if (i < to) close_attempt(w, i);
        else w->cur = i;
    }
}

/* An interval that ended with a record: its checkpoint and eval shares first, the rest to p. */
static void split(walk *w, const record *r, double ckpt_s, anvil_gp_part p) {
    int i = w->cur;
    double e = ended(w, i), t = r->t < e ? r->t : e;
    double len = t > w->cursor ? t - w->cursor : 0;
    double ck = ckpt_s < len ? ckpt_s : len, ev = r->eval_s < len - ck ? r->eval_s : len - ck;
    /* The interval's evaluation and checkpoint came after the step before, ahead of this step's work. */
    add(w, ANVIL_GP_EVAL, w->cursor, ev, i);
    add(w, ANVIL_GP_CHECKPOINT, w->cursor + ev, ck, i);
    add(w, p, w->cursor + ev + ck, len - ck - ev, i);
    if (len > 0) w->cursor = t;
}

/* A step's loss at its time, for the timeline's curve; a curve out of memory is dropped. */
static void loss_point(walk *w, double t, double loss) {
    anvil_goodput *g = w->g;
    if (w->loss_lost || !isfinite(loss)) return;
    g->loss = with_room(g->loss, g->nloss, &w->loss_cap, 256, 2 * sizeof *g->loss, &w->loss_lost);
    if (w->loss_lost) return;
    g->loss[2 * g->nloss] = t - w->in->submitted_at;
    g->loss[2 * g->nloss++ + 1] = loss;
}

/* Keeps a step for the stalls; steps out of memory are dropped (the stalls then read 0). */
static void note_step(walk *w, const record *r, double interval) {
    if (w->steps_lost) return;
    w->steps = with_room(w->steps, w->nsteps, &w->steps_cap, 256, sizeof *w->steps, &w->steps_lost);
    if (w->steps_lost) {
        w->nsteps = 0;
        return;
    }
    w->steps[w->nsteps++] = (step_rec){r->t, interval > r->eval_s ? interval - r->eval_s : 0, w->cur, r->ckpt_s > 0};
}

/* Second pass: each record of this job's attempts, in order. */
static void walk_record(walk *w, const record *r) {
    if (r->kind == REC_START) {
        int i = r->job == w->in->job_id ? index_of(w->in, r->attempt) : -1;
        if (i >= 0 && i >= w->next) move_to(w, i);
        else if (i < 0 && w->cur >= 0) {
            close_attempt(w, w->cur); /* another job's run in this folder */
            w->cur = -1;
        }
        return;
    }
    if (w->cur < 0 || w->clean) return;
    anvil_gp_attempt *ga = &w->g->attempts[w->cur];
    if (r->kind == REC_TRAIN) {
        double from = w->cursor;
        split(w, r, r->ckpt_s, r->step <= ga->kept_through ? ANVIL_GP_PRODUCTIVE : ANVIL_GP_RECOMPUTED);
        note_step(w, r, w->cursor - from);
        loss_point(w, r->t, r->loss);
        if (r->step > ga->last_step) ga->last_step = r->step;
    } else if (r->kind == REC_END) {
        split(w, r, r->ckpt_s + r->save_s, ANVIL_GP_CHECKPOINT);
        w->clean = true;
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median length of attempt i's steps with (ckpt) or without a checkpoint; HUGE_VAL when there is
 * none, or no memory to find it (then no step counts as slow). */
static double usual_step(const walk *w, int i, bool ckpt) {
    double *v = malloc(sizeof *v * (size_t)(w->nsteps ? w->nsteps : 1)), median = HUGE_VAL;
    int n = 0;
    for (int s = 0; v && s < w->nsteps; s++)
        if (w->steps[s].attempt == i && w->steps[s].ckpt == ckpt) v[n++] = w->steps[s].len;
    if (n) {
        qsort(v, (size_t)n, sizeof *v, by_value);
        median = v[n / 2];
    }
    free(v);
    return median;
}

/* Fault k's stall in attempt i: what the steps after it took beyond usual, the attempt's usual step of
 * their sort (without and with a checkpoint), up to the first back at pace or the next fault. A step
 * within half again of the usual one counts as at pace: steps vary that much without a fault on a
 * shared machine. */
static double stall_after(const walk *w, int k, int i, const double usual[2]) {
    const anvil_job_fault *f = &w->in->faults[k];
    double until = HUGE_VAL, stall = 0;
    for (int m = 0; m < w->in->nfaults; m++)
        if (w->in->faults[m].at > f->at && w->in->faults[m].at < until) until = w->in->faults[m].at;
    for (int s = 0; s < w->nsteps; s++) {
        const step_rec *st = &w->steps[s];
        if (st->attempt != i || st->t <= f->at) continue;
        if (st->t - st->len >= until || st->len <= 1.5 * usual[st->ckpt]) break;
        stall += st->len - usual[st->ckpt];
    }
    return stall;
}

/* What each fault cost: for the fault that ended its attempt, the attempt's detection and recomputed
 * time and the restart of the attempt after it; for one the attempt went on through, its stall. */
static void cost_faults(walk *w) {
    anvil_goodput *g = w->g;
    /* Each attempt's usual steps, found once for all its faults that need them (NAN: not yet); without
     * memory for them, no fault has a stall. */
    double (*usual)[2] = malloc(sizeof *usual * (size_t)(w->in->nattempts ? w->in->nattempts : 1));
    for (int i = 0; usual && i < w->in->nattempts; i++) usual[i][0] = usual[i][1] = NAN;
    for (int k = 0; k < w->in->nfaults; k++) {
        const anvil_job_fault *f = &w->in->faults[k];
        anvil_gp_fault *o = &g->faults[k];
        o->at = f->at;
        o->attempt = f->attempt;
        snprintf(o->kind, sizeof o->kind, "%s", f->kind);
        snprintf(o->target, sizeof o->target, "%s", f->target);
        int i = index_of(w->in, f->attempt);
        if (i < 0) continue;
        /* The last fault of an attempt that failed (another came after it, or the job did not complete) is
         * what ended it; an earlier one, a daemon restart say, or any in the attempt that completed the
         * job, did not. */
        bool last = true, failed = i + 1 < w->in->nattempts || !w->in->completed;
        for (int m = k + 1; m < w->in->nfaults; m++) last = last && w->in->faults[m].attempt != f->attempt;
        if (!w->in->attempts[i].ended_at || !last || !failed || g->attempts[i].parts.s[ANVIL_GP_DETECTION] == 0) {
            if (usual && isnan(usual[i][0])) {
                usual[i][0] = usual_step(w, i, false);
                usual[i][1] = usual_step(w, i, true);
            }
            if (usual) o->stall = stall_after(w, k, i, usual[i]);
            continue;
        }
        o->detection = g->attempts[i].parts.s[ANVIL_GP_DETECTION];
        o->recomputed = g->attempts[i].parts.s[ANVIL_GP_RECOMPUTED];
        if (i + 1 < w->in->nattempts) o->restart = g->attempts[i + 1].parts.s[ANVIL_GP_RESTART];
    }
    free(usual);
}

int anvil_goodput_account(const anvil_goodput_input *in, anvil_goodput *g) {
    memset(g, 0, sizeof *g);
    size_t na = (size_t)(in->nattempts ? in->nattempts : 1), nf = (size_t)(in->nfaults ? in->nfaults : 1);
    walk w = {.in = in, .g = g, .cursor = in->submitted_at, .cur = -1};
    g->attempts = calloc(na, sizeof *g->attempts);
    g->faults = calloc(nf, sizeof *g->faults);
    w.start_step = malloc(na * sizeof *w.start_step);
    w.start_t = calloc(na, sizeof *w.start_t);
    int rc = g->attempts && g->faults && w.start_step && w.start_t ? 0 : anvil_fail("goodput: out of memory");
    if (!rc) {
        g->nattempts = in->nattempts;
        g->nfaults = in->nfaults;
        for (int i = 0; i < in->nattempts; i++) w.start_step[i] = -1;
    }
    records rs;
    if (!rc && !(rc = records_of(in->cache, in->metrics_path, &rs))) {
        for (size_t i = 0; i < rs.n; i++) scan_start(&w, &rs.r[i]);
        double first = in->nattempts ? in->attempts[0].started_at : in->end;
        advance(&w, ANVIL_GP_QUEUE, in->left_queue_at > 0 ? in->left_queue_at : first, in->end, -1);
        for (size_t i = 0; i < rs.n; i++) walk_record(&w, &rs.r[i]);
        records_done(&rs);
    }
    if (!rc) {
        move_to(&w, in->nattempts - 1);
        if (w.cur >= 0) close_attempt(&w, w.cur);
        advance(&w, ANVIL_GP_DETECTION, in->end, in->end, -1);
        cost_faults(&w);
        g->submitted_at = in->submitted_at;
        g->wall = in->end - in->submitted_at;
        double base = g->wall - g->total.s[ANVIL_GP_QUEUE];
        g->ettr = base > 0 ? g->total.s[ANVIL_GP_PRODUCTIVE] / base : 0;
    }
    free(w.start_step);
    free(w.start_t);
    free(w.steps);
    if (rc) anvil_goodput_free(g);
    return rc;
}

/* When the job left the daemon's queue: its first history entry past Pending. */
static double left_queue(anvil_store *st, int64_t id) {
    anvil_job_event *ev;
    int n;
    if (anvil_store_history(st, id, &ev, &n)) return 0;
    double at = 0;
    for (int i = 0; i < n && !at; i++)
        if (ev[i].status != ANVIL_JOB_PENDING) at = ev[i].at;
    anvil_job_events_free(ev, n);
    return at;
}

int anvil_goodput_of(anvil_store *st, anvil_goodput_cache *cache, const anvil_job *j, double now, anvil_goodput *g) {
    anvil_job_attempt *at = NULL;
    anvil_job_fault *faults = NULL;
    int na = 0, nf = 0;
    if (anvil_store_attempts(st, j->id, &at, &na)) return -1;
    if (anvil_store_faults(st, j->id, &faults, &nf)) {
        anvil_job_attempts_free(at, na);
        return -1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", j->run_dir);
    anvil_goodput_input in = {.job_id = j->id,
                              .submitted_at = j->submitted_at,
                              .left_queue_at = left_queue(st, j->id),
                              .end = anvil_job_status_final(j->status) && j->ended_at > 0 ? j->ended_at : now,
                              .completed = j->status == ANVIL_JOB_COMPLETED,
                              .failed = j->status == ANVIL_JOB_FAILED,
                              .attempts = at,
                              .nattempts = na,
                              .faults = faults,
                              .nfaults = nf,
                              .metrics_path = path,
                              .cache = cache};
    int rc = anvil_goodput_account(&in, g);
    anvil_job_attempts_free(at, na);
    anvil_job_faults_free(faults, nf);
    return rc;
}

void anvil_goodput_free(anvil_goodput *g) {
    free(g->attempts);
    free(g->faults);
    free(g->spans);
    free(g->loss);
    memset(g, 0, sizeof *g);
}

static cJSON *parts_json(const anvil_gp_sums *s) {
    cJSON *o = cJSON_CreateObject();
    for (int p = 0; o && p < ANVIL_GP_NPARTS; p++)
        if (!cJSON_AddNumberToObject(o, part_names[p], s->s[p])) {
            cJSON_Delete(o);
            return NULL;
        }
    return o;
}

static cJSON *attempt_json(const anvil_gp_attempt *a) {
    cJSON *o = cJSON_CreateObject(), *parts = parts_json(&a->parts);
    bool ok = o && parts && cJSON_AddNumberToObject(o, "attempt", a->attempt) &&
              cJSON_AddNumberToObject(o, "started_at", a->started_at) &&
              cJSON_AddNumberToObject(o, "ended_at", a->ended_at) &&
              cJSON_AddNumberToObject(o, "resumed_from", (double)a->resumed_from) &&
              cJSON_AddNumberToObject(o, "last_step", (double)a->last_step) &&
              cJSON_AddNumberToObject(o, "kept_through", a->kept_through == INT64_MAX ? -1 : (double)a->kept_through);
    if (ok && cJSON_AddItemToObject(o, "parts", parts)) return o;
    cJSON_Delete(parts);
    cJSON_Delete(o);
    return NULL;
}

static cJSON *fault_json(const anvil_gp_fault *f) {
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddNumberToObject(o, "at", f->at) && cJSON_AddNumberToObject(o, "attempt", f->attempt) &&
        cJSON_AddStringToObject(o, "kind", f->kind) && cJSON_AddStringToObject(o, "target", f->target) &&
        cJSON_AddNumberToObject(o, "detection_s", f->detection) &&
        cJSON_AddNumberToObject(o, "recomputed_s", f->recomputed) &&
        cJSON_AddNumberToObject(o, "restart_s", f->restart) && cJSON_AddNumberToObject(o, "stall_s", f->stall) &&
        cJSON_AddNumberToObject(o, "lost_s", f->detection + f->recomputed + f->restart + f->stall))
        return o;
    cJSON_Delete(o);
    return NULL;
}

/* The timeline's stretches and the loss curve (thinned to ANVIL_GP_LOSS_POINTS), added to o. */
static bool add_timeline(cJSON *o, const anvil_goodput *g) {
    cJSON *spans = cJSON_AddArrayToObject(o, "spans"), *loss = cJSON_AddArrayToObject(o, "loss");
    bool ok = spans && loss;
    for (int i = 0; ok && i < g->nspans; i++) {
        cJSON *s = cJSON_CreateObject();
        ok = s && cJSON_AddItemToArray(spans, s) && cJSON_AddNumberToObject(s, "t0", g->spans[i].t0) &&
             cJSON_AddNumberToObject(s, "t1", g->spans[i].t1) &&
             cJSON_AddNumberToObject(s, "attempt", g->spans[i].attempt) &&
             cJSON_AddStringToObject(s, "part", part_names[g->spans[i].part]);
    }
    int stride = (g->nloss + ANVIL_GP_LOSS_POINTS - 1) / ANVIL_GP_LOSS_POINTS;
    for (int i = 0; ok && i < g->nloss; i += stride) {
        cJSON *pt = cJSON_CreateDoubleArray(g->loss + 2 * i, 2);
        ok = pt && cJSON_AddItemToArray(loss, pt);
    }
    return ok;
}

cJSON *anvil_goodput_json(const anvil_goodput *g, bool timeline) {
    cJSON *o = cJSON_CreateObject(), *parts = parts_json(&g->total);
    cJSON *attempts = cJSON_CreateArray(), *faults = cJSON_CreateArray();
    bool ok = o && parts && attempts && faults && cJSON_AddNumberToObject(o, "submitted_at", g->submitted_at) &&
              cJSON_AddNumberToObject(o, "wall_s", g->wall) &&
              cJSON_AddNumberToObject(o, "ettr", g->ettr);
    for (int i = 0; ok && i < g->nattempts; i++) {
        cJSON *a = attempt_json(&g->attempts[i]);
        ok = a && cJSON_AddItemToArray(attempts, a);
        if (!ok) cJSON_Delete(a);
    }
    for (int i = 0; ok && i < g->nfaults; i++) {
        cJSON *f = fault_json(&g->faults[i]);
        ok = f && cJSON_AddItemToArray(faults, f);
        if (!ok) cJSON_Delete(f);
    }
    if (!ok || !cJSON_AddItemToObject(o, "parts", parts)) goto fail;
    parts = NULL;
    if (!cJSON_AddItemToObject(o, "attempts", attempts)) goto fail;
    attempts = NULL;
    if (cJSON_AddItemToObject(o, "faults", faults) && (!timeline || add_timeline(o, g))) return o;
    if (cJSON_GetObjectItemCaseSensitive(o, "faults")) faults = NULL;
fail:
    cJSON_Delete(parts);
    cJSON_Delete(attempts);
    cJSON_Delete(faults);
    cJSON_Delete(o);
    anvil_fail("goodput: out of memory");
    return NULL;
}

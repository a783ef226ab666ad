#include "train/checkpointer.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "dist/comm.h"
#include "obs/metrics.h"
#include "obs/trace.h"

/* The undisturbed steps a checkpoint's cost is measured against: the most recent ones, enough for
 * a steady median, few enough to follow a machine whose load changes. */
#define BASE_STEPS 16
#define MAX_REPORTS 4

/* Where a rank's shard file stands, as the ranks exchange it. */
typedef enum { SHARD_NONE, SHARD_FAILED, SHARD_WRITTEN, SHARD_PENDING } shard_state;

/* What a rank tells the others about its shard file. */
typedef struct {
    int64_t state; /* shard_state */
    int64_t bytes;
    int64_t crc32c;
    int64_t g; /* the shard's number, which names its file */
} shard_report;

/* An asynchronous checkpoint has two phases: the snapshot, which the training
 * thread takes in the save call with every OpenMP thread (a copy of the
 * weights and moments into images of their files, checksummed as they are
 * copied), and the write, which a writer thread does while training goes on.
 * The writer only hands the images to the disk past the page cache, so it
 * needs almost no CPU. A sharded checkpoint's write has a third phase on
 * rank 0: it waits until the ranks' exchange says every shard file is written
 * (commit 1) or one failed (commit -1), then finishes the folder or removes
 * it.
 *
 * Measured on 2 busy cores (bench/RESULTS.md): copying in a third thread
 * while the next step computes preempts a training thread and holds the
 * other at its next barrier; copying into the page cache cost seconds of CPU;
 * a fork()ed child's copy-on-write image costs a page fault per 4 KiB page
 * the next update writes, and Open MPI does not support fork(). */
struct anvil_checkpointer {
    anvil_checkpointer_config cfg;
    int rank, world;
    anvil_ckpt_state st;         /* what the writer snapshots (its pointers stay valid: model, opt) */
    anvil_ckpt_layout layout;    /* st.layout's copy: the caller's may be gone before the snapshot */
    anvil_ckpt_snapshot *snap;   /* reused from one checkpoint to the next */
    pthread_t writer;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int writing;  /* a writer thread exists and has not been joined */
    int take_rc;  /* the snapshot's result */
    int write_rc; /* the writer's result */
    char write_err[1024];
    char path[4096];
    int64_t step;
    double last_save_time, write_ms, writer_cpu_ms;
    int64_t last_save_step; /* the step of the last save, or where the run started */
    bool relative;          /* every_steps counts from the last save, not in multiples of the step */
    int done; /* the writer thread has finished */
    int failed;
    /* the true cost of the checkpoint in flight (anvil_checkpointer_report) */
    double call_ms;   /* the training thread's time in the save call */
    double waited_ms; /* ... and waiting for the write at a later save call (or free) */
    double steps_ms; /* the steps it overlapped, summed */
    int nsteps;
    double base[BASE_STEPS]; /* the latest undisturbed steps, a ring */
    int nbase, base_next;
    double sync_ms; /* the latest synchronous save's time, of step sync_step (-1: none yet) */
    int64_t sync_step;
    anvil_checkpointer_report costs[MAX_REPORTS]; /* completed, for the caller's metrics */
    int ncosts;
    /* the sharded checkpoint in flight */
    int sharded;
    anvil_checkpointer_shard shard; /* its slices, valid until the snapshot is taken */
    anvil_ckpt_slice *slices;
    int slices_cap;
    anvil_ckpt_shard_snapshot *shard_snap; /* reused from one checkpoint to the next */
    char tmp[4096];          /* the temporary folder rank 0 opened */
    int open;                /* shard states not yet exchanged to the end */
    shard_report mine;
    shard_report *reports;   /* every rank's, one per rank */
    char shard_err[1024];    /* why this rank's shard failed */
    char exchange_err[1024]; /* the exchange's verdict when one failed, for rank 0's writer to report */
    int commit;              /* rank 0: 0 until the exchange decides, then 1 or -1 */
    anvil_ckpt_file shards[ANVIL_CKPT_MAX_FILES];
    int shard_host[ANVIL_CKPT_MAX_FILES]; /* the uploader rank of each shard's writer's host */
    int nshards;
};

anvil_checkpointer *anvil_checkpointer_new(const anvil_checkpointer_config *cfg) {
    anvil_checkpointer *cp = calloc(1, sizeof *cp);
    if (!cp) {
        anvil_fail("checkpoint: out of memory");
        return NULL;
    }
    cp->cfg = *cfg;
    if (cp->cfg.keep_last < 1) cp->cfg.keep_last = 1;
    cp->rank = anvil_dist_rank();
    cp->world = anvil_dist_world_size();
    if (!(cp->reports = calloc((size_t)cp->world, sizeof *cp->reports))) {
        free(cp);
        anvil_fail("checkpoint: out of memory");
        return NULL;
    }
    pthread_mutex_init(&cp->mu, NULL);
    pthread_cond_init(&cp->cv, NULL);
    cp->last_save_time = anvil_now();
    cp->sync_step = -1;
    return cp;
}

static void set_shard_state(anvil_checkpointer *cp, shard_state s) {
    pthread_mutex_lock(&cp->mu);
    cp->mine.state = s;
    pthread_cond_broadcast(&cp->cv);
    pthread_mutex_unlock(&cp->mu);
}

/* The snapshot: the whole state where this rank writes it (replicated
 * runs, and rank 0 of sharded ones), and the shard's slices. */
static void take(anvil_checkpointer *cp) {
    double span = anvil_trace_begin();
    int rc = 0;
    if (!cp->sharded || cp->rank == 0) {
        anvil_ckpt_snapshot *snap = anvil_ckpt_snapshot_take(cp->snap, &cp->st);
        cp->snap = snap;
        if (!snap) rc = -1;
    }
    if (!rc && cp->sharded && cp->shard.writer) {
        anvil_checkpointer_shard *sh = &cp->shard;
        cp->shard_snap = anvil_ckpt_shard_take(cp->shard_snap, sh->g, sh->k, cp->st.model, sh->slices, sh->nslices);
        if (!cp->shard_snap) rc = -1;
    }
    if (rc) snprintf(cp->write_err, sizeof cp->write_err, "%s", anvil_errmsg());
    cp->take_rc = rc;
    anvil_trace_end(span, "ckpt", "checkpoint snapshot", -1, -1);
}

/* The shard's writer writes its file into rank 0's temporary folder. */
static void write_shard(anvil_checkpointer *cp) {
    if (!cp->shard.writer) {
        set_shard_state(cp, SHARD_NONE);
        return;
    }
    anvil_ckpt_file f = {0};
    int rc = cp->take_rc ? -1 : anvil_ckpt_shard_write(cp->shard_snap, cp->tmp, &f);
    if (!rc && cp->cfg.host_leader) {
        char path[sizeof cp->tmp + sizeof f.name + 1];
        snprintf(path, sizeof path, "%s/%s", cp->tmp, f.name);
        rc = anvil_ckpt_remote_stage(cp->cfg.run_dir, cp->step, cp->cfg.host_leader[cp->rank], path);
    }
    if (rc && !cp->take_rc) snprintf(cp->write_err, sizeof cp->write_err, "%s", anvil_errmsg());
    if (rc) snprintf(cp->shard_err, sizeof cp->shard_err, "%s", cp->write_err);
    cp->mine.bytes = (int64_t)f.bytes;
    cp->mine.crc32c = f.crc32c;
    set_shard_state(cp, rc ? SHARD_FAILED : SHARD_WRITTEN);
}

/* Rank 0 queues the committed folder's upload, but for the shard files other hosts upload, and its
 * commit after their markers. */
static int push_remote(anvil_checkpointer *cp) {
    const char *skip[ANVIL_CKPT_MAX_FILES];
    int hosts[ANVIL_CKPT_MAX_FILES], nskip = 0, nhosts = 0;
    for (int i = 0; cp->sharded && i < cp->nshards; i++) {
        int h = cp->shard_host[i], seen = h == 0;
        if (seen) continue;
        skip[nskip++] = cp->shards[i].name;
        for (int j = 0; j < nhosts && !seen; j++) seen = hosts[j] == h;
        if (!seen) hosts[nhosts++] = h;
    }
    return anvil_ckpt_remote_push(cp->cfg.remote, cp->path, cp->step, skip, nskip, hosts, nhosts);
}

/* Writes (or, sharded, completes or removes) the checkpoint folder, then prunes. */
static void finish(anvil_checkpointer *cp) {
    int rc = cp->take_rc;
    if (cp->sharded) {
        pthread_mutex_lock(&cp->mu);
        while (!cp->commit) pthread_cond_wait(&cp->cv, &cp->mu);
        int commit = cp->commit;
        pthread_mutex_unlock(&cp->mu);
        if (commit < 0 || rc) {
            /* The exchange already failed with the reason, on every rank. */
            anvil_ckpt_abandon(cp->tmp);
            if (!rc) snprintf(cp->write_err, sizeof cp->write_err, "%s", cp->exchange_err);
            cp->write_rc = -1;
            return;
        }
        rc = anvil_ckpt_finish(cp->snap, cp->cfg.run_dir, cp->tmp, cp->shards, cp->nshards, cp->path, sizeof cp->path);
    } else if (!rc) {
        rc = anvil_ckpt_snapshot_write(cp->snap, cp->cfg.run_dir, cp->path, sizeof cp->path);
    }
    if (!rc && cp->cfg.remote && push_remote(cp)) rc = -1;
    if (!rc && anvil_ckpt_prune(cp->cfg.run_dir, cp->cfg.keep_last, cp->cfg.keep_every) < 0) rc = -1;
    if (rc && !cp->take_rc) snprintf(cp->write_err, sizeof cp->write_err, "%s", anvil_errmsg());
    cp->write_rc = rc;
}

static double thread_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Write and prune, in the background. Error text is copied out: messages are
 * per thread. The writer runs at the lowest CPU priority: its little CPU
 * work (system calls, the manifest, pruning) should wait for time the
 * training threads leave idle rather than preempt one of them. */
static void *write_main(void *arg) {
    anvil_checkpointer *cp = arg;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    anvil_trace_thread_name("ckpt writer");
    double t0 = anvil_now(), cpu0 = thread_cpu_ms(), span = anvil_trace_begin();
    if (cp->sharded) write_shard(cp);
    if (!cp->sharded || cp->rank == 0) finish(cp);
    anvil_trace_end(span, "ckpt", "checkpoint write", -1, -1);
    cp->write_ms = (anvil_now() - t0) * 1e3;
    cp->writer_cpu_ms = thread_cpu_ms() - cpu0;
    pthread_mutex_lock(&cp->mu);
    cp->done = 1;
    pthread_mutex_unlock(&cp->mu);
    return NULL;
}

/* A host's uploader other than rank 0, once every shard file is written: its host's, when it wrote
 * any, go up now. A failure to queue them is logged; rank 0 then finds no marker and does not
 * commit the step. */
static void push_host(anvil_checkpointer *cp, int nshards) {
    int mine = 0;
    for (int i = 0; i < nshards && !mine; i++) mine = cp->shard_host[i] == cp->rank;
    if (mine && anvil_ckpt_remote_push_host(cp->cfg.remote, cp->step))
        fprintf(cp->cfg.log, "error: checkpoint step %lld not uploaded by this host: %s\n", (long long)cp->step,
                anvil_errmsg());
}

/* Every rank's shard state, so that rank 0 commits the folder only once
 * every shard file is written; with wait, this rank's own file first. All
 * ranks get the same reports, so they all decide alike: 0 while a shard is
 * still being written, 1 when rank 0 may commit, -1 (on every rank) when a
 * shard failed, and rank 0 removes the folder. */
static int exchange(anvil_checkpointer *cp, int wait) {
    shard_report *all = cp->reports;
    memset(all, 0, (size_t)cp->world * sizeof *all);
    pthread_mutex_lock(&cp->mu);
    while (wait && cp->mine.state == SHARD_PENDING) pthread_cond_wait(&cp->cv, &cp->mu);
    all[cp->rank] = cp->mine;
    pthread_mutex_unlock(&cp->mu);
    if (anvil_allreduce(anvil_dist_world(), all, (size_t)cp->world * (sizeof *all / sizeof(int64_t)), ANVIL_I64,
                        "checkpoint shard files"))
        return -1;
    int failed = -1, pending = 0, n = 0;
    for (int r = 0; r < cp->world; r++) {
        if (all[r].state == SHARD_PENDING) pending = 1;
        if (all[r].state == SHARD_FAILED && failed < 0) failed = r;
        if (all[r].state == SHARD_WRITTEN && n < ANVIL_CKPT_MAX_FILES - 2) {
            anvil_ckpt_shard_name((int)all[r].g, cp->shard.k, cp->shards[n].name, sizeof cp->shards[n].name);
            cp->shards[n].bytes = (uint64_t)all[r].bytes;
            cp->shards[n].crc32c = (uint32_t)all[r].crc32c;
            cp->shard_host[n] = cp->cfg.host_leader ? cp->cfg.host_leader[r] : 0;
            n++;
        }
    }
    if (pending) return 0;
    cp->open = 0;
    const char *why = failed == cp->rank ? cp->shard_err : "";
    if (failed >= 0)
        snprintf(cp->exchange_err, sizeof cp->exchange_err, "checkpoint step %lld not saved: rank %d failed to write "
                 "its shard%s%.900s", (long long)cp->step, failed, why[0] ? ": " : "", why);
    pthread_mutex_lock(&cp->mu);
    cp->nshards = n;
    cp->commit = failed >= 0 ? -1 : 1;
    pthread_cond_broadcast(&cp->cv);
    pthread_mutex_unlock(&cp->mu);
    if (failed < 0 && cp->rank != 0 && cp->cfg.remote) push_host(cp, n);
    return failed < 0 ? 1 : anvil_fail("%s", cp->exchange_err);
}

static double base_median(const anvil_checkpointer *cp) {
    double v[BASE_STEPS];
    int n = cp->nbase;
    if (!n) return NAN;
    memcpy(v, cp->base, (size_t)n * sizeof *v);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The cost of the checkpoint just completed: logged, and queued for the caller's metrics. */
static void report(anvil_checkpointer *cp, int background) {
    anvil_checkpointer_report r = {.step = cp->step,
                                   .background = background,
                                   .write_ms = cp->call_ms,
                                   .call_ms = cp->call_ms,
                                   .waited_ms = cp->waited_ms,
                                   .cost_ms = cp->call_ms,
                                   .cost_steps = cp->nsteps,
                                   .base_ms = base_median(cp),
                                   .sync_ms = cp->call_ms,
                                   .sync_step = cp->step};
    if (!background) {
        cp->sync_ms = cp->call_ms;
        cp->sync_step = cp->step;
        fprintf(cp->cfg.log, "checkpoint %s written in %.0f ms (synchronous: training waited for all of it)\n",
                cp->path, r.write_ms);
    } else {
        r.write_ms = cp->write_ms;
        r.writer_cpu_ms = cp->writer_cpu_ms;
        /* Overlapped steps that came out faster than the median are noise, not a gain the write
         * brought: that part is clamped to 0, so a cost is never below the time training spent in
         * the calls. */
        double over = cp->steps_ms - cp->nsteps * r.base_ms;
        r.cost_ms = isnan(r.base_ms) ? NAN : cp->call_ms + cp->waited_ms + (over > 0 ? over : 0);
        r.sync_ms = cp->sync_step >= 0 ? cp->sync_ms : cp->call_ms + cp->write_ms;
        r.sync_step = cp->sync_step;
        char sync[96];
        if (r.sync_step >= 0)
            snprintf(sync, sizeof sync, "%.0f ms, measured at step %lld", r.sync_ms, (long long)r.sync_step);
        else
            snprintf(sync, sizeof sync, "%.0f ms, estimated as this one's snapshot plus write", r.sync_ms);
        fprintf(cp->cfg.log, "checkpoint %s written in %.0f ms in the background (writer CPU %.0f ms); ", cp->path,
                r.write_ms, r.writer_cpu_ms);
        char waited[64] = "", clamped[128] = "";
        if (r.waited_ms > 0.5) snprintf(waited, sizeof waited, ", %.0f ms waiting for the write", r.waited_ms);
        if (over < 0)
            snprintf(clamped, sizeof clamped, "; the steps it overlapped ran %.0f ms under it: noise, counted as 0",
                     -over);
        if (isnan(r.cost_ms))
            fprintf(cp->cfg.log, "cost to training unknown: no undisturbed step was timed before it\n");
        else
            fprintf(cp->cfg.log, "cost to training %+.0f ms over %d steps (%.0f ms snapshot%s; median undisturbed step "
                    "%.0f ms%s), %.1f%% of a synchronous save (%s)\n", r.cost_ms, r.cost_steps, r.call_ms, waited,
                    r.base_ms, clamped, 100.0 * r.cost_ms / r.sync_ms, sync);
    }
    if (cp->ncosts == MAX_REPORTS) memmove(cp->costs, cp->costs + 1, (MAX_REPORTS - 1) * sizeof *cp->costs);
    else cp->ncosts++;
    cp->costs[cp->ncosts - 1] = r;
}

/* Joins the writer in flight and reports its outcome. The training thread has waited for it since
 * `since`: that is part of its cost too. */
static int wait_writer(anvil_checkpointer *cp, double since) {
    if (!cp->writing) return 0;
    pthread_join(cp->writer, NULL);
    cp->writing = 0;
    cp->waited_ms = (anvil_now() - since) * 1e3;
    if (cp->sharded && cp->rank != 0) return 0;
    if (cp->write_rc) {
        cp->failed = 1;
        fprintf(cp->cfg.log, "checkpoint step %lld failed: %s\n", (long long)cp->step, cp->write_err);
        return anvil_fail("%s", cp->write_err);
    }
    report(cp, 1);
    return 0;
}

int anvil_checkpointer_due(const anvil_checkpointer *cp, int64_t step) {
    if (cp->cfg.every_steps > 0 &&
        (cp->relative ? step - cp->last_save_step >= cp->cfg.every_steps : step % cp->cfg.every_steps == 0))
        return 1;
    return cp->cfg.every_minutes > 0 && anvil_now() - cp->last_save_time >= cp->cfg.every_minutes * 60.0;
}

/* Sharded: rank 0 opens the temporary folder and tells every rank where it
 * is, or that it (or the write before) failed. */
static int open_folder(anvil_checkpointer *cp, int rc, int64_t step) {
    struct {
        int64_t rc;
        char tmp[4096];
    } begun = {rc, ""};
    if (cp->rank == 0 && !rc && anvil_ckpt_begin(cp->cfg.run_dir, step, begun.tmp, sizeof begun.tmp)) begun.rc = -1;
    if (anvil_broadcast(anvil_dist_world(), &begun, sizeof begun, ANVIL_U8, 0, "checkpoint folder")) return -1;
    if (begun.rc)
        return cp->rank == 0 ? -1 : anvil_fail("checkpoint step %lld: rank 0 could not start it", (long long)step);
    snprintf(cp->tmp, sizeof cp->tmp, "%s", begun.tmp);
    return 0;
}

/* Keeps the caller's shard description, its slices in an array of our own. */
static int keep_shard(anvil_checkpointer *cp, const anvil_checkpointer_shard *shard) {
    cp->shard = *shard;
    if (shard->nslices > cp->slices_cap) {
        anvil_ckpt_slice *s = realloc(cp->slices, (size_t)shard->nslices * sizeof *s);
        if (!s) return anvil_fail("checkpoint: out of memory");
        cp->slices = s;
        cp->slices_cap = shard->nslices;
    }
    if (shard->nslices) memcpy(cp->slices, shard->slices, (size_t)shard->nslices * sizeof *cp->slices);
    cp->shard.slices = cp->slices;
    return 0;
}

/* Everything now, on the training thread. Sharded runs exchange their
 * shard states, and rank 0 tells everyone whether it committed. */
static int save_now(anvil_checkpointer *cp) {
    take(cp);
    double t0 = anvil_now(), span = anvil_trace_begin();
    int rc = 0;
    if (cp->sharded) {
        write_shard(cp);
        rc = exchange(cp, 1) < 0 ? -1 : 0;
        if (rc && !cp->commit) cp->commit = -1; /* the exchange itself failed */
    }
    if (!cp->sharded || cp->rank == 0) finish(cp);
    cp->write_ms = (anvil_now() - t0) * 1e3;
    anvil_trace_end(span, "ckpt", "checkpoint write (synchronous)", -1, -1);
    if (!rc && cp->sharded) {
        int64_t result = cp->write_rc;
        if (anvil_broadcast(anvil_dist_world(), &result, 1, ANVIL_I64, 0, "checkpoint result")) return -1;
        if (result && cp->rank != 0) rc = anvil_fail("checkpoint step %lld not saved", (long long)cp->step);
    }
    if (!rc && cp->write_rc && (!cp->sharded || cp->rank == 0)) rc = anvil_fail("%s", cp->write_err);
    if (rc) {
        cp->failed = 1;
        return -1;
    }
    return 0;
}

int anvil_checkpointer_save(anvil_checkpointer *cp, const anvil_ckpt_state *st, const anvil_checkpointer_shard *shard,
                            int force_sync) {
    if (!shard && cp->rank != 0) return 0;
    double called = anvil_now();
    /* A sharded checkpoint still open is closed first, the same way on every rank. */
    if (cp->open && exchange(cp, 1) < 0) return -1;
    int rc = wait_writer(cp, called);
    double t0 = anvil_now();
    if (shard ? open_folder(cp, rc, st->step) || keep_shard(cp, shard) : rc) return -1;
    cp->st = *st;
    if (st->layout) {
        cp->layout = *st->layout;
        cp->st.layout = &cp->layout;
    }
    cp->step = st->step;
    cp->sharded = shard != NULL;
    cp->take_rc = cp->write_rc = 0;
    cp->commit = 0;
    cp->done = 0;
    cp->steps_ms = cp->waited_ms = 0;
    cp->nsteps = 0;
    cp->mine = (shard_report){SHARD_PENDING, 0, 0, shard ? shard->g : 0};
    cp->shard_err[0] = '\0';
    cp->last_save_time = called;
    cp->last_save_step = st->step;
    if (cp->cfg.async && !force_sync) {
        take(cp);
        /* A replicated snapshot that failed fails now; a shard's reaches every rank through the exchange. */
        if (cp->take_rc && !cp->sharded) {
            cp->failed = 1;
            fprintf(cp->cfg.log, "checkpoint step %lld failed: %s\n", (long long)cp->step, cp->write_err);
            return anvil_fail("%s", cp->write_err);
        }
        if (pthread_create(&cp->writer, NULL, write_main, cp) == 0) {
            cp->writing = 1;
            cp->open = cp->sharded;
            cp->call_ms = (anvil_now() - t0) * 1e3;
            if (!cp->sharded || cp->rank == 0)
                fprintf(cp->cfg.log, "checkpoint step %lld: snapshot taken in %.0f ms, writing in the background\n",
                        (long long)cp->step, cp->call_ms);
            return 0;
        }
    }
    rc = save_now(cp);
    cp->call_ms = (anvil_now() - t0) * 1e3;
    if (!rc && (!cp->sharded || cp->rank == 0)) report(cp, 0);
    return rc;
}

int anvil_checkpointer_before_update(anvil_checkpointer *cp) {
    if (!cp || !cp->open) return 0;
    return exchange(cp, 0) < 0 ? -1 : 1;
}

int anvil_checkpointer_step_done(anvil_checkpointer *cp, double step_ms, int base) {
    if (!cp) return 0;
    if (!cp->writing) {
        if (base) {
            cp->base[cp->base_next] = step_ms;
            cp->base_next = (cp->base_next + 1) % BASE_STEPS;
            if (cp->nbase < BASE_STEPS) cp->nbase++;
        }
        return 0;
    }
    cp->steps_ms += step_ms;
    cp->nsteps++;
    pthread_mutex_lock(&cp->mu);
    int done = cp->done;
    pthread_mutex_unlock(&cp->mu);
    if (!done) return 0;
    if (cp->cfg.progress && (!cp->sharded || cp->rank == 0)) anvil_progress_end(cp->cfg.log);
    return wait_writer(cp, anvil_now());
}

int anvil_checkpointer_next_report(anvil_checkpointer *cp, anvil_checkpointer_report *rep) {
    if (!cp || !cp->ncosts) return 0;
    *rep = cp->costs[0];
    memmove(cp->costs, cp->costs + 1, (size_t)--cp->ncosts * sizeof *cp->costs);
    return 1;
}

void anvil_checkpointer_set_every(anvil_checkpointer *cp, int every_steps, int64_t from_step) {
    if (!cp) return;
    cp->cfg.every_steps = every_steps;
    if (!cp->relative) cp->last_save_step = from_step;
    cp->relative = true;
}

int anvil_checkpointer_free(anvil_checkpointer *cp) {
    if (!cp) return 0;
    if (cp->open) {
        pthread_mutex_lock(&cp->mu);
        cp->commit = -1;
        pthread_cond_broadcast(&cp->cv);
        pthread_mutex_unlock(&cp->mu);
    }
    int rc = wait_writer(cp, anvil_now());
    int failed = cp->failed;
    anvil_ckpt_snapshot_free(cp->snap);
    free(cp->slices);
    anvil_ckpt_shard_free(cp->shard_snap);
    free(cp->reports);
    pthread_mutex_destroy(&cp->mu);
    pthread_cond_destroy(&cp->cv);
    free(cp);
    return rc || failed ? -1 : 0;
}

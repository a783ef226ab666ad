#include "train/checkpointer.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"

/* An asynchronous checkpoint has two phases on the writer thread: the
 * snapshot copy, which must finish before the next optimizer update changes
 * weights or moments, and the write, which may take as long as it likes.
 * The next step's forward and backward only read the weights, so the copy
 * overlaps them, and the training thread waits only if the copy is not done
 * by the time it wants to update (anvil_checkpointer_before_update). */
struct anvil_checkpointer {
    anvil_checkpointer_config cfg;
    anvil_ckpt_state st;         /* what the writer snapshots (its pointers stay valid: model, opt) */
    anvil_ckpt_snapshot *snap;   /* reused from one checkpoint to the next */
    pthread_t writer;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int writing;  /* a writer thread exists and has not been joined */
    int writing_async; /* write_main runs on its own thread */
    int copied;   /* the writer's snapshot is complete */
    int write_rc; /* the writer's result */
    char write_err[1024];
    char path[4096];
    int64_t step;
    double last_save_time, stall_ms, write_ms;
    int failed;
};

anvil_checkpointer *anvil_checkpointer_new(const anvil_checkpointer_config *cfg) {
    anvil_checkpointer *cp = calloc(1, sizeof *cp);
    if (!cp) {
        anvil_fail("checkpoint: out of memory");
        return NULL;
    }
    cp->cfg = *cfg;
    if (cp->cfg.keep_last < 1) cp->cfg.keep_last = 1;
    pthread_mutex_init(&cp->mu, NULL);
    pthread_cond_init(&cp->cv, NULL);
    cp->last_save_time = anvil_now();
    return cp;
}

/* Snapshot, write, prune. Error text is copied out: messages are per thread.
 * In the background, once the snapshot (which the next update waits for) is
 * taken, the writer drops to the lowest CPU priority: on a machine whose
 * cores all train, it should use the time the training threads leave idle,
 * not preempt one of them and stall the others at the next barrier. */
static void *write_main(void *arg) {
    anvil_checkpointer *cp = arg;
    anvil_ckpt_snapshot *snap = anvil_ckpt_snapshot_take(cp->snap, &cp->st);
    pthread_mutex_lock(&cp->mu);
    cp->snap = snap;
    cp->copied = 1;
    pthread_cond_broadcast(&cp->cv);
    pthread_mutex_unlock(&cp->mu);
    if (cp->writing_async) setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    double t0 = anvil_now();
    cp->write_rc = snap ? anvil_ckpt_snapshot_write(snap, cp->cfg.run_dir, cp->path, sizeof cp->path) : -1;
    if (!cp->write_rc && anvil_ckpt_prune(cp->cfg.run_dir, cp->cfg.keep_last, cp->cfg.keep_every) < 0)
        cp->write_rc = -1;
    if (cp->write_rc) snprintf(cp->write_err, sizeof cp->write_err, "%s", anvil_errmsg());
    cp->write_ms = (anvil_now() - t0) * 1e3;
    return NULL;
}

/* Joins the writer in flight and reports its outcome. */
static int wait_writer(anvil_checkpointer *cp) {
    if (!cp->writing) return 0;
    pthread_join(cp->writer, NULL);
    cp->writing = 0;
    if (cp->write_rc) {
        cp->failed = 1;
        fprintf(cp->cfg.log, "checkpoint step %lld failed: %s\n", (long long)cp->step, cp->write_err);
        return anvil_fail("%s", cp->write_err);
    }
    fprintf(cp->cfg.log, "checkpoint %s written in %.0f ms\n", cp->path, cp->write_ms);
    return 0;
}

int anvil_checkpointer_due(const anvil_checkpointer *cp, int64_t step) {
    if (cp->cfg.every_steps > 0 && step % cp->cfg.every_steps == 0) return 1;
    return cp->cfg.every_minutes > 0 && anvil_now() - cp->last_save_time >= cp->cfg.every_minutes * 60.0;
}

int anvil_checkpointer_save(anvil_checkpointer *cp, const anvil_ckpt_state *st, int force_sync) {
    double t0 = anvil_now();
    if (wait_writer(cp)) return -1;
    cp->st = *st;
    cp->step = st->step;
    cp->copied = 0;
    cp->last_save_time = t0;
    cp->writing_async = cp->cfg.async && !force_sync;
    if (cp->writing_async && pthread_create(&cp->writer, NULL, write_main, cp) == 0) {
        cp->writing = 1;
        cp->stall_ms = (anvil_now() - t0) * 1e3;
        return 0;
    }
    cp->writing_async = 0;
    write_main(cp);
    cp->stall_ms = (anvil_now() - t0) * 1e3;
    if (cp->write_rc) {
        cp->failed = 1;
        return anvil_fail("%s", cp->write_err);
    }
    fprintf(cp->cfg.log, "checkpoint %s written in %.0f ms (synchronous)\n", cp->path, cp->write_ms);
    return 0;
}

int anvil_checkpointer_before_update(anvil_checkpointer *cp) {
    if (!cp || !cp->writing) return 0;
    double t0 = anvil_now();
    pthread_mutex_lock(&cp->mu);
    int was_copied = cp->copied;
    while (!cp->copied) pthread_cond_wait(&cp->cv, &cp->mu);
    pthread_mutex_unlock(&cp->mu);
    if (was_copied == 2) return 0; /* already reported */
    cp->stall_ms += (anvil_now() - t0) * 1e3;
    cp->copied = 2;
    if (!cp->snap) return wait_writer(cp);
    fprintf(cp->cfg.log, "checkpoint step %lld: snapshot taken during the next step, training stalled %.1f ms; "
                         "writing in the background\n",
            (long long)cp->step, cp->stall_ms);
    return 0;
}

int anvil_checkpointer_free(anvil_checkpointer *cp) {
    if (!cp) return 0;
    int rc = wait_writer(cp);
    int failed = cp->failed;
    anvil_ckpt_snapshot_free(cp->snap);
    pthread_mutex_destroy(&cp->mu);
    pthread_cond_destroy(&cp->cv);
    free(cp);
    return rc || failed ? -1 : 0;
}

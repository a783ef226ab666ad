#include "train/checkpointer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"

struct anvil_checkpointer {
    anvil_checkpointer_config cfg;
    anvil_ckpt_snapshot *snap; /* the snapshot being (or last) written; reused for the next one */
    pthread_t writer;
    int writing;                /* a writer thread exists and has not been joined */
    int write_rc;               /* its result */
    char write_err[1024];       /* its error message */
    char path[4096];            /* the folder it wrote */
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
    cp->last_save_time = anvil_now();
    return cp;
}

/* The writer thread: write the snapshot, then apply retention. Errors are
 * copied out because messages are per thread. */
static void *write_main(void *arg) {
    anvil_checkpointer *cp = arg;
    double t0 = anvil_now();
    cp->write_rc = anvil_ckpt_snapshot_write(cp->snap, cp->cfg.run_dir, cp->path, sizeof cp->path);
    if (!cp->write_rc && anvil_ckpt_prune(cp->cfg.run_dir, cp->cfg.keep_last, cp->cfg.keep_every) < 0)
        cp->write_rc = -1;
    if (cp->write_rc) snprintf(cp->write_err, sizeof cp->write_err, "%s", anvil_errmsg());
    cp->write_ms = (anvil_now() - t0) * 1e3;
    return NULL;
}

/* Joins the writer in flight, reporting its outcome. */
static int wait_writer(anvil_checkpointer *cp) {
    if (!cp->writing) return 0;
    pthread_join(cp->writer, NULL);
    cp->writing = 0;
    if (cp->write_rc) {
        cp->failed = 1;
        fprintf(cp->cfg.log, "checkpoint step %lld failed: %s\n", (long long)anvil_ckpt_snapshot_step(cp->snap),
                cp->write_err);
        anvil_fail("%s", cp->write_err);
        return -1;
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
    int rc = wait_writer(cp);
    cp->snap = anvil_ckpt_snapshot_take(cp->snap, st);
    if (!cp->snap) return -1;
    cp->last_save_time = anvil_now();
    cp->stall_ms = (cp->last_save_time - t0) * 1e3;
    if (cp->cfg.async && !force_sync) {
        if (pthread_create(&cp->writer, NULL, write_main, cp) == 0) {
            cp->writing = 1;
            fprintf(cp->cfg.log, "checkpoint step %lld: training stalled %.1f ms (snapshot); writing in the background\n",
                    (long long)st->step, cp->stall_ms);
            return rc;
        }
    }
    write_main(cp);
    cp->writing = 0;
    cp->stall_ms = (anvil_now() - t0) * 1e3;
    if (cp->write_rc) {
        cp->failed = 1;
        return anvil_fail("%s", cp->write_err);
    }
    fprintf(cp->cfg.log, "checkpoint %s written in %.0f ms (synchronous)\n", cp->path, cp->write_ms);
    return rc;
}

double anvil_checkpointer_last_stall_ms(const anvil_checkpointer *cp) { return cp->stall_ms; }
double anvil_checkpointer_last_write_ms(const anvil_checkpointer *cp) { return cp->write_ms; }

int anvil_checkpointer_free(anvil_checkpointer *cp) {
    if (!cp) return 0;
    int rc = wait_writer(cp);
    int failed = cp->failed;
    anvil_ckpt_snapshot_free(cp->snap);
    free(cp);
    return rc || failed ? -1 : 0;
}

/* Saving: snapshots of the training state, the temporary folder with the weights, moments and shard
 * files, its rename into place and `latest`. */
#include "ckpt/checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/checkpoint_internal.h"
#include "ckpt/safetensors.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"

/* ---- tensor tables: the model-file layout, shared by weights and moments ---- */

typedef struct {
    anvil_st_tensor t[ANVIL_MODEL_MAX_TENSORS];
    char names[ANVIL_MODEL_MAX_TENSORS][64];
    int n;
} tensor_table;

/* The tensors of a flat array at base (on the backend) as the model file lays them out. */
static void fill_table(tensor_table *tt, const anvil_model_config *c, const size_t *offsets, const float *base,
                       const char *prefix) {
    tt->n = anvil_model_ntensors(c);
    for (int i = 0; i < tt->n; i++) {
        int64_t s[3];
        int nd = ckpt_file_shape(c, i, s);
        anvil_st_tensor *t = &tt->t[i];
        memset(t, 0, sizeof *t);
        ckpt_tensor_name(c, i, prefix, tt->names[i], sizeof tt->names[i]);
        t->name = tt->names[i];
        t->dtype = ANVIL_ST_F32;
        t->ndim = nd;
        t->nbytes = sizeof(float);
        for (int d = 0; d < nd; d++) {
            t->shape[d] = s[d];
            t->nbytes *= (uint64_t)s[d];
        }
        t->data = base + offsets[i];
    }
}

/* The snapshot is copied and checksummed in pieces of this size, spread over the threads; the
 * pieces' CRCs are then combined in order. */
#define SNAPSHOT_PIECE ((size_t)1 << 20)

/* Fills the image bytes [lo, hi) (the header is there already; the rest is the tensors' bytes) and
 * returns their CRC-32C. */
static uint32_t fill_piece(anvil_st_image *img, const anvil_kernels *k, const anvil_st_tensor *t, int n, size_t lo,
                           size_t hi) {
    uint32_t crc = 0;
    size_t at = lo;
    if (n == 0 || at < img->offsets[0]) {
        size_t header_end = n ? img->offsets[0] : img->len;
        at = header_end < hi ? header_end : hi;
        crc = anvil_crc32c(crc, img->bytes + lo, at - lo);
    }
    int a = 0, b = n; /* the first tensor that ends after at */
    while (a < b) {
        int mid = (a + b) / 2;
        if (img->offsets[mid] + t[mid].nbytes <= at) a = mid + 1;
        else b = mid;
    }
    for (int i = a; i < n && at < hi; i++) {
        size_t to = img->offsets[i] + t[i].nbytes < hi ? img->offsets[i] + t[i].nbytes : hi;
        if (to > at)
            crc = k->download_crc32c(img->bytes + at, (const char *)t[i].data + (at - img->offsets[i]), to - at, crc);
        at = to > at ? to : at;
    }
    return crc;
}

/* Lays out img for tensors, copies their bytes in from the backend and checksums the whole file into
 * *crc, in one pass over memory. The training thread takes snapshots, with every OpenMP thread: the
 * copy and the checksum are the only CPU work a checkpoint asks of a busy machine, and spread over
 * the training threads they take the shortest time without a third thread preempting one of them
 * (the rest of each step's threads would wait for it at their next barrier). */
static int image_take(anvil_st_image *img, const char *name, const anvil_kernels *k, const anvil_st_tensor *t, int n,
                      const char *const *meta, int nmeta, uint32_t *crc) {
    if (anvil_st_image_layout(img, name, t, n, meta, nmeta)) return -1;
    size_t npieces = (img->len + SNAPSHOT_PIECE - 1) / SNAPSHOT_PIECE;
    uint32_t *crcs = malloc(npieces * sizeof *crcs);
    if (!crcs) return anvil_fail("%s: out of memory", name);
#pragma omp parallel for schedule(static)
    for (size_t p = 0; p < npieces; p++) {
        size_t lo = p * SNAPSHOT_PIECE, hi = lo + SNAPSHOT_PIECE < img->len ? lo + SNAPSHOT_PIECE : img->len;
        crcs[p] = fill_piece(img, k, t, n, lo, hi);
    }
    *crc = crcs[0];
    for (size_t p = 1; p < npieces; p++) {
        size_t len = p + 1 < npieces ? SNAPSHOT_PIECE : img->len - p * SNAPSHOT_PIECE;
        *crc = anvil_crc32c_combine(*crc, crcs[p], len);
    }
    free(crcs);
    return 0;
}

static int take_weights(anvil_ckpt_snapshot *s, const anvil_model *model) {
    tensor_table tt;
    fill_table(&tt, &s->cfg, s->offsets, model->params, "");
    /* The model file's metadata, so anvil_model_load (and `anvil sample`) read this file directly. */
    ckpt_model_meta mm;
    ckpt_model_meta_fill(&mm, &s->cfg);
    return image_take(&s->weights, "model.safetensors", model->k, tt.t, tt.n, mm.kv, mm.n, &s->weights_crc);
}

static int take_moments(anvil_ckpt_snapshot *s, const anvil_model *model, const anvil_adamw *opt) {
    tensor_table tm, tv;
    fill_table(&tm, &s->cfg, s->offsets, opt->m, "m.");
    fill_table(&tv, &s->cfg, s->offsets, opt->v, "v.");
    anvil_st_tensor all[2 * ANVIL_MODEL_MAX_TENSORS];
    memcpy(all, tm.t, (size_t)tm.n * sizeof tm.t[0]);
    memcpy(all + tm.n, tv.t, (size_t)tv.n * sizeof tv.t[0]);
    char t[24];
    snprintf(t, sizeof t, "%d", opt->t);
    const char *meta[] = {"format", "anvil-adamw", "t", t};
    return image_take(&s->moments, "optim.safetensors", model->k, all, 2 * tm.n, meta, 2, &s->moments_crc);
}

/* ---- snapshots ---- */

void anvil_ckpt_snapshot_free(anvil_ckpt_snapshot *s) {
    if (!s) return;
    anvil_st_image_free(&s->weights);
    anvil_st_image_free(&s->moments);
    free(s->tokenizer);
    free(s->train_config);
    free(s);
}

int64_t anvil_ckpt_snapshot_step(const anvil_ckpt_snapshot *s) { return s->step; }

static char *compact_config(const char *json) {
    if (!json) json = "{}";
    cJSON *j = anvil_json_parse_str(json);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        anvil_fail("checkpoint: the training configuration is not a JSON object");
        return NULL;
    }
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!out) anvil_fail("checkpoint: out of memory");
    return out;
}

anvil_ckpt_snapshot *anvil_ckpt_snapshot_take(anvil_ckpt_snapshot *reuse, const anvil_ckpt_state *st) {
    int stage = st && st->layout ? st->layout->zero_stage : 0;
    /* What rank 0 holds whole, and so writes itself; the rest is in the shard files. */
    int whole_weights = !ckpt_weights_sharded(st ? st->layout : NULL);
    int whole_moments = !ckpt_moments_sharded(st ? st->layout : NULL);
    int has_opt = st && st->opt && (!whole_moments || (st->opt->m && st->opt->v));
    if (!st || !st->model || !has_opt || (whole_weights && !st->model->params) || st->step < 0 ||
        st->tokens_seen < 0 || stage < 0 || stage > 3) {
        anvil_ckpt_snapshot_free(reuse);
        anvil_fail("checkpoint: the state to save needs a model, an initialized optimizer and counters >= 0");
        return NULL;
    }
    const anvil_adamw_config *ac = &st->opt->cfg;
    if (!isfinite(ac->beta1) || !isfinite(ac->beta2) || !isfinite(ac->eps) || !isfinite(ac->weight_decay)) {
        anvil_ckpt_snapshot_free(reuse);
        anvil_fail("checkpoint: the AdamW hyperparameters are not finite");
        return NULL;
    }
    const anvil_model *model = st->model;
    anvil_ckpt_snapshot *s = reuse ? reuse : calloc(1, sizeof *s);
    if (!s) {
        anvil_fail("checkpoint: out of memory");
        return NULL;
    }
    free(s->tokenizer);
    free(s->train_config);
    s->tokenizer = strdup(st->tokenizer ? st->tokenizer : "bytes");
    s->train_config = compact_config(st->train_config_json);
    if (!s->tokenizer || !s->train_config) {
        if (!s->tokenizer) anvil_fail("checkpoint: out of memory");
        anvil_ckpt_snapshot_free(s);
        return NULL;
    }
    s->nparams = model->nparams;
    s->cfg = model->cfg;
    memcpy(s->offsets, model->offsets, sizeof s->offsets);
    if (!whole_weights) anvil_st_image_free(&s->weights);
    if (!whole_moments) anvil_st_image_free(&s->moments);
    if ((whole_weights && take_weights(s, model)) || (whole_moments && take_moments(s, model, st->opt))) {
        anvil_ckpt_snapshot_free(s);
        return NULL;
    }
    s->layout = st->layout ? *st->layout : (anvil_ckpt_layout){1, 0, 1, 1, 1};
    s->acfg = *ac;
    s->t = st->opt->t;
    s->loader = st->loader;
    s->rng = st->rng;
    s->step = st->step;
    s->tokens_seen = st->tokens_seen;
    return s;
}

/* ---- writing ---- */

/* For tests only (tests/cli_ckpt_kill.sh): with ANVIL_TEST_KILL_IN_CKPT_WRITE=STEP:N this process
 * raises SIGKILL right after its Nth file written into step STEP's temporary folder (in the order
 * model, moments, shard, manifest), so that a test kills a run at a chosen point inside a
 * checkpoint. One thread writes a checkpoint's files, and the next checkpoint's writer starts
 * after it is joined. */
static void test_kill_point(const char *tmp) {
    static char folder[PATH_MAX];
    static int written;
    const char *v = getenv("ANVIL_TEST_KILL_IN_CKPT_WRITE"), *leaf = strrchr(tmp, '/');
    long long step;
    int n;
    char want[64];
    if (!v || sscanf(v, "%lld:%d", &step, &n) != 2) return;
    snprintf(want, sizeof want, "step_%08lld.", step);
    if (strncmp(leaf ? leaf + 1 : tmp, want, strlen(want))) return;
    if (strcmp(folder, tmp)) {
        snprintf(folder, sizeof folder, "%s", tmp);
        written = 0;
    }
    if (++written == n) raise(SIGKILL);
}

/* Fills the temporary folder: the snapshot's tensor files, then the manifest
 * with their checksums and the shard files'. */
static int fill_tmp(const anvil_ckpt_snapshot *s, const char *tmp, const anvil_ckpt_file *shards, int nshards) {
    static const char *const names[2] = {"model.safetensors", "optim.safetensors"};
    anvil_ckpt_file files[ANVIL_CKPT_MAX_FILES];
    int n = 0;
    if (nshards < 0 || nshards > ANVIL_CKPT_MAX_FILES - 2)
        return anvil_fail("checkpoint: %d shard files (at most %d)", nshards, ANVIL_CKPT_MAX_FILES - 2);
    for (int i = 0; i < 2; i++) {
        const anvil_st_image *img = i == 0 ? &s->weights : &s->moments;
        if (!img->len) continue;
        char path[PATH_MAX];
        if (ckpt_join(path, sizeof path, tmp, names[i]) || anvil_write_new_file_direct(path, img->bytes, img->len))
            return -1;
        test_kill_point(tmp);
        snprintf(files[n].name, sizeof files[n].name, "%s", names[i]);
        files[n].bytes = img->len;
        files[n].crc32c = i == 0 ? s->weights_crc : s->moments_crc;
        n++;
    }
    for (int i = 0; i < nshards; i++) files[n++] = shards[i];
    char *text = ckpt_build_manifest(s, files, n);
    if (!text) return -1;
    char path[PATH_MAX];
    int rc = ckpt_join(path, sizeof path, tmp, "manifest.json");
    if (!rc) rc = anvil_write_new_file(path, text, strlen(text));
    cJSON_free(text);
    if (!rc) test_kill_point(tmp);
    return rc ? rc : anvil_fsync_dir(tmp);
}

static int update_latest(const char *ckdir, const char *leaf) {
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    if (ckpt_join(path, sizeof path, ckdir, "latest")) return -1;
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    unlink(tmp);
    char line[128];
    int n = snprintf(line, sizeof line, "%s\n", leaf);
    /* This process's id in the temporary name, not anvil_write_file_atomic's random suffix, so that
     * anvil_ckpt_prune recognises a crashed writer's leftover. */
    if (anvil_write_new_file(tmp, line, (size_t)n)) return -1;
    return anvil_rename_durable(tmp, path);
}

/* RUN/ckpt (created when missing), the folder name of `step` and its full path. */
static int step_paths(const char *run_dir, int64_t step, char *ckdir, char *leaf, size_t leafcap, char *final) {
    snprintf(leaf, leafcap, "step_%08" PRId64, step);
    if (anvil_mkdir(run_dir) || ckpt_join(ckdir, PATH_MAX, run_dir, "ckpt") || anvil_mkdir(ckdir) ||
        ckpt_join(final, PATH_MAX, ckdir, leaf))
        return -1;
    return 0;
}

int anvil_ckpt_begin(const char *run_dir, int64_t step, char *tmp, size_t cap) {
    char ckdir[PATH_MAX], leaf[64], final[PATH_MAX];
    if (step < 0) return anvil_fail("checkpoint: negative step %" PRId64, step);
    if (step_paths(run_dir, step, ckdir, leaf, sizeof leaf, final)) return -1;
    if ((size_t)snprintf(tmp, cap, "%s.tmp-%ld", final, (long)getpid()) >= cap)
        return anvil_fail("%s: path too long", final);
    if (anvil_remove_tree(tmp)) return -1;
    if (mkdir(tmp, 0755)) return anvil_fail("%s: cannot create folder: %s", tmp, strerror(errno));
    return 0;
}

void anvil_ckpt_abandon(const char *tmp) { anvil_remove_tree(tmp); }

int anvil_ckpt_finish(const anvil_ckpt_snapshot *s, const char *run_dir, const char *tmp,
                      const anvil_ckpt_file *shards, int nshards, char *out, size_t cap) {
    char ckdir[PATH_MAX], leaf[64], final[PATH_MAX];
    if (step_paths(run_dir, s->step, ckdir, leaf, sizeof leaf, final) || fill_tmp(s, tmp, shards, nshards)) {
        char why[1024];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        anvil_remove_tree(tmp);
        return anvil_fail("checkpoint step %" PRId64 " not saved: %s", s->step, why);
    }
    if (rename(tmp, final)) {
        /* A checkpoint of this step exists already (a rerun of the same step): swap atomically so
         * step_X is always one complete checkpoint, then delete the old one under the temporary name. */
        int err = errno;
        if ((err != ENOTEMPTY && err != EEXIST) || renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE)) {
            if (err == ENOTEMPTY || err == EEXIST) err = errno;
            anvil_remove_tree(tmp);
            return anvil_fail("%s: rename from %s failed: %s", final, tmp, strerror(err));
        }
        if (anvil_fsync_dir(ckdir) || anvil_remove_tree(tmp)) return -1;
    }
    if (anvil_fsync_dir(ckdir) || update_latest(ckdir, leaf)) return -1;
    if (out && cap) snprintf(out, cap, "%s", final);
    return 0;
}

int anvil_ckpt_snapshot_write(const anvil_ckpt_snapshot *s, const char *run_dir, char *out, size_t cap) {
    char tmp[PATH_MAX + 32];
    if (anvil_ckpt_begin(run_dir, s->step, tmp, sizeof tmp)) return -1;
    return anvil_ckpt_finish(s, run_dir, tmp, NULL, 0, out, cap);
}

const char *const ckpt_slice_kinds[3] = {"m", "v", "p"};

void anvil_ckpt_shard_name(int g, int k, char *out, size_t cap) {
    snprintf(out, cap, "shard_%d_of_%d.safetensors", g, k);
}

struct anvil_ckpt_shard_snapshot {
    int g, k;
    anvil_st_image file;
    uint32_t crc32c;
};

void anvil_ckpt_shard_free(anvil_ckpt_shard_snapshot *s) {
    if (!s) return;
    anvil_st_image_free(&s->file);
    free(s);
}

anvil_ckpt_shard_snapshot *anvil_ckpt_shard_take(anvil_ckpt_shard_snapshot *reuse, int g, int k,
                                                 const anvil_model *model, const anvil_ckpt_slice *sl, int n) {
    int kinds = n > 0 && sl[0].p ? 3 : 2;
    anvil_ckpt_shard_snapshot *s = reuse ? reuse : calloc(1, sizeof *s);
    anvil_st_tensor *t = calloc((size_t)n * kinds + 1, sizeof *t);
    char (*names)[64] = calloc((size_t)n * kinds + 1, sizeof *names);
    int rc = 0;
    if (!s || !t || !names) rc = anvil_fail("checkpoint: out of memory for shard %d of %d", g, k);
    for (int i = 0; !rc && i < n; i++) {
        int ti = sl[i].tensor;
        size_t rows = sl[i].rows > 1 ? sl[i].rows : 1;
        size_t width = ti >= 0 && ti < model->ntensors ? ckpt_row_width(&model->cfg, ti) : 0;
        if (ti < 0 || ti >= model->ntensors || sl[i].flat < model->offsets[ti] || (rows > 1 && sl[i].len > width) ||
            sl[i].flat + (rows - 1) * width + sl[i].len > model->offsets[ti + 1] || (kinds == 3) != (sl[i].p != NULL)) {
            rc = anvil_fail("checkpoint: shard %d of %d: slice %d is outside its tensor", g, k, i);
            break;
        }
        char param[32];
        ckpt_tensor_name(&model->cfg, ti, "", param, sizeof param);
        for (int j = 0; j < kinds; j++) {
            anvil_st_tensor *x = &t[i * kinds + j];
            snprintf(names[i * kinds + j], sizeof names[0], "%s.%s.%zu", ckpt_slice_kinds[j], param,
                     sl[i].flat - model->offsets[ti]);
            x->name = names[i * kinds + j];
            x->dtype = ANVIL_ST_F32;
            x->ndim = rows > 1 ? 2 : 1;
            x->shape[0] = (int64_t)(rows > 1 ? rows : sl[i].len);
            x->shape[1] = (int64_t)sl[i].len;
            x->nbytes = rows * sl[i].len * sizeof(float);
            x->data = j == 0 ? sl[i].m : j == 1 ? sl[i].v : sl[i].p;
        }
    }
    char name[64], gs[16], ks[16];
    anvil_ckpt_shard_name(g, k, name, sizeof name);
    snprintf(gs, sizeof gs, "%d", g);
    snprintf(ks, sizeof ks, "%d", k);
    const char *meta[] = {"format", "anvil-shard", "shard", gs, "of", ks};
    if (!rc) rc = image_take(&s->file, name, model->k, t, n * kinds, meta, 3, &s->crc32c);
    free(t);
    free(names);
    if (rc) {
        anvil_ckpt_shard_free(s);
        return NULL;
    }
    s->g = g;
    s->k = k;
    return s;
}

int anvil_ckpt_shard_write(const anvil_ckpt_shard_snapshot *s, const char *tmp, anvil_ckpt_file *out) {
    char path[PATH_MAX];
    anvil_ckpt_shard_name(s->g, s->k, out->name, sizeof out->name);
    if (ckpt_join(path, sizeof path, tmp, out->name) || anvil_write_new_file_direct(path, s->file.bytes, s->file.len))
        return -1;
    test_kill_point(tmp);
    out->bytes = s->file.len;
    out->crc32c = s->crc32c;
    return 0;
}

int anvil_ckpt_write_shard(const char *tmp, int g, int k, const anvil_model *model, const anvil_ckpt_slice *sl,
                           int n, anvil_ckpt_file *out) {
    anvil_ckpt_shard_snapshot *s = anvil_ckpt_shard_take(NULL, g, k, model, sl, n);
    int rc = s ? anvil_ckpt_shard_write(s, tmp, out) : -1;
    anvil_ckpt_shard_free(s);
    return rc;
}

int anvil_ckpt_save(const char *run_dir, const anvil_ckpt_state *st, char *out, size_t cap) {
    anvil_ckpt_snapshot *s = anvil_ckpt_snapshot_take(NULL, st);
    if (!s) return -1;
    int rc = anvil_ckpt_snapshot_write(s, run_dir, out, cap);
    anvil_ckpt_snapshot_free(s);
    return rc;
}

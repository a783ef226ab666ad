/* Training checkpoints and the Hugging Face GPT-2 interchange:
 * - save/load restores parameters, AdamW moments and step, loader and RNG
 *   state bit-exactly; a different model config or a newer format is refused;
 * - verify catches truncated and bit-flipped files and names them, and the
 *   manifest's own checksum catches every single-bit flip of the manifest;
 *   version 1 manifests (without it) still load;
 * - --resume auto falls back past a corrupt newest checkpoint, ignores .tmp-
 *   leftovers; prune keeps the right set and removes other processes' leftovers,
 *   even one whose pid is alive (the run folder's lock is the proof);
 * - a full disk (RLIMIT_FSIZE) fails the save with the file named, leaves no
 *   temporary folder, and leaves older checkpoints and `latest` intact;
 * - the checkpointer's cost of a background save is never negative: steps that
 *   it overlapped and that came out faster than the median count 0, and its
 *   log line says so;
 * - export/import round-trips bit-exactly, and the exported model's logits
 *   computed by an independent GPT-2 over the HF layout (the fixture from
 *   tests/fixtures/gen_hf_fixture.py) match anvil's to 1e-4 rel + 1e-5 abs.
 *
 * `test_checkpoint --write-hf DIR` writes the fixture model's export for the
 * generator script. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "core/crc32c.h"
#include "ckpt/hf.h"
#include "ckpt/model_file.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "model/model.h"
#include "testutil.h"
#include "optim/optim.h"
#include "train/checkpointer.h"

#define HF_FIXTURE "fixtures/hf_gpt2_tiny_logits.safetensors"
#define HF_SEED 4242

static char root[64];

static anvil_model_config tiny_cfg;

static void path_in(char *out, size_t cap, const char *a, const char *b) {
    if ((size_t)snprintf(out, cap, "%s/%s", a, b) >= cap) {
        fprintf(stderr, "path too long: %s/%s\n", a, b);
        exit(1);
    }
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void make_model(anvil_model *m, anvil_model_config cfg, uint64_t seed) {
    anvil_model_config_check(&cfg);
    if (anvil_model_init(m, &cfg, anvil_kernels_cpu())) {
        fprintf(stderr, "init: %s\n", anvil_errmsg());
        exit(1);
    }
    anvil_model_init_weights(m, seed);
}

/* A few real training steps so the moments are not trivial. */
static void train_steps(anvil_model *m, anvil_adamw *o, int steps) {
    enum { B = 2, T = 8 };
    int32_t x[B * T], y[B * T];
    anvil_rng r;
    anvil_rng_seed(&r, 7);
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < B * T; i++) {
            x[i] = (int32_t)(anvil_rng_u64(&r) % (uint64_t)m->cfg.vocab_size);
            y[i] = (int32_t)(anvil_rng_u64(&r) % (uint64_t)m->cfg.vocab_size);
        }
        float loss;
        anvil_model_zero_grad(m);
        CHECK(anvil_model_forward_backward(m, x, y, B, T, 1.0f, &loss) == 0);
        anvil_adamw_step(o, m->params, m->grads, anvil_adamw_grad_sumsq(o, m->grads), 0.0f, 1e-3f);
    }
}

typedef struct {
    anvil_model m;
    anvil_adamw o;
} trained;

static const anvil_adamw_config acfg = {0.9f, 0.95f, 1e-8f, 0.1f};

static void make_trained(trained *t, uint64_t seed, int steps) {
    make_model(&t->m, tiny_cfg, seed);
    CHECK(t_adamw_whole(&t->o, t->m.k, &acfg, t->m.offsets, &t->m.cfg) == 0);
    train_steps(&t->m, &t->o, steps);
}

static void free_trained(trained *t) {
    anvil_adamw_free(&t->o);
    anvil_model_free(&t->m);
}

static anvil_ckpt_state state_of(const trained *t, int64_t step) {
    anvil_ckpt_state st = {0};
    st.model = &t->m;
    st.opt = &t->o;
    st.loader = (anvil_loader_state){3, 123456789012LL, 2, 1, 0xfedcba9876543211ULL, ANVIL_LOADER_STRIDED};
    st.rng.s[0] = 0xfedcba9876543210ULL; /* above 2^53: must survive as text */
    st.rng.s[1] = (uint64_t)step * 0x9e3779b97f4a7c15ULL;
    st.step = step;
    st.tokens_seen = step * 4096;
    st.tokenizer = "bytes";
    st.train_config_json = "{\"lr\":0.0006,\"B\":2,\"T\":8,\"name\":\"test\"}";
    return st;
}

static void save_step(const char *run, const trained *t, int64_t step) {
    anvil_ckpt_state st = state_of(t, step);
    char out[PATH_MAX];
    if (anvil_ckpt_save(run, &st, out, sizeof out)) t_fail(__FILE__, __LINE__, "save: %s", anvil_errmsg());
}

/* Whether RUN/ckpt/latest holds exactly `want`. */
static int latest_is(const char *run, const char *want) {
    char path[PATH_MAX], line[64] = "";
    path_in(path, sizeof path, run, "ckpt/latest");
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    return got && !strcmp(line, want);
}

static void test_crc(void) {
    CHECK(anvil_crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(anvil_crc32c(anvil_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u);
    CHECK(anvil_crc32c(0, "", 0) == 0);
    /* Pieces combined give the whole's CRC, at every split of a buffer (and 1 MiB pieces of a larger one). */
    unsigned char buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (unsigned char)(i * 37 + 11);
    uint32_t whole = anvil_crc32c(0, buf, sizeof buf);
    int all = 1;
    for (size_t cut = 0; cut <= sizeof buf; cut++)
        all &= anvil_crc32c_combine(anvil_crc32c(0, buf, cut), anvil_crc32c(0, buf + cut, sizeof buf - cut),
                                    sizeof buf - cut) == whole;
    CHECK(all);
    size_t big = (3u << 20) + 5;
    unsigned char *b = malloc(big);
    for (size_t i = 0; i < big; i++) b[i] = (unsigned char)(i * 2654435761u >> 13);
    uint32_t c = anvil_crc32c(0, b, 1u << 20);
    for (size_t at = 1u << 20; at < big; at += 1u << 20) {
        size_t n = big - at < (1u << 20) ? big - at : 1u << 20;
        c = anvil_crc32c_combine(c, anvil_crc32c(0, b + at, n), n);
    }
    CHECK(c == anvil_crc32c(0, b, big));
    /* Bit by bit, the definition, against the library's lanes on 200000 bytes (several 48 KiB blocks and a tail). */
    uint32_t ref = 0xFFFFFFFFu;
    for (size_t i = 0; i < 200000; i++) {
        ref ^= b[i];
        for (int k = 0; k < 8; k++) ref = ref & 1 ? (ref >> 1) ^ 0x82F63B78u : ref >> 1;
    }
    CHECK(~ref == anvil_crc32c(0, b, 200000));
    /* The copying CRC: the same CRC and an exact copy, at odd lengths and offsets, continuing a CRC. */
    unsigned char *d = malloc(200016);
    int same = 1;
    for (size_t len = 0; len < 200000; len = len * 3 + 7)
        for (size_t off = 0; off < 12; off += 5) {
            memset(d, 0xAA, 200016);
            uint32_t want = anvil_crc32c(ref, b + off, len);
            same &= anvil_crc32c_copy(ref, d + off, b + off, len) == want && !memcmp(d + off, b + off, len) &&
                    d[off + len] == 0xAA && (off == 0 || d[off - 1] == 0xAA);
        }
    CHECK(same);
    free(d);
    free(b);
}

static void test_round_trip(void) {
    char run[PATH_MAX], dir[PATH_MAX], warn[1024];
    path_in(run, sizeof run, root, "rt");
    trained a, b;
    make_trained(&a, 1, 3);
    save_step(run, &a, 3);
    path_in(dir, sizeof dir, run, "ckpt/step_00000003");
    CHECK(anvil_ckpt_verify(dir) == 0);

    char latest[PATH_MAX];
    CHECK(latest_is(run, "step_00000003\n"));

    make_trained(&b, 99, 1);
    anvil_ckpt_manifest info;
    if (anvil_ckpt_load(dir, &b.m, &b.o, &info, 1)) {
        t_fail(__FILE__, __LINE__, "load: %s", anvil_errmsg());
        return;
    }
    size_t bytes = a.m.nparams * sizeof(float);
    CHECK(!memcmp(a.m.params, b.m.params, bytes));
    CHECK(!memcmp(a.o.m, b.o.m, bytes));
    CHECK(!memcmp(a.o.v, b.o.v, bytes));
    CHECK(b.o.t == 3 && a.o.t == 3);
    anvil_ckpt_state st = state_of(&a, 3);
    CHECK(info.step == 3 && info.tokens_seen == 3 * 4096);
    CHECK(info.loader.shard == 3 && info.loader.position == 123456789012LL && info.loader.epoch == 2);
    CHECK(info.loader.shuffled == 1 && info.loader.shuffle_seed == 0xfedcba9876543211ULL);
    CHECK(info.rng.s[0] == st.rng.s[0] && info.rng.s[1] == st.rng.s[1]);
    CHECK(!strcmp(info.tokenizer, "bytes"));
    CHECK(info.train_config && !strcmp(info.train_config, "{\"lr\":0.0006,\"B\":2,\"T\":8,\"name\":\"test\"}"));
    CHECK(info.world == 1 && info.rank == 0 && info.zero_stage == 0 && info.shard_group == 1);
    CHECK(info.adamw.beta2 == 0.95f);
    anvil_ckpt_manifest_free(&info);

    /* Training continues identically from the restored state. */
    train_steps(&a.m, &a.o, 2);
    train_steps(&b.m, &b.o, 2);
    CHECK(!memcmp(a.m.params, b.m.params, bytes));

    /* The weights file is a plain model file too. */
    anvil_model mf;
    char wpath[PATH_MAX];
    path_in(wpath, sizeof wpath, dir, "model.safetensors");
    if (anvil_model_load(wpath, anvil_kernels_cpu(), &mf) == 0) {
        CHECK(mf.nparams == b.m.nparams);
        anvil_model_free(&mf);
    } else {
        t_fail(__FILE__, __LINE__, "model_load of checkpoint weights: %s", anvil_errmsg());
    }

    /* Saving the same step again replaces it atomically. */
    save_step(run, &a, 3);
    CHECK(anvil_ckpt_verify(dir) == 0);
    CHECK(anvil_ckpt_find_latest_valid(run, latest, sizeof latest, warn, sizeof warn) == 1);
    CHECK(!strcmp(latest, dir) && warn[0] == '\0');

    free_trained(&a);
    free_trained(&b);
}

/* The manifest checksum rule written out independently of the library: CRC-32C of the whole
 * text with the 8 digits after the last "manifest_crc32c":<tab>" taken as "00000000". */
static int ref_stamp(char *text, size_t n) {
    static const char key[] = "\"manifest_crc32c\":\t\"";
    char *at = NULL;
    for (char *p = text; (p = strstr(p, key)); p++) at = p;
    if (!at || (size_t)(at - text) + sizeof key - 1 + 8 > n) return -1;
    char *digits = at + sizeof key - 1;
    memcpy(digits, "00000000", 8);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", (unsigned)anvil_crc32c(0, text, n));
    memcpy(digits, hex, 8);
    return 0;
}

static size_t read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    return n;
}

static void write_text(const char *path, const char *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(buf, 1, n, f) == n);
    if (f) fclose(f);
}

/* Replaces `from` by `to` in DIR/manifest.json, then, when restamp is set, recomputes its checksum
 * (an edit made on purpose) with the independent rule and checks the library's stamp agrees. */
static void rewrite_manifest_field(const char *dir, const char *from, const char *to, int restamp) {
    char p[PATH_MAX];
    path_in(p, sizeof p, dir, "manifest.json");
    static char buf[1 << 16], out[1 << 16];
    read_text(p, buf, sizeof buf);
    char *at = strstr(buf, from);
    if (!at) {
        t_fail(__FILE__, __LINE__, "manifest lacks '%s'", from);
        return;
    }
    int n = snprintf(out, sizeof out, "%.*s%s%s", (int)(at - buf), buf, to, at + strlen(from));
    if (restamp) {
        CHECK(ref_stamp(out, (size_t)n) == 0);
        memcpy(buf, out, (size_t)n);
        CHECK(anvil_ckpt_manifest_stamp(buf, (size_t)n) == 0 && memcmp(buf, out, (size_t)n) == 0);
    }
    write_text(p, out, (size_t)n);
}

static void test_refusals(void) {
    char run[PATH_MAX], dir[PATH_MAX];
    path_in(run, sizeof run, root, "ref");
    trained a;
    make_trained(&a, 2, 1);
    save_step(run, &a, 10);
    path_in(dir, sizeof dir, run, "ckpt/step_00000010");

    /* Another model config: the message names the field. */
    anvil_model_config other = tiny_cfg;
    other.n_head = 4;
    anvil_model m;
    make_model(&m, other, 1);
    CHECK(anvil_ckpt_load(dir, &m, NULL, NULL, 1) == -1);
    CHECK(strstr(anvil_errmsg(), "n_head is 2 in the checkpoint, 4 in this run") != NULL);
    anvil_model_free(&m);

    /* Replicas of a multi-process run all hold the same state: any world size restores it. A
     * sharded (ZeRO) checkpoint must bring its shard files. */
    rewrite_manifest_field(dir, "\"world\":\t1", "\"world\":\t2", 1);
    CHECK(anvil_ckpt_verify(dir) == 0);
    CHECK(anvil_ckpt_load(dir, &a.m, &a.o, NULL, 1) == 0);
    rewrite_manifest_field(dir, "\"zero_stage\":\t0", "\"zero_stage\":\t1", 1);
    CHECK(anvil_ckpt_load(dir, &a.m, &a.o, NULL, 1) == -1 &&
          strstr(anvil_errmsg(), "lists optim.safetensors, but the layout (zero_stage 1, tensor_parallel 1, "
                                 "pipeline_parallel 1) keeps the moments in shard files"));
    rewrite_manifest_field(dir, "\"zero_stage\":\t1", "\"zero_stage\":\t0", 1);
    rewrite_manifest_field(dir, "\"world\":\t2", "\"world\":\t1", 1);
    CHECK(anvil_ckpt_load(dir, &a.m, &a.o, NULL, 1) == 0);

    /* The same edit without a new checksum is corruption. */
    rewrite_manifest_field(dir, "\"world\":\t1", "\"world\":\t2", 0);
    CHECK(anvil_ckpt_verify(dir) == -1 && strstr(anvil_errmsg(), "manifest.json: checksum mismatch"));
    rewrite_manifest_field(dir, "\"world\":\t2", "\"world\":\t1", 0);
    CHECK(anvil_ckpt_verify(dir) == 0);

    /* A newer format version. */
    rewrite_manifest_field(dir, "\"version\":\t3", "\"version\":\t4", 1);
    CHECK(anvil_ckpt_verify(dir) == -1);
    CHECK(strstr(anvil_errmsg(), "version 4 is newer") != NULL);
    CHECK(anvil_ckpt_load(dir, &a.m, &a.o, NULL, 1) == -1);
    free_trained(&a);
}

/* Every single-bit flip of a manifest, at every byte, is refused by the parser with one line
 * naming the file; on disk, a sample of them also fails verify, load and --resume auto, which
 * falls back to the older checkpoint. */
/* A stage-3 checkpoint of a 2-shard run (each shard holds half of every
 * tensor), written the way ranks write one, restores weights, moments and
 * the update count exactly into one process; shard files that leave a gap or
 * overlap are refused without touching the model. */
static int shard_slices(const trained *t, int g, anvil_ckpt_slice *sl, int drop_last, int dup_first) {
    int n = 0;
    for (int i = 0; i < t->m.ntensors; i++) {
        size_t a = t->m.offsets[i], len = t->m.offsets[i + 1] - a, half = len / 2;
        size_t lo = g ? a + half : a, l = g ? len - half : half;
        sl[n++] = (anvil_ckpt_slice){i, lo, l, 0, t->o.m + lo, t->o.v + lo, t->m.params + lo};
    }
    if (drop_last) n--;
    if (dup_first) sl[n++] = (anvil_ckpt_slice){0, 0, 5, 0, t->o.m, t->o.v, t->m.params};
    return n;
}

static int save_sharded_step(const char *run, const trained *t, int64_t step, int drop, int dup) {
    anvil_ckpt_layout lay = {2, 3, 2, 1, 1};
    anvil_ckpt_state st = state_of(t, step);
    st.layout = &lay;
    char tmp[PATH_MAX + 64], out[PATH_MAX];
    anvil_ckpt_file files[2];
    anvil_ckpt_slice sl[ANVIL_MODEL_MAX_TENSORS + 1];
    if (anvil_ckpt_begin(run, step, tmp, sizeof tmp)) return -1;
    for (int g = 0; g < 2; g++) {
        int n = shard_slices(t, g, sl, g == 1 && drop, g == 1 && dup);
        if (anvil_ckpt_write_shard(tmp, g, 2, &t->m, sl, n, &files[g])) return -1;
    }
    anvil_ckpt_snapshot *snap = anvil_ckpt_snapshot_take(NULL, &st);
    int rc = !snap || anvil_ckpt_finish(snap, run, tmp, files, 2, out, sizeof out);
    anvil_ckpt_snapshot_free(snap);
    return rc ? -1 : 0;
}

static void test_sharded(void) {
    char run[PATH_MAX], dir[PATH_MAX];
    path_in(run, sizeof run, root, "sharded");
    trained a, b;
    make_trained(&a, 5, 3);
    make_trained(&b, 6, 1);
    size_t bytes = a.m.nparams * sizeof(float);
    CHECK(save_sharded_step(run, &a, 7, 0, 0) == 0);
    path_in(dir, sizeof dir, run, "ckpt/step_00000007");
    CHECK(anvil_ckpt_verify(dir) == 0);
    char shard[PATH_MAX + 64];
    snprintf(shard, sizeof shard, "%s/shard_1_of_2.safetensors", dir);
    CHECK(exists(shard));
    anvil_ckpt_manifest man;
    CHECK(anvil_ckpt_load(dir, &b.m, &b.o, &man, 1) == 0);
    CHECK(man.world == 2 && man.zero_stage == 3 && man.shard_group == 2);
    anvil_ckpt_manifest_free(&man);
    CHECK(memcmp(a.m.params, b.m.params, bytes) == 0);
    CHECK(memcmp(a.o.m, b.o.m, bytes) == 0 && memcmp(a.o.v, b.o.v, bytes) == 0 && a.o.t == b.o.t);

    float *before = malloc(bytes);
    trained c;
    make_trained(&c, 7, 1);
    memcpy(before, c.m.params, bytes);
    CHECK(save_sharded_step(run, &a, 8, 1, 0) == 0);
    path_in(dir, sizeof dir, run, "ckpt/step_00000008");
    CHECK(anvil_ckpt_load(dir, &c.m, &c.o, NULL, 1) == -1 && strstr(anvil_errmsg(), "slices cover"));
    CHECK(save_sharded_step(run, &a, 9, 0, 1) == 0);
    path_in(dir, sizeof dir, run, "ckpt/step_00000009");
    CHECK(anvil_ckpt_load(dir, &c.m, &c.o, NULL, 1) == -1 && strstr(anvil_errmsg(), "overlap"));
    CHECK(memcmp(before, c.m.params, bytes) == 0);
    free(before);
    free_trained(&a);
    free_trained(&b);
    free_trained(&c);
}

/* The shards of tensor parallelism: rank g of 2 saves every even tensor as a block (the columns of
 * its half of each row, as a rank holds a row-parallel matrix) and every odd one as a run (half of
 * the tensor). skew moves rank 1's blocks one column left, onto rank 0's. The local data of each
 * slice is contiguous, so it is copied out of the whole tensors into buf (3 * nparams floats). */
static int block_slices(const trained *t, int g, int skew, float *buf, anvil_ckpt_slice *sl) {
    int n = 0;
    size_t used = 0, np = t->m.nparams;
    for (int i = 0; i < t->m.ntensors; i++) {
        size_t a = t->m.offsets[i], len = t->m.offsets[i + 1] - a, w = anvil_model_tensor_row(&t->m.cfg, i);
        size_t rows = len / w;
        anvil_ckpt_slice *x = &sl[n++];
        x->tensor = i;
        if (i % 2 == 0) {
            size_t c0 = g ? w / 2 - (size_t)skew : 0, cols = g ? w - c0 : w / 2;
            x->flat = a + c0;
            x->len = cols;
            x->rows = rows;
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++) {
                    size_t from = a + r * w + c0 + c, to = used + r * cols + c;
                    buf[to] = t->o.m[from];
                    buf[np + to] = t->o.v[from];
                    buf[2 * np + to] = t->m.params[from];
                }
        } else {
            size_t half = len / 2;
            x->flat = g ? a + half : a;
            x->len = g ? len - half : half;
            x->rows = 1;
            memcpy(buf + used, t->o.m + x->flat, x->len * sizeof(float));
            memcpy(buf + np + used, t->o.v + x->flat, x->len * sizeof(float));
            memcpy(buf + 2 * np + used, t->m.params + x->flat, x->len * sizeof(float));
        }
        x->m = buf + used;
        x->v = buf + np + used;
        x->p = buf + 2 * np + used;
        used += x->rows * x->len;
    }
    return n;
}

static int save_block_step(const char *run, const trained *t, int64_t step, int skew) {
    anvil_ckpt_layout lay = {2, 0, 1, 2, 1};
    anvil_ckpt_state st = state_of(t, step);
    st.layout = &lay;
    char tmp[PATH_MAX + 64], out[PATH_MAX];
    anvil_ckpt_file files[2];
    anvil_ckpt_slice sl[ANVIL_MODEL_MAX_TENSORS];
    float *buf = malloc(3 * t->m.nparams * sizeof(float));
    int rc = !buf || anvil_ckpt_begin(run, step, tmp, sizeof tmp);
    for (int g = 0; !rc && g < 2; g++) {
        int n = block_slices(t, g, g ? skew : 0, buf, sl);
        rc = anvil_ckpt_write_shard(tmp, g, 2, &t->m, sl, n, &files[g]);
    }
    free(buf);
    anvil_ckpt_snapshot *snap = rc ? NULL : anvil_ckpt_snapshot_take(NULL, &st);
    rc = rc || !snap || anvil_ckpt_finish(snap, run, tmp, files, 2, out, sizeof out);
    anvil_ckpt_snapshot_free(snap);
    return rc ? -1 : 0;
}

/* A checkpoint whose shards are blocks (tensor parallelism) lists no whole weights or moments, loads
 * bit-exactly into one process, and reads piece by piece over any range, across blocks; blocks that
 * overlap are refused by both without touching the model. */
static void test_sharded_blocks(void) {
    char run[PATH_MAX], dir[PATH_MAX], path[PATH_MAX + 64];
    path_in(run, sizeof run, root, "blocks");
    trained a, b;
    make_trained(&a, 15, 3);
    make_trained(&b, 16, 1);
    size_t bytes = a.m.nparams * sizeof(float);
    CHECK(save_block_step(run, &a, 4, 0) == 0);
    path_in(dir, sizeof dir, run, "ckpt/step_00000004");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(!exists(path));
    anvil_ckpt_manifest man;
    CHECK(anvil_ckpt_load(dir, &b.m, &b.o, &man, 1) == 0);
    CHECK(man.version == ANVIL_CKPT_VERSION && man.tensor_parallel == 2 && man.pipeline_parallel == 1);
    anvil_ckpt_manifest_free(&man);
    CHECK(memcmp(a.m.params, b.m.params, bytes) == 0);
    CHECK(memcmp(a.o.m, b.o.m, bytes) == 0 && memcmp(a.o.v, b.o.v, bytes) == 0 && a.o.t == b.o.t);

    anvil_ckpt_reader *r = anvil_ckpt_reader_open(dir, &a.m.cfg, NULL, 1);
    CHECK(r != NULL);
    float got[512];
    anvil_rng rng;
    anvil_rng_seed(&rng, 3);
    long reads = 0, bad = 0;
    for (int k = 0; r && k < 3; k++)
        for (int i = 0; i < a.m.ntensors; i++) {
            size_t len = a.m.offsets[i + 1] - a.m.offsets[i];
            const float *want = (k == 0 ? a.m.params : k == 1 ? a.o.m : a.o.v) + a.m.offsets[i];
            for (int trial = 0; trial < 20; trial++) {
                size_t n = 1 + anvil_rng_u64(&rng) % (len < 512 ? len : 512);
                size_t off = anvil_rng_u64(&rng) % (len - n + 1);
                reads++;
                if (anvil_ckpt_reader_read(r, k, i, off, n, got)) bad++;
                else bad += memcmp(got, want + off, n * sizeof(float)) != 0;
            }
        }
    CHECK(reads == 3 * a.m.ntensors * 20 && bad == 0);
    CHECK(r && anvil_ckpt_reader_read(r, 0, t_tensor(&a.m.cfg, "lnfb"), 1, a.m.cfg.n_embd, got) == -1 &&
          strstr(anvil_errmsg(), "past the end"));
    anvil_ckpt_reader_close(r);

    /* b now differs from a, so a partial copy of a's checkpoint would show. */
    float *before = malloc(bytes);
    train_steps(&b.m, &b.o, 1);
    memcpy(before, b.m.params, bytes);
    CHECK(save_block_step(run, &a, 5, 1) == 0);
    path_in(dir, sizeof dir, run, "ckpt/step_00000005");
    CHECK(anvil_ckpt_load(dir, &b.m, &b.o, NULL, 1) == -1 && strstr(anvil_errmsg(), "overlap"));
    CHECK(memcmp(before, b.m.params, bytes) == 0);
    CHECK(anvil_ckpt_reader_open(dir, &a.m.cfg, NULL, 1) == NULL && strstr(anvil_errmsg(), "overlap"));
    free(before);
    free_trained(&a);
    free_trained(&b);
}

static void test_manifest_bit_flips(void) {
    char run[PATH_MAX], d1[PATH_MAX], d2[PATH_MAX], p[PATH_MAX], out[PATH_MAX], warn[2048];
    path_in(run, sizeof run, root, "flip");
    trained a;
    make_trained(&a, 11, 1);
    save_step(run, &a, 1);
    save_step(run, &a, 2);
    path_in(d1, sizeof d1, run, "ckpt/step_00000001");
    path_in(d2, sizeof d2, run, "ckpt/step_00000002");
    path_in(p, sizeof p, d2, "manifest.json");
    static char orig[1 << 16], buf[1 << 16];
    size_t n = read_text(p, orig, sizeof orig);
    CHECK(n > 500);

    /* The stored checksum is the documented rule's. */
    memcpy(buf, orig, n + 1);
    CHECK(ref_stamp(buf, n) == 0 && memcmp(buf, orig, n) == 0);
    const char *key = strstr(orig, "\"manifest_crc32c\"");
    CHECK(key != NULL);
    size_t key_at = key ? (size_t)(key - orig) : n;

    long flips = 0, refused = 0, by_checksum = 0;
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(buf, orig, n);
            buf[i] ^= (char)(1 << bit);
            anvil_ckpt_manifest m;
            flips++;
            anvil_fail("%s", "");
            if (anvil_ckpt_manifest_parse(buf, n, p, &m) == 0) {
                anvil_ckpt_manifest_free(&m);
                t_fail(__FILE__, __LINE__, "flip of bit %d at byte %zu (0x%02x) accepted", bit, i,
                       (unsigned char)orig[i]);
                continue;
            }
            const char *e = anvil_errmsg();
            if (strstr(e, p) && !strchr(e, '\n')) refused++;
            else t_fail(__FILE__, __LINE__, "flip at byte %zu: message '%s' does not name the file in one line", i, e);
            /* Before the checksum's own member, only the checksum can tell (a flipped tab is still JSON). */
            if (i < key_at) by_checksum += strstr(e, "checksum mismatch") != NULL;
        }
    CHECK(refused == flips && by_checksum == (long)key_at * 8);
    printf("manifest: %ld single-bit flips over %zu bytes, all refused\n", flips, n);

    /* On disk: every 37th byte, one bit each, through verify, load and find_latest_valid. */
    for (size_t i = 0; i < n; i += 37) {
        memcpy(buf, orig, n);
        buf[i] ^= (char)(1 << (i % 8));
        write_text(p, buf, n);
        CHECK(anvil_ckpt_verify(d2) == -1 && strstr(anvil_errmsg(), "step_00000002/manifest.json"));
        CHECK(anvil_ckpt_load(d2, &a.m, &a.o, NULL, 1) == -1 && strstr(anvil_errmsg(), "step_00000002/manifest.json"));
        if (anvil_ckpt_find_latest_valid(run, out, sizeof out, warn, sizeof warn) != 1 || strcmp(out, d1) ||
            !strstr(warn, "skipping corrupt checkpoint step_00000002"))
            t_fail(__FILE__, __LINE__, "flip at byte %zu: resume did not fall back to step 1 (%s)", i, warn);
    }
    write_text(p, orig, n);
    CHECK(anvil_ckpt_verify(d2) == 0);
    CHECK(anvil_ckpt_find_latest_valid(run, out, sizeof out, warn, sizeof warn) == 1 && !strcmp(out, d2));
    free_trained(&a);
}

/* Version 1 manifests (before the manifest checksum and shuffled orders) still load, in order;
 * a version 2 manifest without its checksum does not. */
static void test_manifest_v1(void) {
    char run[PATH_MAX], dir[PATH_MAX], p[PATH_MAX];
    path_in(run, sizeof run, root, "v1");
    trained a, b;
    make_trained(&a, 12, 2);
    save_step(run, &a, 2);
    path_in(dir, sizeof dir, run, "ckpt/step_00000002");
    path_in(p, sizeof p, dir, "manifest.json");
    static char orig[1 << 16], buf[1 << 16];
    size_t n = read_text(p, orig, sizeof orig);
    char *crc = strstr(orig, ",\n\t\"manifest_crc32c\"");
    CHECK(crc != NULL);
    if (!crc) return;

    /* Without the checksum, as version 2: refused. */
    int len = snprintf(buf, sizeof buf, "%.*s\n}", (int)(crc - orig), orig);
    write_text(p, buf, (size_t)len);
    CHECK(anvil_ckpt_verify(dir) == -1 && strstr(anvil_errmsg(), "'manifest_crc32c' is missing"));

    /* As version 1 wrote it: no checksum, no order fields. */
    rewrite_manifest_field(dir, "\"version\":\t3", "\"version\":\t1", 0);
    rewrite_manifest_field(dir,
                           ",\n\t\t\"shuffled\":\ttrue,\n\t\t\"shuffle_seed\":\t\"18364758544493064721\",\n\t\t\"layout\":\t"
                           "\"strided\"",
                           "", 0);
    CHECK(anvil_ckpt_verify(dir) == 0);
    make_trained(&b, 13, 0);
    anvil_ckpt_manifest info;
    if (anvil_ckpt_load(dir, &b.m, &b.o, &info, 1) == 0) {
        CHECK(info.version == 1 && info.loader.shuffled == 0 && info.loader.shuffle_seed == 0 &&
              info.loader.layout == ANVIL_LOADER_STRIDED);
        CHECK(info.loader.shard == 3 && info.loader.epoch == 2);
        CHECK(!memcmp(a.m.params, b.m.params, a.m.nparams * sizeof(float)));
        anvil_ckpt_manifest_free(&info);
    } else {
        t_fail(__FILE__, __LINE__, "version 1 manifest: %s", anvil_errmsg());
    }
    /* A version 2 manifest's order fields are required, and a seed without shuffling is inconsistent. */
    write_text(p, orig, n);
    rewrite_manifest_field(dir, "\"shuffled\":\ttrue", "\"shuffled\":\t1", 1);
    CHECK(anvil_ckpt_verify(dir) == -1 && strstr(anvil_errmsg(), "'loader.shuffled'"));
    rewrite_manifest_field(dir, "\"shuffled\":\t1", "\"shuffled\":\tfalse", 1);
    CHECK(anvil_ckpt_verify(dir) == -1 && strstr(anvil_errmsg(), "'loader.shuffle_seed' must be"));
    /* The layout: strided as written, contiguous read back as such, anything else refused. */
    write_text(p, orig, n);
    rewrite_manifest_field(dir, "\"layout\":\t\"strided\"", "\"layout\":\t\"contiguous\"", 1);
    if (anvil_ckpt_load(dir, &b.m, &b.o, &info, 1) == 0) {
        CHECK(info.loader.layout == ANVIL_LOADER_CONTIGUOUS);
        anvil_ckpt_manifest_free(&info);
    } else {
        t_fail(__FILE__, __LINE__, "contiguous layout: %s", anvil_errmsg());
    }
    rewrite_manifest_field(dir, "\"layout\":\t\"contiguous\"", "\"layout\":\t\"sideways\"", 1);
    CHECK(anvil_ckpt_verify(dir) == -1 && strstr(anvil_errmsg(), "'loader.layout' must be"));
    free_trained(&a);
    free_trained(&b);
}

static void corrupt(const char *file, long off, int truncate_to) {
    if (truncate_to >= 0) {
        CHECK(truncate(file, truncate_to) == 0);
        return;
    }
    int fd = open(file, O_RDWR);
    unsigned char c;
    CHECK(pread(fd, &c, 1, off) == 1);
    c ^= 0x10;
    CHECK(pwrite(fd, &c, 1, off) == 1);
    close(fd);
}

/* A run folder root/name with the checkpoints of steps 100, 200 and 300 of a's state. */
static void three_checkpoints(const char *name, trained *a, char *run, size_t cap) {
    path_in(run, cap, root, name);
    make_trained(a, 3, 1);
    save_step(run, a, 100);
    save_step(run, a, 200);
    save_step(run, a, 300);
}

static void test_corruption_and_fallback(void) {
    char run[PATH_MAX], d1[PATH_MAX], d2[PATH_MAX], d3[PATH_MAX], file[PATH_MAX], out[PATH_MAX], warn[2048];
    trained a;
    three_checkpoints("fb", &a, run, sizeof run);
    path_in(d1, sizeof d1, run, "ckpt/step_00000100");
    path_in(d2, sizeof d2, run, "ckpt/step_00000200");
    path_in(d3, sizeof d3, run, "ckpt/step_00000300");

    /* Bit flip deep in the moments. */
    path_in(file, sizeof file, d3, "optim.safetensors");
    corrupt(file, 5000, -1);
    CHECK(anvil_ckpt_verify(d3) == -1);
    CHECK(strstr(anvil_errmsg(), "optim.safetensors: checksum mismatch") != NULL);
    /* Truncated weights. */
    path_in(file, sizeof file, d2, "model.safetensors");
    corrupt(file, 0, 1000);
    CHECK(anvil_ckpt_verify(d2) == -1);
    CHECK(strstr(anvil_errmsg(), "model.safetensors: 1000 bytes") != NULL);
    CHECK(anvil_ckpt_load(d2, &a.m, &a.o, NULL, 1) == -1);

    /* A stale temporary folder of a newer step is not a candidate. */
    char stale[PATH_MAX];
    path_in(stale, sizeof stale, run, "ckpt/step_00000400.tmp-2147483647");
    CHECK(mkdir(stale, 0755) == 0);

    CHECK(anvil_ckpt_find_latest_valid(run, out, sizeof out, warn, sizeof warn) == 1);
    CHECK(!strcmp(out, d1));
    CHECK(strstr(warn, "step_00000300") && strstr(warn, "step_00000200") && !strstr(warn, "step_00000400"));

    /* Truncated manifest. */
    path_in(file, sizeof file, d1, "manifest.json");
    corrupt(file, 0, 100);
    CHECK(anvil_ckpt_verify(d1) == -1);
    CHECK(strstr(anvil_errmsg(), "manifest.json: not valid JSON") != NULL);
    CHECK(anvil_ckpt_find_latest_valid(run, out, sizeof out, warn, sizeof warn) == -1);
    CHECK(strstr(anvil_errmsg(), "no checkpoint verifies") != NULL);

    char empty[PATH_MAX];
    path_in(empty, sizeof empty, root, "no-such-run");
    CHECK(anvil_ckpt_find_latest_valid(empty, out, sizeof out, warn, sizeof warn) == 0);
    free_trained(&a);
}

/* Verifying in parts (the ranks of a resume): every listed file falls to exactly one part whatever the
 * number of parts, with no two files in one part while a part is empty, and a bad file fails the
 * part it fell to alone, naming the file. */
static void test_verify_parts(void) {
    char run[PATH_MAX], dir[PATH_MAX], file[PATH_MAX + 64];
    path_in(run, sizeof run, root, "parts");
    trained a;
    make_trained(&a, 4, 2);
    CHECK(save_sharded_step(run, &a, 5, 0, 0) == 0);
    path_in(dir, sizeof dir, run, "ckpt/step_00000005");
    anvil_ckpt_manifest man;
    CHECK(anvil_ckpt_read_manifest(dir, &man) == 0 && man.nfiles >= 2);
    for (int n = 1; n <= 4; n++)
        for (int p = 0; p < n; p++) CHECK(anvil_ckpt_verify_part(dir, 5, p, n) == 0);
    CHECK(anvil_ckpt_verify_part(dir, -1, 0, 3) == 0);
    CHECK(anvil_ckpt_verify_part(dir, 6, 0, 1) == -1 && strstr(anvil_errmsg(), "the manifest says step 5"));
    CHECK(anvil_ckpt_verify_part(dir, 5, 2, 2) == -1);
    int part_of[ANVIL_CKPT_MAX_FILES];
    for (int f = 0; f < man.nfiles; f++) {
        snprintf(file, sizeof file, "%s/%s", dir, man.files[f].name);
        corrupt(file, 100, -1);
        for (int n = 1; n <= man.nfiles + 1; n++) {
            int failed = 0;
            for (int p = 0; p < n; p++)
                if (anvil_ckpt_verify_part(dir, 5, p, n)) {
                    failed++;
                    CHECK(strstr(anvil_errmsg(), man.files[f].name) && strstr(anvil_errmsg(), "checksum mismatch"));
                    if (n == man.nfiles) part_of[f] = p;
                }
            CHECK(failed == 1);
        }
        corrupt(file, 100, -1);
    }
    for (int f = 0; f < man.nfiles; f++)
        for (int g = 0; g < f; g++) CHECK(part_of[f] != part_of[g]);
    anvil_ckpt_manifest_free(&man);
    free_trained(&a);
}

/* anvil_ckpt_find_latest_checked's checks: the newest refused (-1: an older one may do), then either
 * verified as usual or, with *give_up set, the search abandoned (-2). */
static int refuse_newest(void *ctx, const char *dir, int64_t step) {
    int *give_up = ctx;
    if (step == 300) return anvil_fail("%s: refused by the test", dir);
    if (*give_up) {
        anvil_fail("%s: given up by the test", dir);
        return -2;
    }
    return anvil_ckpt_verify_part(dir, step, 0, 1);
}

static void test_find_checked(void) {
    char run[PATH_MAX], out[PATH_MAX] = "", warn[2048], d2[PATH_MAX];
    trained a;
    three_checkpoints("checked", &a, run, sizeof run);
    path_in(d2, sizeof d2, run, "ckpt/step_00000200");
    int give_up = 0;
    CHECK(anvil_ckpt_find_latest_checked(run, out, sizeof out, warn, sizeof warn, refuse_newest, &give_up) == 1);
    CHECK(!strcmp(out, d2) && strstr(warn, "skipping corrupt checkpoint step_00000300: ") &&
          strstr(warn, "refused by the test"));
    give_up = 1;
    out[0] = 0;
    CHECK(anvil_ckpt_find_latest_checked(run, out, sizeof out, warn, sizeof warn, refuse_newest, &give_up) == -1);
    CHECK(!out[0] && strstr(anvil_errmsg(), "given up by the test") && !strstr(warn, "step_00000200"));
    free_trained(&a);
}

static int count_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return n;
}

static void test_prune(void) {
    char run[PATH_MAX], ck[PATH_MAX], p[PATH_MAX];
    path_in(run, sizeof run, root, "prune");
    path_in(ck, sizeof ck, run, "ckpt");
    trained a;
    make_trained(&a, 4, 1);
    for (int s = 100; s <= 1000; s += 100) save_step(run, &a, s);
    char stale[PATH_MAX], mine[PATH_MAX], stale_latest[PATH_MAX], live_pid[PATH_MAX];
    path_in(stale, sizeof stale, ck, "step_00000050.tmp-2147483647");
    char leaf[64];
    /* A pid that exists proves nothing (a zombie, a reused pid, another host's pid): the run's lock does. */
    snprintf(leaf, sizeof leaf, "step_00000060.tmp-%ld", (long)getppid());
    path_in(live_pid, sizeof live_pid, ck, leaf);
    snprintf(leaf, sizeof leaf, "step_00001100.tmp-%ld", (long)getpid());
    path_in(mine, sizeof mine, ck, leaf);
    path_in(stale_latest, sizeof stale_latest, ck, "latest.tmp-2147483647");
    CHECK(mkdir(stale, 0755) == 0 && mkdir(mine, 0755) == 0 && mkdir(live_pid, 0755) == 0);
    FILE *f = fopen(stale_latest, "w");
    if (f) fclose(f);
    /* keep_last 3 -> 800, 900, 1000; keep_every 400 -> 400, 800. */
    int removed = anvil_ckpt_prune(run, 3, 400);
    CHECK(removed == 9); /* steps 100, 200, 300, 500, 600, 700 and the three leftovers of other processes */
    static const int kept[] = {400, 800, 900, 1000};
    for (int s = 100; s <= 1000; s += 100) {
        char leaf[32];
        snprintf(leaf, sizeof leaf, "step_%08d", s);
        path_in(p, sizeof p, ck, leaf);
        int want = 0;
        for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) want |= kept[i] == s;
        if (exists(p) != want) t_fail(__FILE__, __LINE__, "prune: step %d %s", s, want ? "removed" : "kept");
    }
    CHECK(!exists(stale) && !exists(stale_latest) && !exists(live_pid));
    CHECK(exists(mine)); /* this process's in-flight write is never touched */
    rmdir(mine);
    CHECK(count_prefix(ck, "step_") == 4);
    CHECK(anvil_ckpt_prune(run, 0, 0) == -1);
    free_trained(&a);
}

static void test_disk_full(void) {
    char run[PATH_MAX], ck[PATH_MAX], d1[PATH_MAX], p[PATH_MAX], out[PATH_MAX];
    path_in(run, sizeof run, root, "full");
    path_in(ck, sizeof ck, run, "ckpt");
    trained a;
    make_trained(&a, 5, 1);
    save_step(run, &a, 1);
    path_in(d1, sizeof d1, ck, "step_00000001");
    struct stat sb;
    path_in(p, sizeof p, d1, "model.safetensors");
    CHECK(stat(p, &sb) == 0);

    /* Room for the weights but not for the twice-as-large moments file. */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)sb.st_size + 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    anvil_ckpt_state st = state_of(&a, 2);
    int rc = anvil_ckpt_save(run, &st, out, sizeof out);
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, prev);

    CHECK(rc == -1);
    CHECK(strstr(anvil_errmsg(), "step_00000002.tmp-") && strstr(anvil_errmsg(), "optim.safetensors") &&
          strstr(anvil_errmsg(), "File too large"));
    CHECK(count_prefix(ck, "step_") == 1); /* no step_2, no temporary folder */
    CHECK(anvil_ckpt_verify(d1) == 0);
    CHECK(anvil_ckpt_find_latest_valid(run, out, sizeof out, NULL, 0) == 1 && !strcmp(out, d1));
    CHECK(latest_is(run, "step_00000001\n"));
    free_trained(&a);
}

static void test_snapshot_reuse(void) {
    char run[PATH_MAX], dir[PATH_MAX];
    path_in(run, sizeof run, root, "snap");
    trained a, b;
    make_trained(&a, 6, 1);
    anvil_ckpt_state st = state_of(&a, 1);
    anvil_ckpt_snapshot *s = anvil_ckpt_snapshot_take(NULL, &st);
    CHECK(s != NULL);
    /* Training moves on; the snapshot keeps step 1's values. */
    float *before = malloc(a.m.nparams * sizeof(float));
    memcpy(before, a.m.params, a.m.nparams * sizeof(float));
    train_steps(&a.m, &a.o, 1);
    CHECK(anvil_ckpt_snapshot_step(s) == 1);
    CHECK(anvil_ckpt_snapshot_write(s, run, dir, sizeof dir) == 0);
    st = state_of(&a, 2);
    s = anvil_ckpt_snapshot_take(s, &st);
    CHECK(s && anvil_ckpt_snapshot_write(s, run, NULL, 0) == 0);
    anvil_ckpt_snapshot_free(s);
    make_trained(&b, 7, 0);
    CHECK(anvil_ckpt_load(dir, &b.m, &b.o, NULL, 1) == 0);
    CHECK(!memcmp(before, b.m.params, a.m.nparams * sizeof(float)));
    st.train_config_json = "[1,2]";
    CHECK(anvil_ckpt_snapshot_take(NULL, &st) == NULL);
    CHECK(strstr(anvil_errmsg(), "not a JSON object") != NULL);
    free(before);
    free_trained(&a);
    free_trained(&b);
}

typedef struct {
    const anvil_ckpt_snapshot *s;
    const char *run;
    int rc;
    char err[512];
} bg_write;

static void *bg_writer(void *arg) {
    bg_write *w = arg;
    w->rc = anvil_ckpt_snapshot_write(w->s, w->run, NULL, 0);
    snprintf(w->err, sizeof w->err, "%s", anvil_errmsg()); /* messages are per thread */
    return NULL;
}

/* The asynchronous pattern: take on the training thread, write on another while training goes on. */
static void test_background_write(void) {
    char run[PATH_MAX], dir[PATH_MAX];
    path_in(run, sizeof run, root, "bg");
    trained a, b;
    make_trained(&a, 9, 1);
    anvil_ckpt_state st = state_of(&a, 5);
    anvil_ckpt_snapshot *s = anvil_ckpt_snapshot_take(NULL, &st);
    float *at5 = malloc(a.m.nparams * sizeof(float));
    memcpy(at5, a.m.params, a.m.nparams * sizeof(float));
    bg_write w = {s, run, -1, ""};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, bg_writer, &w) == 0);
    train_steps(&a.m, &a.o, 3);
    pthread_join(th, NULL);
    if (w.rc) t_fail(__FILE__, __LINE__, "background write: %s", w.err);
    anvil_ckpt_snapshot_free(s);
    path_in(dir, sizeof dir, run, "ckpt/step_00000005");
    make_trained(&b, 10, 0);
    CHECK(anvil_ckpt_load(dir, &b.m, &b.o, NULL, 1) == 0);
    CHECK(!memcmp(at5, b.m.params, a.m.nparams * sizeof(float)) && b.o.t == 1);
    free(at5);
    free_trained(&a);
    free_trained(&b);
}

/* A background save whose overlapped steps ran far under the median (what a machine's load falling
 * away looks like): their sum is negative, and the cost is the time in the save call alone. */
static void test_cost_not_negative(void) {
    char run[PATH_MAX], *text = NULL;
    size_t len = 0;
    path_in(run, sizeof run, root, "costs");
    FILE *log = open_memstream(&text, &len);
    trained a;
    make_trained(&a, 11, 1);
    anvil_checkpointer_config cfg = {.run_dir = run, .keep_last = 3, .async = 1, .log = log};
    anvil_checkpointer *cp = anvil_checkpointer_new(&cfg);
    CHECK(cp != NULL);
    for (int i = 0; i < 16; i++) CHECK(anvil_checkpointer_step_done(cp, 100.0, 1) == 0);
    anvil_ckpt_state st = state_of(&a, 4);
    CHECK(anvil_checkpointer_save(cp, &st, NULL, 0) == 0);
    anvil_checkpointer_report rep = {0};
    int got = 0;
    for (int i = 0; i < 2000 && !got; i++) {
        usleep(5000);
        CHECK(anvil_checkpointer_step_done(cp, 1.0, 0) == 0);
        got = anvil_checkpointer_next_report(cp, &rep);
    }
    CHECK(anvil_checkpointer_free(cp) == 0);
    fclose(log);
    CHECK(got == 1 && rep.background == 1 && rep.base_ms == 100.0 && rep.cost_steps >= 1);
    /* Each overlapped step ran 99 ms under the median: clamped, the cost is the calls' time exactly. */
    if (got && rep.cost_ms != rep.call_ms + rep.waited_ms)
        t_fail(__FILE__, __LINE__, "cost %.3f ms, want the save call's %.3f + the wait's %.3f", rep.cost_ms,
               rep.call_ms, rep.waited_ms);
    CHECK(rep.cost_ms >= 0);
    if (!text || !strstr(text, "ms under it: noise, counted as 0"))
        t_fail(__FILE__, __LINE__, "the log line does not say the sum was clamped: %s", text ? text : "");
    free(text);
    free_trained(&a);
}

static void test_manifest_parser(void) {
    anvil_ckpt_manifest m;
    CHECK(anvil_ckpt_manifest_parse("{", 1, "x", &m) == -1);
    CHECK(anvil_ckpt_manifest_parse("{\"format\":\"anvil-checkpoint\",\"version\":1}", 42, "x", &m) == -1);
    CHECK(strstr(anvil_errmsg(), "'step' is missing") != NULL);
    const char *evil =
        "{\"format\":\"anvil-checkpoint\",\"version\":1,\"step\":1,\"tokens_seen\":0,"
        "\"model\":{\"n_layer\":1,\"n_head\":1,\"n_embd\":8,\"block_size\":8,\"vocab_size\":10},\"tokenizer\":"
        "\"bytes\","
        "\"train_config\":{},\"loader\":{\"shard\":0,\"position\":0,\"epoch\":0},\"rng\":{\"s0\":\"1\",\"s1\":\"2\"},"
        "\"optimizer\":{\"t\":1,\"beta1\":0.9,\"beta2\":0.95,\"eps\":1e-8,\"weight_decay\":0.1},"
        "\"parallel\":{\"world\":1,\"rank\":0,\"zero_stage\":0,\"shard_group\":1},"
        "\"files\":[{\"name\":\"../../etc/passwd\",\"bytes\":1,\"crc32c\":\"00000000\"}]}";
    CHECK(anvil_ckpt_manifest_parse(evil, strlen(evil), "x", &m) == -1);
    CHECK(strstr(anvil_errmsg(), "files[0].name") != NULL);
}

/* ---- Hugging Face interchange ---- */

static void fixture_model(anvil_model *m) { make_model(m, tiny_cfg, HF_SEED); }

static void test_hf_round_trip(void) {
    char dir[PATH_MAX];
    path_in(dir, sizeof dir, root, "hf");
    trained a;
    make_trained(&a, 8, 2); /* trained weights: no symmetric zeros or ones to hide a transposition */
    CHECK(anvil_hf_export(&a.m, dir, 0, NULL, NULL, NULL) == 0);
    anvil_model b;
    if (anvil_hf_import(dir, anvil_kernels_cpu(), &b, NULL, NULL)) {
        t_fail(__FILE__, __LINE__, "import: %s", anvil_errmsg());
        return;
    }
    CHECK(b.nparams == a.m.nparams && !memcmp(a.m.params, b.params, a.m.nparams * sizeof(float)));
    anvil_model_free(&b);

    /* The layout HF expects: prefixed names, Conv1D [in, out], no lm_head, format=pt. */
    char p[PATH_MAX];
    path_in(p, sizeof p, dir, "model.safetensors");
    anvil_st_file *f = anvil_st_open(p);
    CHECK(f != NULL);
    if (f) {
        const anvil_st_tensor *t = anvil_st_find(f, "transformer.h.1.attn.c_attn.weight");
        CHECK(t && t->ndim == 2 && t->shape[0] == 32 && t->shape[1] == 96);
        t = anvil_st_find(f, "transformer.h.0.mlp.c_proj.weight");
        CHECK(t && t->shape[0] == 128 && t->shape[1] == 32);
        /* c_fc.weight[i][j] is anvil's fcw[layer 0][j][i]. */
        t = anvil_st_find(f, "transformer.h.0.mlp.c_fc.weight");
        const float *fcw = a.m.params + a.m.offsets[t_tensor(&a.m.cfg, "fcw")];
        CHECK(t && ((const float *)t->data)[5 * 128 + 77] == fcw[77 * 32 + 5]);
        t = anvil_st_find(f, "transformer.wte.weight");
        CHECK(t && t->shape[0] == 67);
        CHECK(anvil_st_find(f, "lm_head.weight") == NULL);
        CHECK(anvil_st_count(f) == 4 + 2 * 12);
        CHECK(anvil_st_meta(f, "format") && !strcmp(anvil_st_meta(f, "format"), "pt"));

        /* The original gpt2 repository's style: no prefix, mask buffers, a tied lm_head, and F16. */
        int n = anvil_st_count(f);
        anvil_st_tensor *ts = calloc((size_t)n + 3, sizeof *ts);
        char(*names)[80] = calloc((size_t)n + 3, sizeof *names);
        uint16_t *half = calloc(96, sizeof(uint16_t));
        for (int i = 0; i < n; i++) {
            ts[i] = *anvil_st_at(f, i);
            snprintf(names[i], sizeof names[i], "%s", ts[i].name + strlen("transformer."));
            ts[i].name = names[i];
        }
        float mask[4] = {1, 0, 1, 1};
        ts[n] = (anvil_st_tensor){.name = "h.0.attn.bias",
                                  .dtype = ANVIL_ST_F32,
                                  .ndim = 4,
                                  .shape = {1, 1, 2, 2},
                                  .nbytes = 16,
                                  .data = mask};
        ts[n + 1] = *anvil_st_find(f, "transformer.wte.weight");
        ts[n + 1].name = "lm_head.weight";
        /* c_attn.bias of layer 1 as F16 holding exactly representable values. */
        float *qkvb = a.m.params + a.m.offsets[t_tensor(&a.m.cfg, "qkvb")] + 96;
        for (int i = 0; i < 96; i++) {
            float v = qkvb[i] = (float)(i - 48) / 64.0f;
            if (v == 0.0f) continue;
            int e;
            float mant = frexpf(fabsf(v), &e); /* v = mant * 2^e, mant in [0.5, 1) */
            uint16_t bits = (uint16_t)(((e - 1 + 15) << 10) | (uint16_t)((mant * 2.0f - 1.0f) * 1024.0f));
            half[i] = (uint16_t)((v < 0 ? 0x8000 : 0) | bits);
        }
        for (int i = 0; i < n; i++)
            if (!strcmp(ts[i].name, "h.1.attn.c_attn.bias")) {
                ts[i].dtype = ANVIL_ST_F16;
                ts[i].nbytes = 96 * 2;
                ts[i].data = half;
            }
        char dir2[PATH_MAX], p2[PATH_MAX], cfg1[PATH_MAX], cfg2[PATH_MAX];
        path_in(dir2, sizeof dir2, root, "hf-orig");
        mkdir(dir2, 0755);
        path_in(p2, sizeof p2, dir2, "model.safetensors");
        CHECK(anvil_st_write(p2, ts, n + 2, NULL, 0) == 0);
        path_in(cfg1, sizeof cfg1, dir, "config.json");
        path_in(cfg2, sizeof cfg2, dir2, "config.json");
        char cmd[3 * PATH_MAX];
        snprintf(cmd, sizeof cmd, "cp %s %s", cfg1, cfg2);
        CHECK(system(cmd) == 0);
        if (anvil_hf_import(dir2, anvil_kernels_cpu(), &b, NULL, NULL) == 0) {
            CHECK(!memcmp(a.m.params, b.params, a.m.nparams * sizeof(float)));
            anvil_model_free(&b);
        } else {
            t_fail(__FILE__, __LINE__, "import of the unprefixed file: %s", anvil_errmsg());
        }

        /* An untied lm_head and a foreign tensor are refused by name. */
        float *w = (float *)ts[n + 1].data;
        float *copy = malloc(ts[n + 1].nbytes);
        memcpy(copy, w, ts[n + 1].nbytes);
        copy[3] += 1.0f;
        ts[n + 1].data = copy;
        CHECK(anvil_st_write(p2, ts, n + 2, NULL, 0) == 0);
        CHECK(anvil_hf_import(dir2, anvil_kernels_cpu(), &b, NULL, NULL) == -1 && strstr(anvil_errmsg(), "lm_head.weight"));
        ts[n + 1].data = w;
        ts[n + 1].name = "score.weight";
        CHECK(anvil_st_write(p2, ts, n + 2, NULL, 0) == 0);
        CHECK(anvil_hf_import(dir2, anvil_kernels_cpu(), &b, NULL, NULL) == -1 && strstr(anvil_errmsg(), "'score.weight'"));
        free(copy);
        free(ts);
        free(names);
        free(half);
        anvil_st_close(f);

        /* Configurations anvil does not compute. */
        FILE *cf = fopen(cfg2, "w");
        fputs("{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_head\":2,\"n_embd\":32,\"n_positions\":16,"
              "\"vocab_size\":67,\"activation_function\":\"relu\"}",
              cf);
        fclose(cf);
        CHECK(anvil_hf_import(dir2, anvil_kernels_cpu(), &b, NULL, NULL) == -1 && strstr(anvil_errmsg(), "activation_function"));
    }
    free_trained(&a);
}

static void test_hf_logits(void) {
    anvil_st_file *fx = anvil_st_open(HF_FIXTURE);
    if (!fx) {
        t_fail(__FILE__, __LINE__, "fixture: %s", anvil_errmsg());
        return;
    }
    const anvil_st_tensor *ids = anvil_st_find(fx, "input_ids"), *want = anvil_st_find(fx, "logits");
    if (!ids || !want || ids->dtype != ANVIL_ST_I32 || ids->ndim != 2 || want->ndim != 3 ||
        want->shape[2] != tiny_cfg.vocab_size) {
        t_fail(__FILE__, __LINE__, "fixture tensors missing or malformed");
        anvil_st_close(fx);
        return;
    }
    int B = (int)ids->shape[0], T = (int)ids->shape[1], V = tiny_cfg.vocab_size;
    anvil_model native, imported;
    fixture_model(&native);
    char dir[PATH_MAX];
    path_in(dir, sizeof dir, root, "hf-fixture");
    CHECK(anvil_hf_export(&native, dir, 0, NULL, NULL, NULL) == 0);
    CHECK(anvil_hf_import(dir, anvil_kernels_cpu(), &imported, NULL, NULL) == 0);
    anvil_model *models[2] = {&native, &imported};
    const char *what[2] = {"logits (anvil model)", "logits (exported and re-imported)"};
    for (int k = 0; k < 2; k++) {
        anvil_model *m = models[k];
        float *logits = malloc((size_t)B * T * m->cfg.padded_vocab * sizeof(float));
        float *real = malloc((size_t)B * T * V * sizeof(float));
        CHECK(anvil_model_forward(m, ids->data, NULL, B, T, NULL) == 0);
        CHECK(anvil_model_logits(m, logits) == 0);
        for (int r = 0; r < B * T; r++)
            memcpy(real + (size_t)r * V, logits + (size_t)r * m->cfg.padded_vocab, V * sizeof(float));
        /* transformers' fp32 logits: measured |diff| <= 1.2e-7 on every path, 1% of the bound. */
        t_close(what[k], real, want->data, (size_t)B * T * V, 1e-4f, 1e-5f);
        free(logits);
        free(real);
    }
    anvil_model_free(&native);
    anvil_model_free(&imported);
    anvil_st_close(fx);
}

static int rm_rf(const char *p) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    return system(cmd);
}

int main(int argc, char **argv) {
    tiny_cfg = t_gpt2(2, 2, 32, 16, 67);
    if (argc == 3 && !strcmp(argv[1], "--write-hf")) {
        anvil_model m;
        fixture_model(&m);
        int rc = anvil_hf_export(&m, argv[2], 0, NULL, NULL, NULL);
        if (rc) fprintf(stderr, "%s\n", anvil_errmsg());
        anvil_model_free(&m);
        return rc ? 1 : 0;
    }
    snprintf(root, sizeof root, "/tmp/anvil-ckpt-XXXXXX");
    if (!mkdtemp(root)) return 1;
    test_crc();
    test_manifest_parser();
    test_round_trip();
    test_refusals();
    test_sharded();
    test_sharded_blocks();
    test_corruption_and_fallback();
    test_verify_parts();
    test_find_checked();
    test_manifest_bit_flips();
    test_manifest_v1();
    test_prune();
    test_disk_full();
    test_snapshot_reuse();
    test_background_write();
    test_cost_not_negative();
    test_hf_round_trip();
    test_hf_logits();
    rm_rf(root);
    return t_done("test_checkpoint");
}

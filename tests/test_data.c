/* The data module: shard format, loader order, byte tokenizer, prep. */
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>
#include <zstd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "data/bytetok.h"
#include "data/loader.h"
#include "data/prep.h"
#include "data/shard.h"
#include "testutil.h"
#include "tok/tokenizer.h"

static char tmp[256];

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
    return buf[k];
}

/* A file with exactly these bytes, header and all: for shards the writer refuses to make. */
static void write_raw(const char *path, int32_t magic, int32_t version, int32_t count, const void *tokens,
                      size_t token_bytes) {
    FILE *f = fopen(path, "wb");
    int32_t hdr[256] = {magic, version, count};
    fwrite(hdr, sizeof hdr, 1, f);
    if (token_bytes) fwrite(tokens, token_bytes, 1, f);
    fclose(f);
}

static int contains(const char *hay, const char *needle) {
    if (!strstr(hay, needle)) {
        fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", hay, needle);
        return 0;
    }
    return 1;
}

static void expect_open_error(const char *name, const char *what) {
    anvil_shard s;
    int rc = anvil_shard_open(&s, tpath(name));
    CHECK(rc == -1);
    CHECK(contains(anvil_errmsg(), name));
    CHECK(contains(anvil_errmsg(), what));
}

static void test_shard_roundtrip(void) {
    int32_t tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (i * 7919) % 65536;
    CHECK(anvil_shard_write(tpath("v1.bin"), tok, 1000, ANVIL_SHARD_V16) == 0);
    anvil_shard s;
    CHECK(anvil_shard_open(&s, tpath("v1.bin")) == 0);
    CHECK(s.version == 1 && s.token_bytes == 2 && s.ntokens == 1000);
    int32_t got[1000];
    CHECK(anvil_shard_read(&s, 0, 1000, got, 65536) == 0);
    CHECK(memcmp(got, tok, sizeof tok) == 0);
    CHECK(anvil_shard_read(&s, 123, 77, got, 0) == 0);
    CHECK(memcmp(got, tok + 123, 77 * sizeof *tok) == 0);
    CHECK(anvil_shard_read(&s, 999, 1, got, 0) == 0 && got[0] == tok[999]);
    CHECK(anvil_shard_read(&s, 990, 11, got, 0) == -1);
    CHECK(contains(anvil_errmsg(), "v1.bin"));
    anvil_shard_close(&s);
    FILE *f = fopen(tpath("v1.bin"), "rb");
    fseek(f, 0, SEEK_END);
    CHECK(ftell(f) == 1024 + 2000);
    fclose(f);

    /* Version 7 holds ids past 65535. */
    for (int i = 0; i < 1000; i++) tok[i] = 60000 + i * 100;
    CHECK(anvil_shard_write(tpath("v7.bin"), tok, 1000, ANVIL_SHARD_V32) == 0);
    CHECK(anvil_shard_open(&s, tpath("v7.bin")) == 0);
    CHECK(s.version == 7 && s.token_bytes == 4 && s.ntokens == 1000);
    CHECK(anvil_shard_read(&s, 500, 500, got, 200000) == 0);
    CHECK(memcmp(got, tok + 500, 500 * sizeof *tok) == 0);
    anvil_shard_close(&s);
    CHECK(anvil_shard_version_for_vocab(50257) == 1 && anvil_shard_version_for_vocab(65536) == 1 &&
          anvil_shard_version_for_vocab(65537) == 7);

    /* The writer refuses what the format cannot hold, and leaves nothing behind. */
    int32_t big = 65536, neg = -1;
    CHECK(anvil_shard_write(tpath("w1.bin"), &big, 1, ANVIL_SHARD_V16) == -1);
    CHECK(contains(anvil_errmsg(), "token offset 0"));
    CHECK(anvil_shard_write(tpath("w2.bin"), &neg, 1, ANVIL_SHARD_V32) == -1);
    CHECK(anvil_shard_write(tpath("w3.bin"), tok, 0, ANVIL_SHARD_V16) == -1);
    CHECK(anvil_shard_write(tpath("w4.bin"), tok, 1, 3) == -1);
    CHECK(access(tpath("w1.bin"), F_OK) != 0 && access(tpath("w2.bin"), F_OK) != 0 &&
          access(tpath("w3.bin"), F_OK) != 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", tmp);
    CHECK(system(cmd) != 0); /* no temporary files left */
}

static void test_bad_shards(void) {
    uint16_t t16[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    write_raw(tpath("magic.bin"), 20240521, 1, 10, t16, 20);
    expect_open_error("magic.bin", "byte offset 0");
    write_raw(tpath("version.bin"), ANVIL_SHARD_MAGIC, 2, 10, t16, 20);
    expect_open_error("version.bin", "byte offset 4");
    write_raw(tpath("zero.bin"), ANVIL_SHARD_MAGIC, 1, 0, t16, 0);
    expect_open_error("zero.bin", "byte offset 8");
    write_raw(tpath("negative.bin"), ANVIL_SHARD_MAGIC, 1, -5, t16, 0);
    expect_open_error("negative.bin", "byte offset 8");
    write_raw(tpath("short.bin"), ANVIL_SHARD_MAGIC, 1, 10, t16, 18);
    expect_open_error("short.bin", "1042 bytes");
    write_raw(tpath("long.bin"), ANVIL_SHARD_MAGIC, 1, 9, t16, 20);
    expect_open_error("long.bin", "9 tokens");
    write_raw(tpath("v7short.bin"), ANVIL_SHARD_MAGIC, 7, 10, t16, 20);
    expect_open_error("v7short.bin", "1064 bytes");
    FILE *f = fopen(tpath("tiny.bin"), "wb");
    fwrite(t16, 20, 1, f);
    fclose(f);
    expect_open_error("tiny.bin", "header");
    expect_open_error("missing.bin", "cannot open");

    /* A token id at or past the vocabulary, in both widths. */
    uint16_t bad16[6] = {1, 2, 3, 50257, 4, 5};
    write_raw(tpath("vocab16.bin"), ANVIL_SHARD_MAGIC, 1, 6, bad16, sizeof bad16);
    anvil_shard s;
    int32_t got[6];
    CHECK(anvil_shard_open(&s, tpath("vocab16.bin")) == 0);
    CHECK(anvil_shard_read(&s, 0, 6, got, 50257) == -1);
    CHECK(contains(anvil_errmsg(), "vocab16.bin") && contains(anvil_errmsg(), "token offset 3") &&
          contains(anvil_errmsg(), "50257"));
    CHECK(anvil_shard_read(&s, 0, 3, got, 50257) == 0);
    CHECK(anvil_shard_read(&s, 0, 6, got, 50258) == 0);
    anvil_shard_close(&s);
    uint32_t bad32[4] = {1, 2, 3, 0x80000001u};
    write_raw(tpath("vocab32.bin"), ANVIL_SHARD_MAGIC, 7, 4, bad32, sizeof bad32);
    CHECK(anvil_shard_open(&s, tpath("vocab32.bin")) == 0);
    CHECK(anvil_shard_read(&s, 1, 3, got, 100000) == -1);
    CHECK(contains(anvil_errmsg(), "token offset 3") && contains(anvil_errmsg(), "2147483649"));
    anvil_shard_close(&s);
}

/* Loader fixtures: token k of shard i is i*1000 + k, so a window shows where it came from. */
static const int sizes[3] = {50, 37, 64};

static void make_loader_shards(void) {
    int32_t tok[64];
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < sizes[i]; k++) tok[k] = i * 1000 + k;
        char name[64];
        snprintf(name, sizeof name, "ld/part_%03d.bin", i);
        CHECK(anvil_shard_write(tpath(name), tok, sizes[i], ANVIL_SHARD_V16) == 0);
    }
}

/* Checks that a batch is the window of B*T+1 tokens at pos of shard. */
static int is_window(const int32_t *in, const int32_t *tg, int n, int shard, int pos) {
    for (int j = 0; j < n; j++)
        if (in[j] != shard * 1000 + pos + j || tg[j] != shard * 1000 + pos + j + 1) return 0;
    return 1;
}

static void test_loader_order(void) {
    enum { B = 2, T = 4, BT = 8 };
    int32_t in[BT], tg[BT];
    /* One process: windows of 9 tokens every 8, while pos + 9 <= shard size.
     * Shard 0 (50 tokens): 0..40; shard 1 (37): 0..24; shard 2 (64): 0..48. */
    static const int want1[][2] = {{0, 0},  {0, 8},  {0, 16}, {0, 24}, {0, 32}, {0, 40}, {1, 0},  {1, 8},
                                   {1, 16}, {1, 24}, {2, 0},  {2, 8},  {2, 16}, {2, 24}, {2, 32}, {2, 40},
                                   {2, 48}, {0, 0},  {0, 8}};
    anvil_loader *L = anvil_loader_open(tpath("ld/part_*.bin"), B, T, 0, 1, 3000);
    CHECK(L != NULL);
    if (!L) return;
    CHECK(anvil_loader_num_shards(L) == 3 && anvil_loader_total_tokens(L) == 151);
    CHECK(strstr(anvil_loader_shard_path(L, 2), "part_002.bin") != NULL);
    int n1 = (int)(sizeof want1 / sizeof want1[0]);
    for (int i = 0; i < n1; i++) {
        CHECK(anvil_loader_next(L, in, tg) == 0);
        if (!is_window(in, tg, BT, want1[i][0], want1[i][1]))
            t_fail(__FILE__, __LINE__, "world 1 step %d: got window starting at %d, want shard %d pos %d", i, in[0],
                   want1[i][0], want1[i][1]);
        anvil_loader_state st = anvil_loader_get_state(L);
        CHECK(st.epoch == (i >= 17));
    }
    anvil_loader_reset(L);
    CHECK(anvil_loader_next(L, in, tg) == 0 && is_window(in, tg, BT, 0, 0));
    anvil_loader_close(L);

    /* Two processes: global batches of 17 tokens every 16, rank r at +8r.
     * Shard 0: 0,16,32; shard 1: 0,16; shard 2: 0,16,32; then epoch 1. */
    static const int want2[][2] = {{0, 0}, {0, 16}, {0, 32}, {1, 0}, {1, 16}, {2, 0}, {2, 16}, {2, 32}, {0, 0}};
    int n2 = (int)(sizeof want2 / sizeof want2[0]);
    for (int rank = 0; rank < 2; rank++) {
        L = anvil_loader_open(tpath("ld/part_*.bin"), B, T, rank, 2, 3000);
        CHECK(L != NULL);
        if (!L) return;
        for (int i = 0; i < n2; i++) {
            CHECK(anvil_loader_next(L, in, tg) == 0);
            if (!is_window(in, tg, BT, want2[i][0], want2[i][1] + rank * BT))
                t_fail(__FILE__, __LINE__, "world 2 rank %d step %d: got window starting at %d", rank, i, in[0]);
        }
        CHECK(anvil_loader_get_state(L).epoch == 1);
        anvil_loader_close(L);
    }

    /* B=4, T=4 on three processes needs 3*16+1 = 49 tokens per batch: shard 1 has 37. */
    L = anvil_loader_open(tpath("ld/part_*.bin"), 4, 4, 0, 3, 3000);
    CHECK(L == NULL);
    CHECK(contains(anvil_errmsg(), "part_001.bin") && contains(anvil_errmsg(), "too few"));
    CHECK(anvil_loader_open(tpath("ld/nothing_*.bin"), B, T, 0, 1, 3000) == NULL);
    CHECK(contains(anvil_errmsg(), "nothing_*.bin"));
    CHECK(anvil_loader_open(tpath("ld/part_*.bin"), B, T, 2, 2, 3000) == NULL);
    CHECK(anvil_loader_open(tpath("ld/part_*.bin"), 0, T, 0, 1, 3000) == NULL);

    /* Ids are checked on every read: shard 2's ids reach 2063. */
    L = anvil_loader_open(tpath("ld/part_*.bin"), B, T, 0, 1, 2010);
    CHECK(L != NULL);
    if (!L) return;
    for (int i = 0; i < 10; i++) CHECK(anvil_loader_next(L, in, tg) == 0);
    CHECK(anvil_loader_next(L, in, tg) == 0); /* shard 2 at 0: ids up to 2008 */
    anvil_loader_state before = anvil_loader_get_state(L);
    CHECK(anvil_loader_next(L, in, tg) == -1); /* shard 2 at 8: id 2010 at offset 10 */
    CHECK(contains(anvil_errmsg(), "part_002.bin") && contains(anvil_errmsg(), "token offset 10"));
    anvil_loader_state after = anvil_loader_get_state(L);
    CHECK(after.shard == before.shard && after.position == before.position && after.epoch == before.epoch);
    anvil_loader_close(L);
}

static void test_loader_state(void) {
    enum { B = 1, T = 5, BT = 5, STEPS = 40 };
    int32_t in[BT], tg[BT];
    static int32_t ref_in[STEPS][BT], ref_tg[STEPS][BT];
    anvil_loader *L = anvil_loader_open(tpath("ld/part_*.bin"), B, T, 1, 2, 3000);
    CHECK(L != NULL);
    if (!L) return;
    for (int i = 0; i < 7; i++) CHECK(anvil_loader_next(L, in, tg) == 0);
    anvil_loader_state saved = anvil_loader_get_state(L);
    for (int i = 0; i < STEPS; i++) CHECK(anvil_loader_next(L, ref_in[i], ref_tg[i]) == 0);
    anvil_loader_state end = anvil_loader_get_state(L);
    CHECK(end.epoch >= 1);
    anvil_loader_close(L);

    /* A fresh loader given the saved state continues identically, across the wrap. */
    L = anvil_loader_open(tpath("ld/part_*.bin"), B, T, 1, 2, 3000);
    CHECK(anvil_loader_set_state(L, saved) == 0);
    for (int i = 0; i < STEPS; i++) {
        CHECK(anvil_loader_next(L, in, tg) == 0);
        if (memcmp(in, ref_in[i], sizeof in) || memcmp(tg, ref_tg[i], sizeof tg))
            t_fail(__FILE__, __LINE__, "restored loader differs at step %d", i);
    }
    anvil_loader_state end2 = anvil_loader_get_state(L);
    CHECK(end2.shard == end.shard && end2.position == end.position && end2.epoch == end.epoch);

    /* States that cannot belong to these shards are refused and change nothing. */
    CHECK(anvil_loader_set_state(L, (anvil_loader_state){.shard = 3}) == -1);
    CHECK(anvil_loader_set_state(L, (anvil_loader_state){.shard = -1}) == -1);
    CHECK(anvil_loader_set_state(L, (anvil_loader_state){.shard = 1, .position = 38}) == -1);
    CHECK(anvil_loader_set_state(L, (anvil_loader_state){.epoch = -1}) == -1);
    anvil_loader_state same = anvil_loader_get_state(L);
    CHECK(same.shard == end.shard && same.position == end.position && same.epoch == end.epoch);
    anvil_loader_close(L);
}

static void test_bytetok(void) {
    const unsigned char text[] = {'H', 'i', 0, 0xff, '\n'};
    int32_t tok[5];
    anvil_bytetok_encode(text, 5, tok);
    CHECK(tok[0] == 'H' && tok[2] == 0 && tok[3] == 255 && tok[4] == '\n');
    char piece[ANVIL_BYTETOK_MAX_PIECE];
    for (int i = 0; i < 5; i++) CHECK(anvil_bytetok_decode(tok[i], piece) == 1 && (unsigned char)piece[0] == text[i]);
    CHECK(anvil_bytetok_decode(ANVIL_BYTETOK_EOT, piece) == 13 && memcmp(piece, "<|endoftext|>", 13) == 0);
    CHECK(anvil_bytetok_decode(257, piece) == -1 && anvil_bytetok_decode(-1, piece) == -1);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

/* Reads a whole shard (no vocabulary check); returns its token count. */
static int64_t slurp(const char *path, int32_t *out, int64_t cap) {
    anvil_shard s;
    if (anvil_shard_open(&s, path)) return -1;
    int64_t n = s.ntokens <= cap ? s.ntokens : -1;
    if (n > 0 && anvil_shard_read(&s, 0, n, out, ANVIL_BYTETOK_VOCAB)) n = -1;
    anvil_shard_close(&s);
    return n;
}

static void notes(void *ctx, const char *msg) {
    (void)msg;
    (*(int *)ctx)++;
}


/* The tokenizer a manifest names is a file of its own folder, whatever the manifest says: an old
 * manifest's absolute "file" (a real rank file elsewhere, which loaded before) and names that climb
 * are refused, naming the field; a plain name loads from the folder. */
static void test_manifest_tokenizer_file(const char *mdir) {
    char real[PATH_MAX], text[PATH_MAX + 128], copy[PATH_MAX + 64];
    CHECK(realpath("tok/expected/train_llama3_1456.tiktoken", real) != NULL);
    struct anvil_tok *tk = NULL;
    snprintf(text, sizeof text, "{\"tokenizer\": {\"file\": \"%s\", \"pattern\": \"llama3\"}}", real);
    write_text(tpath("prep/manifest.json"), text);
    CHECK(anvil_data_manifest_tokenizer(mdir, &tk, NULL, 0) == -1 && tk == NULL &&
          contains(anvil_errmsg(), "manifest.json: field \"tokenizer.file\" must name a file in the manifest's own"));
    const char *const bad[] = {"{\"copy\": \"..\"", "{\"copy\": \".\"", "{\"copy\": \"\"", "{\"file\": \"../x\"",
                               "{\"copy\": \"/tmp/x.tiktoken\"", "{\"copy\": \"a/b\""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(text, sizeof text, "{\"tokenizer\": %s, \"pattern\": \"llama3\"}}", bad[i]);
        write_text(tpath("prep/manifest.json"), text);
        CHECK(anvil_data_manifest_tokenizer(mdir, &tk, NULL, 0) == -1 && tk == NULL &&
              contains(anvil_errmsg(), bad[i][2] == 'c' ? "\"tokenizer.copy\"" : "\"tokenizer.file\""));
    }
    snprintf(copy, sizeof copy, "%s/old.tiktoken", mdir);
    char *data;
    size_t len;
    CHECK(anvil_read_file(real, &data, &len) == 0 && anvil_write_file_atomic(copy, data, len) == 0);
    free(data);
    write_text(tpath("prep/manifest.json"), "{\"tokenizer\": {\"file\": \"old.tiktoken\", \"pattern\": \"llama3\"}}");
    char file[PATH_MAX + 64];
    CHECK(anvil_data_manifest_tokenizer(mdir, &tk, file, sizeof file) == 0 && tk != NULL && !strcmp(file, copy));
    anvil_tok_free(tk);
}

/* Manifest errors name the file and the field. */
static void test_manifest_errors(void) {
    char mdir[512];
    int vocab = 0, eot = 0;
    int64_t ntok = 0, nbytes = 0;
    snprintf(mdir, sizeof mdir, "%s/prep", tmp);
    CHECK(anvil_data_manifest_vocab(mdir, &vocab, &eot) == -1 && contains(anvil_errmsg(), "manifest.json"));
    write_text(tpath("prep/manifest.json"), "{\"vocab_size\": 257, \"eot\": ");
    CHECK(anvil_data_manifest_vocab(mdir, &vocab, &eot) == -1 && contains(anvil_errmsg(), "not valid JSON"));
    write_text(tpath("prep/manifest.json"), "{\"vocab_size\": 257.5, \"eot\": 1}");
    CHECK(anvil_data_manifest_vocab(mdir, &vocab, &eot) == -1 && contains(anvil_errmsg(), "vocab_size"));
    write_text(tpath("prep/manifest.json"), "{\"vocab_size\": 257, \"eot\": 257}");
    CHECK(anvil_data_manifest_vocab(mdir, &vocab, &eot) == -1 && contains(anvil_errmsg(), "\"eot\""));
    struct anvil_tok *tk = (struct anvil_tok *)&vocab; /* not NULL, so the calls must clear it */
    write_text(tpath("prep/manifest.json"), "{\"tokenizer\": \"bytes\"}");
    char file[64] = "stale";
    CHECK(anvil_data_manifest_tokenizer(mdir, &tk, file, sizeof file) == 0 && tk == NULL && file[0] == 0);
    write_text(tpath("prep/manifest.json"), "{\"tokenizer\": {\"copy\": \"../x.tiktoken\", \"pattern\": \"gpt2\"}}");
    CHECK(anvil_data_manifest_tokenizer(mdir, &tk, NULL, 0) == -1 && contains(anvil_errmsg(), "\"tokenizer.copy\"") &&
          tk == NULL);
    test_manifest_tokenizer_file(mdir);
    CHECK(anvil_data_manifest_split(mdir, "val", &ntok, &nbytes) == -1 && contains(anvil_errmsg(), "splits.val"));
}

static void test_prep(void) {
    /* FNV-1a 64 reference values. */
    CHECK(anvil_fnv1a64("", 0) == 0xcbf29ce484222325ull);
    CHECK(anvil_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
    CHECK(anvil_fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
    CHECK(!anvil_prep_is_val(0, 0.0) && anvil_prep_is_val(999999, 1.0) && anvil_prep_is_val(1000000, 1e-6) &&
          !anvil_prep_is_val(1000001, 1e-6));

    /* 40 documents "doc N: ..." split at "@@"; two inputs plus an empty one. */
    char text[8192] = "";
    for (int i = 0; i < 40; i++) {
        char d[128];
        snprintf(d, sizeof d, "doc %d: the quick brown fox jumps over the lazy dog.@@", i);
        strcat(text, d);
    }
    write_text(tpath("in1.txt"), text);
    write_text(tpath("in2.txt"), "@@@@last document");
    write_text(tpath("empty.txt"), "");
    const char *inputs[] = {tpath("in1.txt"), tpath("empty.txt"), tpath("in2.txt")};
    char in0[512], in1[512], in2[512];
    snprintf(in0, sizeof in0, "%s", inputs[0]);
    snprintf(in1, sizeof in1, "%s", inputs[1]);
    snprintf(in2, sizeof in2, "%s", inputs[2]);
    const char *const files[] = {in0, in1, in2};
    char out[512];
    snprintf(out, sizeof out, "%s/prep/out", tmp);
    int nnotes = 0;
    anvil_prep_opts o = {.out_dir = out, .inputs = files, .ninputs = 3, .val_fraction = 0.2, .delimiter = "@@",
                         .delimiter_len = 2, .shard_tokens = 500, .note = notes, .note_ctx = &nnotes};
    anvil_prep_stats st;
    CHECK(anvil_prep_run(&o, &st) == 0);
    CHECK(st.train_docs + st.val_docs == 41 && st.sources == 2 && st.skipped_inputs == 1 && nnotes == 1);
    CHECK(st.val_docs > 0 && st.train_docs > 0);
    CHECK(st.train_shards == (int)((st.train_tokens + 499) / 500));

    /* Every document is EOT + its bytes, in order, split by its hash; every
     * shard but a split's last is full. */
    static int32_t all[2][8192];
    int64_t n[2] = {0, 0};
    const char *split[2] = {"train", "val"};
    int nsh[2] = {st.train_shards, st.val_shards};
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < nsh[s]; i++) {
            char p[600];
            snprintf(p, sizeof p, "%s/%s_%06d.bin", out, split[s], i);
            int64_t k = slurp(p, all[s] + n[s], 8192 - n[s]);
            CHECK(i == nsh[s] - 1 ? k > 0 && k <= 500 : k == 500);
            n[s] += k;
        }
    }
    CHECK(n[0] == st.train_tokens && n[1] == st.val_tokens);
    int64_t pos[2] = {0, 0};
    for (int i = 0; i <= 40; i++) {
        char d[128];
        if (i < 40) snprintf(d, sizeof d, "doc %d: the quick brown fox jumps over the lazy dog.", i);
        else snprintf(d, sizeof d, "last document");
        size_t len = strlen(d);
        int s = anvil_prep_is_val(anvil_fnv1a64(d, len), 0.2);
        int ok = pos[s] + 1 + (int64_t)len <= n[s] && all[s][pos[s]] == ANVIL_BYTETOK_EOT;
        for (size_t j = 0; ok && j < len; j++) ok = all[s][pos[s] + 1 + (int64_t)j] == (unsigned char)d[j];
        if (!ok) t_fail(__FILE__, __LINE__, "document %d is not where it belongs in %s", i, split[s]);
        pos[s] += 1 + (int64_t)len;
    }
    CHECK(pos[0] == n[0] && pos[1] == n[1]);

    int vocab = 0, eot = 0;
    CHECK(anvil_data_manifest_vocab(out, &vocab, &eot) == 0 && vocab == 257 && eot == 256);

    /* A second run with bigger shards removes the first run's extra shards. */
    o.shard_tokens = 100000;
    nnotes = 0;
    CHECK(anvil_prep_run(&o, &st) == 0);
    CHECK(st.train_shards == 1 && st.val_shards == 1);
    /* The manifest counts each split's tokens and text (EOT adds no text). */
    int64_t ntok = 0, nbytes = 0;
    CHECK(anvil_data_manifest_split(out, "train", &ntok, &nbytes) == 0 && ntok == st.train_tokens &&
          nbytes == st.train_tokens - st.train_docs);
    char p[600];
    snprintf(p, sizeof p, "%s/train_000001.bin", out);
    CHECK(access(p, F_OK) != 0);
    CHECK(nnotes >= 1);

    /* A missing input fails before anything is written. */
    const char *const bad[] = {in0, "/nonexistent/input.txt"};
    char out2[512];
    snprintf(out2, sizeof out2, "%s/prep/never", tmp);
    anvil_prep_opts o2 = o;
    o2.out_dir = out2;
    o2.inputs = bad;
    o2.ninputs = 2;
    CHECK(anvil_prep_run(&o2, &st) == -1 && contains(anvil_errmsg(), "/nonexistent/input.txt"));
    CHECK(access(out2, F_OK) != 0);
    o2.inputs = files + 1;
    o2.ninputs = 1;
    CHECK(anvil_prep_run(&o2, &st) == -1 && contains(anvil_errmsg(), "no documents"));

    test_manifest_errors();
}


static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    *len = b ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

/* Where a document starts, for samples: after Llama 3's <|begin_of_text|> (1200 in this 1200-rank
 * vocabulary), else after the end-of-text token (GPT's encodings, bytes). */
static void test_doc_start(void) {
    const char *rank = "tok/expected/train_llama3_1456.tiktoken";
    anvil_tok *l3 = anvil_tok_load(rank, "llama3"), *gpt = anvil_tok_load(rank, "gpt2");
    CHECK(l3 && gpt);
    if (l3 && gpt) {
        CHECK(anvil_tok_bos(l3) == 1200 && anvil_data_doc_start(l3) == 1200);
        CHECK(anvil_tok_bos(gpt) == -1 && anvil_data_doc_start(gpt) == anvil_tok_eot(gpt));
    }
    CHECK(anvil_data_doc_start(NULL) == ANVIL_BYTETOK_EOT);
    anvil_tok_free(l3);
    anvil_tok_free(gpt);
}

/* BPE prep: the token stream is EOT + encode(doc) per document, in order,
 * and the shards are byte-identical for any number of workers. */
static void test_prep_bpe(void) {
    const char *rank = "tok/ranks/gpt2.tiktoken";
    anvil_tok *tk = anvil_tok_load(rank, "gpt2");
    CHECK(tk != NULL);
    if (!tk) return;
    char text[1 << 16];
    size_t tl = 0;
    for (int i = 0; i < 200; i++)
        tl += (size_t)snprintf(text + tl, sizeof text - tl, "Doc %d: caf\xc3\xa9 <|endoftext|> %s ends.\n@@", i,
                               i % 3 ? "héllo, world's" : "  spaced\ttabs");
    mkdir(tpath("bpe"), 0755);
    write_text(tpath("bpe/in.txt"), text);
    const char *files[] = {tpath("bpe/in.txt")};
    char in[300];
    snprintf(in, sizeof in, "%s", files[0]);
    files[0] = in;

    char out[300];
    snprintf(out, sizeof out, "%s/bpe/all", tmp);
    anvil_prep_opts o = {.out_dir = out, .inputs = files, .ninputs = 1, .val_fraction = 0, .delimiter = "@@",
                         .delimiter_len = 2, .shard_tokens = 1 << 20, .tokenizer_file = rank, .workers = 2,
                         .chunk_bytes = 300};
    anvil_prep_stats st;
    CHECK(anvil_prep_run(&o, &st) == 0);
    CHECK(st.train_docs == 200 && st.train_shards == 1);

    int32_t *want = malloc(sizeof(int32_t) * 65536), *got = malloc(sizeof(int32_t) * 65536), *ids = NULL;
    size_t cap = 0;
    int64_t nw = 0;
    const char *p = text;
    while (*p) {
        const char *e = strstr(p, "@@");
        want[nw++] = anvil_tok_eot(tk);
        int64_t n = anvil_tok_encode(tk, NULL, p, (size_t)(e - p), ANVIL_TOK_SPECIAL_PLAIN, &ids, &cap);
        CHECK(n > 0);
        memcpy(want + nw, ids, (size_t)n * sizeof *ids);
        nw += n;
        p = e + 2;
    }
    anvil_shard sh;
    char path[400];
    snprintf(path, sizeof path, "%s/train_000000.bin", out);
    CHECK(anvil_shard_open(&sh, path) == 0);
    CHECK(sh.version == ANVIL_SHARD_V16 && sh.ntokens == nw);
    CHECK(sh.ntokens == nw && anvil_shard_read(&sh, 0, nw, got, anvil_tok_vocab_size(tk)) == 0 &&
          !memcmp(got, want, (size_t)nw * sizeof *got));
    anvil_shard_close(&sh);
    int vocab = 0, eot = 0;
    CHECK(anvil_data_manifest_vocab(out, &vocab, &eot) == 0 && vocab == 50257 && eot == 50256);

    /* Read 5 bytes at a time, so that documents and the 2-byte delimiter end in every place of a
     * read: the same shard. */
    size_t all_len = 0, r5_len = 0;
    unsigned char *all = read_all(path, &all_len), *r5;
    snprintf(out, sizeof out, "%s/bpe/r5", tmp);
    o.read_bytes = 5;
    CHECK(anvil_prep_run(&o, &st) == 0 && st.train_docs == 200);
    o.read_bytes = 0;
    snprintf(path, sizeof path, "%s/train_000000.bin", out);
    r5 = read_all(path, &r5_len);
    CHECK(all && r5 && all_len == r5_len && !memcmp(all, r5, all_len));
    free(all);
    free(r5);
    /* A document longer than max_doc_bytes fails the run naming where it starts (documents 0-9
     * have at most 49 bytes, document 10 has 50 and starts at byte 502), however it is read. */
    snprintf(out, sizeof out, "%s/bpe/cap", tmp);
    o.max_doc_bytes = 49;
    for (size_t rb = 0; rb <= 7; rb += 7) {
        o.read_bytes = rb;
        CHECK(anvil_prep_run(&o, &st) == -1 && contains(anvil_errmsg(), "the document at byte 502 is longer than"));
    }
    o.read_bytes = o.max_doc_bytes = 0;

    /* 1, 2 and 3 workers over many small chunks, both splits, several shards. */
    o.val_fraction = 0.3;
    o.shard_tokens = 700;
    unsigned char *ref[8] = {0};
    size_t reflen[8] = {0};
    int nfiles = 0;
    for (int w = 1; w <= 3; w++) {
        snprintf(out, sizeof out, "%s/bpe/w%d", tmp, w);
        o.workers = w;
        CHECK(anvil_prep_run(&o, &st) == 0);
        CHECK(st.val_docs > 0 && st.train_shards > 1);
        int k = 0;
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < 4; i++, k++) {
                snprintf(path, sizeof path, "%s/%s_%06d.bin", out, s ? "val" : "train", i);
                size_t len = 0;
                unsigned char *b = read_all(path, &len);
                if (w == 1) {
                    ref[k] = b;
                    reflen[k] = len;
                    nfiles += b != NULL;
                } else {
                    CHECK((b == NULL) == (ref[k] == NULL) && len == reflen[k] && (!b || !memcmp(b, ref[k], len)));
                    free(b);
                }
            }
    }
    CHECK(nfiles >= 3);
    for (int k = 0; k < 8; k++) free(ref[k]);

    /* A bad rank file is reported by name; nothing is written. */
    o.tokenizer_file = "/nonexistent/x.tiktoken";
    snprintf(out, sizeof out, "%s/bpe/never", tmp);
    CHECK(anvil_prep_run(&o, &st) == -1 && contains(anvil_errmsg(), "/nonexistent/x.tiktoken"));
    struct stat sb;
    CHECK(stat(out, &sb) != 0);
    free(want);
    free(got);
    free(ids);
    anvil_tok_free(tk);
}

typedef struct {
    int n;
    char last[3][512];
} note_log;

static void log_note(void *ctx, const char *msg) {
    note_log *l = ctx;
    if (l->n < 3) snprintf(l->last[l->n], sizeof l->last[0], "%s", msg);
    l->n++;
}

/* JSON lines: each line's field is a document; bad lines are named by
 * file:line in order (across chunks and workers) and skipped, or fail the
 * run under strict. */
static void test_prep_jsonl(void) {
    mkdir(tpath("jl"), 0755);
    char path[300], out[300];
    snprintf(path, sizeof path, "%s/jl/in.jsonl", tmp);
    FILE *f = fopen(path, "wb");
    for (int i = 1; i <= 60; i++) {
        if (i == 17) fputs("{\"text\": \"unterminated\n", f);
        else if (i == 41) fputs("{\"title\": \"no text field\"}\r\n", f);
        else if (i == 50) fputs("\n", f);
        else if (i == 53) fputs("{\"text\": \"cut \\u0000 here\"}\n", f);
        else if (i == 54) fputs("{\"text\": \"\\\\u0000 is text\"}\n", f); /* an escaped backslash, then text */
        else fprintf(f, "{\"id\": %d, \"text\": \"line %d\\tsays \\u00e9\"}\n", i, i);
    }
    fclose(f);
    const char *files[] = {path};
    note_log log = {0};
    snprintf(out, sizeof out, "%s/jl/out", tmp);
    anvil_prep_opts o = {.out_dir = out, .inputs = files, .ninputs = 1, .val_fraction = 0, .shard_tokens = 1 << 20,
                         .jsonl_field = "text", .workers = 3, .chunk_bytes = 100, .note = log_note, .note_ctx = &log};
    anvil_prep_stats st;
    CHECK(anvil_prep_run(&o, &st) == 0);
    CHECK(st.train_docs == 56 && st.bad_lines == 3 && log.n == 3);
    char want17[400], want41[400], want53[400];
    snprintf(want17, sizeof want17, "%s:17: not valid JSON", path);
    snprintf(want41, sizeof want41, "%s:41: no string field \"text\"", path);
    snprintf(want53, sizeof want53, "%s:53: a string holds \\u0000", path);
    CHECK(contains(log.last[0], want17) && contains(log.last[1], want41) && contains(log.last[2], want53));

    int32_t *got = malloc(sizeof(int32_t) * 4096);
    char shard[400];
    snprintf(shard, sizeof shard, "%s/train_000000.bin", out);
    int64_t n = slurp(shard, got, 4096);
    char expect[4096];
    size_t el = 0;
    for (int i = 1; i <= 60; i++)
        if (i == 54) el += (size_t)snprintf(expect + el, sizeof expect - el, "\x01\\u0000 is text");
        else if (i != 17 && i != 41 && i != 50 && i != 53) el += (size_t)snprintf(expect + el, sizeof expect - el, "\x01line %d\tsays \xc3\xa9", i);
    CHECK(n == (int64_t)el);
    int same = n == (int64_t)el;
    for (int64_t k = 0; same && k < n; k++)
        same = got[k] == (expect[k] == '\x01' ? ANVIL_BYTETOK_EOT : (unsigned char)expect[k]);
    CHECK(same);
    free(got);

    /* 2000 lines in chunks of a few lines: 1 and 2 workers (parsing at once, a window of 16 chunks
     * after another: scripts/tsan.sh runs this under ThreadSanitizer) give the same shard. */
    char many[300];
    snprintf(many, sizeof many, "%s/jl/many.jsonl", tmp);
    f = fopen(many, "wb");
    for (int i = 0; i < 2000; i++) fprintf(f, "{\"text\": \"document %d, \\\"quoted\\\"\", \"n\": %d}\n", i, i);
    fclose(f);
    const char *many_files[] = {many};
    anvil_prep_opts om = {.out_dir = out, .inputs = many_files, .ninputs = 1, .val_fraction = 0,
                          .shard_tokens = 1 << 20, .jsonl_field = "text", .chunk_bytes = 64};
    unsigned char *by[2] = {NULL, NULL};
    size_t bylen[2] = {0, 0};
    for (int w = 1; w <= 2; w++) {
        snprintf(out, sizeof out, "%s/jl/many%d", tmp, w);
        om.workers = w;
        CHECK(anvil_prep_run(&om, &st) == 0 && st.train_docs == 2000);
        snprintf(shard, sizeof shard, "%s/train_000000.bin", out);
        by[w - 1] = read_all(shard, &bylen[w - 1]);
    }
    CHECK(by[0] && by[1] && bylen[0] == bylen[1] && bylen[0] > 1024 + 2 * 2000 * 20 && !memcmp(by[0], by[1], bylen[0]));

    /* Read 7 bytes at a time, so that lines end in every place of a read: the same shard. */
    snprintf(out, sizeof out, "%s/jl/many_r7", tmp);
    om.read_bytes = 7;
    CHECK(anvil_prep_run(&om, &st) == 0 && st.train_docs == 2000);
    snprintf(shard, sizeof shard, "%s/train_000000.bin", out);
    size_t r7len = 0;
    unsigned char *r7 = read_all(shard, &r7len);
    CHECK(r7 && r7len == bylen[0] && !memcmp(r7, by[0], r7len));
    free(r7);
    free(by[0]);
    free(by[1]);
    /* A line longer than max_doc_bytes is an error naming its number, however it is read: lines
     * 1-10 have 42 bytes, line 11 has 44. */
    snprintf(out, sizeof out, "%s/jl/many_cap", tmp);
    om.max_doc_bytes = 43;
    CHECK(anvil_prep_run(&om, &st) == -1 && contains(anvil_errmsg(), "many.jsonl:11: the line is longer than"));
    om.read_bytes = 0;
    CHECK(anvil_prep_run(&om, &st) == -1 && contains(anvil_errmsg(), "many.jsonl:11: the line is longer than"));

    o.strict = 1;
    o.workers = 1;
    snprintf(out, sizeof out, "%s/jl/strict", tmp);
    CHECK(anvil_prep_run(&o, &st) == -1 && contains(anvil_errmsg(), want17));
    /* Output streams, so the folder may exist, but no shard was finished. */
    snprintf(shard, sizeof shard, "%s/train_000000.bin", out);
    struct stat sb;
    CHECK(stat(shard, &sb) != 0);
}

/* .gz and .zst inputs are decompressed as they are read, a few bytes at a time or 4 MiB, across
 * gzip members and zstd frames: the shards of the plain text. Empty and cut short ones too. */
static void test_prep_compressed(void) {
    mkdir(tpath("z"), 0755);
    char text[16384];
    size_t tl = 0;
    for (int i = 0; i < 200; i++) tl += (size_t)snprintf(text + tl, sizeof text - tl, "document %d of the streams@@", i);
    char plain[300], gz[300], zst[300];
    snprintf(plain, sizeof plain, "%s/z/in.txt", tmp);
    snprintf(gz, sizeof gz, "%s/z/in.txt.gz", tmp);
    snprintf(zst, sizeof zst, "%s/z/in.txt.zst", tmp);
    write_text(plain, text);
    for (int m = 0; m < 2; m++) { /* two gzip members, each half the text */
        gzFile g = gzopen(gz, m ? "ab" : "wb");
        CHECK(g && gzwrite(g, text + m * (tl / 2), (unsigned)(m ? tl - tl / 2 : tl / 2)) > 0);
        gzclose(g);
    }
    size_t cap = ZSTD_compressBound(tl), zl = 0;
    unsigned char *z = malloc(2 * cap);
    for (int m = 0; m < 2; m++) { /* two zstd frames */
        size_t r = ZSTD_compress(z + zl, 2 * cap - zl, text + m * (tl / 2), m ? tl - tl / 2 : tl / 2, 3);
        CHECK(!ZSTD_isError(r));
        zl += r;
    }
    FILE *f = fopen(zst, "wb");
    fwrite(z, 1, zl, f);
    fclose(f);

    const char *in[1];
    char out[300];
    anvil_prep_opts o = {.out_dir = out, .inputs = in, .ninputs = 1, .val_fraction = 0, .delimiter = "@@",
                         .delimiter_len = 2, .shard_tokens = 1 << 20, .chunk_bytes = 500};
    anvil_prep_stats st;
    unsigned char *ref = NULL;
    size_t ref_len = 0;
    const char *names[] = {plain, gz, zst};
    for (int k = 0; k < 3; k++)
        for (size_t rb = 0; rb <= 7; rb += 7) {
            in[0] = names[k];
            o.read_bytes = rb;
            snprintf(out, sizeof out, "%s/z/out%d_%zu", tmp, k, rb);
            CHECK(anvil_prep_run(&o, &st) == 0 && st.train_docs == 200 && st.bytes_in == (int64_t)tl);
            char shard[400];
            snprintf(shard, sizeof shard, "%s/train_000000.bin", out);
            size_t len = 0;
            unsigned char *b = read_all(shard, &len);
            if (!ref) {
                ref = b;
                ref_len = len;
                continue;
            }
            if (!(b && len == ref_len && !memcmp(b, ref, len)))
                t_fail(__FILE__, __LINE__, "%s read %zu bytes at a time differs from the plain text", names[k], rb);
            free(b);
        }
    free(ref);

    /* Cut short inside the second frame, read 7 bytes at a time: an error naming the offset. */
    f = fopen(zst, "wb");
    fwrite(z, 1, zl - 5, f);
    fclose(f);
    in[0] = zst;
    o.read_bytes = 7;
    snprintf(out, sizeof out, "%s/z/cut", tmp);
    CHECK(anvil_prep_run(&o, &st) == -1 && contains(anvil_errmsg(), "in.txt.zst: zstd data truncated at compressed byte"));
    free(z);
    /* Empty compressed files hold no documents. */
    f = fopen(zst, "wb");
    fclose(f);
    gzFile g = gzopen(gz, "wb");
    gzclose(g);
    const char *empties[] = {gz, zst};
    o.inputs = empties;
    o.ninputs = 2;
    snprintf(out, sizeof out, "%s/z/empty", tmp);
    CHECK(anvil_prep_run(&o, &st) == -1 && contains(anvil_errmsg(), "no documents"));
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/anvil_test_data.XXXXXX");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    char sub[300];
    snprintf(sub, sizeof sub, "%s/ld", tmp);
    mkdir(sub, 0755);
    test_shard_roundtrip();
    test_bad_shards();
    make_loader_shards();
    test_loader_order();
    test_loader_state();
    test_bytetok();
    test_prep();
    test_prep_bpe();
    test_doc_start();
    test_prep_jsonl();
    test_prep_compressed();
    nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return t_done("test_data");
}

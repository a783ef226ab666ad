/* The BPE tokenizer: rank-file validation, id-for-id agreement with the
 * official tiktoken (fixtures from tests/tok/gen.sh), byte round trips on
 * arbitrary input, and training (a hand-checked merge order, round trips,
 * compression, determinism).
 *
 * The gpt2 rank file is committed; the cl100k_base and o200k_base ones come
 * from the npm package through tests/tok/gen.sh. Llama 3's is a vocabulary
 * trained in its format (tok/expected/train_llama3_1456.tiktoken, committed),
 * which tiktoken encodes with Meta's pattern and specials. A missing one fails the
 * test, unless ANVIL_TEST_ALLOW_SKIP=1 (then skipped, saying so: exit 77). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/rng.h"
#include "testutil.h"
#include "tok/tokenizer.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Encodes, checks decode(encode(x)) == x, returns the id count or -1. */
static int64_t roundtrip(const anvil_tok *t, anvil_tok_state *s, const void *x, size_t n, int32_t **ids,
                         size_t *cap) {
    int64_t k = anvil_tok_encode(t, s, x, n, ANVIL_TOK_SPECIAL_PLAIN, ids, cap);
    CHECK(k >= 0);
    if (k < 0) return -1;
    unsigned char *out = NULL;
    size_t oc = 0;
    int64_t m = anvil_tok_decode(t, *ids, (size_t)k, &out, &oc);
    CHECK(m == (int64_t)n && (n == 0 || !memcmp(out, x, n)));
    free(out);
    return k;
}

static void expect_load_error(const char *text, const char *want) {
    anvil_tok *t = anvil_tok_load_mem(text, strlen(text), "bad.tiktoken", "gpt2");
    CHECK(t == NULL);
    if (!strstr(anvil_errmsg(), want)) t_fail(__FILE__, __LINE__, "error '%s' lacks '%s'", anvil_errmsg(), want);
    anvil_tok_free(t);
}

/* A valid byte-level file: the 256 bytes at ranks 0..255, then `extra`. */
static char *byte_file(const char *extra) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t cap = 256 * 12 + strlen(extra) + 1;
    char *s = malloc(cap), *o = s;
    for (int b = 0; b < 256; b++)
        o += sprintf(o, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    strcpy(o, extra);
    return s;
}

static void test_rank_file_errors(void) {
    char *ok = byte_file("YWI= 256\n");
    anvil_tok *t = anvil_tok_load_mem(ok, strlen(ok), "ok.tiktoken", "gpt2");
    CHECK(t != NULL);
    if (t) {
        CHECK(anvil_tok_vocab_size(t) == 258);
        CHECK(anvil_tok_eot(t) == 257);
        int32_t *ids = NULL;
        size_t cap = 0;
        CHECK(anvil_tok_encode(t, NULL, "ab", 2, ANVIL_TOK_SPECIAL_PLAIN, &ids, &cap) == 1 && ids[0] == 256);
        free(ids);
    }
    anvil_tok_free(t);
    free(ok);
    struct {
        const char *extra, *want;
    } bad[] = {
        {"YW!= 256\n", "bad.tiktoken:257: invalid base64"},
        {"YWI 256\n", "bad.tiktoken:257: base64 length"},
        {"YWJ= 256\n", "non-canonical"},
        {"YWI= 25x\n", "bad.tiktoken:257: rank is not a decimal"},
        {"YWI= -1\n", "not a decimal"},
        {"YWI=\n", "bad.tiktoken:257: expected"},
        {"YWI= \n", "missing rank"},
        {"YWI= 99999999999\n", "out of range"},
        {"YWI= 255\n", "bad.tiktoken:257: duplicate rank 255"},
        {"\nYWI= 256\nYWI= 257\n", "bad.tiktoken:259: duplicate token 257"},
        {" 256\n", "empty token"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *s = byte_file(bad[i].extra);
        expect_load_error(s, bad[i].want);
        free(s);
    }
    expect_load_error("", "no tokens");
    expect_load_error("QQ== 0\n", "no token for the single byte 0x00");
    anvil_tok *u = anvil_tok_load_mem("QQ== 0\n", 7, "x", "nope");
    CHECK(u == NULL && strstr(anvil_errmsg(), "unknown encoding 'nope'"));
    CHECK(anvil_tok_load("/nonexistent/r.tiktoken", "gpt2") == NULL &&
          strstr(anvil_errmsg(), "/nonexistent/r.tiktoken"));
}

/* ranks: the rank file, or NULL for the npm package's own (tok/ranks/<enc>.tiktoken). */
static void test_tiktoken(const char *enc, const char *ranks) {
    char path[256];
    if (ranks) snprintf(path, sizeof path, "%s", ranks);
    else snprintf(path, sizeof path, "tok/ranks/%s.tiktoken", enc);
    if (access(path, R_OK)) {
        t_missing("test_tokenizer", "%s: tests/%s is missing (tests/tok/gen.sh fetches it from npm tiktoken)", enc,
                  path);
        return;
    }
    anvil_tok *t = anvil_tok_load(path, enc);
    CHECK(t != NULL);
    if (!t) {
        printf("%s\n", anvil_errmsg());
        return;
    }
    size_t nc, ne;
    char *cases = slurp("tok/cases.bin", &nc);
    snprintf(path, sizeof path, "tok/expected/%s.bin", enc);
    char *exp = slurp(path, &ne);
    CHECK(cases && exp);
    if (!cases || !exp) {
        free(cases), free(exp), anvil_tok_free(t);
        return;
    }
    anvil_tok_state *s = anvil_tok_state_new(t);
    const unsigned char *c = (const unsigned char *)cases, *e = (const unsigned char *)exp;
    uint32_t n = rd32(c);
    size_t co = 4, eo = 0;
    int32_t *ids = NULL;
    size_t cap = 0;
    unsigned char *dec = NULL;
    size_t dcap = 0;
    int bad = 0, total_ids = 0;
    for (uint32_t i = 0; i < n && co + 8 <= nc && eo + 4 <= ne; i++) {
        uint32_t mode = rd32(c + co), len = rd32(c + co + 4);
        const unsigned char *text = c + co + 8;
        co += 8 + len;
        uint32_t want_n = rd32(e + eo);
        const unsigned char *want = e + eo + 4;
        eo += 4 + (want_n == UINT32_MAX ? 0 : 4 * (size_t)want_n);
        int64_t k = anvil_tok_encode(t, s, text, len, (enum anvil_tok_special)mode, &ids, &cap);
        if (want_n == UINT32_MAX) {
            if (k >= 0 && bad++ < 5) t_fail(__FILE__, __LINE__, "%s case %u: tiktoken refused, anvil did not", enc, i);
            continue;
        }
        int same = k == (int64_t)want_n;
        for (int64_t j = 0; same && j < k; j++) same = (uint32_t)ids[j] == rd32(want + 4 * j);
        if (!same && bad++ < 5) {
            int64_t j = 0;
            while (j < k && j < (int64_t)want_n && (uint32_t)ids[j] == rd32(want + 4 * j)) j++;
            t_fail(__FILE__, __LINE__, "%s case %u (%u bytes, mode %u): %lld ids vs tiktoken's %u, first difference at %lld: %d vs %u",
                   enc, i, len, mode, (long long)k, want_n, (long long)j, j < k ? ids[j] : -1,
                   j < (int64_t)want_n ? rd32(want + 4 * j) : 0);
        }
        total_ids += (int)want_n;
        int64_t m = k >= 0 ? anvil_tok_decode(t, ids, (size_t)k, &dec, &dcap) : -1;
        if ((m != len || (len && memcmp(dec, text, len))) && bad++ < 5)
            t_fail(__FILE__, __LINE__, "%s case %u: decode(encode(x)) != x", enc, i);
    }
    CHECK(co == nc && eo == ne);
    printf("%s: %u cases, %d ids, %s\n", enc, n, total_ids, bad ? "MISMATCH" : "all identical to tiktoken");

    /* Arbitrary bytes (mostly ill-formed UTF-8) always round-trip. */
    anvil_rng rng;
    anvil_rng_seed(&rng, 7);
    unsigned char buf[512];
    for (int r = 0; r < 2000; r++) {
        size_t len = anvil_rng_u64(&rng) % sizeof buf;
        for (size_t j = 0; j < len; j++) {
            uint64_t v = anvil_rng_u64(&rng);
            /* A mix of ASCII, UTF-8 lead/continuation bytes and raw noise. */
            buf[j] = (unsigned char)(v % 4 == 0 ? 0x80 + (v >> 8) % 64 : v % 4 == 1 ? 0xC0 + (v >> 8) % 64
                                     : v % 4 == 2 ? (unsigned char)" a1.\n'\t"[(v >> 8) % 7] : (v >> 8));
        }
        roundtrip(t, s, buf, len, &ids, &cap);
    }
    /* Ill-formed runs are pieces of their own: "\xff\xfe" never merges with text. */
    int64_t k = roundtrip(t, s, "ab\xff\xfe cd", 7, &ids, &cap);
    CHECK(k >= 3);
    /* A megabyte-long piece takes the heap path and still round-trips. */
    size_t big = 1 << 20;
    char *huge = malloc(big);
    for (size_t j = 0; j < big; j++) huge[j] = "abcde"[anvil_rng_u64(&rng) % 5];
    CHECK(roundtrip(t, s, huge, big, &ids, &cap) > 0);
    memset(huge, ' ', big);
    CHECK(roundtrip(t, s, huge, big, &ids, &cap) > 0);
    free(huge);
    size_t el;
    const unsigned char *eot = anvil_tok_token_bytes(t, anvil_tok_eot(t), &el);
    char refused[64];
    snprintf(refused, sizeof refused, "a%.*s", (int)el, (const char *)eot);
    CHECK(anvil_tok_encode(t, s, refused, strlen(refused), ANVIL_TOK_SPECIAL_REFUSE, &ids, &cap) < 0 &&
          strstr(anvil_errmsg(), "at byte 1"));
    int32_t badid = anvil_tok_vocab_size(t);
    CHECK(anvil_tok_decode(t, &badid, 1, &dec, &dcap) < 0 && strstr(anvil_errmsg(), "names no token"));

    anvil_tok_state_free(s);
    free(ids), free(dec), free(cases), free(exp);
    anvil_tok_free(t);
}

static void test_train_tiny(void) {
    /* One word, "aaabdaaabac". Pairs: aa 4, ab 2, ... -> "aa". Then (aa,a) and
     * (a,b) tie at 2 and the lower left id (a=97 < aa=256) wins -> "ab".
     * Then (aa,ab) 2 -> "aaab". All remaining pairs count 1; the lowest left
     * id wins each time: (a,c) -> "ac", (d,aaab) -> "daaab", (aaab,daaab),
     * then the whole word. */
    const char *text = "aaabdaaabac";
    size_t len = strlen(text);
    const char *out = "/tmp/anvil_test_tok_tiny.tiktoken";
    anvil_tok_train_opts o = {.vocab_size = 300, .pattern_name = "gpt2", .out_path = out, .threads = 2};
    int n = anvil_tok_train_mem(&o, &text, &len, 1);
    CHECK(n == 263);
    anvil_tok *t = anvil_tok_load(out, "gpt2");
    CHECK(t != NULL);
    if (!t) return;
    const char *want[] = {"aa", "ab", "aaab", "ac", "daaab", "aaabdaaab", "aaabdaaabac"};
    for (int i = 0; i < 7; i++) {
        size_t l;
        const unsigned char *b = anvil_tok_token_bytes(t, 256 + i, &l);
        if (!b || l != strlen(want[i]) || memcmp(b, want[i], l))
            t_fail(__FILE__, __LINE__, "rank %d: got '%.*s', want '%s'", 256 + i, b ? (int)l : 0, b ? (const char *)b : "",
                   want[i]);
    }
    CHECK(anvil_tok_eot(t) == 263 && anvil_tok_vocab_size(t) == 264);
    int32_t *ids = NULL;
    size_t cap = 0;
    CHECK(anvil_tok_encode(t, NULL, text, len, ANVIL_TOK_SPECIAL_PLAIN, &ids, &cap) == 1 && ids[0] == 262);
    CHECK(anvil_tok_encode(t, NULL, "aaab", 4, ANVIL_TOK_SPECIAL_PLAIN, &ids, &cap) == 1 && ids[0] == 258);
    CHECK(anvil_tok_encode(t, NULL, "x<|endoftext|>", 14, ANVIL_TOK_SPECIAL_ALLOW, &ids, &cap) == 2 && ids[1] == 263);
    free(ids);
    anvil_tok_free(t);
    /* A vocabulary the corpus cannot fill stops early; too small a size is refused. */
    o.vocab_size = 256;
    CHECK(anvil_tok_train_mem(&o, &text, &len, 1) < 0 && strstr(anvil_errmsg(), "vocab size 256"));
    remove(out);
}

static void test_train_corpus(void) {
    size_t n;
    char *text = slurp("tok/real.txt", &n);
    CHECK(text != NULL);
    if (!text) return;
    const char *out1 = "/tmp/anvil_test_tok_a.tiktoken", *out2 = "/tmp/anvil_test_tok_b.tiktoken";
    anvil_tok_train_opts o = {.vocab_size = 2048, .pattern_name = "gpt2", .out_path = out1, .threads = 2};
    const char *tx = text;
    CHECK(anvil_tok_train_mem(&o, &tx, &n, 1) == 2047);
    /* Determinism: one thread, the same text as two inputs gives the same
     * merges (every count doubles; the order cannot change). */
    o.out_path = out2;
    o.threads = 1;
    const char *two[2] = {text, text};
    size_t lens[2] = {n, n};
    CHECK(anvil_tok_train_mem(&o, two, lens, 2) == 2047);
    size_t n1, n2;
    char *f1 = slurp(out1, &n1), *f2 = slurp(out2, &n2);
    CHECK(f1 && f2 && n1 == n2 && !memcmp(f1, f2, n1));
    free(f1), free(f2);
    /* The same merges as tests/tok/train_ref.js, a naive trainer that
     * recounts all pairs before every merge. */
    o.vocab_size = 1200;
    o.threads = 2;
    CHECK(anvil_tok_train_mem(&o, &tx, &n, 1) == 1199);
    f1 = slurp(out2, &n1);
    f2 = slurp("tok/expected/train_gpt2_1200.tiktoken", &n2);
    CHECK(f1 && f2 && n1 == n2 && !memcmp(f1, f2, n1));
    free(f1), free(f2);
    anvil_tok *t = anvil_tok_load(out1, "gpt2");
    CHECK(t != NULL);
    if (t) {
        int32_t *ids = NULL;
        size_t cap = 0;
        int64_t k = roundtrip(t, NULL, text, n, &ids, &cap);
        printf("trained 2048-token vocabulary: %zu bytes -> %lld tokens (%.2f bytes/token)\n", n, (long long)k,
               (double)n / (double)k);
        CHECK(k > 0 && (double)k < 0.4 * (double)n);
        const char *unseen = "Unseen words: zyxwvut \xf0\x9f\x98\x80 \xff";
        roundtrip(t, NULL, unseen, strlen(unseen), &ids, &cap);
        free(ids);
    }
    anvil_tok_free(t);
    remove(out1), remove(out2);
    free(text);
}

/* Llama 3: a vocabulary trained in its format equals the naive reference's (tests/tok/train_ref.js
 * with Meta's pattern), its 256 specials follow the ranks, and a file of Llama 3's official size
 * puts them at 128000.. as Meta's tokenizer does. */
static void test_llama3(void) {
    size_t n;
    char *text = slurp("tok/real.txt", &n);
    CHECK(text != NULL);
    if (!text) return;
    const char *out = "/tmp/anvil_test_tok_llama3.tiktoken";
    anvil_tok_train_opts o = {.vocab_size = 1456, .pattern_name = "llama3", .out_path = out, .threads = 2};
    const char *tx = text;
    CHECK(anvil_tok_train_ranks("llama3", 1456) == 1200 && anvil_tok_train_ranks("gpt2", 1456) == 1455);
    CHECK(anvil_tok_train_mem(&o, &tx, &n, 1) == 1200);
    size_t n1, n2;
    char *f1 = slurp(out, &n1), *f2 = slurp("tok/expected/train_llama3_1456.tiktoken", &n2);
    CHECK(f1 && f2 && n1 == n2 && !memcmp(f1, f2, n1));
    free(f1), free(f2), free(text);
    anvil_tok *t = anvil_tok_load(out, "llama3");
    CHECK(t && anvil_tok_vocab_size(t) == 1456 && anvil_tok_bos(t) == 1200 && anvil_tok_eot(t) == 1201);
    int32_t *ids = NULL;
    size_t cap = 0;
    const char *chat = "<|begin_of_text|><|start_header_id|>x<|end_header_id|><|eot_id|><|reserved_special_token_246|>";
    CHECK(t && anvil_tok_encode(t, NULL, chat, strlen(chat), ANVIL_TOK_SPECIAL_ALLOW, &ids, &cap) == 6 &&
          ids[0] == 1200 && ids[1] == 1206 && ids[3] == 1207 && ids[4] == 1209 && ids[5] == 1455);
    anvil_tok_free(t);
    remove(out);
    o.vocab_size = 511;
    CHECK(anvil_tok_train_mem(&o, &tx, &n, 1) < 0 && strstr(anvil_errmsg(), "outside [512,"));

    /* 128000 ranks: the bytes, then two- and three-byte strings. */
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *big = malloc((size_t)128000 * 16), *w = big;
    for (int r = 0; r < 128000; r++) {
        unsigned char b[3];
        int len = r < 256 ? 1 : r < 256 + 65536 ? 2 : 3;
        int v = r < 256 ? r : r < 256 + 65536 ? r - 256 : r - 256 - 65536;
        if (len == 1) b[0] = (unsigned char)v;
        else if (len == 2) b[0] = (unsigned char)(v >> 8), b[1] = (unsigned char)v;
        else b[0] = (unsigned char)(v >> 16), b[1] = (unsigned char)(v >> 8), b[2] = (unsigned char)v;
        uint32_t x = (uint32_t)b[0] << 16 | (len > 1 ? (uint32_t)b[1] << 8 : 0) | (len > 2 ? b[2] : 0);
        w += sprintf(w, "%c%c%c%c %d\n", b64[x >> 18], b64[(x >> 12) & 63], len > 1 ? b64[(x >> 6) & 63] : '=',
                     len > 2 ? b64[x & 63] : '=', r);
    }
    t = anvil_tok_load_mem(big, (size_t)(w - big), "official.tiktoken", "llama3");
    CHECK(t && anvil_tok_vocab_size(t) == 128256 && anvil_tok_bos(t) == 128000 && anvil_tok_eot(t) == 128001);
    if (t) {
        size_t l;
        const unsigned char *b = anvil_tok_token_bytes(t, 128009, &l);
        CHECK(b && l == 10 && !memcmp(b, "<|eot_id|>", 10));
        b = anvil_tok_token_bytes(t, 128255, &l);
        CHECK(b && l == 30 && !memcmp(b, "<|reserved_special_token_246|>", 30));
    }
    anvil_tok_free(t);
    free(big);
    free(ids);
}

int main(void) {
    test_rank_file_errors();
    test_train_tiny();
    test_train_corpus();
    test_llama3();
    test_tiktoken("gpt2", NULL);
    test_tiktoken("cl100k_base", NULL);
    test_tiktoken("o200k_base", NULL);
    test_tiktoken("llama3", "tok/expected/train_llama3_1456.tiktoken");
    return t_done("test_tokenizer");
}

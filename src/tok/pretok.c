/* Pre-tokenization: tiktoken's split regexes, run with PCRE2.
 *
 * The regexes are tiktoken's own (tiktoken_ext/openai_public.py and the npm
 * package's encoder JSON), with two deliberate rewrites, both so that PCRE2
 * classifies characters exactly as tiktoken's Rust regex engine does:
 *  - \s and \S are spelled out as the Unicode White_Space property: PCRE2's
 *    \s also matches U+180E;
 *  - \p{L}, \p{N} and o200k's letter classes get the characters Unicode
 *    15.0 to 16.0 assigned (plus U+0295, Ll until 16.0, now Lo): PCRE2 10.42
 *    knows Unicode 14, tiktoken's engine Unicode 16. The ranges below were
 *    derived by tests/tok/unicode_delta.js, which checks each candidate code
 *    point against the npm tiktoken itself. With a PCRE2 of Unicode 16 they
 *    would be redundant but harmless. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

#define WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define CONTRACTIONS "'s|'t|'re|'ve|'m|'ll|'d"

#define U16_L \
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}\\x{10D4A}-\\x{10D65}" \
    "\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}" \
    "\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}" \
    "\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}" \
    "\\x{16100}-\\x{1611D}\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}" \
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}" \
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"
#define U16_N \
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}" \
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}" \
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}"
#define U16_M \
    "\\x{897}\\x{CF3}\\x{ECE}\\x{10D69}-\\x{10D6D}\\x{10EFC}-\\x{10EFF}\\x{11241}\\x{113B8}-\\x{113C0}" \
    "\\x{113C2}\\x{113C5}\\x{113C7}-\\x{113CA}\\x{113CC}-\\x{113D0}\\x{113D2}\\x{113E1}-\\x{113E2}" \
    "\\x{11F00}-\\x{11F01}\\x{11F03}\\x{11F34}-\\x{11F3A}\\x{11F3E}-\\x{11F42}\\x{11F5A}\\x{13440}" \
    "\\x{13447}-\\x{13455}\\x{1611E}-\\x{1612F}\\x{1E08F}\\x{1E4EC}-\\x{1E4EF}\\x{1E5EE}-\\x{1E5EF}"
#define U16_UPPER \
    "\\x{295}\\x{897}\\x{CF3}\\x{ECE}\\x{1C89}\\x{A7CB}-\\x{A7CC}\\x{A7DA}\\x{A7DC}\\x{105C0}-\\x{105F3}" \
    "\\x{10D4A}-\\x{10D65}\\x{10D69}-\\x{10D6D}\\x{10D6F}\\x{10EC2}-\\x{10EC4}\\x{10EFC}-\\x{10EFF}" \
    "\\x{1123F}-\\x{11241}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}" \
    "\\x{113B7}-\\x{113C0}\\x{113C2}\\x{113C5}\\x{113C7}-\\x{113CA}\\x{113CC}-\\x{113D3}" \
    "\\x{113E1}-\\x{113E2}\\x{11BC0}-\\x{11BE0}\\x{11F00}-\\x{11F10}\\x{11F12}-\\x{11F3A}" \
    "\\x{11F3E}-\\x{11F42}\\x{11F5A}\\x{1342F}\\x{13440}-\\x{13455}\\x{13460}-\\x{143FA}" \
    "\\x{16100}-\\x{1612F}\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1E030}-\\x{1E06D}" \
    "\\x{1E08F}\\x{1E4D0}-\\x{1E4EF}\\x{1E5D0}-\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}" \
    "\\x{31350}-\\x{323AF}"
#define U16_LOWER \
    "\\x{897}\\x{CF3}\\x{ECE}\\x{1C8A}\\x{A7CD}\\x{A7DB}\\x{105C0}-\\x{105F3}\\x{10D4A}-\\x{10D4F}" \
    "\\x{10D69}-\\x{10D6D}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{10EFC}-\\x{10EFF}" \
    "\\x{1123F}-\\x{11241}\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}" \
    "\\x{113B7}-\\x{113C0}\\x{113C2}\\x{113C5}\\x{113C7}-\\x{113CA}\\x{113CC}-\\x{113D3}" \
    "\\x{113E1}-\\x{113E2}\\x{11BC0}-\\x{11BE0}\\x{11F00}-\\x{11F10}\\x{11F12}-\\x{11F3A}" \
    "\\x{11F3E}-\\x{11F42}\\x{11F5A}\\x{1342F}\\x{13440}-\\x{13455}\\x{13460}-\\x{143FA}" \
    "\\x{16100}-\\x{1612F}\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}" \
    "\\x{1E030}-\\x{1E06D}\\x{1E08F}\\x{1E4D0}-\\x{1E4EF}\\x{1E5D0}-\\x{1E5F0}\\x{2B739}" \
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"

/* The regexes, parameterized by the extra code points of each class: with
 * the U16_* sets they are exact for all input; with empty sets they are
 * faster (PCRE2's JIT checks plain \\p{..} classes more cheaply) and give the
 * same pieces for any text without those code points (tok_needs_u16). */
#define GPT2_RE(XL, XN)                                                                            \
    CONTRACTIONS "| ?[\\p{L}" XL "]+| ?[\\p{N}" XN "]+| ?[^" WS "\\p{L}\\p{N}" XL XN "]+|[" WS         \
    "]+(?![^" WS "])|[" WS "]+"
#define CL100K_RE(XL, XN)                                                                          \
    "(?i:" CONTRACTIONS ")|[^\\r\\n\\p{L}\\p{N}" XL XN "]?[\\p{L}" XL "]+|[\\p{N}" XN "]{1,3}| ?[^" WS     \
    "\\p{L}\\p{N}" XL XN "]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"
#define O200K_RE(XL, XN, XU, XW)                                                                   \
    "[^\\r\\n\\p{L}\\p{N}" XL XN "]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}" XU "]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}" XW \
    "]+(?i:" CONTRACTIONS ")?|[^\\r\\n\\p{L}\\p{N}" XL XN "]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}" XU       \
    "]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}" XW "]*(?i:" CONTRACTIONS ")?|[\\p{N}" XN "]{1,3}| ?[^" WS          \
    "\\p{L}\\p{N}" XL XN "]+[\\r\\n/]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

/* Llama 3 (Meta's tokenizer.py, the Llama 3.1 list, which 3.2 and 3.3 text models keep): the
 * regex is cl100k_base's as tiktoken first published it, character for character (the same
 * pieces as tiktoken's later rewrite with possessive quantifiers), and 256 specials follow the
 * ranks, whatever their count (Meta numbers them from len(mergeable_ranks)): these 11 named ones,
 * then <|reserved_special_token_2|> onwards. 128000 ranks put <|begin_of_text|> at 128000. */
static const char *const llama3_named[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
    "<|eot_id|>", "<|python_tag|>"};
static const char *const eot_only[] = {"<|endoftext|>"};

#define GPT_FOLLOW 1, 0, -1, 1, eot_only
static const tok_encoding encodings[] = {
    {"gpt2", GPT2_RE(U16_L, U16_N), GPT2_RE("", ""), 50256, 1, {"<|endoftext|>"}, {50256}, GPT_FOLLOW},
    {"r50k_base", GPT2_RE(U16_L, U16_N), GPT2_RE("", ""), 50256, 1, {"<|endoftext|>"}, {50256}, GPT_FOLLOW},
    {"p50k_base", GPT2_RE(U16_L, U16_N), GPT2_RE("", ""), 50280, 1, {"<|endoftext|>"}, {50256}, GPT_FOLLOW},
    {"cl100k_base",
     CL100K_RE(U16_L, U16_N),
     CL100K_RE("", ""),
     100256,
     5,
     {"<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|endofprompt|>"},
     {100257, 100258, 100259, 100260, 100276},
     GPT_FOLLOW},
    {"o200k_base",
     O200K_RE(U16_L, U16_N, U16_UPPER, U16_LOWER),
     O200K_RE("", "", "", ""),
     199998,
     2,
     {"<|endoftext|>", "<|endofprompt|>"},
     {199999, 200018},
     GPT_FOLLOW},
    {"llama3", CL100K_RE(U16_L, U16_N), CL100K_RE("", ""), 0, 0, {NULL}, {0}, TOK_MAX_SPECIAL, 1, 0,
     (int)(sizeof llama3_named / sizeof llama3_named[0]), llama3_named},
};

/* Reserved specials go on from the named list's own (Llama 3's ends at number 1). */
void tok_follow_name(const tok_encoding *e, int i, char *buf) {
    int first = 0;
    for (int k = 0; k < e->n_named; k++)
        if (!strncmp(e->named[k], "<|reserved_special_token_", 25)) first = atoi(e->named[k] + 25) + 1;
    if (i < e->n_named) snprintf(buf, TOK_SPECIAL_CAP, "%s", e->named[i]);
    else snprintf(buf, TOK_SPECIAL_CAP, "<|reserved_special_token_%d|>", first + i - e->n_named);
}

/* The U16_* code points as ranges, parsed once from the macros above so
 * that the fast-path check and the regexes cannot disagree. */
static uint32_t u16_lo[512], u16_hi[512];
static int n_u16 = -1;

static void parse_u16(void) {
    static const char all[] = U16_L U16_N U16_M U16_UPPER U16_LOWER;
    int n = 0;
    for (const char *p = all; (p = strstr(p, "\\x{")) && n < 512;) {
        uint32_t lo = (uint32_t)strtoul(p + 3, (char **)&p, 16), hi = lo;
        p++;
        if (p[0] == '-' && p[1] == '\\') {
            hi = (uint32_t)strtoul(p + 4, (char **)&p, 16);
            p++;
        }
        u16_lo[n] = lo;
        u16_hi[n] = hi;
        n++;
    }
    n_u16 = n;
}

size_t tok_safe_cut(const unsigned char *p, size_t n, size_t from) {
    if (from < 2) from = 2;
    for (size_t c = from; c < n; c++) {
        const unsigned char *nl = memchr(p + c - 1, '\n', n - c);
        if (!nl) break;
        c = (size_t)(nl - p) + 1;
        if (c < n && p[c - 2] > ' ' && p[c - 2] < 127 && (p[c] | 32) >= 'a' && (p[c] | 32) <= 'z') return c;
    }
    return n;
}

int tok_needs_u16(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        /* Every U16 code point is U+0295 or above and so starts with a lead
         * byte of 0xCA or more; anything ill-formed is simply not one. */
        if (c < 0xCA) continue;
        uint32_t cp;
        if (c < 0xE0 && i + 1 < n) cp = (uint32_t)(c & 0x1F) << 6 | (p[i + 1] & 0x3F);
        else if (c < 0xF0 && i + 2 < n) cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(p[i + 1] & 0x3F) << 6 | (p[i + 2] & 0x3F);
        else if (i + 3 < n)
            cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(p[i + 1] & 0x3F) << 12 | (uint32_t)(p[i + 2] & 0x3F) << 6 |
                 (p[i + 3] & 0x3F);
        else continue;
        for (int k = 0; k < n_u16; k++)
            if (cp >= u16_lo[k] && cp <= u16_hi[k]) return 1;
    }
    return 0;
}

const tok_encoding *tok_find_encoding(const char *name) {
    for (size_t i = 0; i < sizeof encodings / sizeof encodings[0]; i++)
        if (!strcmp(encodings[i].name, name)) return &encodings[i];
    anvil_fail("tokenizer: unknown encoding '%s' (known: gpt2, r50k_base, p50k_base, cl100k_base, o200k_base, "
               "llama3)",
               name);
    return NULL;
}

pcre2_code *tok_compile_regex(const tok_encoding *e, int fast) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, parse_u16);
    int err;
    PCRE2_SIZE off;
    /* MATCH_INVALID_UTF lets arbitrary bytes through: ill-formed sequences
     * simply never match, instead of failing the whole match call. */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(fast ? e->regex_fast : e->regex), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, NULL);
    if (!re) {
        char msg[160];
        pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg);
        anvil_fail("tokenizer: regex of '%s' does not compile at offset %zu: %s", e->name, (size_t)off, msg);
        return NULL;
    }
    if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0) {
        pcre2_code_free(re);
        anvil_fail("tokenizer: PCRE2 has no JIT for the '%s' regex on this machine", e->name);
        return NULL;
    }
    return re;
}

int tok_split(const pcre2_code *re, pcre2_match_data *md, const unsigned char *p, size_t n, tok_piece_fn fn,
              void *ctx) {
    size_t pos = 0;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    while (pos < n) {
        int rc = pcre2_jit_match(re, p, n, pos, 0, md, NULL);
        size_t ms, me;
        if (rc == PCRE2_ERROR_NOMATCH) {
            ms = me = n;
        } else if (rc < 0) {
            char msg[160];
            pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg);
            return anvil_fail("tokenizer: regex match failed at byte %zu: %s", pos, msg);
        } else {
            ms = ov[0];
            me = ov[1];
        }
        /* Bytes the regex skipped are ill-formed UTF-8: one piece per run. */
        if (ms > pos && fn(p + pos, ms - pos, ctx)) return -1;
        if (me > ms) {
            if (fn(p + ms, me - ms, ctx)) return -1;
            pos = me;
        } else if (ms < n) {
            /* No pattern item matches the empty string; guard anyway so the
             * loop always advances. */
            if (fn(p + ms, 1, ctx)) return -1;
            pos = ms + 1;
        } else {
            pos = n;
        }
    }
    return 0;
}

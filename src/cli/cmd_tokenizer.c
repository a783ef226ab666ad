/* anvil tokenizer: encode, decode and train byte-level BPE (tiktoken files). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/clock.h"
#include "core/fsutil.h"
#include "obs/metrics.h"
#include "tok/tokenizer.h"

static const char usage[] =
    "usage: anvil tokenizer encode --ranks FILE [--encoding NAME] [--allow-special] [--binary] [--out FILE] [INPUT]\n"
    "       anvil tokenizer decode --ranks FILE [--encoding NAME] [--binary] [--out FILE] [INPUT]\n"
    "       anvil tokenizer train --vocab-size N --out FILE [--pattern NAME] [--threads N] [--no-progress] FILE...\n"
    "\n"
    "Byte-level BPE compatible with tiktoken: the same .tiktoken rank files and\n"
    "the same ids.\n"
    "\n"
    "  encode           INPUT (default: standard input) as bytes -> ids, one line of\n"
    "                   space-separated decimals, or with --binary uint32 little-endian\n"
    "  decode           ids (decimal, whitespace-separated; or --binary uint32) -> bytes\n"
    "  train            learn a vocabulary of N ids in total from the FILEs: the 256 bytes,\n"
    "                   merges, then the specials that follow the ranks (not in the file:\n"
    "                   <|endoftext|> last, N-257 merges; llama3's 256, N-512 merges);\n"
    "                   writes FILE atomically\n"
    "\n"
    "  --ranks FILE     a .tiktoken rank file\n"
    "  --encoding NAME  regex and special tokens: gpt2 (default; = r50k_base), p50k_base,\n"
    "                   cl100k_base, o200k_base, llama3 (Llama 3's tokenizer.model: 256\n"
    "                   specials after the ranks, <|begin_of_text|> first).\n"
    "                   --pattern is the same option.\n"
    "  --allow-special  encode special-token text (\"<|endoftext|>\") as its id;\n"
    "                   without it such text is encoded as ordinary bytes\n"
    "  --binary         uint32 little-endian ids instead of decimal text\n"
    "  --out FILE       output file (encode/decode default: standard output)\n"
    "  --threads N      word-counting threads for train (default: OpenMP's)\n"
    "  --no-progress    train: no progress on standard error (by default a bar on a\n"
    "                   terminal, else a line at every tenth of the merges or every 10 s)\n";

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = path ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "anvil tokenizer: error: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16;
    *n = 0;
    unsigned char *b = malloc(cap);
    for (size_t got; b && (got = fread(b + *n, 1, cap - *n, f)) > 0;) {
        *n += got;
        if (*n == cap) {
            unsigned char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    int bad = ferror(f);
    if (path) fclose(f);
    if (!b || bad) {
        fprintf(stderr, "anvil tokenizer: error: cannot read %s\n", path ? path : "standard input");
        free(b);
        return NULL;
    }
    return b;
}

/* Writes n bytes; with n == 0 it reports the stream's earlier failure. */
static int write_out(FILE *f, const char *path, const void *p, size_t n) {
    if (fwrite(p, 1, n, f) != n || (n == 0 && ferror(f))) {
        fprintf(stderr, "anvil tokenizer: error: cannot write %s: %s\n", path ? path : "standard output", strerror(errno));
        return -1;
    }
    return 0;
}

static void progress(void *ctx, int done, int total, int64_t count) {
    char detail[64];
    snprintf(detail, sizeof detail, "last pair seen %lld times", (long long)count);
    anvil_meter_update(ctx, done, total, detail);
}

static int train(int argc, char **argv) {
    int vocab = 0, threads = 0, show_progress = 1;
    const char *out = NULL, *pattern = "gpt2";
    const char **files = calloc((size_t)argc, sizeof *files);
    int nf = 0;
    if (!files) return 1;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--vocab-size")) {
            rc = !(v = arg_value("tokenizer", argc, argv, &i)) || arg_int("tokenizer", a, v, 257, 1 << 24, &vocab);
        } else if (!strcmp(a, "--out")) {
            rc = !(out = arg_value("tokenizer", argc, argv, &i));
        } else if (!strcmp(a, "--pattern") || !strcmp(a, "--encoding")) {
            rc = !(pattern = arg_value("tokenizer", argc, argv, &i));
        } else if (!strcmp(a, "--threads")) {
            rc = !(v = arg_value("tokenizer", argc, argv, &i)) || arg_int("tokenizer", a, v, 1, 1024, &threads);
        } else if (!strcmp(a, "--no-progress")) {
            show_progress = 0;
        } else if (a[0] == '-' && a[1]) {
            rc = cli_usage_error("tokenizer", "unknown option '%s' for train", a) != 0;
        } else {
            files[nf++] = a;
        }
    }
    if (!rc && !vocab) rc = cli_usage_error("tokenizer", "train needs --vocab-size N") != 0;
    if (!rc && !out) rc = cli_usage_error("tokenizer", "train needs --out FILE") != 0;
    if (!rc && !nf) rc = cli_usage_error("tokenizer", "train needs input files") != 0;
    if (rc) {
        free(files);
        return 2;
    }
    int ranks = anvil_tok_train_ranks(pattern, vocab);
    if (ranks < 0 || anvil_mkdir_parent(out)) {
        free(files);
        return cli_fail("tokenizer");
    }
    double t0 = anvil_now();
    anvil_meter meter;
    anvil_meter_start(&meter, stderr, anvil_meter_mode(stderr, show_progress), "tokenizer train", "merges");
    int merges = ranks - 256;
    anvil_tok_train_opts o = {.files = files,
                              .n_files = nf,
                              .vocab_size = vocab,
                              .pattern_name = pattern,
                              .out_path = out,
                              .threads = threads,
                              .progress = meter.mode != ANVIL_METER_OFF ? progress : NULL,
                              .progress_ctx = &meter};
    int n = anvil_tok_train(&o);
    free(files);
    if (n < 0) {
        anvil_meter_break(&meter);
        return cli_fail("tokenizer");
    }
    /* Training stops early when no pair is left to merge. */
    anvil_meter_finish(&meter, n - 256, merges, "");
    anvil_tok *t = anvil_tok_load(out, pattern);
    if (!t) return cli_fail("tokenizer");
    if (anvil_tok_bos(t) >= 0)
        fprintf(stderr, "wrote %s: %d ranks, %d specials from %d (beginning of text %d, end of text %d), %.1f s\n",
                out, n, anvil_tok_vocab_size(t) - n, n, anvil_tok_bos(t), anvil_tok_eot(t), anvil_now() - t0);
    else
        fprintf(stderr, "wrote %s: %d ranks, <|endoftext|> = %d, %.1f s\n", out, n, anvil_tok_eot(t), anvil_now() - t0);
    anvil_tok_free(t);
    return 0;
}

static int codec(int argc, char **argv, int encode) {
    const char *ranks = NULL, *enc = "gpt2", *out = NULL, *in = NULL;
    int allow = 0, binary = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--ranks")) {
            if (!(ranks = arg_value("tokenizer", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--encoding") || !strcmp(a, "--pattern")) {
            if (!(enc = arg_value("tokenizer", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--out")) {
            if (!(out = arg_value("tokenizer", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--allow-special") && encode) {
            allow = 1;
        } else if (!strcmp(a, "--binary")) {
            binary = 1;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("tokenizer", "unknown option '%s' for %s", a, argv[0]);
        } else if (in) {
            return cli_usage_error("tokenizer", "%s takes one input, got '%s' and '%s'", argv[0], in, a);
        } else {
            in = strcmp(a, "-") ? a : NULL;
        }
    }
    if (!ranks) return cli_usage_error("tokenizer", "%s needs --ranks FILE", argv[0]);
    anvil_tok *t = anvil_tok_load(ranks, enc);
    if (!t) return cli_fail("tokenizer");
    size_t n;
    unsigned char *data = read_all(in, &n);
    int rc = data ? 0 : 1;
    FILE *f = stdout;
    if (!rc && out && anvil_mkdir_parent(out)) rc = cli_fail("tokenizer");
    if (!rc && out && !(f = fopen(out, "wb"))) {
        fprintf(stderr, "anvil tokenizer: error: %s: %s\n", out, strerror(errno));
        rc = 1;
    }
    int32_t *ids = NULL;
    size_t cap = 0;
    if (!rc && encode) {
        int64_t k = anvil_tok_encode(t, NULL, data, n, allow ? ANVIL_TOK_SPECIAL_ALLOW : ANVIL_TOK_SPECIAL_PLAIN, &ids,
                                     &cap);
        if (k < 0) rc = cli_fail("tokenizer");
        for (int64_t j = 0; !rc && binary && j < k; j++) {
            uint32_t v = (uint32_t)ids[j];
            unsigned char le[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                                   (unsigned char)(v >> 24)};
            rc = write_out(f, out, le, 4) ? 1 : 0;
        }
        for (int64_t j = 0; !rc && !binary && j < k; j++)
            if (fprintf(f, j + 1 < k ? "%d " : "%d", ids[j]) < 0) rc = write_out(f, out, "", 1) ? 1 : 0;
        if (!rc && !binary && fputc('\n', f) == EOF) rc = write_out(f, out, "", 1) ? 1 : 0;
    } else if (!rc) {
        size_t k = 0;
        if (binary) {
            if (n % 4) {
                fprintf(stderr, "anvil tokenizer: error: %s: %zu bytes is not a whole number of uint32 ids\n",
                        in ? in : "standard input", n);
                rc = 1;
            }
            ids = malloc(sizeof(int32_t) * (n / 4 + 1));
            for (size_t j = 0; !rc && ids && j < n / 4; j++)
                ids[k++] = (int32_t)((uint32_t)data[4 * j] | (uint32_t)data[4 * j + 1] << 8 |
                                     (uint32_t)data[4 * j + 2] << 16 | (uint32_t)data[4 * j + 3] << 24);
        } else {
            ids = malloc(sizeof(int32_t) * (n / 2 + 1));
            for (size_t j = 0; !rc && ids && j < n;) {
                while (j < n && (data[j] == ' ' || data[j] == '\n' || data[j] == '\t' || data[j] == '\r')) j++;
                if (j == n) break;
                long v = 0;
                size_t s = j;
                while (j < n && data[j] >= '0' && data[j] <= '9' && v < (1L << 31)) v = v * 10 + (data[j++] - '0');
                if (j == s || v >= (1L << 31) ||
                    (j < n && data[j] != ' ' && data[j] != '\n' && data[j] != '\t' && data[j] != '\r')) {
                    fprintf(stderr, "anvil tokenizer: error: %s: byte %zu: expected a decimal token id\n",
                            in ? in : "standard input", s);
                    rc = 1;
                } else {
                    ids[k++] = (int32_t)v;
                }
            }
        }
        if (!ids) rc = 1;
        unsigned char *bytes = NULL;
        size_t bcap = 0;
        int64_t m = rc ? 0 : anvil_tok_decode(t, ids, k, &bytes, &bcap);
        if (m < 0) rc = cli_fail("tokenizer");
        if (!rc && write_out(f, out, bytes, (size_t)m)) rc = 1;
        free(bytes);
    }
    if (f && f != stdout && fclose(f) && !rc) {
        fprintf(stderr, "anvil tokenizer: error: cannot write %s\n", out);
        rc = 1;
    }
    if (f == stdout && fflush(stdout) && !rc) rc = 1;
    free(ids);
    free(data);
    anvil_tok_free(t);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
    if (!strcmp(argv[1], "encode")) return codec(argc - 1, argv + 1, 1);
    if (!strcmp(argv[1], "decode")) return codec(argc - 1, argv + 1, 0);
    if (!strcmp(argv[1], "train")) return train(argc - 1, argv + 1);
    return cli_usage_error("tokenizer", "unknown action '%s' (encode, decode or train)", argv[1]);
}

/* anvil prep: text files in, llm.c token shards out (see data/prep.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/clock.h"
#include "core/error.h"
#include "data/prep.h"

static const char usage_text[] =
    "usage: anvil prep --out DIR [options] FILE... ('-' reads standard input)\n"
    "\n"
    "Turns text into llm.c token shards (bytes, or BPE with --tokenizer):\n"
    "DIR/train_NNNNNN.bin, DIR/val_NNNNNN.bin and DIR/manifest.json. Each\n"
    "document starts with the end-of-text token; a document goes to val when\n"
    "the FNV-1a hash of its bytes says so, so the split is the same on every run.\n"
    "Files ending in .gz or .zst are decompressed.\n"
    "\n"
    "Shards are written as they fill, and manifest.json (with each shard's size\n"
    "and CRC32C) after each one. Run again with the same inputs and options, an\n"
    "interrupted prep continues after its last verified shard, and a finished one\n"
    "is left as it is; a shard that fails its checksum is written again.\n"
    "\n"
    "options:\n"
    "  --out DIR            output folder (created if missing)\n"
    "  --val-fraction F     share of documents for validation, in [0, 1] (default 0.01)\n"
    "  --delimiter STR      split the input into documents at STR; \\n \\t \\r \\\\ \\xHH\n"
    "                       escapes allowed, e.g. '\\n\\n\\n' (default: one document per file)\n"
    "  --shard-tokens N     tokens per shard; a split's last one holds the rest\n"
    "                       (default 100000000)\n"
    "  --tokenizer FILE     BPE tokens from a .tiktoken rank file (default: bytes)\n"
    "  --pattern NAME       the tokenizer's encoding: gpt2, cl100k_base, o200k_base\n"
    "                       (default gpt2)\n"
    "  --jsonl-field NAME   inputs are JSON lines; each line's string field NAME is a\n"
    "                       document (a bad line is skipped with a note naming it)\n"
    "  --strict             with --jsonl-field: a bad line is an error instead\n"
    "  --workers N          encoding threads (default 1); the output is the same for any N\n"
    "  --help               show this help\n";

static int bad_usage(const char *fmt, ...) ANVIL_PRINTF(1, 2);
static int bad_usage(const char *fmt, ...) {
    va_list ap;
    fputs("anvil prep: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (try 'anvil prep --help')\n", stderr);
    return 2;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Shells cannot easily pass a newline, so the delimiter takes C escapes. */
static int unescape(const char *in, char *out, size_t *len) {
    size_t n = 0;
    for (const char *p = in; *p; p++) {
        if (*p != '\\') {
            out[n++] = *p;
            continue;
        }
        p++;
        switch (*p) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case '\\': out[n++] = '\\'; break;
        case 'x': {
            int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
            if (lo < 0) return -1;
            out[n++] = (char)(hi * 16 + lo);
            p += 2;
            break;
        }
        default: return -1;
        }
    }
    *len = n;
    return 0;
}

static void print_note(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "anvil prep: note: %s\n", msg);
}

/* "--name VALUE" or "--name=VALUE"; advances *i past what it used. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing) {
    size_t k = strlen(name);
    const char *a = argv[*i];
    *missing = 0;
    if (strncmp(a, name, k)) return NULL;
    if (a[k] == '=') return a + k + 1;
    if (a[k] != 0) return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int cmd_prep(int argc, char **argv) {
    anvil_prep_opts o = {.val_fraction = 0.01, .shard_tokens = 100000000, .note = print_note};
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    char *delim = NULL;
    int ninputs = 0, rc = 0, only_inputs = 0;
    if (!inputs) {
        fprintf(stderr, "anvil prep: error: out of memory\n");
        return 1;
    }
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v;
        int missing = 0;
        if (only_inputs || a[0] != '-' || !strcmp(a, "-")) {
            inputs[ninputs++] = a;
        } else if (!strcmp(a, "--")) {
            only_inputs = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            free(inputs);
            free(delim);
            return 0;
        } else if ((v = opt_value(argc, argv, &i, "--out", &missing)) || missing) {
            if (missing || !*v) rc = bad_usage("%s needs a folder", a);
            else o.out_dir = v;
        } else if ((v = opt_value(argc, argv, &i, "--val-fraction", &missing)) || missing) {
            char *end;
            errno = 0;
            double f = missing ? -1 : strtod(v, &end);
            if (missing || errno || end == v || *end || !(f >= 0 && f <= 1))
                rc = bad_usage("--val-fraction needs a number in [0, 1], got '%s'", missing ? "" : v);
            else o.val_fraction = f;
        } else if ((v = opt_value(argc, argv, &i, "--shard-tokens", &missing)) || missing) {
            char *end;
            errno = 0;
            long long n = missing ? -1 : strtoll(v, &end, 10);
            if (missing || errno || end == v || *end || n < 1 || n > INT32_MAX)
                rc = bad_usage("--shard-tokens needs an integer in [1, 2147483647], got '%s'", missing ? "" : v);
            else o.shard_tokens = n;
        } else if ((v = opt_value(argc, argv, &i, "--tokenizer", &missing)) || missing) {
            if (missing || !*v) rc = bad_usage("--tokenizer needs a .tiktoken file");
            else o.tokenizer_file = v;
        } else if ((v = opt_value(argc, argv, &i, "--pattern", &missing)) || missing) {
            if (missing || !*v) rc = bad_usage("--pattern needs gpt2, cl100k_base or o200k_base");
            else o.tokenizer_pattern = v;
        } else if ((v = opt_value(argc, argv, &i, "--jsonl-field", &missing)) || missing) {
            if (missing || !*v) rc = bad_usage("--jsonl-field needs a field name");
            else o.jsonl_field = v;
        } else if (!strcmp(a, "--strict")) {
            o.strict = 1;
        } else if ((v = opt_value(argc, argv, &i, "--workers", &missing)) || missing) {
            char *end;
            errno = 0;
            long n = missing ? -1 : strtol(v, &end, 10);
            if (missing || errno || end == v || *end || n < 1 || n > 1024)
                rc = bad_usage("--workers needs an integer in [1, 1024], got '%s'", missing ? "" : v);
            else o.workers = (int)n;
        } else if ((v = opt_value(argc, argv, &i, "--delimiter", &missing)) || missing) {
            free(delim);
            delim = missing ? NULL : malloc(strlen(v) + 1);
            if (missing || !*v) rc = bad_usage("--delimiter needs a non-empty string");
            else if (!delim || unescape(v, delim, &o.delimiter_len))
                rc = bad_usage("--delimiter '%s': bad escape (use \\n \\t \\r \\\\ \\xHH)", v);
            else o.delimiter = delim;
        } else {
            rc = bad_usage("unknown option '%s'", a);
        }
    }
    if (!rc && !o.out_dir) rc = bad_usage("--out DIR is required");
    if (!rc && !ninputs) rc = bad_usage("no input files given");
    if (!rc && o.tokenizer_pattern && !o.tokenizer_file) rc = bad_usage("--pattern needs --tokenizer");
    if (!rc && o.strict && !o.jsonl_field) rc = bad_usage("--strict needs --jsonl-field");
    if (!rc && o.delimiter && o.jsonl_field) rc = bad_usage("--delimiter and --jsonl-field cannot be combined");
    if (rc) {
        free(inputs);
        free(delim);
        return rc;
    }

    o.inputs = inputs;
    o.ninputs = ninputs;
    anvil_prep_stats st;
    double t0 = anvil_now();
    if (anvil_prep_run(&o, &st)) {
        fprintf(stderr, "anvil prep: error: %s\n", anvil_errmsg());
        free(inputs);
        free(delim);
        return 1;
    }
    double dt = anvil_now() - t0;
    double mb = (double)st.bytes_in / 1e6;
    printf("prep: %lld documents from %d input%s (%.2f MB) in %.3f s, %.1f MB/s\n",
           (long long)(st.train_docs + st.val_docs), st.sources, st.sources == 1 ? "" : "s", mb, dt,
           dt > 0 ? mb / dt : 0.0);
    printf("  train: %lld documents, %lld tokens in %d shard%s\n", (long long)st.train_docs,
           (long long)st.train_tokens, st.train_shards, st.train_shards == 1 ? "" : "s");
    printf("  val:   %lld documents, %lld tokens in %d shard%s\n", (long long)st.val_docs, (long long)st.val_tokens,
           st.val_shards, st.val_shards == 1 ? "" : "s");
    if (st.kept_shards)
        printf("  kept %d shard%s of an earlier run (checksums verified)\n", st.kept_shards,
               st.kept_shards == 1 ? "" : "s");
    if (st.bad_lines) printf("  skipped %lld bad JSON line%s\n", (long long)st.bad_lines, st.bad_lines == 1 ? "" : "s");
    printf("  wrote %s/manifest.json\n", o.out_dir);
    free(inputs);
    free(delim);
    return 0;
}

/* anvil prep: text files in, llm.c token shards out (see data/prep.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/s3path.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/exit.h"
#include "data/prep.h"
#include "obs/metrics.h"

static const char usage_text[] =
    "usage: anvil prep --out DIR [options] FILE... ('-' reads standard input)\n"
    "\n"
    "Turns text into llm.c token shards (bytes, or BPE with --tokenizer):\n"
    "DIR/train_NNNNNN.bin, DIR/val_NNNNNN.bin and DIR/manifest.json. Each\n"
    "document starts with the end-of-text token, or with --pattern llama3 lies\n"
    "between <|begin_of_text|> and <|end_of_text|>; a document goes to val when\n"
    "the FNV-1a hash of its bytes says so, so the split is the same on every run.\n"
    "Files ending in .gz or .zst are decompressed as they are read. A FILE may be\n"
    "s3://bucket/key: the object is downloaded whole to a private temporary folder\n"
    "first (the disk needs room for it) and read from there.\n"
    "\n"
    "Shards are written as they fill, and manifest.json (with each shard's size\n"
    "and CRC32C) after each one. Run again with the same inputs and options, an\n"
    "interrupted prep continues after its last verified shard, and a finished one\n"
    "is left as it is; a shard that fails its checksum is written again.\n"
    "\n"
    "options:\n"
    "  --out DIR            output folder (created if missing); s3://bucket/prefix writes the\n"
    "                       shards there, through a staging folder, and manifest.json last\n"
    "  --val-fraction F     share of documents for validation, in [0, 1] (default 0.01)\n"
    "  --delimiter STR      split the input into documents at STR; \\n \\t \\r \\\\ \\xHH\n"
    "                       escapes allowed, e.g. '\\n\\n\\n' (default: one document per file)\n"
    "  --shard-tokens N     tokens per shard; a split's last one holds the rest\n"
    "                       (default 100000000)\n"
    "  --tokenizer FILE     BPE tokens from a .tiktoken rank file (default: bytes)\n"
    "  --pattern NAME       the tokenizer's encoding: gpt2, cl100k_base, o200k_base,\n"
    "                       llama3 (default gpt2)\n"
    "  --jsonl-field NAME   inputs are JSON lines; each line's string field NAME is a\n"
    "                       document (a bad line is skipped with a note naming it)\n"
    "  --strict             with --jsonl-field: a bad line is an error instead\n"
    "  --workers N          encoding threads (default 1); the output is the same for any N\n"
    "  --max-doc-bytes N    the longest document (or JSON line) allowed, held in memory\n"
    "                       whole; a longer one is an error (default 67108864, 64 MiB)\n"
    "  --no-progress        no progress on standard error (by default a bar on a terminal,\n"
    "                       else a line at every tenth of the input read or every 10 s)\n"
    "  --help               show this help\n";

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
    anvil_meter_break(ctx);
    fprintf(stderr, "anvil prep: note: %s\n", msg);
}

typedef struct {
    anvil_meter meter;
    anvil_prep_progress last;
} prep_progress;

static void progress_detail(const prep_progress *pp, char *out, size_t cap) {
    double el = anvil_now() - pp->meter.t0;
    snprintf(out, cap, "%lld documents | %lld tokens | %.0f tok/s", (long long)pp->last.docs,
             (long long)pp->last.tokens, el > 0 ? (double)pp->last.tokens / el : 0.0);
}

static void on_progress(void *ctx, const anvil_prep_progress *p) {
    prep_progress *pp = ctx;
    pp->last = *p;
    char detail[160];
    progress_detail(pp, detail, sizeof detail);
    anvil_meter_update(&pp->meter, (double)p->bytes_read, (double)p->bytes_total, detail);
}

/* Downloads each s3:// input into a private folder of its own, under the object's base name (so
 * that .gz and .zst still choose the decompressor), and points inputs[i] there; names[i] keeps the
 * URI for messages and the manifest. */
static int stage_inputs(const char **inputs, const char **names, s3path_stage *in, int n) {
    for (int i = 0; i < n; i++) {
        if (!anvil_s3_is_uri(inputs[i])) continue;
        const char *leaf = strrchr(inputs[i], '/') + 1;
        if (!*leaf || leaf - inputs[i] <= 5)
            return anvil_fail("input %s: not an object (s3://bucket/key, the key not ending in '/')", inputs[i]);
        names[i] = inputs[i];
        if (s3path_in(&in[i], inputs[i], "", leaf)) return -1;
        inputs[i] = in[i].local;
    }
    return 0;
}

static void unstage_inputs(const char **names, s3path_stage *in, int n) {
    for (int i = 0; in && i < n; i++)
        if (names[i]) s3path_done(&in[i]);
    free(names);
    free(in);
}

int cmd_prep(int argc, char **argv) {
    const char *cmd = "prep";
    anvil_prep_opts o = {.val_fraction = 0.01, .shard_tokens = 100000000, .note = print_note};
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    char *delim = NULL;
    int ninputs = 0, rc = 0, only_inputs = 0, show_progress = 1;
    if (!inputs) {
        fprintf(stderr, "anvil prep: error: out of memory\n");
        return ANVIL_EXIT_ERROR;
    }
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v;
        if (only_inputs || a[0] != '-' || !strcmp(a, "-")) {
            inputs[ninputs++] = a;
            continue;
        }
        if (!strcmp(a, "--")) { only_inputs = 1; continue; }
        if (!strcmp(a, "--strict")) { o.strict = 1; continue; }
        if (!strcmp(a, "--no-progress")) { show_progress = 0; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            free(inputs);
            free(delim);
            return 0;
        }
        if (!(v = arg_value(cmd, argc, argv, &i))) {
            rc = ANVIL_EXIT_USAGE;
        } else if (!strcmp(a, "--out")) {
            if (!*v) rc = cli_usage_error(cmd, "--out needs a folder");
            else o.out_dir = v;
        } else if (!strcmp(a, "--val-fraction")) {
            if (arg_double(cmd, a, v, &o.val_fraction)) rc = ANVIL_EXIT_USAGE;
            else if (!(o.val_fraction >= 0 && o.val_fraction <= 1))
                rc = cli_usage_error(cmd, "--val-fraction must be in [0, 1], got %s", v);
        } else if (!strcmp(a, "--shard-tokens")) {
            if (arg_i64(cmd, a, v, 1, INT32_MAX, &o.shard_tokens)) rc = ANVIL_EXIT_USAGE;
        } else if (!strcmp(a, "--workers")) {
            if (arg_int(cmd, a, v, 1, 1024, &o.workers)) rc = ANVIL_EXIT_USAGE;
        } else if (!strcmp(a, "--max-doc-bytes")) {
            int64_t n;
            if (arg_i64(cmd, a, v, 1, INT64_MAX / 2, &n)) rc = ANVIL_EXIT_USAGE;
            else o.max_doc_bytes = (size_t)n;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!*v) rc = cli_usage_error(cmd, "--tokenizer needs a .tiktoken file");
            else o.tokenizer_file = v;
        } else if (!strcmp(a, "--pattern")) {
            if (!*v) rc = cli_usage_error(cmd, "--pattern needs gpt2, cl100k_base, o200k_base or llama3");
            else o.tokenizer_pattern = v;
        } else if (!strcmp(a, "--jsonl-field")) {
            if (!*v) rc = cli_usage_error(cmd, "--jsonl-field needs a field name");
            else o.jsonl_field = v;
        } else if (!strcmp(a, "--delimiter")) {
            free(delim);
            delim = malloc(strlen(v) + 1);
            if (!*v) rc = cli_usage_error(cmd, "--delimiter needs a non-empty string");
            else if (!delim || unescape(v, delim, &o.delimiter_len))
                rc = cli_usage_error(cmd, "--delimiter '%s': bad escape (use \\n \\t \\r \\\\ \\xHH)", v);
            else o.delimiter = delim;
        } else {
            rc = cli_usage_error(cmd, "unknown option '%s'", a);
        }
    }
    if (!rc && !o.out_dir) rc = cli_usage_error(cmd, "--out DIR is required");
    if (!rc && !ninputs) rc = cli_usage_error(cmd, "no input files given");
    if (!rc && o.tokenizer_pattern && !o.tokenizer_file) rc = cli_usage_error(cmd, "--pattern needs --tokenizer");
    if (!rc && o.strict && !o.jsonl_field) rc = cli_usage_error(cmd, "--strict needs --jsonl-field");
    if (!rc && o.delimiter && o.jsonl_field)
        rc = cli_usage_error(cmd, "--delimiter and --jsonl-field cannot be combined");
    if (rc) {
        free(inputs);
        free(delim);
        return rc;
    }

    /* An s3:// output is written to a staging folder, then uploaded with its manifest last; s3://
     * inputs are staged too, each downloaded whole before prep reads it. */
    const char *out_uri = o.out_dir;
    s3path_stage out;
    const char **names = calloc((size_t)ninputs, sizeof *names);
    s3path_stage *in = calloc((size_t)ninputs, sizeof *in);
    if (!names || !in || s3path_out(&out, out_uri, NULL) || stage_inputs(inputs, names, in, ninputs)) {
        if (!names || !in) anvil_fail("prep: out of memory");
        else s3path_done(&out);
        unstage_inputs(names, in, ninputs);
        free(inputs);
        free(delim);
        return cli_fail(cmd);
    }
    o.out_dir = out.local;
    o.inputs = inputs;
    o.input_names = names;
    o.ninputs = ninputs;
    anvil_prep_stats st;
    prep_progress pp = {0};
    o.note_ctx = &pp.meter;
    anvil_meter_start(&pp.meter, stderr, anvil_meter_mode(stderr, show_progress), "prep", NULL);
    if (pp.meter.mode != ANVIL_METER_OFF) {
        o.progress = on_progress;
        o.progress_ctx = &pp;
    }
    double t0 = anvil_now();
    int failed = anvil_prep_run(&o, &st) || s3path_out_push(&out);
    s3path_done(&out);
    unstage_inputs(names, in, ninputs);
    char detail[160];
    progress_detail(&pp, detail, sizeof detail);
    if (!failed) anvil_meter_finish(&pp.meter, (double)pp.last.bytes_read, (double)pp.last.bytes_total, detail);
    else anvil_meter_break(&pp.meter);
    if (failed) {
        free(inputs);
        free(delim);
        return cli_fail(cmd);
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
    printf("  wrote %s/manifest.json\n", out_uri);
    free(inputs);
    free(delim);
    return 0;
}

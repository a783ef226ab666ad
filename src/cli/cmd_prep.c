/* anvil prep: text files in, llm.c token shards out (see data/prep.h). */
#include <stdbool.h>
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
#include "opts/tables.h"

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
    bool whole_files; /* no --delimiter or --jsonl-field: each input is one document */
} prep_progress;

static void progress_detail(const prep_progress *pp, char *out, size_t cap) {
    double el = anvil_now() - pp->meter.t0;
    /* Documents and tokens are counted as each is encoded, after its end is read: "0 documents |
     * 0 tokens" at 95% read as if nothing were happening. */
    if (pp->last.docs == 0) {
        snprintf(out, cap, "no document ended yet%s",
                 pp->whole_files ? " (without --delimiter or --jsonl-field, each input is one document)" : "");
        return;
    }
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

typedef struct {
    anvil_prep_opts o;
    const char **inputs;
    int ninputs;
    bool show_progress;
    char *delim;
} prep_args;

/* A value that must not be empty, else the usage error why. */
static int nonempty(const char *v, const char *why, const char **out) {
    if (!*v) return anvil_fail("%s", why);
    *out = v;
    return 0;
}

/* One argument of prep's table (opts/tables.h), in the order given. */
static int take(void *ctx, const anvil_opt_arg *a) {
    prep_args *p = ctx;
    anvil_prep_opts *o = &p->o;
    const char *v = a->text;
    if (a->id < 0) {
        p->inputs[p->ninputs++] = v;
        return 0;
    }
    switch ((enum anvil_prep_opt)a->id) {
    case ANVIL_PREP_OUT: return nonempty(v, "--out needs a folder", &o->out_dir);
    case ANVIL_PREP_VAL_FRACTION:
        if (!(a->d >= 0 && a->d <= 1)) return anvil_fail("--val-fraction must be in [0, 1], got %s", v);
        o->val_fraction = a->d;
        return 0;
    case ANVIL_PREP_SHARD_TOKENS: o->shard_tokens = a->i; return 0;
    case ANVIL_PREP_WORKERS: o->workers = (int)a->i; return 0;
    case ANVIL_PREP_MAX_DOC_BYTES: o->max_doc_bytes = (size_t)a->i; return 0;
    case ANVIL_PREP_TOKENIZER: return nonempty(v, "--tokenizer needs a .tiktoken file", &o->tokenizer_file);
    case ANVIL_PREP_PATTERN:
        return nonempty(v, "--pattern needs gpt2, cl100k_base, o200k_base or llama3", &o->tokenizer_pattern);
    case ANVIL_PREP_JSONL_FIELD: return nonempty(v, "--jsonl-field needs a field name", &o->jsonl_field);
    case ANVIL_PREP_DELIMITER:
        free(p->delim);
        p->delim = malloc(strlen(v) + 1);
        if (!*v) return anvil_fail("--delimiter needs a non-empty string");
        if (!p->delim || unescape(v, p->delim, &o->delimiter_len))
            return anvil_fail("--delimiter '%s': bad escape (use \\n \\t \\r \\\\ \\xHH)", v);
        o->delimiter = p->delim;
        return 0;
    case ANVIL_PREP_STRICT: o->strict = 1; return 0;
    case ANVIL_PREP_NO_PROGRESS: p->show_progress = false; return 0;
    case ANVIL_PREP_HELP:
    case ANVIL_PREP_NOPTS: return 0;
    }
    return 0;
}

/* Parses the command line into p; 0, or the exit status (-1: --help printed, exit 0). */
static int parse(int argc, char **argv, prep_args *p) {
    const char *cmd = "prep";
    int rc = anvil_opts_parse(&anvil_prep_cmdline, argc, argv, take, p);
    if (rc == 1) {
        char *usage = anvil_opts_usage(&anvil_prep_cmdline);
        fputs(usage ? usage : "anvil prep: out of memory\n", stdout);
        free(usage);
        return usage ? -1 : ANVIL_EXIT_ERROR;
    }
    if (rc) return cli_usage_error(cmd, "%s", anvil_errmsg());
    const anvil_prep_opts *o = &p->o;
    if (!o->out_dir) return cli_usage_error(cmd, "--out DIR is required");
    if (!p->ninputs) return cli_usage_error(cmd, "no input files given");
    if (o->tokenizer_pattern && !o->tokenizer_file) return cli_usage_error(cmd, "--pattern needs --tokenizer");
    if (o->strict && !o->jsonl_field) return cli_usage_error(cmd, "--strict needs --jsonl-field");
    if (o->delimiter && o->jsonl_field) return cli_usage_error(cmd, "--delimiter and --jsonl-field cannot be combined");
    return 0;
}

static void print_stats(const anvil_prep_stats *st, double dt, const char *out_uri) {
    double mb = (double)st->bytes_in / 1e6;
    printf("prep: %lld documents from %d input%s (%.2f MB) in %.3f s, %.1f MB/s\n",
           (long long)(st->train_docs + st->val_docs), st->sources, st->sources == 1 ? "" : "s", mb, dt,
           dt > 0 ? mb / dt : 0.0);
    printf("  train: %lld documents, %lld tokens in %d shard%s\n", (long long)st->train_docs,
           (long long)st->train_tokens, st->train_shards, st->train_shards == 1 ? "" : "s");
    printf("  val:   %lld documents, %lld tokens in %d shard%s\n", (long long)st->val_docs, (long long)st->val_tokens,
           st->val_shards, st->val_shards == 1 ? "" : "s");
    if (st->kept_shards)
        printf("  kept %d shard%s of an earlier run (checksums verified)\n", st->kept_shards,
               st->kept_shards == 1 ? "" : "s");
    if (st->bad_lines) printf("  skipped %lld bad JSON line%s\n", (long long)st->bad_lines, st->bad_lines == 1 ? "" : "s");
    printf("  wrote %s/manifest.json\n", out_uri);
}

/* Stages the s3:// output and inputs, runs prep with its progress and prints what it did. An s3://
 * output is written to a staging folder, then uploaded with its manifest last; s3:// inputs are
 * staged too, each downloaded whole before prep reads it. */
static int run(prep_args *p) {
    const char *cmd = "prep";
    anvil_prep_opts *o = &p->o;
    const char *out_uri = o->out_dir;
    s3path_stage out;
    int n = p->ninputs;
    const char **names = calloc((size_t)n, sizeof *names);
    s3path_stage *in = calloc((size_t)n, sizeof *in);
    if (!names || !in || s3path_out(&out, out_uri, NULL) || stage_inputs(p->inputs, names, in, n)) {
        if (!names || !in) anvil_fail("prep: out of memory");
        else s3path_done(&out);
        unstage_inputs(names, in, n);
        return cli_fail(cmd);
    }
    o->out_dir = out.local;
    o->inputs = p->inputs;
    o->input_names = names;
    o->ninputs = n;
    anvil_prep_stats st;
    prep_progress pp = {.whole_files = !o->delimiter && !o->jsonl_field};
    o->note_ctx = &pp.meter;
    anvil_meter_start(&pp.meter, stderr, anvil_meter_mode(stderr, p->show_progress), "prep", NULL);
    if (pp.meter.mode != ANVIL_METER_OFF) {
        o->progress = on_progress;
        o->progress_ctx = &pp;
    }
    double t0 = anvil_now();
    int failed = anvil_prep_run(o, &st) || s3path_out_push(&out);
    s3path_done(&out);
    unstage_inputs(names, in, n);
    char detail[160];
    progress_detail(&pp, detail, sizeof detail);
    if (!failed) anvil_meter_finish(&pp.meter, (double)pp.last.bytes_read, (double)pp.last.bytes_total, detail);
    else anvil_meter_break(&pp.meter);
    if (failed) return cli_fail(cmd);
    print_stats(&st, anvil_now() - t0, out_uri);
    return 0;
}

int cmd_prep(int argc, char **argv) {
    prep_args p = {.o = {.val_fraction = 0.01, .shard_tokens = 100000000, .note = print_note},
                   .inputs = calloc((size_t)argc + 1, sizeof *p.inputs),
                   .show_progress = true};
    if (!p.inputs) {
        fprintf(stderr, "anvil prep: error: out of memory\n");
        return ANVIL_EXIT_ERROR;
    }
    int rc = parse(argc, argv, &p);
    if (!rc) rc = run(&p);
    free(p.inputs);
    free(p.delim);
    return rc < 0 ? 0 : rc;
}

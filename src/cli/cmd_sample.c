/* anvil sample: generate text from a trained model. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/model_file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "data/bytetok.h"
#include "data/prep.h"
#include "sample/sampler.h"
#include "tok/tokenizer.h"

static const char *usage =
    "usage: anvil sample --model PATH [options]\n"
    "\n"
    "Generates text from a model written by 'anvil train', with a key/value cache.\n"
    "\n"
    "  --model PATH        the model: a model.safetensors, a checkpoint folder or a run folder\n"
    "  --data DIR          decode with the tokenizer of this 'anvil prep' folder (the model's data)\n"
    "  --tokenizer FILE    or with this .tiktoken rank file; --pattern NAME its encoding (default gpt2)\n"
    "                      (neither: the tokenizer.tiktoken that 'anvil train' kept beside the model,\n"
    "                      else byte-level models print text, others token ids); one given by hand\n"
    "                      must be the one the model records\n"
    "  --prompt TEXT       text to continue (after the start of a document: the tokenizer's\n"
    "                      beginning-of-text token, Llama 3's <|begin_of_text|>, else end-of-text);\n"
    "                      default: the start of a document alone\n"
    "  --tokens N          tokens to generate per sample (default 256)\n"
    "  --count N           number of samples (default 1)\n"
    "  --temperature X     0 is greedy (default 1.0)\n"
    "  --top-k K           keep the K most likely tokens (default 0: all)\n"
    "  --top-p P           keep the smallest set with probability >= P (default 1.0)\n"
    "  --ignore-eot        go on past the end-of-text token to --tokens (by default a sample\n"
    "                      ends there)\n"
    "  --seed N            sampling seed (default 1337)\n"
    "  --threads N         OpenMP threads\n"
    "\n"
    "Standard error says why each sample ended: --tokens reached, or the model wrote end-of-text.\n";

/* What emit writes with, and the last token it saw (why a sample ended). */
typedef struct {
    const anvil_tok *tk;
    int32_t last;
} emitter;

static void emit(void *ctx, int32_t tok) {
    emitter *e = ctx;
    const anvil_tok *tk = e->tk;
    e->last = tok;
    if (tk) {
        size_t n;
        const unsigned char *b = tok == anvil_tok_eot(tk) ? NULL : anvil_tok_token_bytes(tk, tok, &n);
        if (b) fwrite(b, 1, n, stdout);
    } else {
        char piece[ANVIL_BYTETOK_MAX_PIECE + 1];
        int n = anvil_bytetok_decode(tok, piece);
        if (n > 0) fwrite(piece, 1, (size_t)n, stdout);
    }
    fflush(stdout);
}

static void emit_id(void *ctx, int32_t tok) {
    ((emitter *)ctx)->last = tok;
    printf("%d ", tok);
}

typedef struct {
    const char *model_path, *prompt, *data, *tok_file, *pattern;
    int tokens, count, threads, ignore_eot;
    int64_t seed;
    anvil_sample_opts so;
    char own[4096], own_pattern[32]; /* the model's own tokenizer, found beside it */
} sample_args;

/* 0, or the exit status for --help (0 after printing it: *done) and for a usage error. */
static int parse_args(int argc, char **argv, sample_args *a, int *done) {
    const char *cmd = "sample";
    *done = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            fputs(usage, stdout);
            *done = 1;
            return 0;
        }
        if (!strcmp(o, "--ignore-eot")) {
            a->ignore_eot = 1;
            continue;
        }
        if (strncmp(o, "--", 2)) return cli_usage_error(cmd, "unexpected argument '%s'", o);
        if (!(v = arg_value(cmd, argc, argv, &i))) return 2;
        int bad = 0;
        if (!strcmp(o, "--model")) a->model_path = v;
        else if (!strcmp(o, "--prompt")) a->prompt = v;
        else if (!strcmp(o, "--data")) a->data = v;
        else if (!strcmp(o, "--tokenizer")) a->tok_file = v;
        else if (!strcmp(o, "--pattern")) a->pattern = v;
        else if (!strcmp(o, "--tokens")) bad = arg_int(cmd, o, v, 0, 1 << 20, &a->tokens);
        else if (!strcmp(o, "--count")) bad = arg_int(cmd, o, v, 1, 1 << 20, &a->count);
        else if (!strcmp(o, "--temperature")) bad = arg_float(cmd, o, v, &a->so.temperature);
        else if (!strcmp(o, "--top-k")) bad = arg_int(cmd, o, v, 0, 1 << 24, &a->so.top_k);
        else if (!strcmp(o, "--top-p")) bad = arg_float(cmd, o, v, &a->so.top_p);
        else if (!strcmp(o, "--seed")) bad = arg_i64(cmd, o, v, 0, INT64_MAX, &a->seed);
        else if (!strcmp(o, "--threads")) bad = arg_int(cmd, o, v, 1, 4096, &a->threads);
        else return cli_usage_error(cmd, "unknown option '%s'", o);
        if (bad) return 2;
    }
    if (!a->model_path) return cli_usage_error(cmd, "--model is required");
    if (a->data && a->tok_file) return cli_usage_error(cmd, "--data and --tokenizer cannot be combined");
    if (a->pattern && !a->tok_file) return cli_usage_error(cmd, "--pattern needs --tokenizer");
    if (a->so.temperature < 0.0f) return cli_usage_error(cmd, "--temperature must be >= 0");
    if (!(a->so.top_p > 0.0f && a->so.top_p <= 1.0f)) return cli_usage_error(cmd, "--top-p must be in (0, 1]");
    return 0;
}

/* The tokenizer given by hand (--tokenizer, or --data's) must be the model's; without one, the model's own
 * is found beside it. *tk stays NULL for a model without one. -1 after anvil_fail. */
static int find_tokenizer(sample_args *a, anvil_tok **tk) {
    char data_tok[4096] = "";
    *tk = NULL;
    if (a->data && anvil_data_manifest_tokenizer(a->data, tk, data_tok, sizeof data_tok)) return -1;
    const char *given = a->tok_file ? a->tok_file : data_tok[0] ? data_tok : NULL;
    if (anvil_model_tokenizer_for(a->model_path, given, a->own, sizeof a->own, a->own_pattern)) {
        anvil_tok_free(*tk);
        *tk = NULL;
        return -1;
    }
    if (!given && a->own[0]) a->tok_file = a->own, a->pattern = a->own_pattern;
    if (a->tok_file && !(*tk = anvil_tok_load(a->tok_file, a->pattern ? a->pattern : "gpt2"))) return -1;
    return 0;
}

/* The prompt's ids after the start token (a document's start: the tokenizer's beginning-of-text token, else
 * the end-of-text one, or 0 without either): encoded by the tokenizer, or as bytes. *ids (free it) NULL after
 * anvil_fail. */
static int prompt_ids(const anvil_tok *tk, const char *prompt, int32_t start, int32_t **ids, int64_t *np) {
    size_t cap = 0;
    *ids = NULL;
    if (tk && prompt) {
        int64_t n = anvil_tok_encode(tk, NULL, prompt, strlen(prompt), ANVIL_TOK_SPECIAL_PLAIN, ids, &cap);
        int32_t *grown = n < 0 ? NULL : realloc(*ids, (size_t)(n + 1) * sizeof **ids);
        if (!grown) {
            free(*ids);
            *ids = NULL;
            return n < 0 ? -1 : anvil_fail("sample: out of memory");
        }
        *ids = grown;
        memmove(*ids + 1, *ids, (size_t)n * sizeof **ids);
        *np = n + 1;
    } else {
        *np = prompt ? (int64_t)strlen(prompt) + 1 : 1;
        if (!(*ids = malloc((size_t)*np * sizeof(int32_t)))) return anvil_fail("sample: out of memory");
        if (prompt) anvil_bytetok_encode((const unsigned char *)prompt, (size_t)*np - 1, *ids + 1);
    }
    (*ids)[0] = start;
    return 0;
}

/* Why a sample ended, on standard error: a short sample is otherwise a puzzle. */
static void stop_reason(const sample_args *a, int s, int made, int at_eot) {
    char which[32] = "";
    if (a->count > 1) snprintf(which, sizeof which, " %d", s + 1);
    if (at_eot)
        fprintf(stderr, "anvil sample: sample%s stopped after %d of %d tokens: the model wrote end-of-text "
                "(--ignore-eot goes on past it)\n", which, made, a->tokens);
    else fprintf(stderr, "anvil sample: sample%s stopped after %d tokens: --tokens %d reached\n", which, made, a->tokens);
}

/* The samples, each the prompt followed by what the model writes. */
static int generate(const sample_args *a, anvil_model *m, const anvil_tok *tk, int bytes) {
    int32_t eot = tk ? anvil_tok_eot(tk) : bytes ? ANVIL_BYTETOK_EOT : -1, *ids;
    int64_t np = 0;
    if (prompt_ids(tk, a->prompt, tk || bytes ? anvil_data_doc_start(tk) : 0, &ids, &np)) return cli_fail("sample");
    anvil_sample_opts so = a->so;
    so.stop_token = a->ignore_eot ? -1 : eot;
    anvil_rng rng;
    anvil_rng_seed(&rng, (uint64_t)a->seed);
    int rc = 0;
    for (int s = 0; s < a->count && !rc; s++) {
        if (a->count > 1) printf("--- sample %d ---\n", s + 1);
        if (a->prompt) fputs(a->prompt, stdout);
        emitter e = {tk, -1};
        int made = anvil_generate(m, ids, (int)np, a->tokens, &so, &rng, bytes || tk ? emit : emit_id, &e);
        if (made < 0) rc = cli_fail("sample");
        printf("\n");
        fflush(stdout);
        if (made >= 0) stop_reason(a, s, made, so.stop_token >= 0 && e.last == so.stop_token);
    }
    free(ids);
    return rc;
}

int cmd_sample(int argc, char **argv) {
    const char *cmd = "sample";
    sample_args a = {.tokens = 256, .count = 1, .seed = 1337, .so = {1.0f, 0, 1.0f, -1}};
    int done, rc = parse_args(argc, argv, &a, &done);
    if (rc || done) return rc;
    if (a.threads) omp_set_num_threads(a.threads);
    anvil_tok *tk;
    if (find_tokenizer(&a, &tk)) return cli_fail(cmd);
    anvil_model m;
    char warn[4096];
    const anvil_device cpu = {ANVIL_DEVICE_CPU, 0};
    rc = anvil_model_load_any(a.model_path, anvil_kernels_for(cpu, ANVIL_MATMUL_F32), &m, warn, sizeof warn);
    fputs(warn, stderr);
    if (rc) {
        anvil_tok_free(tk);
        return cli_fail(cmd);
    }
    int bytes = !tk && m.cfg.vocab_size == ANVIL_BYTETOK_VOCAB;
    if (tk && anvil_tok_vocab_size(tk) > m.cfg.vocab_size)
        rc = cli_usage_error(cmd, "the tokenizer has %d ids but the model only %d", (int)anvil_tok_vocab_size(tk),
                             m.cfg.vocab_size);
    else if (a.prompt && !bytes && !tk)
        rc = cli_usage_error(cmd, "--prompt needs a byte-level model or a tokenizer (--data, --tokenizer)");
    else
        rc = generate(&a, &m, tk, bytes);
    anvil_tok_free(tk);
    anvil_model_free(&m);
    return rc;
}

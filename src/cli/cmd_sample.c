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
    "  --prompt TEXT       text to continue; default: start of a document\n"
    "  --tokens N          tokens to generate per sample (default 256)\n"
    "  --count N           number of samples (default 1)\n"
    "  --temperature X     0 is greedy (default 1.0)\n"
    "  --top-k K           keep the K most likely tokens (default 0: all)\n"
    "  --top-p P           keep the smallest set with probability >= P (default 1.0)\n"
    "  --seed N            sampling seed (default 1337)\n"
    "  --threads N         OpenMP threads\n";

static void emit(void *ctx, int32_t tok) {
    const anvil_tok *tk = ctx;
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
    (void)ctx;
    printf("%d ", tok);
}

int cmd_sample(int argc, char **argv) {
    const char *cmd = "sample", *model_path = NULL, *prompt = NULL, *data = NULL, *tok_file = NULL, *pattern = NULL;
    int tokens = 256, count = 1, threads = 0;
    int64_t seed = 1337;
    anvil_sample_opts so = {1.0f, 0, 1.0f, -1};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (strncmp(o, "--", 2)) return cli_usage_error(cmd, "unexpected argument '%s'", o);
        if (!(v = arg_value(cmd, argc, argv, &i))) return 2;
        int bad = 0;
        if (!strcmp(o, "--model")) model_path = v;
        else if (!strcmp(o, "--prompt")) prompt = v;
        else if (!strcmp(o, "--data")) data = v;
        else if (!strcmp(o, "--tokenizer")) tok_file = v;
        else if (!strcmp(o, "--pattern")) pattern = v;
        else if (!strcmp(o, "--tokens")) bad = arg_int(cmd, o, v, 0, 1 << 20, &tokens);
        else if (!strcmp(o, "--count")) bad = arg_int(cmd, o, v, 1, 1 << 20, &count);
        else if (!strcmp(o, "--temperature")) bad = arg_float(cmd, o, v, &so.temperature);
        else if (!strcmp(o, "--top-k")) bad = arg_int(cmd, o, v, 0, 1 << 24, &so.top_k);
        else if (!strcmp(o, "--top-p")) bad = arg_float(cmd, o, v, &so.top_p);
        else if (!strcmp(o, "--seed")) bad = arg_i64(cmd, o, v, 0, INT64_MAX, &seed);
        else if (!strcmp(o, "--threads")) bad = arg_int(cmd, o, v, 1, 4096, &threads);
        else return cli_usage_error(cmd, "unknown option '%s'", o);
        if (bad) return 2;
    }
    if (!model_path) return cli_usage_error(cmd, "--model is required");
    if (data && tok_file) return cli_usage_error(cmd, "--data and --tokenizer cannot be combined");
    if (pattern && !tok_file) return cli_usage_error(cmd, "--pattern needs --tokenizer");
    if (so.temperature < 0.0f) return cli_usage_error(cmd, "--temperature must be >= 0");
    if (!(so.top_p > 0.0f && so.top_p <= 1.0f)) return cli_usage_error(cmd, "--top-p must be in (0, 1]");
    if (threads) omp_set_num_threads(threads);

    /* The tokenizer given by hand must be the model's; without one, the
     * model's own is found beside it. */
    anvil_tok *tk = NULL;
    char data_tok[4096] = "", own[4096], own_pattern[32];
    if (data && anvil_data_manifest_tokenizer(data, &tk, data_tok, sizeof data_tok)) return cli_fail(cmd);
    const char *given = tok_file ? tok_file : data_tok[0] ? data_tok : NULL;
    if (anvil_model_tokenizer_for(model_path, given, own, sizeof own, own_pattern)) {
        anvil_tok_free(tk);
        return cli_fail(cmd);
    }
    if (!given && own[0]) tok_file = own, pattern = own_pattern;
    if (tok_file && !(tk = anvil_tok_load(tok_file, pattern ? pattern : "gpt2"))) return cli_fail(cmd);
    anvil_gpt2 m;
    char warn[4096];
    int lrc = anvil_model_load_any(model_path, anvil_kernels_cpu(), &m, warn, sizeof warn);
    fputs(warn, stderr);
    if (lrc) {
        anvil_tok_free(tk);
        return cli_fail(cmd);
    }
    int bytes = !tk && m.cfg.vocab_size == ANVIL_BYTETOK_VOCAB;
    if (tk && anvil_tok_vocab_size(tk) > m.cfg.vocab_size) {
        int tv = (int)anvil_tok_vocab_size(tk), mv = m.cfg.vocab_size;
        anvil_tok_free(tk);
        anvil_gpt2_free(&m);
        return cli_usage_error(cmd, "the tokenizer has %d ids but the model only %d", tv, mv);
    }
    if (prompt && !bytes && !tk) {
        anvil_gpt2_free(&m);
        return cli_usage_error(cmd, "--prompt needs a byte-level model or a tokenizer (--data, --tokenizer)");
    }
    int32_t eot = tk ? anvil_tok_eot(tk) : bytes ? ANVIL_BYTETOK_EOT : -1;
    int32_t *ids = NULL;
    int64_t np = 1;
    size_t cap = 0;
    if (tk && prompt) {
        int64_t n = anvil_tok_encode(tk, NULL, prompt, strlen(prompt), ANVIL_TOK_SPECIAL_PLAIN, &ids, &cap);
        int32_t *grown = n < 0 ? NULL : realloc(ids, (size_t)(n + 1) * sizeof *ids);
        if (!grown) {
            free(ids);
            anvil_tok_free(tk);
            anvil_gpt2_free(&m);
            return cli_fail(cmd);
        }
        ids = grown;
        memmove(ids + 1, ids, (size_t)n * sizeof *ids);
        np = n + 1;
    } else {
        np = prompt ? (int64_t)strlen(prompt) + 1 : 1;
        ids = malloc((size_t)np * sizeof(int32_t));
        if (prompt && ids) anvil_bytetok_encode((const unsigned char *)prompt, (size_t)np - 1, ids + 1);
    }
    if (!ids) {
        anvil_tok_free(tk);
        anvil_gpt2_free(&m);
        fprintf(stderr, "anvil sample: error: out of memory\n");
        return 1;
    }
    ids[0] = eot >= 0 ? eot : 0;
    so.stop_token = eot;
    anvil_rng rng;
    anvil_rng_seed(&rng, (uint64_t)seed);
    int rc = 0;
    for (int s = 0; s < count && !rc; s++) {
        if (count > 1) printf("--- sample %d ---\n", s + 1);
        if (prompt) fputs(prompt, stdout);
        if (anvil_generate(&m, ids, (int)np, tokens, &so, &rng, bytes || tk ? emit : emit_id, tk) < 0)
            rc = cli_fail(cmd);
        printf("\n");
    }
    anvil_tok_free(tk);
    free(ids);
    anvil_gpt2_free(&m);
    return rc;
}

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
#include "sample/sampler.h"

static const char *usage =
    "usage: anvil sample --model FILE [options]\n"
    "\n"
    "Generates text from a model.safetensors written by 'anvil train', with a key/value cache.\n"
    "\n"
    "  --model FILE        the model to sample from\n"
    "  --prompt TEXT       text to continue (byte-level models); default: start of a document\n"
    "  --tokens N          tokens to generate per sample (default 256)\n"
    "  --count N           number of samples (default 1)\n"
    "  --temperature X     0 is greedy (default 1.0)\n"
    "  --top-k K           keep the K most likely tokens (default 0: all)\n"
    "  --top-p P           keep the smallest set with probability >= P (default 1.0)\n"
    "  --seed N            sampling seed (default 1337)\n"
    "  --threads N         OpenMP threads\n";

static void emit(void *ctx, int32_t tok) {
    (void)ctx;
    char piece[ANVIL_BYTETOK_MAX_PIECE + 1];
    int n = anvil_bytetok_decode(tok, piece);
    if (n > 0) fwrite(piece, 1, (size_t)n, stdout);
    fflush(stdout);
}

static void emit_id(void *ctx, int32_t tok) {
    (void)ctx;
    printf("%d ", tok);
}

int cmd_sample(int argc, char **argv) {
    const char *cmd = "sample", *model_path = NULL, *prompt = NULL;
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
    if (so.temperature < 0.0f) return cli_usage_error(cmd, "--temperature must be >= 0");
    if (!(so.top_p > 0.0f && so.top_p <= 1.0f)) return cli_usage_error(cmd, "--top-p must be in (0, 1]");
    if (threads) omp_set_num_threads(threads);

    anvil_gpt2 m;
    if (anvil_model_load(model_path, anvil_kernels_cpu(), &m)) return cli_fail(cmd);
    int bytes = m.cfg.vocab_size == ANVIL_BYTETOK_VOCAB;
    if (prompt && !bytes) {
        anvil_gpt2_free(&m);
        return cli_usage_error(cmd, "--prompt needs a byte-level model (this one has vocabulary %d)", m.cfg.vocab_size);
    }
    size_t np = prompt ? strlen(prompt) + 1 : 1;
    int32_t *ids = malloc(np * sizeof(int32_t));
    ids[0] = bytes ? ANVIL_BYTETOK_EOT : 0;
    if (prompt) anvil_bytetok_encode((const unsigned char *)prompt, np - 1, ids + 1);
    so.stop_token = bytes ? ANVIL_BYTETOK_EOT : -1;
    anvil_rng rng;
    anvil_rng_seed(&rng, (uint64_t)seed);
    int rc = 0;
    for (int s = 0; s < count && !rc; s++) {
        if (count > 1) printf("--- sample %d ---\n", s + 1);
        if (prompt) fputs(prompt, stdout);
        if (anvil_generate(&m, ids, (int)np, tokens, &so, &rng, bytes ? emit : emit_id, NULL) < 0) rc = cli_fail(cmd);
        printf("\n");
    }
    free(ids);
    anvil_gpt2_free(&m);
    return rc;
}

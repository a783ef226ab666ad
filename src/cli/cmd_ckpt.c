/* anvil ckpt: look inside and check training checkpoints. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "obs/metrics.h"

static const char *usage = "usage: anvil ckpt inspect DIR\n"
                           "       anvil ckpt verify [--no-progress] DIR\n"
                           "\n"
                           "DIR is one checkpoint (RUN/ckpt/step_00001000) or a run folder, which means its newest\n"
                           "checkpoint that verifies.\n"
                           "  inspect   print the manifest (step, tokens, model and training configuration, loader\n"
                           "            and RNG state, parallel layout, files with sizes and CRC32C checksums)\n"
                           "  verify    check every file's size and checksum; exit 0 if all match, 1 naming the\n"
                           "            first bad file\n"
                           "  --no-progress  verify: no progress on standard error (by default a bar on a\n"
                           "            terminal, else a line at every tenth of the bytes or every 10 s)\n";

static int inspect(const char *dir) {
    anvil_ckpt_manifest m;
    if (anvil_ckpt_read_manifest(dir, &m)) return cli_fail("ckpt");
    cJSON *tc = anvil_json_parse_str(m.train_config);
    char *tct = tc ? cJSON_Print(tc) : NULL;
    printf("checkpoint   %s\n", dir);
    printf("version      %d\n", m.version);
    printf("step         %" PRId64 "\n", m.step);
    printf("tokens seen  %" PRId64 "\n", m.tokens_seen);
    printf("model        n_layer %d, n_head %d, n_embd %d, block_size %d, vocab_size %d\n", m.model.n_layer,
           m.model.n_head, m.model.n_embd, m.model.block_size, m.model.vocab_size);
    printf("tokenizer    %s\n", m.tokenizer);
    printf("loader       shard %" PRId64 ", position %" PRId64 ", epoch %" PRId64 ", %s layout\n", m.loader.shard,
           m.loader.position, m.loader.epoch, anvil_loader_layout_name((int)m.loader.layout));
    printf("rng          %" PRIu64 " %" PRIu64 "\n", m.rng.s[0], m.rng.s[1]);
    printf("optimizer    adamw t=%" PRId64 ", beta1 %g, beta2 %g, eps %g, weight_decay %g\n", m.adam_t,
           (double)m.adamw.beta1, (double)m.adamw.beta2, (double)m.adamw.eps, (double)m.adamw.weight_decay);
    printf("parallel     world %d, rank %d, zero_stage %d, shard_group %d, tensor_parallel %d, "
           "pipeline_parallel %d\n",
           m.world, m.rank, m.zero_stage, m.shard_group, m.tensor_parallel, m.pipeline_parallel);
    printf("files\n");
    for (int i = 0; i < m.nfiles; i++)
        printf("  %-20s %14" PRIu64 " bytes  crc32c %08" PRIx32 "\n", m.files[i].name, m.files[i].bytes,
               m.files[i].crc32c);
    printf("train_config %s\n", tct ? tct : m.train_config);
    cJSON_free(tct);
    cJSON_Delete(tc);
    anvil_ckpt_manifest_free(&m);
    return 0;
}

static void verify_progress(void *ctx, uint64_t done, uint64_t total) {
    anvil_meter_update(ctx, (double)done, (double)total, "");
}

static int verify(const char *dir, int show_progress) {
    anvil_ckpt_manifest m;
    if (anvil_ckpt_read_manifest(dir, &m)) return cli_fail("ckpt");
    uint64_t total = 0;
    for (int i = 0; i < m.nfiles; i++) total += m.files[i].bytes;
    anvil_meter meter;
    anvil_meter_start(&meter, stderr, anvil_meter_mode(stderr, show_progress), "ckpt verify", NULL);
    if (anvil_ckpt_verify_progress(dir, meter.mode != ANVIL_METER_OFF ? verify_progress : NULL, &meter)) {
        anvil_meter_break(&meter);
        anvil_ckpt_manifest_free(&m);
        return cli_fail("ckpt");
    }
    anvil_meter_finish(&meter, (double)total, (double)total, "");
    printf("%s: ok (step %" PRId64 ", %d files, %" PRIu64 " bytes, checksums match)\n", dir, m.step, m.nfiles, total);
    anvil_ckpt_manifest_free(&m);
    return 0;
}

int cmd_ckpt(int argc, char **argv) {
    int show_progress = 1, n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--no-progress")) show_progress = 0;
        else argv[n++ + 1] = argv[i];
    }
    argc = n + 1;
    if (argc != 3) return cli_usage_error("ckpt", "expected 'inspect DIR' or 'verify DIR'");
    if (strcmp(argv[1], "inspect") && strcmp(argv[1], "verify"))
        return cli_usage_error("ckpt", "unknown action '%s'", argv[1]);
    char dir[PATH_MAX];
    char warn[4096];
    int rc = anvil_ckpt_resolve(argv[2], dir, sizeof dir, warn, sizeof warn);
    fputs(warn, stderr);
    if (rc) return cli_fail("ckpt");
    return !strcmp(argv[1], "inspect") ? inspect(dir) : verify(dir, show_progress);
}

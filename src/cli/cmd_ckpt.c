/* anvil ckpt: look inside and check training checkpoints. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/checkpoint.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "obs/metrics.h"

static const char *usage =
    "usage: anvil ckpt inspect DIR\n"
    "       anvil ckpt verify [--no-progress] DIR\n"
    "\n"
    "DIR is one checkpoint (RUN/ckpt/step_00001000), a run folder (RUN) or its checkpoint folder\n"
    "(RUN/ckpt).\n"
    "  inspect   print the manifest (step, tokens, model and training configuration, loader\n"
    "            and RNG state, parallel layout, files with sizes and CRC32C checksums); of a run,\n"
    "            its newest checkpoint that verifies\n"
    "  verify    check the manifest's own CRC32C, then every file it lists: its size, and its\n"
    "            CRC32C against the manifest's; of a run, every checkpoint in RUN/ckpt, newest\n"
    "            first, one line each. Exit 0 when all match, 1 naming each corrupt checkpoint and\n"
    "            its first bad file (--resume auto falls back past a corrupt one; verify reports it)\n"
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

/* One checkpoint folder: its line on stdout; 0, or -1 after anvil_fail naming the bad file. */
static int verify_one(const char *dir, int show_progress) {
    anvil_ckpt_manifest m;
    if (anvil_ckpt_read_manifest(dir, &m)) return -1;
    uint64_t total = 0;
    for (int i = 0; i < m.nfiles; i++) total += m.files[i].bytes;
    anvil_meter meter;
    anvil_meter_start(&meter, stderr, anvil_meter_mode(stderr, show_progress), "ckpt verify", NULL);
    int rc = anvil_ckpt_verify_progress(dir, meter.mode != ANVIL_METER_OFF ? verify_progress : NULL, &meter);
    if (rc) anvil_meter_break(&meter);
    else anvil_meter_finish(&meter, (double)total, (double)total, "");
    if (!rc)
        printf("%s: ok (step %" PRId64 ", %d files, %" PRIu64 " bytes, checksums match)\n", dir, m.step, m.nfiles,
               total);
    anvil_ckpt_manifest_free(&m);
    return rc;
}

/* Every checkpoint of the run, newest first; the corrupt ones named in one error line. */
static int verify_run(const char *run, int show_progress) {
    char (*names)[64];
    int n = anvil_ckpt_list(run, &names);
    if (n < 0) return cli_fail("ckpt");
    if (n == 0) {
        anvil_fail("%s: the run has no checkpoint", run);
        return cli_fail("ckpt");
    }
    char bad[2048] = "";
    int nbad = 0;
    for (int i = 0; i < n; i++) {
        char dir[PATH_MAX + 80]; /* the run, /ckpt/ and a step name of under 64 */
        snprintf(dir, sizeof dir, "%s/ckpt/%s", run, names[i]);
        if (!verify_one(dir, show_progress)) continue;
        printf("%s: corrupt: %s\n", dir, anvil_errmsg());
        size_t len = strlen(bad);
        snprintf(bad + len, sizeof bad - len, "%s%s (%s)", nbad++ ? "; " : "", names[i], anvil_errmsg());
    }
    free(names);
    fflush(stdout);
    if (!nbad) return 0;
    fprintf(stderr, "anvil ckpt: error: %s/ckpt: %d of %d checkpoint%s %s corrupt: %s\n", run, nbad, n, n == 1 ? "" : "s",
            nbad == 1 ? "is" : "are", bad);
    return 1;
}

/* A run's checkpoint folder stands for the run: RUN/ckpt, named so or holding `latest`. */
static int is_ckpt_folder(const char *path) {
    char probe[PATH_MAX + 16];
    struct stat sb;
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    const char *base = path + len;
    while (base > path && base[-1] != '/') base--;
    if (stat(path, &sb) || !S_ISDIR(sb.st_mode)) return 0;
    if (path + len - base == 4 && !strncmp(base, "ckpt", 4)) return 1;
    snprintf(probe, sizeof probe, "%s/latest", path);
    return stat(probe, &sb) == 0;
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
    char given[PATH_MAX], dir[PATH_MAX], probe[PATH_MAX + 16], warn[4096];
    struct stat sb;
    snprintf(given, sizeof given, "%s", argv[2]);
    snprintf(probe, sizeof probe, "%s/manifest.json", given);
    if (stat(probe, &sb) && is_ckpt_folder(given)) {
        /* The run folder: the path without its last component. */
        char *end = given + strlen(given);
        while (end > given + 1 && end[-1] == '/') end--;
        while (end > given && end[-1] != '/') end--;
        while (end > given + 1 && end[-1] == '/') end--;
        if (end == given) snprintf(given, sizeof given, ".");
        else *end = 0;
    }
    snprintf(probe, sizeof probe, "%s/ckpt", given);
    if (!strcmp(argv[1], "verify")) {
        if (stat(probe, &sb) == 0 && S_ISDIR(sb.st_mode)) return verify_run(given, show_progress);
        return verify_one(given, show_progress) ? cli_fail("ckpt") : 0;
    }
    int rc = anvil_ckpt_resolve(given, dir, sizeof dir, warn, sizeof warn);
    fputs(warn, stderr);
    if (rc) return cli_fail("ckpt");
    return inspect(dir);
}

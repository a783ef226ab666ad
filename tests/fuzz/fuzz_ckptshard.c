/* libFuzzer entry point for the shard files of a training checkpoint: any byte
 * string, cut into the two shard files of a tensor-parallel checkpoint of a
 * small model (4 bytes, little-endian, give the first file's length; the
 * rest is the second), with a consistent manifest so that verification
 * passes, must be either indexed as slices that cover every weight and
 * moment exactly once or refused with a message. The whole load and the piece-by-piece reader
 * must agree on which, and on every value. Never a crash, leak or
 * out-of-bounds read. Built and run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ)
 * and scripts/fuzz.sh. */
#include "ckpt/checkpoint.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "optim/optim.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static void cleanup(void) {
    char p[128];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    unlink(p);
    for (int g = 0; g < 2; g++) {
        snprintf(p, sizeof p, "%s/shard_%d_of_2.safetensors", dir, g);
        unlink(p);
    }
    rmdir(dir);
}

static void write_all(const char *leaf, const void *data, size_t n) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, leaf);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_ckptshard.XXXXXX");
        if (!mkdtemp(dir)) abort();
        atexit(cleanup);
    }
    size_t first = size >= 4 ? (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 |
                                       (size_t)data[3] << 24
                             : 0;
    const uint8_t *file[2] = {data + (size < 4 ? size : 4), NULL};
    size_t rest = size - (size_t)(file[0] - data), len[2] = {first < rest ? first : rest, 0};
    file[1] = file[0] + len[0];
    len[1] = size - (size_t)(file[1] - data);
    write_all("shard_0_of_2.safetensors", file[0], len[0]);
    write_all("shard_1_of_2.safetensors", file[1], len[1]);
    char manifest[2048];
    int n = snprintf(manifest, sizeof manifest,
                     "{\"format\":\"anvil-checkpoint\",\"version\":3,\"step\":1,\"tokens_seen\":8,"
                     "\"model\":{\"n_layer\":1,\"n_head\":2,\"n_embd\":4,\"block_size\":4,\"vocab_size\":16},"
                     "\"tokenizer\":\"bytes\",\"train_config\":{},"
                     "\"loader\":{\"shard\":0,\"position\":0,\"epoch\":0,\"shuffled\":false,\"shuffle_seed\":\"0\"},"
                     "\"rng\":{\"s0\":\"1\",\"s1\":\"2\"},"
                     "\"optimizer\":{\"name\":\"adamw\",\"t\":1,\"beta1\":0.9,\"beta2\":0.95,\"eps\":1e-08,"
                     "\"weight_decay\":0.1},"
                     "\"parallel\":{\"world\":2,\"rank\":0,\"zero_stage\":0,\"shard_group\":1,\"tensor_parallel\":2,"
                     "\"pipeline_parallel\":1},"
                     "\"files\":[{\"name\":\"shard_0_of_2.safetensors\",\"bytes\":%zu,\"crc32c\":\"%08x\"},"
                     "{\"name\":\"shard_1_of_2.safetensors\",\"bytes\":%zu,\"crc32c\":\"%08x\"}],"
                     "\"manifest_crc32c\":\"00000000\"}",
                     len[0], anvil_crc32c(0, file[0], len[0]), len[1], anvil_crc32c(0, file[1], len[1]));
    if (n < 0 || (size_t)n >= sizeof manifest || anvil_ckpt_manifest_stamp(manifest, (size_t)n)) abort();
    write_all("manifest.json", manifest, (size_t)n);

    anvil_model_config cfg = {.family = anvil_model_family_named("gpt2"), .n_layer = 1, .n_head = 2, .n_embd = 4,
                              .block_size = 4, .vocab_size = 16};
    anvil_model m;
    anvil_adamw o;
    const anvil_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f};
    int decays[ANVIL_MODEL_MAX_TENSORS];
    if (anvil_model_config_check(&cfg)) abort();
    anvil_model_decays(&cfg, decays);
    if (anvil_model_init(&m, &cfg, anvil_kernels_cpu()) ||
        anvil_adamw_init_whole(&o, m.k, &ac, m.offsets, m.ntensors, decays))
        abort();
    anvil_fail("%s", "");
    int loaded = anvil_ckpt_load(dir, &m, &o, NULL, 1) == 0;
    if (!loaded && !anvil_errmsg()[0]) abort();
    anvil_fail("%s", "");
    anvil_ckpt_reader *r = anvil_ckpt_reader_open(dir, &cfg, NULL, 1);
    if (!r && !anvil_errmsg()[0]) abort();
    if (loaded != (r != NULL)) abort();
    /* Every element of every kind reads, in uneven pieces that cross slices, as the load put it. */
    for (int k = 0; r && k < 3; k++)
        for (int i = 0; i < m.ntensors; i++) {
            size_t len = m.offsets[i + 1] - m.offsets[i];
            const float *want = (k == 0 ? m.params : k == 1 ? o.m : o.v) + m.offsets[i];
            float got[7];
            for (size_t at = 0; at < len; at += 7) {
                size_t take = len - at < 7 ? len - at : 7;
                if (anvil_ckpt_reader_read(r, k, i, at, take, got) || memcmp(got, want + at, take * sizeof(float)))
                    abort();
            }
        }
    anvil_ckpt_reader_close(r);
    anvil_adamw_free(&o);
    anvil_model_free(&m);
    return 0;
}

/* libFuzzer entry point for a Hugging Face config.json as anvil import reads
 * it (its model_type picks the family, GPT-2 without one): any byte string
 * must be refused with a message or give a configuration the family's checks
 * accept, never crash, leak or read out of bounds. An accepted one must
 * survive anvil's own config.json: written back and read again, every field
 * files record is the same. Built and run by tests/fuzz/CMakeLists.txt
 * (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"
#include "model/model.h"

static void same_fields(const anvil_model_config *a, const anvil_model_config *b) {
    const char *key;
    char x[32], y[32];
    for (int i = 0; anvil_model_config_field(a, i, &key, x, sizeof x, NULL, NULL); i++) {
        anvil_model_config_field(b, i, &key, y, sizeof y, NULL, NULL);
        if (strcmp(x, y)) __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *r = anvil_json_parse((const char *)data, size, NULL);
    if (!cJSON_IsObject(r)) {
        cJSON_Delete(r);
        return 0;
    }
    anvil_fail("%s", "");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(r, "model_type");
    const anvil_model_family *f = anvil_model_hf_family(cJSON_IsString(mt) ? mt->valuestring : "gpt2");
    anvil_model_config c;
    if (!f || anvil_model_hf_config_read(f, r, "fuzz", &c)) {
        if (anvil_errmsg()[0] == '\0' || strchr(anvil_errmsg(), '\n')) __builtin_trap();
        cJSON_Delete(r);
        return 0;
    }
    cJSON_Delete(r);
    anvil_model_config again = c;
    if (anvil_model_config_check(&again) || c.n_embd % c.n_head || c.n_head % c.n_kv_head ||
        c.padded_vocab < c.vocab_size)
        __builtin_trap();
    same_fields(&c, &again);
    anvil_model_special_ids ids = {-1, c.vocab_size - 1};
    char *text = anvil_model_hf_config(&c, &ids);
    if (!text) return 0;
    cJSON *back = anvil_json_parse_str(text);
    cJSON_free(text);
    anvil_model_config d;
    if (!back || anvil_model_hf_config_read(f, back, "fuzz (written back)", &d)) __builtin_trap();
    cJSON_Delete(back);
    same_fields(&c, &d);
    return 0;
}

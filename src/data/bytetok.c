#include "data/bytetok.h"

#include <string.h>

#include "core/error.h"

void anvil_bytetok_encode(const unsigned char *bytes, size_t n, int32_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = bytes[i];
}

int anvil_bytetok_decode(int32_t token, char *out) {
    if (token >= 0 && token < 256) {
        out[0] = (char)token;
        return 1;
    }
    if (token == ANVIL_BYTETOK_EOT) {
        memcpy(out, ANVIL_BYTETOK_EOT_TEXT, ANVIL_BYTETOK_MAX_PIECE);
        return ANVIL_BYTETOK_MAX_PIECE;
    }
    return anvil_fail("bytetok: token id %d is outside the byte vocabulary [0, %d)", token, ANVIL_BYTETOK_VOCAB);
}

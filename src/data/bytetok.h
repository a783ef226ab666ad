/* The byte-level tokenizer: one token per byte (ids 0..255) plus the
 * end-of-text token 256 that separates documents. It needs no vocabulary
 * file and can represent any input, which makes it the default for small
 * corpora and for testing the whole pipeline end to end. */
#ifndef ANVIL_DATA_BYTETOK_H
#define ANVIL_DATA_BYTETOK_H

#include <stddef.h>
#include <stdint.h>

#define ANVIL_BYTETOK_VOCAB 257
#define ANVIL_BYTETOK_EOT 256
#define ANVIL_BYTETOK_EOT_TEXT "<|endoftext|>"
/* The longest text one token decodes to (the end-of-text marker). */
#define ANVIL_BYTETOK_MAX_PIECE 13

/* out receives n tokens. */
void anvil_bytetok_encode(const unsigned char *bytes, size_t n, int32_t *out);

/* Writes the bytes of one token to out (room for ANVIL_BYTETOK_MAX_PIECE) and
 * returns how many; -1 for an id outside the vocabulary. */
int anvil_bytetok_decode(int32_t token, char *out);

#endif

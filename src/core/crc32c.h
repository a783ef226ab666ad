/* CRC-32C (Castagnoli), the checksum of checkpoint files, manifests and
 * token shards: the SSE4.2 instruction where the CPU has it, a table
 * otherwise. */
#ifndef ANVIL_CORE_CRC32C_H
#define ANVIL_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues from crc (0 to start): crc32c(crc32c(0, a), b) == crc32c(0, a + b). */
uint32_t anvil_crc32c(uint32_t crc, const void *data, size_t n);
/* Copies n bytes from src to dst (which must not overlap) and continues crc over them, in one pass
 * that leaves dst out of the cache: for snapshots of large buffers. */
uint32_t anvil_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n);
/* The CRC-32C of a + b from crc_a = crc32c(0, a), crc_b = crc32c(0, b) and b's length, so that
 * pieces checksummed apart (on several threads) give the whole's. */
uint32_t anvil_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
/* Reads the whole file: its size and CRC-32C. -1 after anvil_fail naming the path. */
int anvil_crc32c_file(const char *path, uint64_t *bytes, uint32_t *crc);
/* The same, telling progress (may be NULL) the bytes checksummed so far after each read of a few MiB. */
int anvil_crc32c_file_progress(const char *path, uint64_t *bytes, uint32_t *crc,
                               void (*progress)(void *ctx, uint64_t bytes), void *ctx);

#endif

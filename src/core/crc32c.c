#include "core/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nmmintrin.h>
#include <pthread.h>

#include "core/error.h"

/* The CRC32 instruction (SSE4.2) when the CPU has it, decided at run time
 * since the library is built for baseline x86-64; a table otherwise. Both
 * give the same values. */
#define CRC32C_POLY 0x82F63B78u /* reflected */

static uint32_t crc_table[256];

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[i] = c;
    }
}

/* Combining works on the CRC as a polynomial over GF(2) in the reflected bit order of the
 * table above: bit 31 holds the coefficient of x^0, bit 0 that of x^31. Appending n bytes to a
 * message multiplies its CRC state by x^(8n) modulo the polynomial (the pre- and post-inversions
 * cancel out in the combination), and the second piece's CRC is added (XOR). */
#define GF_ONE 0x80000000u   /* x^0 */
#define GF_X8 0x00800000u    /* x^8 */

static uint32_t gf_mul(uint32_t a, uint32_t b) {
    uint32_t prod = 0;
    for (int k = 0; k < 32; k++) {
        if (a & (GF_ONE >> k)) prod ^= b; /* a has x^k: add b * x^k */
        b = (b >> 1) ^ (b & 1 ? CRC32C_POLY : 0); /* b *= x, reduced */
    }
    return prod;
}

/* x^(8 n) modulo the polynomial: what appending n zero bytes multiplies a CRC state by. */
static uint32_t shift_of(uint64_t n) {
    uint32_t shift = GF_ONE, square = GF_X8;
    for (; n; n >>= 1, square = gf_mul(square, square))
        if (n & 1) shift = gf_mul(shift, square);
    return shift;
}

/* The CRC32 instruction takes 3 cycles and can start every cycle: three lanes of a block run side by
 * side (the second and third from a zero state) and are joined by shifting, about 3 times the speed
 * of one chain. */
#define LANE 16384

/* One 8-byte word into the CRC, and to dst when copying (a non-temporal store: the copy goes past
 * the cache, which it would otherwise fill with a buffer nobody reads soon). */
__attribute__((target("sse4.2"), always_inline)) static inline uint64_t crc_word(uint64_t c, const unsigned char *p,
                                                                                 unsigned char *dst) {
    uint64_t w;
    memcpy(&w, p, 8);
    if (dst) _mm_stream_si64((long long *)(void *)dst, (long long)w);
    return _mm_crc32_u64(c, w);
}

/* The CRC of p, and with dst a copy of p into it; inlined twice, so the copy costs no test when
 * there is none. */
__attribute__((target("sse4.2"), always_inline)) static inline uint32_t crc_lanes(uint32_t crc, unsigned char *dst,
                                                                                  const unsigned char *p, size_t n) {
    uint64_t c = crc;
    if (n >= 3 * LANE) {
        uint32_t lane_shift = shift_of(LANE);
        for (; n >= 3 * LANE; n -= 3 * LANE, p += 3 * LANE, dst = dst ? dst + 3 * LANE : NULL) {
            uint64_t a = c, b = 0, d = 0;
            for (size_t i = 0; i < LANE; i += 8) {
                a = crc_word(a, p + i, dst ? dst + i : NULL);
                b = crc_word(b, p + LANE + i, dst ? dst + LANE + i : NULL);
                d = crc_word(d, p + 2 * LANE + i, dst ? dst + 2 * LANE + i : NULL);
            }
            c = gf_mul(gf_mul((uint32_t)a, lane_shift) ^ (uint32_t)b, lane_shift) ^ (uint32_t)d;
        }
    }
    for (; n >= 8; n -= 8, p += 8, dst = dst ? dst + 8 : NULL) c = crc_word(c, p, dst);
    crc = (uint32_t)c;
    if (dst) memcpy(dst, p, n);
    for (; n; n--) crc = _mm_crc32_u8(crc, *p++);
    return crc;
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    return crc_lanes(crc, NULL, p, n);
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42_copy(uint32_t crc, unsigned char *dst,
                                                                 const unsigned char *p, size_t n) {
    crc = crc_lanes(crc, dst, p, n);
    _mm_sfence(); /* the streamed stores are weakly ordered: done before another thread reads dst */
    return crc;
}

uint32_t anvil_crc32c(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    crc = ~crc;
    if (__builtin_cpu_supports("sse4.2")) return ~crc_sse42(crc, p, n);
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, crc_table_init);
    for (; n; n--) crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t anvil_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    return gf_mul(crc_a, shift_of(len_b)) ^ crc_b;
}

uint32_t anvil_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n) {
    if (__builtin_cpu_supports("sse4.2")) return ~crc_sse42_copy(~crc, dst, src, n);
    memcpy(dst, src, n);
    return anvil_crc32c(crc, dst, n);
}

int anvil_crc32c_file(const char *path, uint64_t *bytes, uint32_t *crc) {
    return anvil_crc32c_file_progress(path, bytes, crc, NULL, NULL);
}

int anvil_crc32c_file_progress(const char *path, uint64_t *bytes, uint32_t *crc,
                               void (*progress)(void *ctx, uint64_t bytes), void *ctx) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return anvil_fail("%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4u << 20;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return anvil_fail("%s: out of memory", path);
    }
    uint32_t c = 0;
    uint64_t total = 0;
    int rc = 0;
    for (;;) {
        ssize_t r = read(fd, buf, cap);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = anvil_fail("%s: read error: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        c = anvil_crc32c(c, buf, (size_t)r);
        total += (uint64_t)r;
        if (progress) progress(ctx, total);
    }
    free(buf);
    close(fd);
    *bytes = total;
    *crc = c;
    return rc;
}

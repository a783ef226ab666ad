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
static uint32_t crc_table[256];

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    crc = (uint32_t)c;
    for (; n; n--) crc = _mm_crc32_u8(crc, *p++);
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

int anvil_crc32c_file(const char *path, uint64_t *bytes, uint32_t *crc) {
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
    }
    free(buf);
    close(fd);
    *bytes = total;
    *crc = c;
    return rc;
}

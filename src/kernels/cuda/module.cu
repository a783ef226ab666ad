/* The module's face to libanvil (kernels/cuda_module.h): its one exported
 * entry, and the two library functions the backend calls, forwarded to the
 * library that opened it, so an error lands in the caller's per-thread
 * message and a download's checksum is the library's own CRC32C. */
#include <stdarg.h>
#include <stdio.h>

#include "kernels/cuda/cuda_internal.cuh"

extern "C" {
#include "core/crc32c.h"
#include "kernels/cuda_module.h"
}

static const anvil_cuda_host *host;

extern "C" int anvil_fail(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return host->fail("%s", msg);
}

extern "C" uint32_t anvil_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n) {
    return host->crc32c_copy(crc, dst, src, n);
}

static const anvil_cuda_module api = {sizeof(anvil_kernels), cu_device_count, cu_device_info, cu_kernels, cu_stream};

extern "C" __attribute__((visibility("default"))) const anvil_cuda_module *
anvil_cuda_module_open(const anvil_cuda_host *h) {
    host = h;
    return &api;
}

/* The contract between libanvil and the CUDA backend's shared module
 * (libanvil_cuda.so, built from src/kernels/cuda when CMake finds nvcc).
 *
 * The backend lives in a module of its own, opened on first use
 * (kernels/cuda.c), because the CUDA runtime and cuBLASLt cost every
 * process that maps them about 0.4 s and 200 MB before main: a CPU run,
 * a `--help`, and each of the test suite's thousands of short processes
 * would pay that for a GPU they never touch. Internal to src/kernels; the
 * public face stays kernels/cuda.h. */
#ifndef ANVIL_KERNELS_CUDA_MODULE_H
#define ANVIL_KERNELS_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the module calls back into the library for: it reports errors through the caller's
 * per-thread message (core/error.h) and checksums downloads with its CRC32C. */
typedef struct anvil_cuda_host {
    int (*fail)(const char *fmt, ...);
    uint32_t (*crc32c_copy)(uint32_t crc, void *dst, const void *src, size_t n);
} anvil_cuda_host;

/* kernels/cuda.h's entry points, as the module implements them. */
typedef struct anvil_cuda_module {
    size_t table_size; /* sizeof(anvil_kernels) the module was built with: a stale module is refused */
    int (*device_count)(void);
    int (*device_info)(int device, anvil_cuda_device *info);
    const anvil_kernels *(*kernels)(int device, anvil_matmul_dtype dtype);
    void *(*stream)(void);
} anvil_cuda_module;

/* The module's one exported symbol; host must outlive the process's use of the module. */
#define ANVIL_CUDA_MODULE_ENTRY "anvil_cuda_module_open"
typedef const anvil_cuda_module *(*anvil_cuda_module_open_fn)(const anvil_cuda_host *host);

#ifdef __cplusplus
}
#endif

#endif

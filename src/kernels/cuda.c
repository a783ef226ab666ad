/* The CUDA entry points of a build without the CUDA backend (CMake found no
 * nvcc, or ANVIL_CUDA=OFF): each fails, saying so. */
#include "kernels/cuda.h"

#include "core/error.h"

#define NO_CUDA "anvil was built without CUDA (no nvcc when it was configured, or -DANVIL_CUDA=OFF)"

int anvil_cuda_device_count(void) { return anvil_fail(NO_CUDA); }

int anvil_cuda_device_info(int device, anvil_cuda_device *info) {
    (void)device;
    (void)info;
    return anvil_fail(NO_CUDA);
}

const anvil_kernels *anvil_kernels_cuda(int device, anvil_matmul_dtype dtype) {
    (void)device;
    (void)dtype;
    anvil_fail(NO_CUDA);
    return NULL;
}

void *anvil_cuda_stream(void) { return NULL; }

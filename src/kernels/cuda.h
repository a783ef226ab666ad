/* The CUDA backend: the whole kernel table (kernels.h) on one NVIDIA GPU.
 *
 * A process drives one device. The first anvil_kernels_cuda call binds the
 * process to its device (creating the stream every kernel runs on, the
 * cuBLASLt handle and its workspace); later calls for the same device hand
 * out the fp32 or bf16 table, another device is refused. Pointers given to
 * the tables' kernels are device memory from the table's alloc; tokens and
 * targets are device buffers too. Everything is queued in order on the one
 * stream: upload and download wait for it, and so does the table's sync,
 * which reports the first CUDA or cuBLAS error of any kernel since the
 * start (the void kernels cannot return one). After a failure the backend
 * stays failed: every later sync and int-returning kernel returns -1.
 *
 * The backend is a module (libanvil_cuda.so) that the first call opens,
 * so a process that never asks for a GPU never maps the CUDA libraries.
 * Without a GPU, without the module or its CUDA libraries, or in a build
 * without CUDA (CMake found no nvcc), every function here fails with a
 * one-line anvil_fail message and returns -1 or NULL. */
#ifndef ANVIL_KERNELS_CUDA_H
#define ANVIL_KERNELS_CUDA_H

#include <stddef.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct anvil_cuda_device {
    char name[256];
    size_t memory_bytes; /* global memory */
    int sm_count;        /* streaming multiprocessors */
    int cc_major, cc_minor; /* compute capability */
} anvil_cuda_device;

/* The number of CUDA devices (>= 1), or -1 after anvil_fail ("no CUDA device", with the runtime's
 * reason, or "anvil was built without CUDA"). */
int anvil_cuda_device_count(void);
/* What `anvil info` lists about device `device`; -1 after anvil_fail. */
int anvil_cuda_device_info(int device, anvil_cuda_device *info);
/* The table on `device` with matmuls (linear layers, LM head, logits) in `dtype`: fp32 computes in
 * true fp32 (no TF32); bf16 rounds the operands to bf16 (nearest even) and sums in fp32, as the
 * CPU's bf16 tables do. NULL after anvil_fail (no such device, compute capability below 8.0, the
 * process already bound to another device, out of memory). */
const anvil_kernels *anvil_kernels_cuda(int device, anvil_matmul_dtype dtype);
/* The cudaStream_t the tables' kernels run on, for work (NCCL) that must be ordered against them;
 * NULL before anvil_kernels_cuda succeeded. */
void *anvil_cuda_stream(void);

#ifdef __cplusplus
}
#endif

#endif

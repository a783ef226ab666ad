/* The CUDA backend's state and memory entries: binding to a device, the
 * error latch, device memory, copies, the checkpoint snapshot's fused
 * download and CRC, and the two tables (kernels/cuda.h, through module.cu). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <atomic>

#include "kernels/cuda/cuda_internal.cuh"

extern "C" {
#include "core/crc32c.h"
}

/* cuBLASLt's workspace: what NVIDIA recommends for Hopper. */
#define WORKSPACE_BYTES ((size_t)32 << 20)

cu_state cu_g = {-1, nullptr, nullptr, nullptr, 0};

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static std::atomic<bool> ready{false};
static anvil_kernels table_f32, table_bf16;

/* ---- the error latch ---- */

static pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;
static std::atomic<bool> err_set{false};
static char err_msg[640];
/* The entry that queued the latest kernel: an asynchronous fault surfaces at a later sync, and this
 * is where to start looking (CUDA_LAUNCH_BLOCKING=1 makes every launch report its own). */
static std::atomic<const char *> last_launch{"(none)"};

void cu_latch(const char *what, const char *fmt, ...) {
    pthread_mutex_lock(&err_mu);
    if (!err_set.load()) {
        int n = snprintf(err_msg, sizeof err_msg, "cuda: %s: ", what);
        va_list ap;
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < sizeof err_msg) vsnprintf(err_msg + n, sizeof err_msg - (size_t)n, fmt, ap);
        va_end(ap);
        err_set.store(true);
    }
    pthread_mutex_unlock(&err_mu);
}

bool cu_ok(const char *what, cudaError_t e) {
    if (e == cudaSuccess) return true;
    cu_latch(what, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    return false;
}

bool cu_blas_ok(const char *what, cublasStatus_t s) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    cu_latch(what, "cuBLASLt: %s (%s)", cublasLtGetStatusString(s), cublasLtGetStatusName(s));
    return false;
}

bool cu_launched(const char *what) {
    last_launch.store(what);
    return cu_ok(what, cudaGetLastError());
}

bool cu_failed(void) { return err_set.load(); }

int cu_status(void) {
    if (!err_set.load()) return 0;
    pthread_mutex_lock(&err_mu);
    int rc = anvil_fail("%s", err_msg);
    pthread_mutex_unlock(&err_mu);
    return rc;
}

bool cu_enter(void) {
    static thread_local int bound = -1;
    if (bound == cu_g.dev) return true;
    if (!cu_ok("cudaSetDevice", cudaSetDevice(cu_g.dev))) return false;
    bound = cu_g.dev;
    return true;
}

void *cu_scratch(const char *what, size_t bytes) {
    void *p = nullptr;
    if (!cu_ok(what, cudaMallocAsync(&p, bytes ? bytes : 1, cu_g.stream))) return nullptr;
    return p;
}

void cu_scratch_free(void *p) {
    if (p) cu_ok("cudaFreeAsync", cudaFreeAsync(p, cu_g.stream));
}

/* ---- memory ---- */

/* A failed cudaMalloc is reported by the NULL alone (the caller names what it allocated); its
 * error is cleared so that no later launch check picks it up. */
static void *cu_alloc(size_t bytes) {
    if (!cu_enter()) return nullptr;
    size_t n = bytes ? bytes : 1;
    void *p = nullptr;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    /* Zeroed before any other stream (a collective's) can see it. */
    if (!cu_ok("alloc", cudaMemsetAsync(p, 0, n, cu_g.stream)) || !cu_ok("alloc", cudaStreamSynchronize(cu_g.stream))) {
        cudaFree(p);
        return nullptr;
    }
    return p;
}

static void cu_free(void *p) {
    if (p && cu_enter()) cu_ok("free", cudaFree(p));
}

static void cu_zero(void *p, size_t bytes) {
    if (bytes && cu_enter()) cu_ok("zero", cudaMemsetAsync(p, 0, bytes, cu_g.stream));
}

/* Both copies return once the host buffer may be reused (upload) or read (download). */
static void cu_upload(void *dst, const void *src, size_t bytes) {
    if (!bytes || !cu_enter()) return;
    if (cu_ok("upload", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_g.stream)))
        cu_ok("upload", cudaStreamSynchronize(cu_g.stream));
}

/* A failed download leaves dst all 0xFF bytes (NaN as floats), so a caller that reads it before
 * its next sync sees NaN, never stale numbers. */
static void cu_download(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    if (cu_enter() && cu_ok("download", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cu_g.stream)) &&
        cu_ok("download", cudaStreamSynchronize(cu_g.stream)))
        return;
    memset(dst, 0xFF, bytes);
}

static int cu_sync(void) {
    if (!cu_enter()) return cu_status();
    cudaError_t e = cudaStreamSynchronize(cu_g.stream);
    if (e != cudaSuccess)
        cu_latch("sync", "a kernel queued before this sync failed (the last queued was %s): %s (%s)",
                 last_launch.load(), cudaGetErrorString(e), cudaGetErrorName(e));
    return cu_status();
}

/* ---- the snapshot's download, CRC fused ----
 * Each call takes a slot of two pinned buffers: while the CPU checksums and copies one chunk into
 * dst, the copy engine fills the other. The checkpointer calls this on every OpenMP thread at once;
 * threads beyond the slots wait for one. */
#define STAGE_BYTES ((size_t)8 << 20)
#define STAGE_SLOTS 8

struct stage_slot {
    unsigned char *buf[2];
    cudaEvent_t filled[2];
    bool ready, busy;
};
static stage_slot slots[STAGE_SLOTS];
static pthread_mutex_t stage_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stage_cv = PTHREAD_COND_INITIALIZER;

static bool stage_init(stage_slot *s) {
    bool ok = true;
    for (int b = 0; b < 2; b++) {
        s->buf[b] = nullptr;
        s->filled[b] = nullptr;
        ok = ok && cu_ok("download_crc32c", cudaMallocHost((void **)&s->buf[b], STAGE_BYTES));
        ok = ok && cu_ok("download_crc32c", cudaEventCreateWithFlags(&s->filled[b], cudaEventDisableTiming));
    }
    if (!ok)
        for (int b = 0; b < 2; b++) {
            if (s->buf[b]) cudaFreeHost(s->buf[b]);
            if (s->filled[b]) cudaEventDestroy(s->filled[b]);
        }
    s->ready = ok;
    return ok;
}

static stage_slot *stage_acquire(void) {
    pthread_mutex_lock(&stage_mu);
    stage_slot *s = nullptr;
    while (!s) {
        for (int i = 0; i < STAGE_SLOTS && !s; i++)
            if (!slots[i].busy) s = &slots[i];
        if (!s) pthread_cond_wait(&stage_cv, &stage_mu);
    }
    s->busy = true;
    pthread_mutex_unlock(&stage_mu);
    return s;
}

static void stage_release(stage_slot *s) {
    pthread_mutex_lock(&stage_mu);
    s->busy = false;
    pthread_cond_signal(&stage_cv);
    pthread_mutex_unlock(&stage_mu);
}

static bool stage_issue(stage_slot *s, int b, const unsigned char *from, size_t len) {
    return cu_ok("download_crc32c", cudaMemcpyAsync(s->buf[b], from, len, cudaMemcpyDeviceToHost, cu_g.stream)) &&
           cu_ok("download_crc32c", cudaEventRecord(s->filled[b], cu_g.stream));
}

static uint32_t cu_download_crc32c(void *dst, const void *src, size_t bytes, uint32_t crc) {
    if (!bytes) return crc;
    if (!cu_enter()) {
        memset(dst, 0xFF, bytes);
        return crc;
    }
    stage_slot *s = stage_acquire();
    if (!s->ready && !stage_init(s)) { /* no pinned memory: latched, and the next sync reports it */
        stage_release(s);
        memset(dst, 0xFF, bytes);
        return crc;
    }
    const unsigned char *from = (const unsigned char *)src;
    unsigned char *to = (unsigned char *)dst;
    size_t chunks = (bytes + STAGE_BYTES - 1) / STAGE_BYTES;
    bool ok = stage_issue(s, 0, from, bytes < STAGE_BYTES ? bytes : STAGE_BYTES);
    for (size_t i = 0; i < chunks && ok; i++) {
        size_t off = i * STAGE_BYTES, len = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        if (i + 1 < chunks) {
            size_t next = off + STAGE_BYTES, nlen = bytes - next < STAGE_BYTES ? bytes - next : STAGE_BYTES;
            ok = stage_issue(s, (int)((i + 1) & 1), from + next, nlen);
        }
        ok = ok && cu_ok("download_crc32c", cudaEventSynchronize(s->filled[i & 1]));
        if (ok) crc = anvil_crc32c_copy(crc, to + off, s->buf[i & 1], len);
    }
    if (!ok) {
        /* Nothing may still be writing into the slot when the next caller takes it. */
        (void)cudaStreamSynchronize(cu_g.stream);
        memset(dst, 0xFF, bytes);
    }
    stage_release(s);
    return crc;
}

/* ---- devices and the tables ---- */

int cu_device_count(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return anvil_fail("cuda: no CUDA device (%s)", cudaGetErrorString(e));
    }
    return n > 0 ? n : anvil_fail("cuda: no CUDA device");
}

int cu_device_info(int device, anvil_cuda_device *info) {
    int n = cu_device_count();
    if (n < 0) return -1;
    if (device < 0 || device >= n) return anvil_fail("cuda: no device %d (this machine has %d)", device, n);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess) return anvil_fail("cuda: device %d: %s", device, cudaGetErrorString(e));
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->memory_bytes = p.totalGlobalMem;
    info->sm_count = p.multiProcessorCount;
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    return 0;
}

void *cu_stream(void) { return ready.load() ? (void *)cu_g.stream : nullptr; }

/* The kernel interface's attention takes grouped-query shapes (NH query heads, NKV key/value heads of
 * hs); these kernels compute multi-head attention (NKV = NH) and refuse the rest. */
static int mha_shape(const char *what, int NH, int NKV) {
    if (NKV == NH) return 0;
    cu_latch(what, "grouped-query attention (%d query heads, %d key/value heads) is not on the CUDA backend", NH,
             NKV);
    return cu_status();
}

static int attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs) {
    return mha_shape("attention_forward", NH, NKV) ? -1 : cu_attention_forward(out, lse, qkv, B, T, NH * hs, NH);
}
static int attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs) {
    return mha_shape("attention_forward", NH, NKV) ? -1 : cu_attention_forward_bf16(out, lse, qkv, B, T, NH * hs, NH);
}
static int attention_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                              int B, int T, int NH, int NKV, int hs) {
    return mha_shape("attention_backward", NH, NKV) ? -1
                                                    : cu_attention_backward(dqkv, dout, out, lse, qkv, B, T, NH * hs, NH);
}
static int attention_backward_bf16(float *dqkv, const float *dout, const float *out, const float *lse,
                                   const float *qkv, int B, int T, int NH, int NKV, int hs) {
    return mha_shape("attention_backward", NH, NKV)
               ? -1
               : cu_attention_backward_bf16(dqkv, dout, out, lse, qkv, B, T, NH * hs, NH);
}
static int attention_decode(float *out, const float *q, const float *kcache, const float *vcache, int n, int NH,
                            int NKV, int hs) {
    return mha_shape("attention_decode", NH, NKV) ? -1 : cu_attention_decode(out, q, kcache, vcache, n, NH * hs, NH);
}

/* Llama's kernels are not on the CUDA backend yet: each latches a failure that the next sync reports. */
static void rmsnorm_forward(float *, float *, const float *, const float *, int, int, float) {
    cu_latch("rmsnorm_forward", "not on the CUDA backend");
}
static void rmsnorm_backward(float *, float *, const float *, const float *, const float *, const float *, int, int) {
    cu_latch("rmsnorm_backward", "not on the CUDA backend");
}
static void rope_forward(float *, const float *, int, int, int, int, int, int) {
    cu_latch("rope_forward", "not on the CUDA backend");
}
static void rope_backward(float *, const float *, int, int, int, int, int, int) {
    cu_latch("rope_backward", "not on the CUDA backend");
}
static void swiglu_forward(float *, const float *, const float *, int, int, int) {
    cu_latch("swiglu_forward", "not on the CUDA backend");
}
static void swiglu_backward(float *, float *, const float *, const float *, const float *, int, int, int) {
    cu_latch("swiglu_backward", "not on the CUDA backend");
}

static void fill_table(anvil_kernels *t, bool bf16) {
    t->name = bf16 ? "cuda-bf16" : "cuda";
    t->alloc = cu_alloc;
    t->free = cu_free;
    t->zero = cu_zero;
    t->upload = cu_upload;
    t->download = cu_download;
    t->download_crc32c = cu_download_crc32c;
    t->sync = cu_sync;
    t->encoder_forward = cu_encoder_forward;
    t->encoder_backward = cu_encoder_backward;
    t->encoder_shard_forward = cu_encoder_shard_forward;
    t->encoder_shard_backward = cu_encoder_shard_backward;
    t->layernorm_forward = cu_layernorm_forward;
    t->layernorm_backward = cu_layernorm_backward;
    t->matmul_forward = bf16 ? cu_matmul_forward_bf16 : cu_matmul_forward_f32;
    t->matmul_backward = bf16 ? cu_matmul_backward_bf16 : cu_matmul_backward_f32;
    t->attention_forward = bf16 ? attention_forward_bf16 : attention_forward;
    t->attention_backward = bf16 ? attention_backward_bf16 : attention_backward;
    t->attention_decode = attention_decode;
    t->rmsnorm_forward = rmsnorm_forward;
    t->rmsnorm_backward = rmsnorm_backward;
    t->rope_forward = rope_forward;
    t->rope_backward = rope_backward;
    t->swiglu_forward = swiglu_forward;
    t->swiglu_backward = swiglu_backward;
    t->gelu_forward = cu_gelu_forward;
    t->gelu_backward = cu_gelu_backward;
    t->copy = cu_copy;
    t->add_inplace = cu_add_inplace;
    t->classifier = bf16 ? cu_classifier_bf16 : cu_classifier_f32;
    t->classifier_shard_stats = bf16 ? cu_classifier_shard_stats_bf16 : cu_classifier_shard_stats_f32;
    t->classifier_shard_backward = bf16 ? cu_classifier_shard_backward_bf16 : cu_classifier_shard_backward_f32;
    t->logits = bf16 ? cu_logits_bf16 : cu_logits_f32;
    t->sumsq = cu_sumsq;
    t->adamw = cu_adamw;
}

static int init_fail(const char *what, cudaError_t e) {
    (void)cudaGetLastError();
    return anvil_fail("cuda: %s: %s", what, cudaGetErrorString(e));
}

/* The stream, cuBLASLt and its workspace on `device`; the memory pool keeps what scratch memory
 * it has grown to (by default it would hand it back to the driver at every sync). */
static int init(int device) {
    anvil_cuda_device info;
    if (cu_device_info(device, &info)) return -1;
    if (info.cc_major < 8)
        return anvil_fail("cuda: device %d (%s) has compute capability %d.%d; anvil's kernels need 8.0 or later",
                          device, info.name, info.cc_major, info.cc_minor);
    cudaError_t e;
    if ((e = cudaSetDevice(device)) != cudaSuccess) return init_fail("cudaSetDevice", e);
    if ((e = cudaStreamCreateWithFlags(&cu_g.stream, cudaStreamNonBlocking)) != cudaSuccess)
        return init_fail("cudaStreamCreate", e);
    cublasStatus_t bs = cublasLtCreate(&cu_g.lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(cu_g.stream);
        return anvil_fail("cuda: cublasLtCreate: %s", cublasLtGetStatusString(bs));
    }
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    if ((e = cudaMalloc(&cu_g.workspace, WORKSPACE_BYTES)) != cudaSuccess ||
        (e = cudaDeviceGetDefaultMemPool(&pool, device)) != cudaSuccess ||
        (e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep)) != cudaSuccess) {
        if (cu_g.workspace) cudaFree(cu_g.workspace);
        cu_g.workspace = nullptr;
        cublasLtDestroy(cu_g.lt);
        cudaStreamDestroy(cu_g.stream);
        return init_fail("device setup", e);
    }
    cu_g.workspace_bytes = WORKSPACE_BYTES;
    cu_g.dev = device;
    fill_table(&table_f32, false);
    fill_table(&table_bf16, true);
    ready.store(true);
    return 0;
}

const anvil_kernels *cu_kernels(int device, anvil_matmul_dtype dtype) {
    pthread_mutex_lock(&init_mu);
    int rc = 0;
    if (!ready.load()) rc = init(device);
    else if (device != cu_g.dev)
        rc = anvil_fail("cuda: this process drives device %d and cannot also drive device %d", cu_g.dev, device);
    pthread_mutex_unlock(&init_mu);
    if (rc) return nullptr;
    return dtype == ANVIL_MATMUL_BF16 ? &table_bf16 : &table_f32;
}

/* kernels/cuda.h's entry points: the CUDA backend's module, opened on the
 * first call (kernels/cuda_module.h says why it is a module).
 *
 * The module is looked for beside the running binary, then in the build
 * folder the library was configured in (where the tests and benchmarks,
 * one folder down, find it). A build without CUDA (CMake found no nvcc,
 * or ANVIL_CUDA=OFF) has no module, and every entry fails saying so. */
#include "kernels/cuda.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "kernels/cuda_module.h"

#ifdef ANVIL_CUDA_MODULE_DIR

#define MODULE_NAME "libanvil_cuda.so"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const anvil_cuda_module *mod;
static char why[768];

static const anvil_cuda_host host = {anvil_fail, anvil_crc32c_copy};

/* Opens path into mod, or leaves its reason in why (the first reason is kept: it names the
 * candidate nearest the binary). */
static void try_open(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        if (!why[0]) snprintf(why, sizeof why, "cuda: cannot load the CUDA backend: %s", dlerror());
        return;
    }
    anvil_cuda_module_open_fn open_fn;
    *(void **)&open_fn = dlsym(h, ANVIL_CUDA_MODULE_ENTRY);
    const anvil_cuda_module *m = open_fn ? open_fn(&host) : NULL;
    if (!m || m->table_size != sizeof(anvil_kernels)) {
        snprintf(why, sizeof why, "cuda: %s is not this build's CUDA backend (rebuild anvil)", path);
        dlclose(h);
        return;
    }
    mod = m;
}

static void load(void) {
    char self[PATH_MAX], path[PATH_MAX + sizeof MODULE_NAME + 1];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        snprintf(path, sizeof path, "%s/" MODULE_NAME, dirname(self));
        if (access(path, F_OK) == 0) try_open(path);
    }
    if (!mod) try_open(ANVIL_CUDA_MODULE_DIR "/" MODULE_NAME);
}

/* The module, or NULL after anvil_fail with why it could not be loaded. */
static const anvil_cuda_module *module(void) {
    pthread_once(&once, load);
    if (!mod) anvil_fail("%s", why);
    return mod;
}

int anvil_cuda_device_count(void) {
    const anvil_cuda_module *m = module();
    return m ? m->device_count() : -1;
}

int anvil_cuda_device_info(int device, anvil_cuda_device *info) {
    const anvil_cuda_module *m = module();
    return m ? m->device_info(device, info) : -1;
}

const anvil_kernels *anvil_kernels_cuda(int device, anvil_matmul_dtype dtype) {
    const anvil_cuda_module *m = module();
    return m ? m->kernels(device, dtype) : NULL;
}

void *anvil_cuda_stream(void) {
    pthread_once(&once, load);
    return mod ? mod->stream() : NULL;
}

#else

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

#endif

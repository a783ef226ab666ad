/* Choosing a backend by device: the CPU's tables, or a GPU's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cuda.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"

int anvil_device_parse(const char *s, anvil_device *out) {
    if (!strcmp(s, "cpu")) {
        *out = (anvil_device){ANVIL_DEVICE_CPU, 0};
        return 0;
    }
    if (!strncmp(s, "cuda", 4) && (!s[4] || s[4] == ':')) {
        char *end = NULL;
        long i = s[4] ? strtol(s + 5, &end, 10) : 0;
        if (s[4] && (end == s + 5 || *end || i < 0 || i > 1023))
            return anvil_fail("device '%s': the GPU index must be an integer in 0..1023 (cuda:N)", s);
        *out = (anvil_device){ANVIL_DEVICE_CUDA, (int)i};
        return 0;
    }
    return anvil_fail("device '%s' is neither cpu nor cuda[:N]", s);
}

void anvil_device_name(anvil_device d, char *out, size_t cap) {
    if (d.kind == ANVIL_DEVICE_CPU) snprintf(out, cap, "cpu");
    else snprintf(out, cap, "cuda:%d", d.index);
}

const anvil_kernels *anvil_kernels_for(anvil_device device, anvil_matmul_dtype dtype) {
    if (device.kind == ANVIL_DEVICE_CUDA) return anvil_kernels_cuda(device.index, dtype);
    const anvil_kernels *k = anvil_kernels_cpu_for(dtype);
    if (!k) anvil_isa_check_bf16();
    return k;
}

/* The one AMX tile configuration in anvil: palette 1, every tile 16 rows of 64 bytes. The AMX GEMM
 * tile (tile_amx_bf16.c) and the AMX peak probe (fma_peak.c) both load it, so a thread that ran one
 * finds its tiles shaped for the other. Static and const because _tile_loadconfig's asm tells the
 * compiler it reads 8 bytes only: stores to a local configuration could be dropped as dead. */
#ifndef ANVIL_KERNELS_CPU_AMX_CONFIG_H
#define ANVIL_KERNELS_CPU_AMX_CONFIG_H

#include <stdint.h>

static const _Alignas(64) struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tile_config = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

#endif

/* Seeded, reproducible random numbers: used for weight initialization,
 * sampling and data shuffling. The state is two 64-bit words so that the
 * checkpoint code can save and restore it exactly. */
#ifndef ANVIL_CORE_RNG_H
#define ANVIL_CORE_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[2];
} anvil_rng;

void anvil_rng_seed(anvil_rng *r, uint64_t seed);
uint64_t anvil_rng_u64(anvil_rng *r);
/* Uniform in [0, 1) with 24 bits of resolution, as a float can hold. */
float anvil_rng_uniform(anvil_rng *r);
/* Standard normal, by Box-Muller on two uniforms. */
float anvil_rng_normal(anvil_rng *r);

#endif

#include "core/rng.h"

#include <math.h>

/* splitmix64 expands the user's seed into well-mixed state words. */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void anvil_rng_seed(anvil_rng *r, uint64_t seed) {
    r->s[0] = splitmix64(&seed);
    r->s[1] = splitmix64(&seed);
}

/* xoroshiro128+ */
uint64_t anvil_rng_u64(anvil_rng *r) {
    uint64_t s0 = r->s[0], s1 = r->s[1];
    uint64_t result = s0 + s1;
    s1 ^= s0;
    r->s[0] = ((s0 << 24) | (s0 >> 40)) ^ s1 ^ (s1 << 16);
    r->s[1] = (s1 << 37) | (s1 >> 27);
    return result;
}

float anvil_rng_uniform(anvil_rng *r) { return (float)(anvil_rng_u64(r) >> 40) / 16777216.0f; }

float anvil_rng_normal(anvil_rng *r) {
    /* 1 - u keeps the log argument in (0, 1]. */
    double u1 = 1.0 - (double)(anvil_rng_u64(r) >> 11) / 9007199254740992.0;
    double u2 = (double)(anvil_rng_u64(r) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

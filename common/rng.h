/* Random numbers for everything ddp-train draws (weight initialisation,
 * data augmentation, shuffling, synthetic data): a generator seeded from a
 * tuple, so every stream is a pure function of its seed and indices and
 * never of the rank or the thread that draws it. */
#ifndef DDPRUN_COMMON_RNG_H
#define DDPRUN_COMMON_RNG_H

#include <stdint.h>

/* A small, fast, splittable generator (splitmix64 seeding xoshiro256**). */
typedef struct {
    uint64_t s[4];
} rng_t;
void rng_seed(rng_t *r, uint64_t a, uint64_t b, uint64_t c);
uint64_t rng_next(rng_t *r);
/* Uniform in [0, n). */
uint64_t rng_below(rng_t *r, uint64_t n);
/* Uniform float in [0, 1). */
float rng_float(rng_t *r);
/* Standard normal (Box-Muller). */
float rng_normal(rng_t *r);

#endif

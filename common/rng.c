/* The random number generator behind everything random in ddp-train's
 * data: xoshiro256** seeded through splitmix64 from three words (typically
 * seed, epoch and sample index), so that any stream can be recreated on
 * demand from those words alone, on any rank, after any restart. */
#include "common/rng.h"

#include <assert.h>
#include <math.h>

/* One splitmix64 step: advances *x and returns a well-mixed output. It is
 * the seeding generator the xoshiro authors recommend, because it turns
 * nearby seeds (epoch 3, epoch 4) into unrelated states. */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* The three words are absorbed one after another, each passing through a
 * full splitmix64 mix, so that (a, b, c) and (b, a, c) give unrelated
 * streams; the four state words are then drawn from the mixed value. */
void rng_seed(rng_t *r, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t x = a;
    uint64_t h = splitmix64(&x);
    x = h ^ b;
    h = splitmix64(&x);
    x = h ^ c;
    h = splitmix64(&x);
    x = h;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    /* xoshiro's only bad state is all zeros; four consecutive splitmix64
     * outputs are never all zero, but say so rather than rely on it. */
    assert(r->s[0] | r->s[1] | r->s[2] | r->s[3]);
}

uint64_t rng_next(rng_t *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Rejection sampling: draws below 2^64 mod n would make the small residues
 * slightly more likely, so they are redrawn (rarely: at most n / 2^64 of
 * the time). */
uint64_t rng_below(rng_t *r, uint64_t n) {
    assert(n > 0);
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t x = rng_next(r);
        if (x >= threshold) return x % n;
    }
}

/* The top 24 bits, because a float's mantissa holds exactly 24: every
 * value is representable and 1.0 is never returned. */
float rng_float(rng_t *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }

/* Box-Muller with u1 in (0, 1], so the logarithm is always finite. Only
 * the cosine half is used: keeping the sine half for the next call would
 * make the stream depend on call history beyond the state words. */
float rng_normal(rng_t *r) {
    double u1 = (double)((rng_next(r) >> 11) + 1) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

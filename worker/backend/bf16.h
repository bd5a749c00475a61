/* bfloat16 on the host: the top half of an IEEE float, rounded to nearest
 * even as GPUs round (__float2bfloat16_rn), NaN kept a NaN. */
#ifndef DDPRUN_WORKER_BACKEND_BF16_H
#define DDPRUN_WORKER_BACKEND_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f rounded to bf16's precision, as a float. */
static inline float bf16_round(float f) { return bf16_to_float(bf16_from_float(f)); }

static inline void bf16_from_floats(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_float(src[i]);
}

static inline void bf16_to_floats(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float(src[i]);
}

#endif

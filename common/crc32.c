/* See crc32.h. The folding is the one in Intel's white paper "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ Instruction" (2009),
 * for the reflected polynomial 0x1DB710641: four 128-bit lanes are folded
 * over 64 bytes at a time (constants x^(512+64) and x^512 mod P), then into
 * one lane (x^(128+64), x^128 mod P), down to 64 bits, and Barrett-reduced
 * to 32 (P and floor(x^64 / P), both bit-reflected). */
#include "common/crc32.h"

#include <zlib.h>

uint32_t crc32_portable(uint32_t crc, const void *p, size_t n) {
    const unsigned char *b = p;
    /* zlib's crc32 takes a 32-bit length: feed it in chunks */
    while (n > 0) {
        size_t k = n > (1u << 30) ? (1u << 30) : n;
        crc = (uint32_t)crc32(crc, b, (uInt)k);
        b += k;
        n -= k;
    }
    return crc;
}

#if defined(__x86_64__)
#include <immintrin.h>

#define FOLD_MIN 64 /* below this zlib is as fast */

/* One 128-bit lane folded 128 * k bits forward (by the constant pair
 * in k) and added to the next data. */
__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold(__m128i x, __m128i k,
                                                                   __m128i next) {
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(hi, lo), next);
}

/* The CRC register (not inverted) after n bytes, n >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t fold_pclmul(uint32_t reg,
                                                                    const unsigned char *b,
                                                                    size_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i pmu = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(b + 0));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(b + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(b + 32));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(b + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)reg));
    b += 64, n -= 64;
    for (; n >= 64; b += 64, n -= 64) {
        x1 = fold(x1, k1k2, _mm_loadu_si128((const __m128i *)(b + 0)));
        x2 = fold(x2, k1k2, _mm_loadu_si128((const __m128i *)(b + 16)));
        x3 = fold(x3, k1k2, _mm_loadu_si128((const __m128i *)(b + 32)));
        x4 = fold(x4, k1k2, _mm_loadu_si128((const __m128i *)(b + 48)));
    }
    x1 = fold(x1, k3k4, x2);
    x1 = fold(x1, k3k4, x3);
    x1 = fold(x1, k3k4, x4);
    for (; n >= 16; b += 16, n -= 16)
        x1 = fold(x1, k3k4, _mm_loadu_si128((const __m128i *)b));
    /* 128 bits to 64 */
    __m128i x2f = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2f);
    __m128i hi = _mm_srli_si128(x1, 4);
    x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00);
    x1 = _mm_xor_si128(x1, hi);
    /* Barrett: 64 bits to 32 */
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), pmu, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), pmu, 0x00);
    x1 = _mm_xor_si128(x1, t);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

int crc32_is_accelerated(void) {
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    }
    return have;
}

uint32_t crc32_update(uint32_t crc, const void *p, size_t n) {
    const unsigned char *b = p;
    if (n >= FOLD_MIN && crc32_is_accelerated()) {
        size_t whole = n & ~(size_t)15;
        crc = ~fold_pclmul(~crc, b, whole);
        b += whole, n -= whole;
    }
    return crc32_portable(crc, b, n);
}

#else

int crc32_is_accelerated(void) { return 0; }

uint32_t crc32_update(uint32_t crc, const void *p, size_t n) { return crc32_portable(crc, p, n); }

#endif

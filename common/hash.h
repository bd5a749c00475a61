/* FNV-1a, 64 bits: the one non-cryptographic hash in ddprun (the store's
 * key table, the communicator's per-attempt port offset, checkpoints'
 * weight digest). Chain calls to hash several pieces as one stream. */
#ifndef DDPRUN_COMMON_HASH_H
#define DDPRUN_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV1A64_INIT 0xcbf29ce484222325ull

static inline uint64_t hash_fnv1a64(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#endif

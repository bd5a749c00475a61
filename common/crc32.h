/* CRC-32 as zlib computes it (the IEEE 802.3 polynomial, reflected:
 * zlib.crc32 in Python gives the same values), fast: on x86-64 CPUs with
 * carry-less multiplication (PCLMULQDQ: every x86-64 CPU since 2010) the
 * data is folded 64 bytes at a time, several times zlib's own speed; on
 * others, and for the short tails, zlib's crc32. Checkpoints are checked
 * with it: a snapshot of every step checksums the whole training state
 * every step. */
#ifndef DDPRUN_COMMON_CRC32_H
#define DDPRUN_COMMON_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of n bytes at p, continuing crc (0 to start). Any length. */
uint32_t crc32_update(uint32_t crc, const void *p, size_t n);

/* zlib's alone, for comparison and tests (also any length). */
uint32_t crc32_portable(uint32_t crc, const void *p, size_t n);

/* Whether crc32_update folds with PCLMULQDQ on this CPU. */
int crc32_is_accelerated(void);

#endif

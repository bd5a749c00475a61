/* common/crc32.c: the folded CRC equals zlib's for every length, start
 * and alignment, and continues across calls. */
#include <stdlib.h>
#include <string.h>

#include "common/crc32.h"
#include "tests/unit/test.h"

TEST(crc32_known_value) {
    CHECK_EQ(crc32_update(0, "123456789", 9), 0xCBF43926u);
    CHECK_EQ(crc32_update(0, "", 0), 0);
    /* 64 bytes and up take the folding path */
    char s[200];
    for (int i = 0; i < 200; i++) s[i] = (char)('a' + i % 26);
    CHECK_EQ(crc32_update(0, s, 200), crc32_portable(0, s, 200));
}

TEST(crc32_equals_zlib_at_every_length_and_alignment) {
    size_t n = 1 << 16;
    unsigned char *buf = malloc(n + 64);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n + 64; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    for (size_t len = 0; len <= 600; len++)
        for (size_t off = 0; off < 16; off += 5) {
            uint32_t start = (uint32_t)(len * 2654435761u);
            uint32_t want = crc32_portable(start, buf + off, len);
            uint32_t got = crc32_update(start, buf + off, len);
            if (got != want)
                test_fail(__FILE__, __LINE__, "length %zu at offset %zu: %08x, zlib %08x", len,
                          off, got, want);
        }
    CHECK_EQ(crc32_update(0, buf + 3, n), crc32_portable(0, buf + 3, n));
    /* in pieces of odd sizes, as a stream */
    uint32_t c = 0;
    for (size_t at = 0, k = 1; at < n; at += k, k = k * 3 % 977 + 1)
        c = crc32_update(c, buf + at, at + k > n ? n - at : k);
    CHECK_EQ(c, crc32_portable(0, buf, n));
    free(buf);
}

TEST(crc32_is_accelerated_on_x86_64_with_pclmul) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    CHECK_EQ(crc32_is_accelerated(), __builtin_cpu_supports("pclmul") != 0);
#else
    CHECK_EQ(crc32_is_accelerated(), 0);
#endif
}

/* Unit tests of common/base64.c against RFC 4648's test vectors. */
#include "common/base64.h"
#include "tests/unit/test.h"

#include <stdlib.h>

static const char *vectors[][2] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                   {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                   {"foobar", "Zm9vYmFy"}};

TEST(base64_rfc4648_vectors) {
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        char out[32];
        base64_encode(vectors[i][0], strlen(vectors[i][0]), out);
        CHECK_STR(out, vectors[i][1]);
        CHECK_EQ(base64_len(strlen(vectors[i][0])), strlen(vectors[i][1]));
        size_t n = 99;
        unsigned char *back = base64_decode(vectors[i][1], &n);
        CHECK(back != NULL);
        CHECK_EQ(n, strlen(vectors[i][0]));
        CHECK(memcmp(back, vectors[i][0], n) == 0);
        free(back);
    }
}

TEST(base64_every_byte_round_trips) {
    unsigned char all[256];
    for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
    char enc[400];
    base64_encode(all, sizeof all, enc);
    size_t n = 0;
    unsigned char *back = base64_decode(enc, &n);
    CHECK(back && n == sizeof all && memcmp(back, all, n) == 0);
    free(back);
}

TEST(base64_refuses_what_is_not_base64) {
    const char *bad[] = {"Zg=", "Z===", "Zm9v!A==", "Zg==Zg==", "Zm=v"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n;
        CHECK(base64_decode(bad[i], &n) == NULL);
    }
}

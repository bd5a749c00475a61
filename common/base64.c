/* See base64.h. */
#include "common/base64.h"

#include <stdlib.h>
#include <string.h>

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_len(size_t n) { return (n + 2) / 3 * 4; }

void base64_encode(const void *src, size_t n, char *out) {
    const unsigned char *p = src;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n) v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < n) v |= p[i + 2];
        out[k++] = alphabet[v >> 18 & 63];
        out[k++] = alphabet[v >> 12 & 63];
        out[k++] = i + 1 < n ? alphabet[v >> 6 & 63] : '=';
        out[k++] = i + 2 < n ? alphabet[v & 63] : '=';
    }
    out[k] = '\0';
}

static int value_of(char c) {
    const char *at = c ? strchr(alphabet, c) : NULL;
    return at ? (int)(at - alphabet) : -1;
}

unsigned char *base64_decode(const char *s, size_t *n) {
    size_t len = strlen(s);
    if (len % 4) return NULL;
    unsigned char *out = malloc(len / 4 * 3 + 1);
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i += 4) {
        int pad = (s[i + 2] == '=') + (s[i + 3] == '=');
        int last = i + 4 == len;
        if ((pad && !last) || (s[i + 2] == '=' && s[i + 3] != '=')) goto bad;
        int a = value_of(s[i]), b = value_of(s[i + 1]);
        int c = pad >= 2 ? 0 : value_of(s[i + 2]), d = pad >= 1 ? 0 : value_of(s[i + 3]);
        if (a < 0 || b < 0 || c < 0 || d < 0) goto bad;
        unsigned v = (unsigned)a << 18 | (unsigned)b << 12 | (unsigned)c << 6 | (unsigned)d;
        out[k++] = (unsigned char)(v >> 16);
        if (pad < 2) out[k++] = (unsigned char)(v >> 8);
        if (pad < 1) out[k++] = (unsigned char)v;
    }
    out[k] = 0;
    *n = k;
    return out;
bad:
    free(out);
    return NULL;
}

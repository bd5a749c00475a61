/* Base64 (RFC 4648, with padding), as etcd's JSON gateway carries keys and
 * values. */
#ifndef DDPRUN_COMMON_BASE64_H
#define DDPRUN_COMMON_BASE64_H

#include <stddef.h>

/* The encoded length of n bytes, without the terminator. */
size_t base64_len(size_t n);
/* Encodes src[0..n) into out, which holds base64_len(n) + 1 bytes. */
void base64_encode(const void *src, size_t n, char *out);
/* Decodes s (padding required where RFC 4648 puts it) into a new buffer
 * (malloc'd, terminated with a NUL that *n does not count). NULL when s is
 * not base64 or memory runs out. */
unsigned char *base64_decode(const char *s, size_t *n);

#endif

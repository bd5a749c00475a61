/* A growable byte buffer: the one container every module uses for wire
 * data (requests being built, replies queued, partial frames kept). */
#ifndef DDPRUN_COMMON_BUF_H
#define DDPRUN_COMMON_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *data;
    size_t len; /* bytes in use */
    size_t cap; /* bytes allocated */
} buf_t;

#define BUF_INIT {NULL, 0, 0}

/* Make room for `extra` more bytes; 0 or -ENOMEM. */
int buf_reserve(buf_t *b, size_t extra);
/* Append n bytes; 0 or -ENOMEM. */
int buf_append(buf_t *b, const void *p, size_t n);
/* Drop the first n bytes, keeping the rest. */
void buf_consume(buf_t *b, size_t n);
/* Forget the contents but keep the allocation. */
static inline void buf_clear(buf_t *b) { b->len = 0; }
/* Release the allocation. */
void buf_free(buf_t *b);

#endif

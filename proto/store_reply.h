/* Where a reply ends: how each request's reply is laid out on the wire,
 * and a scanner that follows one reply through a byte stream cut anywhere
 * (a per-node store proxy tells one reply of a channel from the next with
 * it, without decoding them). docs/protocol.md gives the layouts. */
#ifndef DDPRUN_PROTO_STORE_REPLY_H
#define DDPRUN_PROTO_STORE_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "proto/store_proto.h"

typedef enum {
    STORE_REPLY_NONE,      /* no reply (SET, APPEND, MULTI_SET, QUEUE_PUSH, VALIDATE) */
    STORE_REPLY_FIXED,     /* `fixed` bytes */
    STORE_REPLY_VECTORS,   /* `count` vectors (u64 length, bytes) */
    STORE_REPLY_POP,       /* QUEUE_POP: i64 length, then a vector if it was above 0 */
    STORE_REPLY_LIST,      /* LIST_KEYS: i64 count, then that many vectors */
    STORE_REPLY_UNTRACKED, /* replies mixed with events (torch 1.13's WATCH_KEY), or none
                            * because the store drops the client (MUX on a channel) */
} store_reply_kind;

typedef struct {
    uint8_t kind;   /* store_reply_kind */
    uint8_t wait;   /* WAIT, BARRIER, WAIT_ANY: a CANCEL_WAIT sent after it may be answered
                     * alone (WAIT_CANCELED), the wait then getting no reply */
    uint8_t cancel; /* this is CANCEL_WAIT's */
    uint8_t stage;  /* the scanner's */
    uint8_t taken;  /* it has taken a byte */
    uint8_t nhead;  /* bytes of a length or count gathered in head */
    uint8_t head[8];
    uint64_t count; /* vectors still to come */
    uint64_t left;  /* bytes of the current item still to come */
} store_reply;

/* The reply that `req` gets. */
void store_reply_expect(store_reply *r, const store_req *req);

/* Follows r through buf[0..n): returns how many of those bytes belong to
 * it, and sets *done once its last byte was among them. */
size_t store_reply_scan(store_reply *r, const uint8_t *buf, size_t n, int *done);

/* 1 while r has taken no byte yet. */
int store_reply_untouched(const store_reply *r);

#endif

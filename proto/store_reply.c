/* Reply layouts and the reply scanner (proto/store_reply.h). */
#include "proto/store_reply.h"

#include <string.h>

enum { S_DONE, S_SKIP, S_VLEN, S_POP, S_LIST };

static void fixed(store_reply *r, uint32_t n) {
    r->kind = STORE_REPLY_FIXED;
    r->left = n;
    r->stage = S_SKIP;
}

static void vectors(store_reply *r, uint64_t n) {
    r->kind = STORE_REPLY_VECTORS;
    r->count = n;
    r->stage = n ? S_VLEN : S_DONE;
}

void store_reply_expect(store_reply *r, const store_req *req) {
    memset(r, 0, sizeof *r);
    switch (req->op) {
    case STORE_OP_VALIDATE:
    case STORE_OP_SET:
    case STORE_OP_APPEND:
    case STORE_OP_MULTI_SET:
    case STORE_OP_QUEUE_PUSH:
    case STORE_OP_COUNT_: r->kind = STORE_REPLY_NONE; break;
    case STORE_OP_COMPARE_SET:
    case STORE_OP_GET: vectors(r, 1); break;
    case STORE_OP_MULTI_GET: vectors(r, req->nitems); break;
    case STORE_OP_ADD:
    case STORE_OP_GETNUMKEYS:
    case STORE_OP_DELETE_KEY:
    case STORE_OP_QUEUE_LEN:
    case STORE_OP_LEASE_GRANT: fixed(r, 8); break;
    case STORE_OP_CHECK:
    case STORE_OP_SET_OWNED:
    case STORE_OP_LEASE_RENEW:
    case STORE_OP_LEASE_REVOKE: fixed(r, 1); break;
    case STORE_OP_CANCEL_WAIT: fixed(r, 1), r->cancel = 1; break;
    case STORE_OP_WAIT:
    case STORE_OP_BARRIER: fixed(r, 1), r->wait = 1; break;
    case STORE_OP_WAIT_ANY: fixed(r, 9), r->wait = 1; break; /* STOP_WAITING, u64 index */
    case STORE_OP_PING: fixed(r, 4); break;
    case STORE_OP_HELLO: fixed(r, 5); break; /* status, u32 version */
    case STORE_OP_QUEUE_POP: r->kind = STORE_REPLY_POP, r->stage = S_POP; break;
    case STORE_OP_LIST_KEYS: r->kind = STORE_REPLY_LIST, r->stage = S_LIST; break;
    case STORE_OP_WATCH_KEY:
    case STORE_OP_MUX: r->kind = STORE_REPLY_UNTRACKED; break;
    }
}

int store_reply_untouched(const store_reply *r) { return !r->taken; }

static size_t scan(store_reply *r, const uint8_t *buf, size_t n, int *done) {
    size_t at = 0;
    *done = 0;
    for (;;) {
        if (r->stage == S_DONE) {
            *done = 1;
            return at;
        }
        if (r->stage == S_SKIP) {
            uint64_t take = n - at < r->left ? n - at : r->left;
            at += take, r->left -= take;
            if (r->left > 0) return at;
            r->stage = r->count ? S_VLEN : S_DONE;
            continue;
        }
        /* a u64: a vector's length, QUEUE_POP's length or LIST_KEYS' count */
        while (r->nhead < 8 && at < n) r->head[r->nhead++] = buf[at++];
        if (r->nhead < 8) return at;
        uint64_t v = store_load_u64(r->head);
        r->nhead = 0;
        if (r->stage == S_VLEN) {
            r->count--;
            r->left = v;
            r->stage = S_SKIP;
        } else if (r->stage == S_POP) {
            r->count = (int64_t)v > 0;
            r->stage = r->count ? S_VLEN : S_DONE;
        } else { /* S_LIST */
            r->count = v;
            r->stage = v ? S_VLEN : S_DONE;
        }
    }
}

size_t store_reply_scan(store_reply *r, const uint8_t *buf, size_t n, int *done) {
    size_t at = scan(r, buf, n, done);
    if (at) r->taken = 1;
    return at;
}

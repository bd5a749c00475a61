/* The reply scanner (proto/store_reply.h) against the store's real
 * replies: every request of the current generation and of ddprun's
 * extension is sent alone, and what the store answers before a PING after
 * it is that request's reply; all the replies in one stream, cut at every
 * byte, must split exactly there. */
#include <stdlib.h>
#include <unistd.h>

#include "proto/store_reply.h"
#include "tests/unit/store_fixture.h"
#include "tests/unit/test.h"

static const store_limits lim = {STORE_DEFAULT_MAX_KEY, STORE_DEFAULT_MAX_VALUE};

typedef struct {
    buf_t b;
} req_buf;

static void op(buf_t *b, store_op o) { CHECK_EQ(store_enc_op(b, STORE_GEN_V2, o), 0); }
static void str(buf_t *b, const char *s) { store_enc_bytes(b, s, strlen(s)); }
static void list(buf_t *b, int n, const char *const *keys) {
    store_enc_u64(b, (uint64_t)n);
    for (int i = 0; i < n; i++) str(b, keys[i]);
}

/* Builds request number i into b (0 when there are no more). */
static int build(int i, buf_t *b) {
    static const char *const two[] = {"a", "b"}, *const three[] = {"a", "m1", "missing"};
    buf_clear(b);
    switch (i) {
    case 0: op(b, STORE_OP_SET), str(b, "a"), str(b, "value of a"); return 1;
    case 1: op(b, STORE_OP_GET), str(b, "a"); return 1;
    case 2: op(b, STORE_OP_GET), str(b, "missing"); return 1;
    case 3: op(b, STORE_OP_ADD), str(b, "n"), store_enc_i64(b, 5); return 1;
    case 4: op(b, STORE_OP_COMPARE_SET), str(b, "a"), str(b, "value of a"), str(b, "A"); return 1;
    case 5: op(b, STORE_OP_CHECK), list(b, 2, two); return 1;
    case 6: op(b, STORE_OP_WAIT), list(b, 1, two); return 1;
    case 7:
        op(b, STORE_OP_MULTI_SET), store_enc_u64(b, 1), str(b, "m1"), str(b, "");
        return 1;
    case 8: op(b, STORE_OP_MULTI_GET), list(b, 3, three); return 1;
    case 9: op(b, STORE_OP_GETNUMKEYS); return 1;
    case 10: op(b, STORE_OP_DELETE_KEY), str(b, "n"); return 1;
    case 11: op(b, STORE_OP_APPEND), str(b, "a"), str(b, "+"); return 1;
    case 12: op(b, STORE_OP_QUEUE_PUSH), str(b, "q"), str(b, "item"); return 1;
    case 13: op(b, STORE_OP_QUEUE_LEN), str(b, "q"); return 1;
    case 14: op(b, STORE_OP_QUEUE_POP), str(b, "q"); return 1; /* a value */
    case 15: op(b, STORE_OP_QUEUE_POP), str(b, "q"); return 1; /* none */
    case 16: op(b, STORE_OP_LIST_KEYS); return 1;
    case 17: op(b, STORE_OP_CANCEL_WAIT); return 1;
    case 18: op(b, STORE_OP_BARRIER), str(b, "bar"), store_enc_i64(b, 1); return 1;
    case 19: op(b, STORE_OP_LEASE_GRANT), store_enc_i64(b, 60000); return 1;
    case 20: op(b, STORE_OP_LEASE_RENEW), store_enc_u64(b, 12345); return 1;
    case 21: op(b, STORE_OP_SET_OWNED), str(b, "o"), str(b, "x"), store_enc_u64(b, 0); return 1;
    case 22: op(b, STORE_OP_LEASE_REVOKE), store_enc_u64(b, 12345); return 1;
    case 23:
        op(b, STORE_OP_WAIT_ANY), store_enc_u64(b, 2);
        store_enc_u8(b, STORE_COND_EXISTS), str(b, "missing");
        store_enc_u8(b, STORE_COND_ABSENT), str(b, "missing");
        return 1;
    case 24: op(b, STORE_OP_LIST_KEYS); return 1; /* an empty list is not possible here */
    case 25: op(b, STORE_OP_MULTI_GET), list(b, 0, NULL); return 1;
    default: return 0;
    }
}

enum { MAXREQ = 32 };

/* Feeds the stream to the replies in turn as a proxy gets it, in pieces
 * (cut in two at `cut`, or one byte at a time), noting where each ends. */
static void feed(const store_reply *want, int n, const buf_t *all, size_t cut, int bytewise,
                 size_t *ends) {
    store_reply r = want[0];
    int i = 0;
    for (size_t at = 0; at < all->len || i < n;) {
        size_t piece_end = bytewise ? at + 1 : at < cut ? cut : all->len;
        if (piece_end > all->len) piece_end = all->len;
        while (i < n) { /* replies that end here, the empty ones too */
            int done = 0;
            at += store_reply_scan(&r, all->data + at, piece_end - at, &done);
            if (!done) break;
            ends[i++] = at;
            if (i < n) r = want[i];
        }
        if (at < piece_end || (i < n && at == all->len)) {
            CHECK(i == n ? at == all->len : 0);
            return;
        }
    }
}

TEST(store_reply_scanner_splits_the_stores_replies_where_they_end) {
    store_fixture f;
    fixture_start(&f, NULL);
    int fd = fixture_raw(&f);
    buf_t hs = BUF_INIT, b = BUF_INIT, all = BUF_INIT;
    op(&hs, STORE_OP_VALIDATE);
    store_enc_u32(&hs, STORE_VALIDATE_MAGIC);
    raw_send(fd, hs.data, hs.len);
    store_reply want[MAXREQ];
    size_t end[MAXREQ]; /* where each reply ends in `all` */
    int n = 0;
    for (; build(n, &b); n++) {
        store_req req;
        size_t used = 0;
        CHECK_EQ(store_parse(STORE_GEN_V2, b.data, b.len, &lim, &req, &used), STORE_PARSE_OK);
        store_reply_expect(&want[n], &req);
        CHECK(want[n].kind != STORE_REPLY_UNTRACKED);
        /* the request, then a PING whose nonce marks the reply's end */
        uint32_t nonce = 0xA5C3E100u + (uint32_t)n;
        op(&b, STORE_OP_PING);
        store_enc_u32(&b, nonce);
        raw_send(fd, b.data, b.len);
        uint8_t got[4096];
        size_t k = 0;
        while (k < 4 || store_load_u32(got + k - 4) != nonce) {
            CHECK(k < sizeof got);
            CHECK_EQ(raw_recv(fd, got + k, 1, 5000), 1);
            k++;
        }
        buf_append(&all, got, k - 4);
        end[n] = all.len;
    }
    CHECK(n >= 25);
    /* the whole stream in two pieces cut at every byte, and byte by byte */
    for (size_t cut = 0; cut <= all.len + 1; cut++) {
        size_t ends[MAXREQ];
        feed(want, n, &all, cut <= all.len ? cut : 0, cut == all.len + 1, ends);
        for (int i = 0; i < n; i++)
            if (ends[i] != end[i])
                test_fail(__FILE__, __LINE__, "reply %d ends at %zu, scanned to %zu (cut at %zu)",
                          i, end[i], ends[i], cut);
    }
    buf_free(&hs);
    buf_free(&b);
    buf_free(&all);
    close(fd);
    fixture_stop(&f);
}

/* A CANCEL_WAIT's reply may come alone, the wait answered by nothing: the
 * scanner says a wait's reply is untouched until its first byte. */
TEST(store_reply_wait_and_cancel_are_marked) {
    store_req req = {.op = STORE_OP_WAIT, .nitems = 1};
    store_reply r;
    store_reply_expect(&r, &req);
    CHECK(r.wait && !r.cancel && store_reply_untouched(&r));
    int done = 0;
    const uint8_t stop = STORE_WAIT_STOP_WAITING;
    CHECK_EQ(store_reply_scan(&r, &stop, 1, &done), 1);
    CHECK(done && !store_reply_untouched(&r));
    req.op = STORE_OP_CANCEL_WAIT;
    store_reply_expect(&r, &req);
    CHECK(r.cancel && !r.wait);
    req.op = STORE_OP_WATCH_KEY;
    store_reply_expect(&r, &req);
    CHECK_EQ(r.kind, STORE_REPLY_UNTRACKED);
}

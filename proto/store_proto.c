/* Request parsing and value encoding for the store protocol; see
 * store_proto.h and docs/protocol.md. The parser never allocates: it checks
 * that a whole request is in the buffer, within the limits, and returns
 * views into it. */
#include "proto/store_proto.h"

#include <errno.h>
#include <string.h>

/* Wire codes, indexed by store_op; -1 where the generation lacks the op.
 * ddprun's extension has the same codes in both generations. */
#define WIRE_EXTENSION                                                                      \
    [STORE_OP_HELLO] = STORE_WIRE_HELLO, [STORE_OP_SET_OWNED] = STORE_WIRE_SET_OWNED,      \
    [STORE_OP_LEASE_GRANT] = STORE_WIRE_LEASE_GRANT,                                        \
    [STORE_OP_LEASE_RENEW] = STORE_WIRE_LEASE_RENEW,                                        \
    [STORE_OP_LEASE_REVOKE] = STORE_WIRE_LEASE_REVOKE, [STORE_OP_WAIT_ANY] = STORE_WIRE_WAIT_ANY, \
    [STORE_OP_MUX] = STORE_WIRE_MUX

static const int8_t wire_v2[STORE_OP_COUNT_] = {
    [STORE_OP_VALIDATE] = 0,       [STORE_OP_SET] = 1,         [STORE_OP_COMPARE_SET] = 2,
    [STORE_OP_GET] = 3,            [STORE_OP_ADD] = 4,         [STORE_OP_CHECK] = 5,
    [STORE_OP_WAIT] = 6,           [STORE_OP_GETNUMKEYS] = 7,  [STORE_OP_DELETE_KEY] = 8,
    [STORE_OP_APPEND] = 9,         [STORE_OP_MULTI_GET] = 10,  [STORE_OP_MULTI_SET] = 11,
    [STORE_OP_CANCEL_WAIT] = 12,   [STORE_OP_PING] = 13,       [STORE_OP_QUEUE_PUSH] = 14,
    [STORE_OP_QUEUE_POP] = 15,     [STORE_OP_QUEUE_LEN] = 16,  [STORE_OP_LIST_KEYS] = 17,
    [STORE_OP_BARRIER] = 18,       [STORE_OP_WATCH_KEY] = -1,
    WIRE_EXTENSION,
};

static const int8_t wire_v1[STORE_OP_COUNT_] = {
    [STORE_OP_VALIDATE] = -1,      [STORE_OP_SET] = 0,          [STORE_OP_COMPARE_SET] = 1,
    [STORE_OP_GET] = 2,            [STORE_OP_ADD] = 3,          [STORE_OP_CHECK] = 4,
    [STORE_OP_WAIT] = 5,           [STORE_OP_GETNUMKEYS] = 6,   [STORE_OP_WATCH_KEY] = 7,
    [STORE_OP_DELETE_KEY] = 8,     [STORE_OP_APPEND] = -1,      [STORE_OP_MULTI_GET] = -1,
    [STORE_OP_MULTI_SET] = -1,     [STORE_OP_CANCEL_WAIT] = -1, [STORE_OP_PING] = -1,
    [STORE_OP_QUEUE_PUSH] = -1,    [STORE_OP_QUEUE_POP] = -1,   [STORE_OP_QUEUE_LEN] = -1,
    [STORE_OP_LIST_KEYS] = -1,     [STORE_OP_BARRIER] = -1,
    WIRE_EXTENSION,
};

static const char *const op_names[STORE_OP_COUNT_] = {
    "VALIDATE", "SET", "COMPARE_SET", "GET", "ADD", "CHECK", "WAIT", "GETNUMKEYS",
    "DELETE_KEY", "APPEND", "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING", "QUEUE_PUSH",
    "QUEUE_POP", "QUEUE_LEN", "LIST_KEYS", "BARRIER", "WATCH_KEY", "HELLO", "SET_OWNED",
    "LEASE_GRANT", "LEASE_RENEW", "LEASE_REVOKE", "WAIT_ANY", "MUX",
};

const char *store_op_name(store_op op) {
    return (unsigned)op < STORE_OP_COUNT_ ? op_names[op] : "?";
}

int store_wire_code(store_gen gen, store_op op) {
    if ((unsigned)op >= STORE_OP_COUNT_) return -1;
    if (gen == STORE_GEN_V1) return wire_v1[op];
    if (gen == STORE_GEN_V2) return wire_v2[op];
    return op == STORE_OP_HELLO ? STORE_WIRE_HELLO : op == STORE_OP_MUX ? STORE_WIRE_MUX : -1;
}

/* Map a wire byte back to an op for `gen`; -1 if unknown. */
static int op_from_wire(store_gen gen, uint8_t code) {
    if (gen == STORE_GEN_UNKNOWN)
        return code == STORE_WIRE_HELLO ? STORE_OP_HELLO : code == STORE_WIRE_MUX ? STORE_OP_MUX : -1;
    const int8_t *table = gen == STORE_GEN_V1 ? wire_v1 : wire_v2;
    for (int op = 0; op < STORE_OP_COUNT_; op++)
        if (table[op] >= 0 && (uint8_t)table[op] == code) return op;
    return -1;
}

store_gen store_detect_gen(const uint8_t *buf, size_t len) {
    if (len == 0) return STORE_GEN_UNKNOWN;
    if (buf[0] != 0) return STORE_GEN_V1;
    uint8_t magic[4] = {STORE_VALIDATE_MAGIC & 0xff, (STORE_VALIDATE_MAGIC >> 8) & 0xff,
                        (STORE_VALIDATE_MAGIC >> 16) & 0xff, STORE_VALIDATE_MAGIC >> 24};
    size_t have = len - 1 < 4 ? len - 1 : 4;
    if (memcmp(buf + 1, magic, have) != 0) return STORE_GEN_V1;
    return have == 4 ? STORE_GEN_V2 : STORE_GEN_UNKNOWN;
}

/* A read cursor; every reader returns 1 on success, 0 when the buffer ends
 * first, or a negative STORE_PARSE_* error. */
typedef struct {
    const uint8_t *p, *end;
} cursor;

static int rd_u8(cursor *c, uint8_t *v) {
    if (c->end - c->p < 1) return 0;
    *v = *c->p++;
    return 1;
}

static int rd_u32(cursor *c, uint32_t *v) {
    if (c->end - c->p < 4) return 0;
    *v = store_load_u32(c->p);
    c->p += 4;
    return 1;
}

static int rd_u64(cursor *c, uint64_t *v) {
    if (c->end - c->p < 8) return 0;
    *v = store_load_u64(c->p);
    c->p += 8;
    return 1;
}

/* A length-prefixed byte string of at most `limit` bytes; a longer one is
 * reported as `err` as soon as its length is known, so a huge length
 * prefix never makes the server wait for (or buffer) the bytes. */
static int rd_bytes(cursor *c, uint64_t limit, int err, store_bytes *out) {
    uint64_t n;
    int rc = rd_u64(c, &n);
    if (rc <= 0) return rc;
    if (n > limit) return err;
    if ((uint64_t)(c->end - c->p) < n) return 0;
    out->p = c->p;
    out->n = n;
    c->p += n;
    return 1;
}

#define TRY(expr)                  \
    do {                           \
        int rc_ = (expr);          \
        if (rc_ <= 0) return rc_;  \
    } while (0)

/* The list of CHECK, WAIT, MULTI_GET, MULTI_SET and WAIT_ANY: validated in
 * full here so that store_list_next() cannot run off the buffer. */
static int rd_list(cursor *c, const store_limits *lim, store_req *r) {
    TRY(rd_u64(c, &r->nitems));
    if (r->nitems > STORE_MAX_LIST) return STORE_PARSE_ELIST;
    r->list = c->p;
    for (uint64_t i = 0; i < r->nitems; i++) {
        store_bytes k, v;
        if (r->op == STORE_OP_WAIT_ANY) {
            uint8_t cond;
            TRY(rd_u8(c, &cond));
            if (cond > STORE_COND_ABSENT) return STORE_PARSE_EARG;
        }
        TRY(rd_bytes(c, lim->max_key, STORE_PARSE_EKEY, &k));
        if (r->op == STORE_OP_MULTI_SET) TRY(rd_bytes(c, lim->max_value, STORE_PARSE_EVALUE, &v));
    }
    return 1;
}

static int rd_args(cursor *c, const store_limits *lim, store_req *r) {
    const uint64_t K = lim->max_key, V = lim->max_value;
    switch (r->op) {
    case STORE_OP_VALIDATE:
        TRY(rd_u32(c, &r->u32));
        return r->u32 == STORE_VALIDATE_MAGIC ? 1 : STORE_PARSE_EMAGIC;
    case STORE_OP_PING:
        return rd_u32(c, &r->u32);
    case STORE_OP_MUX:
        TRY(rd_u32(c, &r->version));
        return r->version == STORE_MUX_VERSION ? 1 : STORE_PARSE_EARG;
    case STORE_OP_HELLO:
        TRY(rd_u32(c, &r->u32));
        if (r->u32 != STORE_EXT_MAGIC) return STORE_PARSE_EMAGIC;
        TRY(rd_u32(c, &r->version));
        return rd_bytes(c, K, STORE_PARSE_EKEY, &r->token);
    case STORE_OP_SET:
    case STORE_OP_APPEND:
    case STORE_OP_QUEUE_PUSH:
        TRY(rd_bytes(c, K, STORE_PARSE_EKEY, &r->key));
        return rd_bytes(c, V, STORE_PARSE_EVALUE, &r->value);
    case STORE_OP_SET_OWNED:
        TRY(rd_bytes(c, K, STORE_PARSE_EKEY, &r->key));
        TRY(rd_bytes(c, V, STORE_PARSE_EVALUE, &r->value));
        return rd_u64(c, &r->id);
    case STORE_OP_COMPARE_SET:
        TRY(rd_bytes(c, K, STORE_PARSE_EKEY, &r->key));
        TRY(rd_bytes(c, V, STORE_PARSE_EVALUE, &r->expected));
        return rd_bytes(c, V, STORE_PARSE_EVALUE, &r->value);
    case STORE_OP_GET:
    case STORE_OP_DELETE_KEY:
    case STORE_OP_QUEUE_POP:
    case STORE_OP_QUEUE_LEN:
    case STORE_OP_WATCH_KEY:
        return rd_bytes(c, K, STORE_PARSE_EKEY, &r->key);
    case STORE_OP_ADD:
    case STORE_OP_BARRIER:
        TRY(rd_bytes(c, K, STORE_PARSE_EKEY, &r->key));
        return rd_u64(c, (uint64_t *)&r->num);
    case STORE_OP_CHECK:
    case STORE_OP_WAIT:
    case STORE_OP_MULTI_GET:
    case STORE_OP_MULTI_SET:
    case STORE_OP_WAIT_ANY:
        return rd_list(c, lim, r);
    case STORE_OP_LEASE_GRANT:
        TRY(rd_u64(c, (uint64_t *)&r->num));
        return r->num > 0 ? 1 : STORE_PARSE_EARG;
    case STORE_OP_LEASE_RENEW:
    case STORE_OP_LEASE_REVOKE:
        return rd_u64(c, &r->id);
    case STORE_OP_GETNUMKEYS:
    case STORE_OP_CANCEL_WAIT:
    case STORE_OP_LIST_KEYS:
        return 1;
    case STORE_OP_COUNT_:
        break;
    }
    return STORE_PARSE_EUNKNOWN;
}

int store_parse(store_gen gen, const uint8_t *buf, size_t len, const store_limits *lim,
                store_req *req, size_t *used) {
    if (len == 0) return STORE_PARSE_MORE;
    int op = op_from_wire(gen, buf[0]);
    if (op < 0) return STORE_PARSE_EUNKNOWN;
    memset(req, 0, sizeof *req);
    req->op = (store_op)op;
    cursor c = {buf + 1, buf + len};
    int rc = rd_args(&c, lim, req);
    if (rc <= 0) return rc;
    *used = (size_t)(c.p - buf);
    return STORE_PARSE_OK;
}

void store_list_next(const store_req *req, const uint8_t **cursor_p, store_item *item) {
    const uint8_t *p = *cursor_p;
    memset(item, 0, sizeof *item);
    if (req->op == STORE_OP_WAIT_ANY) item->cond = *p++;
    item->key.n = store_load_u64(p);
    item->key.p = p + 8;
    p += 8 + item->key.n;
    if (req->op == STORE_OP_MULTI_SET) {
        item->value.n = store_load_u64(p);
        item->value.p = p + 8;
        p += 8 + item->value.n;
    }
    *cursor_p = p;
}

const char *store_parse_strerror(int err) {
    switch (err) {
    case STORE_PARSE_EUNKNOWN: return "unknown query type";
    case STORE_PARSE_EKEY: return "key longer than the limit";
    case STORE_PARSE_EVALUE: return "value longer than the limit";
    case STORE_PARSE_ELIST: return "too many keys in one request";
    case STORE_PARSE_EMAGIC: return "wrong magic number in handshake";
    case STORE_PARSE_EARG: return "argument out of range";
    default: return "malformed request";
    }
}

int store_enc_u8(buf_t *b, uint8_t v) { return buf_append(b, &v, 1); }

int store_enc_u32(buf_t *b, uint32_t v) {
    uint8_t x[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, v >> 24};
    return buf_append(b, x, 4);
}

int store_enc_u64(buf_t *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    return buf_append(b, x, 8);
}

int store_enc_i64(buf_t *b, int64_t v) { return store_enc_u64(b, (uint64_t)v); }

int store_enc_bytes(buf_t *b, const void *p, uint64_t n) {
    int rc = buf_reserve(b, 8 + n);
    if (rc) return rc;
    store_enc_u64(b, n);
    return buf_append(b, p, n);
}

int store_enc_op(buf_t *b, store_gen gen, store_op op) {
    int code = store_wire_code(gen, op);
    if (code < 0) return -EINVAL;
    return store_enc_u8(b, (uint8_t)code);
}

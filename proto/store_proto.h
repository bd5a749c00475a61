/* The store's wire format: PyTorch TCPStore's two protocol generations plus
 * ddprun's own extension, as pure encode/decode functions with no I/O.
 *
 * A request is a one-byte query type followed by its arguments. Strings and
 * byte vectors are a little-endian uint64 length followed by the bytes;
 * integers are little-endian. The server parses requests with store_parse()
 * straight out of its receive buffer (no copies: the parsed request points
 * into the buffer) and the client builds them with the store_enc_* helpers.
 * docs/protocol.md is the byte-level specification. */
#ifndef DDPRUN_PROTO_STORE_PROTO_H
#define DDPRUN_PROTO_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* VALIDATE's magic number (torch >= 2.x clients send it first). */
#define STORE_VALIDATE_MAGIC 0x3C85F7CEu
/* Our extension's HELLO magic ("DDPR" little-endian) and version. */
#define STORE_EXT_MAGIC 0x52504444u
#define STORE_EXT_VERSION 1u

/* Default limits, overridable by the server's flags. */
#define STORE_DEFAULT_MAX_KEY (8u * 1024u)
#define STORE_DEFAULT_MAX_VALUE (8u * 1024u * 1024u)
#define STORE_MAX_LIST 131072u /* keys in one CHECK/WAIT/MULTI_* request */

/* Which protocol generation a connection speaks. */
typedef enum {
    STORE_GEN_UNKNOWN = 0, /* nothing but (optionally) HELLO seen yet */
    STORE_GEN_V1 = 1,      /* torch 1.13: no handshake */
    STORE_GEN_V2 = 2,      /* torch >= 2.x: VALIDATE first */
} store_gen;

/* Operations, numbered independently of either generation's wire codes. */
typedef enum {
    STORE_OP_VALIDATE,
    STORE_OP_SET,
    STORE_OP_COMPARE_SET,
    STORE_OP_GET,
    STORE_OP_ADD,
    STORE_OP_CHECK,
    STORE_OP_WAIT,
    STORE_OP_GETNUMKEYS,
    STORE_OP_DELETE_KEY,
    STORE_OP_APPEND,
    STORE_OP_MULTI_GET,
    STORE_OP_MULTI_SET,
    STORE_OP_CANCEL_WAIT,
    STORE_OP_PING,
    STORE_OP_QUEUE_PUSH,
    STORE_OP_QUEUE_POP,
    STORE_OP_QUEUE_LEN,
    STORE_OP_LIST_KEYS,
    STORE_OP_BARRIER,
    STORE_OP_WATCH_KEY, /* torch 1.13 only */
    /* ddprun's extension; same wire codes in both generations. */
    STORE_OP_HELLO,        /* u32 magic, u32 version, string token -> u8 status, u32 version */
    STORE_OP_SET_OWNED,    /* key, value, u64 lease (0: this connection) -> u8 status */
    STORE_OP_LEASE_GRANT,  /* i64 ttl_ms -> u64 lease id */
    STORE_OP_LEASE_RENEW,  /* u64 lease id -> u8 status (0 renewed, 1 unknown/expired) */
    STORE_OP_LEASE_REVOKE, /* u64 lease id -> u8 status; deletes its keys */
    STORE_OP_WAIT_ANY,     /* u64 n, n x (u8 cond, key) -> u8 STOP_WAITING, u64 index */
    STORE_OP_MUX,          /* u32 version -> u8 status (0); then frames both ways */
    STORE_OP_COUNT_
} store_op;

/* Wire codes of the extension (0x40 and up: unused by both generations). */
enum {
    STORE_WIRE_HELLO = 0x40,
    STORE_WIRE_SET_OWNED = 0x41,
    STORE_WIRE_LEASE_GRANT = 0x42,
    STORE_WIRE_LEASE_RENEW = 0x43,
    STORE_WIRE_LEASE_REVOKE = 0x44,
    STORE_WIRE_WAIT_ANY = 0x45,
    STORE_WIRE_MUX = 0x46,
};

/* A multiplexed connection (STORE_OP_MUX, sent first or after HELLO): one
 * connection carries many clients' connections, as a per-node store proxy
 * needs (store/store_proxy.h). After MUX's reply both directions are
 * frames: u32 channel, u32 length, that many bytes of the channel's own
 * byte stream, which the server serves exactly as a connection of its own
 * (its generation, token, waits and owned keys). A frame of length 0
 * closes the channel; each side sends it once per channel, and a channel
 * number is free again once a side has both sent and received it. */
#define STORE_MUX_VERSION 1u
#define STORE_MUX_HDR 8u
#define STORE_MUX_MAX_FRAME (1u << 20)
#define STORE_MUX_MAX_CHANS 65536u

static inline void store_mux_hdr(uint8_t *h, uint32_t chan, uint32_t len) {
    for (int i = 0; i < 4; i++) h[i] = (uint8_t)(chan >> (8 * i)), h[4 + i] = (uint8_t)(len >> (8 * i));
}
static inline void store_mux_parse_hdr(const uint8_t *h, uint32_t *chan, uint32_t *len) {
    *chan = *len = 0;
    for (int i = 0; i < 4; i++)
        *chan |= (uint32_t)h[i] << (8 * i), *len |= (uint32_t)h[4 + i] << (8 * i);
}

/* Reply bytes shared by both generations. */
enum { STORE_CHECK_READY = 0, STORE_CHECK_NOT_READY = 1 };
enum { STORE_WAIT_STOP_WAITING = 0, STORE_WAIT_CANCELED = 1 };
enum {
    STORE_WATCH_KEY_UPDATED = 0,
    STORE_WATCH_KEY_CREATED = 1,
    STORE_WATCH_KEY_DELETED = 2,
    STORE_WATCH_CALLBACK_REGISTERED = 3,
};
/* WAIT_ANY conditions. */
enum { STORE_COND_EXISTS = 0, STORE_COND_ABSENT = 1 };

/* A borrowed byte range (points into a receive buffer). */
typedef struct {
    const uint8_t *p;
    uint64_t n;
} store_bytes;

/* A parsed request. Fields not used by the operation are zero. For the
 * list operations (CHECK, WAIT, MULTI_GET, MULTI_SET, WAIT_ANY) `list`
 * points at the first list item and store_list_next() walks it. */
typedef struct {
    store_op op;
    store_bytes key;      /* one-key operations */
    store_bytes value;    /* SET, APPEND, QUEUE_PUSH, SET_OWNED; CAS: desired */
    store_bytes expected; /* COMPARE_SET */
    store_bytes token;    /* HELLO */
    int64_t num;          /* ADD delta, BARRIER world size, LEASE_GRANT ttl_ms */
    uint64_t id;          /* lease id (SET_OWNED, LEASE_RENEW, LEASE_REVOKE) */
    uint32_t u32;         /* VALIDATE / HELLO magic, PING nonce */
    uint32_t version;     /* HELLO */
    uint64_t nitems;      /* list length */
    const uint8_t *list;  /* list items, see store_list_next() */
} store_req;

/* One item of a request's list; `cond` is only set for WAIT_ANY and
 * `value` only for MULTI_SET. */
typedef struct {
    store_bytes key;
    store_bytes value;
    uint8_t cond;
} store_item;

typedef struct {
    uint32_t max_key;   /* longest key in bytes */
    uint32_t max_value; /* longest value in bytes */
} store_limits;

/* Parse results. */
enum {
    STORE_PARSE_OK = 1,
    STORE_PARSE_MORE = 0,        /* need more bytes; nothing consumed */
    STORE_PARSE_EUNKNOWN = -1,   /* unknown query type */
    STORE_PARSE_EKEY = -2,       /* key longer than the limit */
    STORE_PARSE_EVALUE = -3,     /* value longer than the limit */
    STORE_PARSE_ELIST = -4,      /* too many list items */
    STORE_PARSE_EMAGIC = -5,     /* VALIDATE/HELLO with a wrong magic number */
    STORE_PARSE_EARG = -6,       /* an argument out of range (e.g. a bad WAIT_ANY condition) */
};

/* Decide a connection's generation from its first bytes (after any
 * HELLO). Returns STORE_GEN_V2 for VALIDATE + magic, STORE_GEN_V1 for
 * anything else that can be told apart, STORE_GEN_UNKNOWN if more bytes
 * are needed. */
store_gen store_detect_gen(const uint8_t *buf, size_t len);

/* Parse one request of generation `gen` (STORE_GEN_UNKNOWN parses only HELLO and MUX)
 * from buf[0..len). On STORE_PARSE_OK sets *req and *used (bytes
 * taken). Returns one of the STORE_PARSE_* values. */
int store_parse(store_gen gen, const uint8_t *buf, size_t len, const store_limits *lim,
                store_req *req, size_t *used);

/* Walk a parsed request's list: *cursor starts at req->list; each call
 * fills *item and advances the cursor. Only valid for as many items as
 * req->nitems (store_parse has already checked that they are complete). */
void store_list_next(const store_req *req, const uint8_t **cursor, store_item *item);

/* One-line English description of a parse error. */
const char *store_parse_strerror(int err);

/* Name of an operation for logs ("SET", "WAIT", ...). */
const char *store_op_name(store_op op);

/* Wire code of `op` in generation `gen`, or -1 if that generation lacks it. */
int store_wire_code(store_gen gen, store_op op);

/* --- Encoding (used by the client for requests, by the server for
 * replies); each appends to a growable buffer and returns 0 or -ENOMEM. */
int store_enc_u8(buf_t *b, uint8_t v);
int store_enc_u32(buf_t *b, uint32_t v);
int store_enc_u64(buf_t *b, uint64_t v);
int store_enc_i64(buf_t *b, int64_t v);
int store_enc_bytes(buf_t *b, const void *p, uint64_t n); /* u64 length + bytes */
/* The query type byte for `op` in generation `gen`; -EINVAL if absent. */
int store_enc_op(buf_t *b, store_gen gen, store_op op);

/* Little-endian loads for reply decoding. */
static inline uint64_t store_load_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint32_t store_load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif

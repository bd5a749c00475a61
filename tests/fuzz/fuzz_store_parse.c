/* libFuzzer target for the store's request parser, store_parse().
 *
 * The server hands store_parse() whatever bytes a client sent, so the
 * parser is the first thing an attacker or a confused client reaches. This
 * target drives it the way the server does: parse a request, consume the
 * bytes it used, and go on until the parser asks for more or reports an
 * error. Every view it returns is read byte by byte so that AddressSanitizer
 * sees any read outside the input, and the parser's promises (documented in
 * proto/store_proto.h) are checked with __builtin_trap() so that a broken
 * promise is reported as a crash with the input that caused it.
 *
 * Input layout: the first byte chooses how to parse, the rest is the byte
 * stream a client would send.
 *   bits 0-1  generation: 0 STORE_GEN_UNKNOWN (HELLO only), 1 V1 (torch
 *             1.13), 2 V2 (torch >= 2), 3 the server's own sequence: HELLO
 *             requests while the generation is unknown, then
 *             store_detect_gen() on the next bytes.
 *   bits 2-3  limits: 0 the defaults, 1 small (16-byte keys, 64-byte
 *             values), 2 one byte each, 3 zero (only empty keys and values
 *             pass), so the over-limit paths are reachable with short inputs.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/store_proto.h"

#define CHECK(cond)                        \
    do {                                   \
        if (!(cond)) __builtin_trap();     \
    } while (0)

/* Reads that the optimizer may not remove: the sum of every byte seen. */
static volatile uint64_t sink;

/* Read every byte of a view, and check that it lies inside [lo, hi). The
 * read is what lets ASan catch a view pointing past the input; the range
 * check catches a view pointing at other valid memory. */
static void touch(store_bytes b, const uint8_t *lo, const uint8_t *hi) {
    if (b.n == 0) return;
    CHECK(b.p != NULL);
    CHECK(b.p >= lo && b.p <= hi && b.n <= (uint64_t)(hi - b.p));
    uint64_t s = 0;
    for (uint64_t i = 0; i < b.n; i++) s += b.p[i];
    sink += s;
}

static int is_list_op(store_op op) {
    return op == STORE_OP_CHECK || op == STORE_OP_WAIT || op == STORE_OP_MULTI_GET ||
           op == STORE_OP_MULTI_SET || op == STORE_OP_WAIT_ANY;
}

/* Check one successfully parsed request that occupies buf[0..used). */
static void check_request(store_gen gen, const uint8_t *buf, size_t used,
                          const store_limits *lim, const store_req *r) {
    const uint8_t *end = buf + used;
    CHECK((unsigned)r->op < STORE_OP_COUNT_);
    /* The first byte is the op's wire code in this generation. */
    CHECK(store_wire_code(gen, r->op) == buf[0]);
    CHECK(store_op_name(r->op) != NULL);
    CHECK(r->key.n <= lim->max_key);
    CHECK(r->token.n <= lim->max_key);
    CHECK(r->value.n <= lim->max_value);
    CHECK(r->expected.n <= lim->max_value);
    touch(r->key, buf, end);
    touch(r->value, buf, end);
    touch(r->expected, buf, end);
    touch(r->token, buf, end);
    if (r->op == STORE_OP_VALIDATE) CHECK(r->u32 == STORE_VALIDATE_MAGIC);
    if (r->op == STORE_OP_HELLO) CHECK(r->u32 == STORE_EXT_MAGIC);
    if (r->op == STORE_OP_LEASE_GRANT) CHECK(r->num > 0);
    if (!is_list_op(r->op)) {
        CHECK(r->nitems == 0 && r->list == NULL);
        return;
    }
    CHECK(r->nitems <= STORE_MAX_LIST);
    CHECK(r->list >= buf + 1 && r->list <= end);
    const uint8_t *cur = r->list;
    for (uint64_t i = 0; i < r->nitems; i++) {
        store_item it;
        store_list_next(r, &cur, &it);
        CHECK(cur <= end);
        CHECK(it.key.n <= lim->max_key);
        CHECK(it.value.n <= lim->max_value);
        if (r->op == STORE_OP_WAIT_ANY) CHECK(it.cond <= STORE_COND_ABSENT);
        else CHECK(it.cond == 0);
        if (r->op != STORE_OP_MULTI_SET) CHECK(it.value.n == 0);
        touch(it.key, buf, end);
        touch(it.value, buf, end);
    }
    /* The list is each list operation's last argument, so walking it
     * must end exactly where the request ends. */
    CHECK(cur == end);
}

/* Parse a private copy of exactly n bytes, so that ASan's redzone sits
 * right after them and catches a read of even one byte too many. */
static int parse_exact(store_gen gen, const uint8_t *src, size_t n, const store_limits *lim,
                       store_req *r, size_t *used, uint8_t **copy) {
    *copy = malloc(n ? n : 1);
    if (!*copy) abort();
    memcpy(*copy, src, n);
    return store_parse(gen, *copy, n, lim, r, used);
}

/* A whole request parses the same on its own, and one byte less is never
 * enough: the parser must neither look past a request nor accept a
 * truncated one. */
static void check_boundaries(store_gen gen, const uint8_t *p, size_t used,
                             const store_limits *lim, const store_req *orig) {
    store_req r;
    size_t u = 0;
    uint8_t *copy;
    int rc = parse_exact(gen, p, used, lim, &r, &u, &copy);
    CHECK(rc == STORE_PARSE_OK && u == used && r.op == orig->op);
    check_request(gen, copy, used, lim, &r);
    free(copy);

    rc = parse_exact(gen, p, used - 1, lim, &r, &u, &copy);
    CHECK(rc == STORE_PARSE_MORE);
    free(copy);
}

static void limits_for(uint8_t mode, store_limits *lim) {
    switch ((mode >> 2) & 3) {
    case 0: lim->max_key = STORE_DEFAULT_MAX_KEY; lim->max_value = STORE_DEFAULT_MAX_VALUE; break;
    case 1: lim->max_key = 16; lim->max_value = 64; break;
    case 2: lim->max_key = 1; lim->max_value = 1; break;
    default: lim->max_key = 0; lim->max_value = 0; break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    store_limits lim;
    limits_for(mode, &lim);
    const int server_like = (mode & 3) == 3;
    store_gen gen = server_like ? STORE_GEN_UNKNOWN : (store_gen)(mode & 3);
    const uint8_t *p = data + 1;
    size_t left = size - 1;

    /* Like the server: one request after another until the bytes run out
     * or the client would be dropped. */
    for (;;) {
        if (server_like && gen == STORE_GEN_UNKNOWN && left > 0 && p[0] != STORE_WIRE_HELLO) {
            gen = store_detect_gen(p, left);
            /* Five bytes (VALIDATE and its magic) always decide. */
            if (left >= 5) CHECK(gen != STORE_GEN_UNKNOWN);
            if (gen == STORE_GEN_UNKNOWN) break;
        }
        store_req r;
        size_t used = 0;
        int rc = store_parse(gen, p, left, &lim, &r, &used);
        if (rc == STORE_PARSE_MORE) break;
        if (rc < 0) {
            CHECK(rc >= STORE_PARSE_EARG);
            CHECK(store_parse_strerror(rc) != NULL);
            break;
        }
        CHECK(rc == STORE_PARSE_OK);
        CHECK(used > 0 && used <= left);
        check_request(gen, p, used, &lim, &r);
        check_boundaries(gen, p, used, &lim, &r);
        p += used;
        left -= used;
    }
    return 0;
}

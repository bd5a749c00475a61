/* Unit tests of the wire codec: every operation of both generations
 * round-trips through the encoder and the parser, incomplete input asks for
 * more at every prefix, and limits and bad bytes are refused. */
#include "proto/store_proto.h"
#include "tests/unit/test.h"

static const store_limits lim = {STORE_DEFAULT_MAX_KEY, STORE_DEFAULT_MAX_VALUE};

/* Parses b completely as one request, checking that every strict prefix
 * of it reports STORE_PARSE_MORE first. */
static store_req parse_all(store_gen gen, const buf_t *b) {
    store_req r;
    size_t used = 0;
    for (size_t n = 0; n < b->len; n++)
        CHECK_EQ(store_parse(gen, b->data, n, &lim, &r, &used), STORE_PARSE_MORE);
    CHECK_EQ(store_parse(gen, b->data, b->len, &lim, &r, &used), STORE_PARSE_OK);
    CHECK_EQ(used, b->len);
    return r;
}

TEST(proto_detects_generation) {
    const uint8_t v2[] = {0, 0xCE, 0xF7, 0x85, 0x3C};
    CHECK_EQ(store_detect_gen(v2, 0), STORE_GEN_UNKNOWN);
    for (size_t n = 1; n < 5; n++) CHECK_EQ(store_detect_gen(v2, n), STORE_GEN_UNKNOWN);
    CHECK_EQ(store_detect_gen(v2, 5), STORE_GEN_V2);
    const uint8_t v1_set[] = {0, 3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c'};
    CHECK_EQ(store_detect_gen(v1_set, 2), STORE_GEN_V1);
    const uint8_t v1_get[] = {2};
    CHECK_EQ(store_detect_gen(v1_get, 1), STORE_GEN_V1);
}

TEST(proto_set_round_trips_in_both_generations) {
    for (int g = STORE_GEN_V1; g <= STORE_GEN_V2; g++) {
        buf_t b = BUF_INIT;
        CHECK_EQ(store_enc_op(&b, (store_gen)g, STORE_OP_SET), 0);
        store_enc_bytes(&b, "key", 3);
        store_enc_bytes(&b, "value", 5);
        CHECK_EQ(b.data[0], g == STORE_GEN_V1 ? 0 : 1);
        store_req r = parse_all((store_gen)g, &b);
        CHECK_EQ(r.op, STORE_OP_SET);
        CHECK_MEM(r.key.p, r.key.n, "key", 3);
        CHECK_MEM(r.value.p, r.value.n, "value", 5);
        buf_free(&b);
    }
}

TEST(proto_compare_set_add_barrier) {
    buf_t b = BUF_INIT;
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_COMPARE_SET);
    store_enc_bytes(&b, "k", 1);
    store_enc_bytes(&b, "old", 3);
    store_enc_bytes(&b, "new", 3);
    store_req r = parse_all(STORE_GEN_V2, &b);
    CHECK_MEM(r.expected.p, r.expected.n, "old", 3);
    CHECK_MEM(r.value.p, r.value.n, "new", 3);
    buf_clear(&b);
    store_enc_op(&b, STORE_GEN_V1, STORE_OP_ADD);
    store_enc_bytes(&b, "n", 1);
    store_enc_i64(&b, -42);
    r = parse_all(STORE_GEN_V1, &b);
    CHECK_EQ(r.op, STORE_OP_ADD);
    CHECK_EQ(r.num, -42);
    buf_clear(&b);
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_BARRIER);
    store_enc_bytes(&b, "bar", 3);
    store_enc_i64(&b, 8);
    r = parse_all(STORE_GEN_V2, &b);
    CHECK_EQ(r.op, STORE_OP_BARRIER);
    CHECK_EQ(r.num, 8);
    buf_free(&b);
}

TEST(proto_lists_walk_every_item) {
    buf_t b = BUF_INIT;
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_MULTI_SET);
    store_enc_u64(&b, 3);
    const char *keys[] = {"a", "bb", ""}, *vals[] = {"1", "", "333"};
    for (int i = 0; i < 3; i++) {
        store_enc_bytes(&b, keys[i], strlen(keys[i]));
        store_enc_bytes(&b, vals[i], strlen(vals[i]));
    }
    store_req r = parse_all(STORE_GEN_V2, &b);
    CHECK_EQ(r.nitems, 3);
    const uint8_t *cur = r.list;
    for (int i = 0; i < 3; i++) {
        store_item it;
        store_list_next(&r, &cur, &it);
        CHECK_MEM(it.key.p, it.key.n, keys[i], strlen(keys[i]));
        CHECK_MEM(it.value.p, it.value.n, vals[i], strlen(vals[i]));
    }
    CHECK(cur == b.data + b.len);
    buf_clear(&b);
    store_enc_u8(&b, STORE_WIRE_WAIT_ANY);
    store_enc_u64(&b, 2);
    store_enc_u8(&b, STORE_COND_ABSENT);
    store_enc_bytes(&b, "x", 1);
    store_enc_u8(&b, STORE_COND_EXISTS);
    store_enc_bytes(&b, "y", 1);
    r = parse_all(STORE_GEN_V1, &b);
    cur = r.list;
    store_item it;
    store_list_next(&r, &cur, &it);
    CHECK_EQ(it.cond, STORE_COND_ABSENT);
    store_list_next(&r, &cur, &it);
    CHECK_EQ(it.cond, STORE_COND_EXISTS);
    CHECK_MEM(it.key.p, it.key.n, "y", 1);
    buf_free(&b);
}

TEST(proto_every_op_has_a_code_and_parses) {
    /* Each op that a generation has must parse from its own minimal frame. */
    for (int g = STORE_GEN_V1; g <= STORE_GEN_V2; g++) {
        for (int op = 0; op < STORE_OP_COUNT_; op++) {
            int code = store_wire_code((store_gen)g, (store_op)op);
            if (code < 0) continue;
            buf_t b = BUF_INIT;
            store_enc_u8(&b, (uint8_t)code);
            switch (op) {
            case STORE_OP_VALIDATE: store_enc_u32(&b, STORE_VALIDATE_MAGIC); break;
            case STORE_OP_PING: store_enc_u32(&b, 7); break;
            case STORE_OP_MUX: store_enc_u32(&b, STORE_MUX_VERSION); break;
            case STORE_OP_HELLO:
                store_enc_u32(&b, STORE_EXT_MAGIC);
                store_enc_u32(&b, 1);
                store_enc_bytes(&b, "t", 1);
                break;
            case STORE_OP_SET: case STORE_OP_APPEND: case STORE_OP_QUEUE_PUSH:
                store_enc_bytes(&b, "k", 1);
                store_enc_bytes(&b, "v", 1);
                break;
            case STORE_OP_SET_OWNED:
                store_enc_bytes(&b, "k", 1);
                store_enc_bytes(&b, "v", 1);
                store_enc_u64(&b, 0);
                break;
            case STORE_OP_COMPARE_SET:
                store_enc_bytes(&b, "k", 1);
                store_enc_bytes(&b, "", 0);
                store_enc_bytes(&b, "v", 1);
                break;
            case STORE_OP_GET: case STORE_OP_DELETE_KEY: case STORE_OP_QUEUE_POP:
            case STORE_OP_QUEUE_LEN: case STORE_OP_WATCH_KEY:
                store_enc_bytes(&b, "k", 1);
                break;
            case STORE_OP_ADD: case STORE_OP_BARRIER:
                store_enc_bytes(&b, "k", 1);
                store_enc_i64(&b, 1);
                break;
            case STORE_OP_CHECK: case STORE_OP_WAIT: case STORE_OP_MULTI_GET:
            case STORE_OP_MULTI_SET: case STORE_OP_WAIT_ANY:
                store_enc_u64(&b, 0);
                break;
            case STORE_OP_LEASE_GRANT: case STORE_OP_LEASE_RENEW: case STORE_OP_LEASE_REVOKE:
                store_enc_u64(&b, 5);
                break;
            default: break;
            }
            store_req r = parse_all((store_gen)g, &b);
            CHECK_EQ(r.op, op);
            CHECK(strcmp(store_op_name((store_op)op), "?") != 0);
            buf_free(&b);
        }
    }
}

TEST(proto_refuses_bad_input) {
    store_req r;
    size_t used;
    const uint8_t unknown[] = {0xEE};
    CHECK_EQ(store_parse(STORE_GEN_V2, unknown, 1, &lim, &r, &used), STORE_PARSE_EUNKNOWN);
    const uint8_t v2_only[] = {13, 0, 0, 0, 0}; /* PING does not exist in 1.13 */
    CHECK_EQ(store_parse(STORE_GEN_V1, v2_only, 5, &lim, &r, &used), STORE_PARSE_EUNKNOWN);
    /* A huge length prefix is refused as soon as it is read. */
    const uint8_t huge[] = {1, 0, 0, 0, 0, 0, 1, 0, 0};
    CHECK_EQ(store_parse(STORE_GEN_V2, huge, sizeof huge, &lim, &r, &used), STORE_PARSE_EKEY);
    buf_t b = BUF_INIT;
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_SET);
    store_enc_bytes(&b, "k", 1);
    store_enc_u64(&b, (uint64_t)STORE_DEFAULT_MAX_VALUE + 1);
    CHECK_EQ(store_parse(STORE_GEN_V2, b.data, b.len, &lim, &r, &used), STORE_PARSE_EVALUE);
    buf_clear(&b);
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_VALIDATE);
    store_enc_u32(&b, 0x12345678);
    CHECK_EQ(store_parse(STORE_GEN_V2, b.data, b.len, &lim, &r, &used), STORE_PARSE_EMAGIC);
    buf_clear(&b);
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_WAIT);
    store_enc_u64(&b, STORE_MAX_LIST + 1);
    CHECK_EQ(store_parse(STORE_GEN_V2, b.data, b.len, &lim, &r, &used), STORE_PARSE_ELIST);
    buf_clear(&b);
    store_enc_u8(&b, STORE_WIRE_WAIT_ANY);
    store_enc_u64(&b, 1);
    store_enc_u8(&b, 9);
    CHECK_EQ(store_parse(STORE_GEN_V2, b.data, b.len, &lim, &r, &used), STORE_PARSE_EARG);
    /* Before the generation is known only HELLO parses. */
    CHECK_EQ(store_parse(STORE_GEN_UNKNOWN, huge, sizeof huge, &lim, &r, &used),
             STORE_PARSE_EUNKNOWN);
    CHECK(strlen(store_parse_strerror(STORE_PARSE_EKEY)) > 0);
    buf_free(&b);
}

TEST(proto_pipelined_requests_parse_one_by_one) {
    buf_t b = BUF_INIT;
    for (int i = 0; i < 100; i++) {
        store_enc_op(&b, STORE_GEN_V2, STORE_OP_ADD);
        store_enc_bytes(&b, "ctr", 3);
        store_enc_i64(&b, i);
    }
    size_t off = 0;
    for (int i = 0; i < 100; i++) {
        store_req r;
        size_t used;
        CHECK_EQ(store_parse(STORE_GEN_V2, b.data + off, b.len - off, &lim, &r, &used),
                 STORE_PARSE_OK);
        CHECK_EQ(r.num, i);
        off += used;
    }
    CHECK_EQ(off, b.len);
    buf_free(&b);
}

/* The per-node store proxy: clients on its port reach the job's store
 * through one multiplexed connection, and every operation keeps its
 * meaning (both protocol generations, waits and their cancelling, keys
 * owned by a connection), with no reply ever reaching the wrong client. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "store/store_proxy.h"
#include "tests/unit/store_fixture.h"
#include "tests/unit/test.h"

/* A proxy on a thread of its own, with its own loop. */
typedef struct {
    uv_loop_t loop;
    uv_async_t stop;
    pthread_t thread;
    store_proxy *p;
    int port;
    store_proxy_stats st; /* at the end */
} proxy_fixture;

static void on_stop(uv_async_t *a) {
    proxy_fixture *x = a->data;
    store_proxy_stats_get(x->p, &x->st);
    store_proxy_close(x->p, NULL, NULL);
    uv_close((uv_handle_t *)a, NULL);
}

static void *proxy_main(void *arg) {
    proxy_fixture *x = arg;
    uv_run(&x->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void proxy_start_stall(proxy_fixture *x, int store_port, int stall_ms) {
    memset(x, 0, sizeof *x);
    uv_loop_init(&x->loop);
    store_proxy_opts o = {.upstream_host = "127.0.0.1", .upstream_port = store_port,
                          .stall_report_ms = stall_ms};
    int rc = store_proxy_start(&x->loop, &o, &x->p);
    if (rc) test_fail(__FILE__, __LINE__, "store_proxy_start: %s", strerror(-rc));
    x->port = store_proxy_port(x->p);
    uv_async_init(&x->loop, &x->stop, on_stop);
    x->stop.data = x;
    pthread_create(&x->thread, NULL, proxy_main, x);
}

static void proxy_start(proxy_fixture *x, int store_port) { proxy_start_stall(x, store_port, 0); }

static void proxy_stop(proxy_fixture *x) {
    uv_async_send(&x->stop);
    pthread_join(x->thread, NULL);
    CHECK_EQ(uv_loop_close(&x->loop), 0); /* nothing left open */
}

static store_client *proxied(proxy_fixture *x, store_gen gen) {
    store_client_opts o = {.host = "127.0.0.1", .port = x->port, .connect_timeout_ms = 5000,
                           .timeout_ms = 5000, .gen = gen};
    store_client *c = NULL;
    int rc = store_client_connect(&o, &c);
    if (rc) test_fail(__FILE__, __LINE__, "connect to the proxy: %s", strerror(-rc));
    return c;
}

static void check_value(store_client *c, const char *key, const char *want) {
    uint8_t *v = NULL;
    size_t n = 0;
    CHECK_EQ(store_get(c, key, &v, &n), 0);
    CHECK_EQ(n, strlen(want));
    CHECK(v && memcmp(v, want, n) == 0);
    free(v);
}

/* The operations torch's clients use, through the proxy, in both
 * protocol generations; what one writes, a client of the store itself
 * reads. */
static void every_operation(store_gen gen) {
    store_fixture f;
    fixture_start(&f, NULL);
    proxy_fixture x;
    proxy_start(&x, f.port);
    store_client *c = proxied(&x, gen), *direct = fixture_client(&f);
    CHECK_EQ(store_set(c, "k", "v1", 2), 0);
    check_value(direct, "k", "v1");
    int64_t sum = 0;
    CHECK_EQ(store_add(c, "n", 5, &sum), 0);
    CHECK_EQ(store_add(direct, "n", 2, &sum), 0);
    CHECK_EQ(store_add(c, "n", 0, &sum), 0);
    CHECK_EQ(sum, 7);
    uint8_t *out = NULL;
    size_t on = 0;
    CHECK_EQ(store_compare_set(c, "k", "v1", 2, "v2", 2, &out, &on), 0);
    CHECK(on == 2 && memcmp(out, "v2", 2) == 0);
    free(out);
    const char *both[] = {"k", "missing"};
    int all = 1;
    CHECK_EQ(store_check(c, 2, both, &all), 0);
    CHECK_EQ(all, 0);
    /* A wait that times out is cancelled, the connection kept (torch 2.x;
     * torch 1.13's client gives its connection up instead). */
    if (gen == STORE_GEN_V2) {
        CHECK_EQ(store_wait(c, 1, &both[1], 200), -ETIMEDOUT);
        check_value(c, "k", "v2");
    }
    int deleted = 0;
    CHECK_EQ(store_delete(c, "k", &deleted), 0);
    CHECK_EQ(deleted, 1);
    int64_t nkeys = -1;
    CHECK_EQ(store_num_keys(c, &nkeys), 0);
    CHECK_EQ(nkeys, 1); /* "n" */
    if (gen == STORE_GEN_V2) {
        /* set, append and multi_set have no reply: a round trip on the same
         * connection orders them before what the other client does */
        CHECK_EQ(store_append(c, "log", "a", 1), 0);
        CHECK_EQ(store_num_keys(c, &nkeys), 0);
        CHECK_EQ(store_append(direct, "log", "b", 1), 0);
        check_value(c, "log", "ab");
        const char *keys[] = {"m1", "m2"};
        const void *vals[] = {"x", "yy"};
        size_t lens[] = {1, 2};
        CHECK_EQ(store_multi_set(c, 2, keys, vals, lens), 0);
        CHECK_EQ(store_num_keys(c, &nkeys), 0);
        uint8_t *got[2] = {0};
        size_t glen[2] = {0};
        CHECK_EQ(store_multi_get(direct, 2, keys, got, glen), 0);
        CHECK(glen[0] == 1 && glen[1] == 2 && memcmp(got[1], "yy", 2) == 0);
        free(got[0]);
        free(got[1]);
    }
    store_client_close(c);
    store_client_close(direct);
    proxy_stop(&x);
    CHECK_EQ(x.st.upstream_connects, 1);
    fixture_stop(&f);
}

TEST(store_proxy_serves_every_operation_torch_2) { every_operation(STORE_GEN_V2); }
TEST(store_proxy_serves_every_operation_torch_1_13) { every_operation(STORE_GEN_V1); }

typedef struct {
    proxy_fixture *x;
    int id;
    int rc;
} waiter_arg;

/* Waits for "go", then gets it, then sets and reads back its own key. */
static void *waiter(void *p) {
    waiter_arg *a = p;
    store_client *c = proxied(a->x, a->id % 2 ? STORE_GEN_V1 : STORE_GEN_V2);
    const char *go = "go";
    char k[32], v[32];
    snprintf(k, sizeof k, "rank/%d", a->id);
    snprintf(v, sizeof v, "value of %d", a->id);
    a->rc = store_wait(c, 1, &go, 5000);
    int64_t n;
    if (a->rc == 0) a->rc = store_add(c, "arrived", 1, &n);
    if (a->rc == 0) a->rc = store_set(c, k, v, strlen(v));
    uint8_t *got = NULL;
    size_t gn = 0;
    if (a->rc == 0) a->rc = store_get(c, k, &got, &gn);
    if (a->rc == 0 && (gn != strlen(v) || memcmp(got, v, gn) != 0)) a->rc = -EPROTO;
    free(got);
    store_client_close(c);
    return NULL;
}

/* n clients on threads of their own, each running fn with its a[i]. */
static void start_clients(proxy_fixture *x, int n, void *(*fn)(void *), waiter_arg *a,
                          pthread_t *t) {
    for (int i = 0; i < n; i++) {
        a[i] = (waiter_arg){.x = x, .id = i, .rc = -1};
        pthread_create(&t[i], NULL, fn, &a[i]);
    }
}

/* Many clients wait on one key at once through one connection; one set
 * releases them all, and each then gets its own replies. */
TEST(store_proxy_many_waiting_clients_share_one_connection) {
    store_fixture f;
    fixture_start(&f, NULL);
    proxy_fixture x;
    proxy_start(&x, f.port);
    enum { N = 64 };
    pthread_t t[N];
    waiter_arg a[N];
    start_clients(&x, N, waiter, a, t);
    sleep_ms(200);
    store_client *direct = fixture_client(&f);
    CHECK_EQ(store_set(direct, "go", "1", 1), 0);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(a[i].rc, 0);
    }
    int64_t n = 0;
    CHECK_EQ(store_add(direct, "arrived", 0, &n), 0);
    CHECK_EQ(n, N);
    store_client_close(direct);
    proxy_stop(&x);
    CHECK_EQ(x.st.upstream_connects, 1);
    CHECK_EQ(x.st.clients_accepted, N);
    fixture_stop(&f);
}

/* --max-conns bounds descriptors: a proxy's clients hold none of the
 * store's, so a store limited to 2 connections serves a proxy carrying
 * 64 clients, and refuses a third connection of its own. */
TEST(store_proxy_clients_are_not_counted_against_max_conns) {
    store_server_opts so = {.host = "127.0.0.1", .max_conns = 2};
    store_fixture f;
    fixture_start(&f, &so);
    proxy_fixture x;
    proxy_start(&x, f.port);
    enum { N = 64 };
    store_client *c[N];
    for (int i = 0; i < N; i++) {
        c[i] = proxied(&x, STORE_GEN_V2);
        int64_t n = 0;
        CHECK_EQ(store_add(c[i], "n", 1, &n), 0);
        CHECK_EQ(n, i + 1);
    }
    store_client *direct = fixture_client(&f); /* the second connection */
    int64_t n = 0;
    CHECK_EQ(store_add(direct, "n", 0, &n), 0);
    CHECK_EQ(n, N);
    int third = fixture_raw(&f);
    CHECK(raw_closed(third, 2000));
    close(third);
    for (int i = 0; i < N; i++) store_client_close(c[i]);
    store_client_close(direct);
    proxy_stop(&x);
    fixture_stop(&f);
}

/* A key owned by a proxied client's connection goes when that client
 * disconnects, not when the proxy's connection does; and channel numbers
 * reused by later clients carry no stale reply; clients that connect and
 * leave without a byte are nothing to the store. */
TEST(store_proxy_a_clients_owned_key_goes_with_it) {
    store_fixture f;
    fixture_start(&f, NULL);
    proxy_fixture x;
    proxy_start(&x, f.port);
    store_client *keep = proxied(&x, STORE_GEN_V2), *direct = fixture_client(&f);
    for (int i = 0; i < 20; i++) {
        /* a client that connects and leaves without a byte (a port probe) */
        int probe = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x.port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        CHECK_EQ(connect(probe, (struct sockaddr *)&a, sizeof a), 0);
        close(probe);
        store_client *c = proxied(&x, STORE_GEN_V2);
        CHECK_EQ(store_set_owned(c, "owned", "1", 1, 0), 0);
        const char *k = "owned";
        int all = 0;
        CHECK_EQ(store_check(direct, 1, &k, &all), 0);
        CHECK_EQ(all, 1);
        /* a wait left pending when the client goes */
        const char *never = "never";
        CHECK_EQ(store_wait(c, 1, &never, 20), -ETIMEDOUT);
        store_client_close(c);
        const uint8_t absent = STORE_COND_ABSENT;
        size_t idx = 9;
        CHECK_EQ(store_wait_any(direct, 1, &absent, &k, 2000, &idx), 0);
        CHECK_EQ(idx, 0);
    }
    CHECK_EQ(store_set(keep, "still", "here", 4), 0); /* the others' going left it be */
    check_value(keep, "still", "here");
    store_client_close(keep);
    store_client_close(direct);
    proxy_stop(&x);
    fixture_stop(&f);
}

/* The store gone: the proxied clients fail at once, as they would on the
 * store's own connection; none hangs. */
TEST(store_proxy_clients_fail_when_the_store_goes) {
    store_fixture f;
    fixture_start(&f, NULL);
    proxy_fixture x;
    proxy_start(&x, f.port);
    store_client *c = proxied(&x, STORE_GEN_V2);
    CHECK_EQ(store_set(c, "k", "v", 1), 0);
    fixture_stop(&f);
    const char *never = "never";
    int64_t t0 = clock_now_ms();
    CHECK(store_wait(c, 1, &never, 4000) < 0);
    CHECK(clock_now_ms() - t0 < 2000);
    store_client_close(c);
    proxy_stop(&x);
}

/* PyTorch's own TCPStore cannot multiplex: a proxy pointed at a store that
 * drops MUX disconnects its clients rather than leaving them hanging. A
 * store that requires a token the proxy lacks is the same case here. */
TEST(store_proxy_a_store_that_refuses_leaves_no_client_hanging) {
    store_server_opts so = {.host = "127.0.0.1", .token = "secret"};
    store_fixture f;
    fixture_start(&f, &so);
    proxy_fixture x;
    proxy_start(&x, f.port);
    store_client_opts o = {.host = "127.0.0.1", .port = x.port, .connect_timeout_ms = 2000,
                           .timeout_ms = 2000, .no_ext = 1};
    store_client *c = NULL;
    int64_t t0 = clock_now_ms();
    int rc = store_client_connect(&o, &c);
    if (rc == 0) {
        int64_t n;
        rc = store_add(c, "k", 1, &n); /* (a set has no reply to fail) */
        store_client_close(c);
    }
    CHECK(rc < 0);
    CHECK(clock_now_ms() - t0 < 1500);
    proxy_stop(&x);
    fixture_stop(&f);
}

typedef struct {
    int fd;
    size_t n;
} sender_arg;

/* Zeros: to the proxy, torch 1.13 SETs of an empty key to an empty value,
 * 17 bytes each, 3,855 in a chunk. */
static void *send_bytes(void *p) {
    sender_arg *a = p;
    static uint8_t chunk[17 * 3855];
    for (size_t at = 0; at < a->n; at += sizeof chunk)
        if (write(a->fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk) break;
    return NULL;
}

/* A store slow to read: past 16 MiB not yet written to it, the proxy stops
 * reading its clients (TCP holds them back) instead of buffering without
 * end, and reads them again as the store catches up: every byte arrives. */
TEST(store_proxy_holds_clients_back_while_the_store_is_slow) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    CHECK_EQ(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(lfd, 4), 0);
    CHECK_EQ(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
    proxy_fixture x;
    proxy_start(&x, ntohs(a.sin_port));
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in pa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x.port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(connect(c, (struct sockaddr *)&pa, sizeof pa), 0);
    sender_arg sa = {.fd = c, .n = (size_t)1024 * 17 * 3855}; /* 64 MiB, whole requests */
    pthread_t t;
    pthread_create(&t, NULL, send_bytes, &sa);
    int up = accept(lfd, NULL, NULL);
    CHECK(up >= 0);
    sleep_ms(1000); /* not read: the proxy's backlog passes its limit */
    uint8_t mux[5];
    CHECK_EQ(raw_recv(up, mux, 5, 2000), 5);
    CHECK_EQ(mux[0], STORE_WIRE_MUX);
    const uint8_t ok = 0;
    raw_send(up, &ok, 1);
    size_t got = 0;
    static uint8_t buf[STORE_MUX_MAX_FRAME];
    while (got < sa.n) {
        uint8_t h[STORE_MUX_HDR];
        uint32_t chan, len;
        if (raw_recv(up, h, sizeof h, 5000) != sizeof h) break;
        store_mux_parse_hdr(h, &chan, &len);
        CHECK(len <= sizeof buf);
        if (raw_recv(up, buf, len, 5000) != len) break;
        got += len;
    }
    CHECK_EQ(got, sa.n);
    pthread_join(t, NULL);
    close(c);
    close(up);
    close(lfd);
    proxy_stop(&x);
}

/* ---- requests shared -------------------------------------------------------- */

/* What every rank does for torch 2.x's NCCL ids: one round trip (its
 * handshake), then WAIT for every id, and MULTI_GET them. */
static void *fetch_ids(void *p) {
    waiter_arg *a = p;
    store_client *c = proxied(a->x, STORE_GEN_V2);
    static const char *const ids[] = {"id/0", "id/1", "id/2"};
    int64_t n;
    a->rc = store_add(c, "started", 1, &n);
    if (a->rc == 0) a->rc = store_wait(c, 3, ids, 5000);
    uint8_t *v[3] = {0};
    size_t len[3] = {0};
    if (a->rc == 0) a->rc = store_multi_get(c, 3, ids, v, len);
    for (int i = 0; i < 3 && a->rc == 0; i++) {
        char want[16];
        snprintf(want, sizeof want, "nccl id %d", i);
        if (len[i] != strlen(want) || memcmp(v[i], want, len[i]) != 0) a->rc = -EPROTO;
    }
    for (int i = 0; i < 3; i++) free(v[i]);
    store_client_close(c);
    return NULL;
}

/* A node's ranks that wait for the same keys and read them at once: the
 * store gets a few requests where the ranks made 2 x 48 (while one is at
 * the store, the same one from others gathers), and every rank gets the
 * values. */
TEST(store_proxy_sends_the_same_request_of_many_clients_once) {
    store_fixture f;
    fixture_start(&f, NULL);
    proxy_fixture x;
    proxy_start(&x, f.port);
    enum { N = 48 };
    pthread_t t[N];
    waiter_arg a[N];
    start_clients(&x, N, fetch_ids, a, t);
    store_client *direct = fixture_client(&f);
    const char *started = "started";
    int64_t n = 0;
    for (int k = 0; k < 500 && n < N; k++) {
        sleep_ms(10);
        CHECK_EQ(store_add(direct, started, 0, &n), 0);
    }
    CHECK_EQ(n, N);
    sleep_ms(100); /* every rank waiting */
    for (int i = 0; i < 3; i++) {
        char k[16], v[16];
        snprintf(k, sizeof k, "id/%d", i);
        snprintf(v, sizeof v, "nccl id %d", i);
        CHECK_EQ(store_set(direct, k, v, strlen(v)), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(a[i].rc, 0);
    }
    store_client_close(direct);
    proxy_stop(&x);
    CHECK_EQ(x.st.requests_shared, 2 * N);
    /* 3-5 here: the first to ask, then the rest gathered meanwhile, for
     * the WAIT and the MULTI_GET; 20-31 when a request is sent as soon as
     * it is made */
    if (x.st.shared_sent > N / 4)
        test_fail(__FILE__, __LINE__, "the store got %llu requests for %d ranks' %llu",
                  (unsigned long long)x.st.shared_sent, N,
                  (unsigned long long)x.st.requests_shared);
    fixture_stop(&f);
}

/* A shared reply larger than its members' sockets take (6 MiB to clients
 * that read only later: the kernel holds some 4 MiB of it a socket): each
 * member's rest is queued from the one copy of the reply, and every member
 * gets every byte of it, in order. (Not with a small receive buffer: a
 * window that small stalls loopback TCP for seconds at a time under load.) */
TEST(store_proxy_a_large_shared_reply_reaches_every_member_whole) {
    store_fixture f;
    fixture_start(&f, NULL);
    proxy_fixture x;
    proxy_start(&x, f.port);
    enum { K = 3, LEN = 6 << 20 };
    uint8_t *big = malloc(LEN), *got = malloc(LEN + 8);
    for (size_t i = 0; i < LEN; i++) big[i] = (uint8_t)(i * 7 + i / 251);
    store_client *direct = fixture_client(&f);
    CHECK_EQ(store_set(direct, "big", big, LEN), 0);
    CHECK_EQ(store_ping(direct, NULL), 0); /* the SET, which has no answer, is done */
    int c[K];
    buf_t b = BUF_INIT;
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_VALIDATE);
    store_enc_u32(&b, STORE_VALIDATE_MAGIC);
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_PING);
    store_enc_u32(&b, 5);
    for (int k = 0; k < K; k++) {
        c[k] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in pa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x.port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        CHECK_EQ(connect(c[k], (struct sockaddr *)&pa, sizeof pa), 0);
        raw_send(c[k], b.data, b.len);
        CHECK_EQ(raw_recv(c[k], got, 4, 2000), 4); /* the store knows it now */
    }
    buf_clear(&b);
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_GET);
    store_enc_bytes(&b, "big", 3);
    for (int k = 0; k < K; k++) raw_send(c[k], b.data, b.len);
    sleep_ms(300); /* the reply came, and what the sockets did not take waits */
    for (int k = 0; k < K; k++) {
        memset(got, 0, LEN + 8);
        CHECK_EQ(raw_recv(c[k], got, LEN + 8, 5000), (size_t)LEN + 8);
        CHECK_EQ(store_load_u64(got), (uint64_t)LEN);
        CHECK(memcmp(got + 8, big, LEN) == 0);
        close(c[k]);
    }
    buf_free(&b);
    free(big);
    free(got);
    store_client_close(direct);
    proxy_stop(&x);
    CHECK_EQ(x.st.requests_shared, K);
    CHECK(x.st.shared_sent < K);
    fixture_stop(&f);
}

typedef struct {
    proxy_fixture *x;
    int timeout_ms;
    int rc, after;
} cancel_arg;

static void *wait_never(void *p) {
    cancel_arg *a = p;
    store_client *c = proxied(a->x, STORE_GEN_V2);
    const char *k = "late";
    int64_t n;
    a->rc = store_add(c, "waiters", 1, &n);
    if (a->rc == 0) a->rc = store_wait(c, 1, &k, a->timeout_ms);
    a->after = store_add(c, "waiters", 0, &n); /* the connection still serves */
    store_client_close(c);
    return NULL;
}

/* A shared wait that times out is cancelled for that client alone: it gets
 * WAIT_CANCELED and goes on; the other still waits and is answered. */
TEST(store_proxy_a_shared_wait_cancelled_by_one_client) {
    store_fixture f;
    fixture_start(&f, NULL);
    proxy_fixture x;
    proxy_start(&x, f.port);
    pthread_t t[2];
    cancel_arg a[2] = {{.x = &x, .timeout_ms = 300}, {.x = &x, .timeout_ms = 5000}};
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, wait_never, &a[i]);
    pthread_join(t[0], NULL);
    CHECK_EQ(a[0].rc, -ETIMEDOUT);
    CHECK_EQ(a[0].after, 0);
    store_client *direct = fixture_client(&f);
    CHECK_EQ(store_set(direct, "late", "1", 1), 0);
    pthread_join(t[1], NULL);
    CHECK_EQ(a[1].rc, 0);
    CHECK_EQ(a[1].after, 0);
    store_client_close(direct);
    proxy_stop(&x);
    CHECK_EQ(x.st.requests_shared, 2);
    fixture_stop(&f);
}

/* ---- the test as the store: the proxy's bytes, one by one ---------------- */

typedef struct {
    int lfd, up;
    proxy_fixture x;
} fake_store;

static void fake_start(fake_store *s) {
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    CHECK_EQ(bind(s->lfd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(s->lfd, 4), 0);
    CHECK_EQ(getsockname(s->lfd, (struct sockaddr *)&a, &alen), 0);
    proxy_start(&s->x, ntohs(a.sin_port));
    s->up = -1;
}

static void fake_stop(fake_store *s) {
    if (s->up >= 0) close(s->up);
    close(s->lfd);
    proxy_stop(&s->x);
}

/* The next frame from the proxy: its channel, and its bytes in buf. */
static uint32_t fake_frame(fake_store *s, uint8_t *buf, uint32_t cap, uint32_t *len) {
    uint8_t h[STORE_MUX_HDR];
    uint32_t chan;
    CHECK_EQ(raw_recv(s->up, h, sizeof h, 2000), sizeof h);
    store_mux_parse_hdr(h, &chan, len);
    CHECK(*len <= cap);
    CHECK_EQ(raw_recv(s->up, buf, *len, 2000), *len);
    return chan;
}

static void fake_reply(fake_store *s, uint32_t chan, const void *data, uint32_t len) {
    uint8_t h[STORE_MUX_HDR];
    store_mux_hdr(h, chan, len);
    raw_send(s->up, h, sizeof h);
    raw_send(s->up, data, len);
}

/* A torch 2.x client through the proxy, its handshake (VALIDATE, PING)
 * answered by the fake store; returns its socket and channel. */
static int fake_client(fake_store *s, uint32_t *chan) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in pa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->x.port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(connect(c, (struct sockaddr *)&pa, sizeof pa), 0);
    buf_t b = BUF_INIT;
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_VALIDATE);
    store_enc_u32(&b, STORE_VALIDATE_MAGIC);
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_PING);
    store_enc_u32(&b, 77);
    raw_send(c, b.data, b.len);
    if (s->up < 0) {
        s->up = accept(s->lfd, NULL, NULL);
        CHECK(s->up >= 0);
        uint8_t mux[5];
        CHECK_EQ(raw_recv(s->up, mux, 5, 2000), 5);
        CHECK_EQ(mux[0], STORE_WIRE_MUX);
        const uint8_t ok = 0;
        raw_send(s->up, &ok, 1);
    }
    uint8_t in[64];
    uint32_t len;
    *chan = fake_frame(s, in, sizeof in, &len);
    CHECK_EQ(len, b.len);
    fake_reply(s, *chan, in + 6, 4); /* the nonce back */
    uint8_t nonce[4];
    CHECK_EQ(raw_recv(c, nonce, 4, 2000), 4);
    CHECK_EQ(store_load_u32(nonce), 77);
    buf_free(&b);
    return c;
}

/* A shared request goes on a channel of the proxy's own (VALIDATE, then
 * the request); when its only client leaves, the proxy closes that channel
 * too, so the store forgets the wait. */
TEST(store_proxy_a_group_whose_clients_left_closes_its_channel) {
    fake_store s;
    fake_start(&s);
    uint32_t client_chan, chan, len;
    int c = fake_client(&s, &client_chan);
    buf_t b = BUF_INIT;
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_WAIT);
    store_enc_u64(&b, 1);
    store_enc_bytes(&b, "w", 1);
    raw_send(c, b.data, b.len);
    uint8_t in[64];
    uint32_t group_chan = fake_frame(&s, in, sizeof in, &len);
    CHECK(group_chan != client_chan);
    CHECK_EQ(len, 5 + b.len);
    CHECK_EQ(in[0], 0);
    CHECK_EQ(store_load_u32(in + 1), STORE_VALIDATE_MAGIC);
    CHECK(memcmp(in + 5, b.data, b.len) == 0);
    close(c); /* the only client leaves: both channels close */
    int closed_client = 0, closed_group = 0;
    for (int i = 0; i < 2; i++) {
        chan = fake_frame(&s, in, sizeof in, &len);
        CHECK_EQ(len, 0);
        closed_client += chan == client_chan;
        closed_group += chan == group_chan;
    }
    CHECK(closed_client == 1 && closed_group == 1);
    buf_free(&b);
    fake_stop(&s);
    CHECK_EQ(s.x.st.shared_sent, 1);
}

/* A request made while the same one is at the store is not answered by
 * it (the store may have served it before this one was made): it waits,
 * and goes to the store once the first is answered. */
TEST(store_proxy_a_request_made_after_its_twin_was_sent_is_sent_again) {
    fake_store s;
    fake_start(&s);
    uint32_t ca, cb, len;
    int a = fake_client(&s, &ca), b = fake_client(&s, &cb);
    buf_t req = BUF_INIT;
    store_enc_op(&req, STORE_GEN_V2, STORE_OP_MULTI_GET);
    store_enc_u64(&req, 1);
    store_enc_bytes(&req, "k", 1);
    raw_send(a, req.data, req.len);
    uint8_t in[64];
    uint32_t g1 = fake_frame(&s, in, sizeof in, &len); /* A's, on a group's channel */
    CHECK_EQ(len, 5 + req.len);
    raw_send(b, req.data, req.len); /* B's: the same, while A's is at the store */
    sleep_ms(100);
    buf_t old = BUF_INIT, new = BUF_INIT;
    store_enc_bytes(&old, "old", 3);
    store_enc_bytes(&new, "new", 3);
    fake_reply(&s, g1, old.data, (uint32_t)old.len);
    uint8_t got[16];
    CHECK_EQ(raw_recv(a, got, old.len, 2000), old.len);
    CHECK(memcmp(got, old.data, old.len) == 0);
    uint32_t chan = fake_frame(&s, in, sizeof in, &len);
    if (len == 0) chan = fake_frame(&s, in, sizeof in, &len); /* g1's close first */
    CHECK(len == 5 + req.len && memcmp(in + 5, req.data, req.len) == 0); /* B's goes now */
    fake_reply(&s, chan, new.data, (uint32_t)new.len);
    CHECK_EQ(raw_recv(b, got, new.len, 2000), new.len);
    CHECK(memcmp(got, new.data, new.len) == 0);
    close(a);
    close(b);
    buf_free(&req);
    buf_free(&old);
    buf_free(&new);
    fake_stop(&s);
    CHECK_EQ(s.x.st.requests_shared, 2);
    CHECK_EQ(s.x.st.shared_sent, 2);
}

/* A client that sends requests without waiting for replies: one behind an
 * unanswered request of its own is not shared (the store would serve the
 * group first, and its reply would come out of turn). Here a GET follows a
 * SET held behind a WAIT_ANY: the GET sees the SET, after the wait's
 * reply. */
TEST(store_proxy_a_pipelined_request_waits_its_turn) {
    store_fixture f;
    fixture_start(&f, NULL);
    proxy_fixture x;
    proxy_start(&x, f.port);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in pa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x.port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(connect(c, (struct sockaddr *)&pa, sizeof pa), 0);
    buf_t b = BUF_INIT;
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_VALIDATE);
    store_enc_u32(&b, STORE_VALIDATE_MAGIC);
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_PING);
    store_enc_u32(&b, 5);
    raw_send(c, b.data, b.len);
    uint8_t r[32];
    CHECK_EQ(raw_recv(c, r, 4, 2000), 4);
    buf_clear(&b);
    store_enc_u8(&b, STORE_WIRE_WAIT_ANY);
    store_enc_u64(&b, 1);
    store_enc_u8(&b, STORE_COND_EXISTS);
    store_enc_bytes(&b, "gate", 4);
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_SET);
    store_enc_bytes(&b, "k", 1);
    store_enc_bytes(&b, "v", 1);
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_GET);
    store_enc_bytes(&b, "k", 1);
    raw_send(c, b.data, b.len);
    sleep_ms(200);
    store_client *direct = fixture_client(&f);
    CHECK_EQ(store_set(direct, "gate", "1", 1), 0);
    CHECK_EQ(raw_recv(c, r, 9 + 9, 2000), 18);
    CHECK_EQ(r[0], STORE_WAIT_STOP_WAITING); /* the wait's, first */
    CHECK_EQ(store_load_u64(r + 1), 0);
    CHECK_EQ(store_load_u64(r + 9), 1); /* then the GET's: "v" */
    CHECK_EQ(r[17], 'v');
    buf_free(&b);
    close(c);
    store_client_close(direct);
    proxy_stop(&x);
    CHECK_EQ(x.st.requests_shared, 0);
    fixture_stop(&f);
}

/* torch 1.13's WATCH_KEY: events come between replies, so the proxy can no
 * longer tell its replies apart and relays that client as bytes: the
 * registration, the event and later replies all arrive, each once (the
 * watch split across two reads, the GET after it in the same one). */
TEST(store_proxy_relays_a_watching_client_as_bytes) {
    store_fixture f;
    fixture_start(&f, NULL);
    proxy_fixture x;
    proxy_start(&x, f.port);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in pa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x.port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(connect(c, (struct sockaddr *)&pa, sizeof pa), 0);
    buf_t b = BUF_INIT;
    store_enc_op(&b, STORE_GEN_V1, STORE_OP_SET);
    store_enc_bytes(&b, "k", 1);
    store_enc_bytes(&b, "v", 1);
    size_t set_len = b.len;
    store_enc_op(&b, STORE_GEN_V1, STORE_OP_WATCH_KEY);
    store_enc_bytes(&b, "w", 1);
    store_enc_op(&b, STORE_GEN_V1, STORE_OP_GET);
    store_enc_bytes(&b, "k", 1);
    raw_send(c, b.data, set_len + 3);
    sleep_ms(100);
    raw_send(c, b.data + set_len + 3, b.len - set_len - 3);
    uint8_t r[64];
    CHECK_EQ(raw_recv(c, r, 1 + 9, 2000), 10);
    CHECK_EQ(r[0], STORE_WATCH_CALLBACK_REGISTERED);
    CHECK(store_load_u64(r + 1) == 1 && r[9] == 'v');
    store_client *direct = fixture_client(&f);
    CHECK_EQ(store_set(direct, "w", "1", 1), 0);
    /* KEY_CREATED, key "w", old value "", new value "1" */
    CHECK_EQ(raw_recv(c, r, 1 + 9 + 8 + 9, 2000), 27);
    CHECK_EQ(r[0], STORE_WATCH_KEY_CREATED);
    CHECK(store_load_u64(r + 1) == 1 && r[9] == 'w' && store_load_u64(r + 10) == 0);
    CHECK(store_load_u64(r + 18) == 1 && r[26] == '1');
    raw_send(c, b.data + set_len + 10, b.len - set_len - 10); /* GET k again */
    CHECK_EQ(raw_recv(c, r, 9, 2000), 9);
    CHECK_EQ(r[8], 'v');
    CHECK_EQ(raw_recv(c, r, 1, 200), 0); /* nothing more: no request went twice */
    buf_free(&b);
    close(c);
    store_client_close(direct);
    proxy_stop(&x);
    fixture_stop(&f);
}

/* A CHECK of the keys a shared WAIT waits for has the same arguments, not
 * the same meaning: it is answered at once. */
TEST(store_proxy_a_check_is_not_the_wait_for_the_same_keys) {
    store_fixture f;
    fixture_start(&f, NULL);
    proxy_fixture x;
    proxy_start(&x, f.port);
    pthread_t t;
    cancel_arg w = {.x = &x, .timeout_ms = 5000};
    pthread_create(&t, NULL, wait_never, &w); /* WAIT ["late"], shared */
    sleep_ms(200);
    store_client *c = proxied(&x, STORE_GEN_V2);
    int64_t n;
    CHECK_EQ(store_add(c, "waiters", 0, &n), 0);
    CHECK_EQ(n, 1); /* the waiter is there */
    const char *k = "late";
    int all = 1;
    int64_t t0 = clock_now_ms();
    CHECK_EQ(store_check(c, 1, &k, &all), 0);
    CHECK_EQ(all, 0);
    CHECK(clock_now_ms() - t0 < 1000);
    store_client *direct = fixture_client(&f);
    CHECK_EQ(store_set(direct, "late", "1", 1), 0);
    pthread_join(t, NULL);
    CHECK_EQ(w.rc, 0);
    store_client_close(c);
    store_client_close(direct);
    proxy_stop(&x);
    fixture_stop(&f);
}

typedef struct {
    proxy_fixture *x;
    const char *key;
    int rc;
} stall_arg;

static void *wait_key(void *p) {
    stall_arg *a = p;
    store_client *c = proxied(a->x, STORE_GEN_V2);
    int64_t n;
    a->rc = store_add(c, "waiters", 1, &n);
    if (a->rc == 0) a->rc = store_wait(c, 1, &a->key, 5000);
    store_client_close(c);
    return NULL;
}

/* A worker that waits too long for a key is named by the proxy, with its
 * pid (the store can name only the proxy): once, and not for ddprun's own
 * keys nor once its wait is over. */
TEST(store_proxy_names_its_clients_that_wait_too_long) {
    store_fixture f;
    fixture_start(&f, NULL);
    test_stderr_begin();
    proxy_fixture x;
    proxy_start_stall(&x, f.port, 300);
    pthread_t t[3];
    stall_arg a[3] = {{&x, "never", -1}, {&x, "/ddprun/job/x", -1}, {&x, "soon", -1}};
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, wait_key, &a[i]);
    store_client *direct = fixture_client(&f);
    sleep_ms(100);
    CHECK_EQ(store_set(direct, "soon", "1", 1), 0);
    sleep_ms(900);
    CHECK_EQ(store_set(direct, "never", "1", 1), 0);
    CHECK_EQ(store_set(direct, "/ddprun/job/x", "1", 1), 0);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(a[i].rc, 0);
    }
    store_client_close(direct);
    proxy_stop(&x);
    fixture_stop(&f);
    char *out = test_stderr_end();
    char want[64];
    snprintf(want, sizeof want, "pid %d waits for 'never'", (int)getpid());
    if (!strstr(out, want) || strstr(out, "ddprun/job") || strstr(out, "soon"))
        test_fail(__FILE__, __LINE__, "wanted \"%s\" alone, got: %s", want, out);
    CHECK(strstr(strstr(out, "waits for") + 1, "waits for") == NULL); /* once */
    free(out);
}

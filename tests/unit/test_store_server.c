/* Server + client tests: each operation's semantics through the real
 * client against a server running in the test process, the extension
 * (owned keys, leases, WAIT_ANY, token), and the server's handling of bad
 * clients, spoken as raw bytes. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "tests/unit/store_fixture.h"
#include "tests/unit/test.h"

#define OK(expr)                                                                  \
    do {                                                                          \
        int rc_ = (expr);                                                         \
        if (rc_ != 0) test_fail(__FILE__, __LINE__, "%s: %s", #expr, strerror(-rc_)); \
    } while (0)

static void check_value(store_client *c, const char *key, const char *want) {
    uint8_t *v = NULL;
    size_t n = 0;
    OK(store_get(c, key, &v, &n));
    CHECK_MEM(v, n, want, strlen(want));
    free(v);
}

TEST(server_set_get_delete_num_keys) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    OK(store_set(c, "a", "hello", 5));
    OK(store_set(c, "b", "", 0));
    check_value(c, "a", "hello");
    check_value(c, "b", "");
    int64_t n = 0;
    OK(store_num_keys(c, &n));
    CHECK_EQ(n, 2);
    int deleted = 0;
    OK(store_delete(c, "a", &deleted));
    CHECK_EQ(deleted, 1);
    OK(store_delete(c, "a", &deleted));
    CHECK_EQ(deleted, 0);
    OK(store_num_keys(c, &n));
    CHECK_EQ(n, 1);
    uint8_t *v = NULL;
    size_t len;
    CHECK_EQ(store_try_get(c, "a", &v, &len), -ENOENT);
    store_client_close(c);
    fixture_stop(&f);
}

TEST(server_add_counts_from_zero_as_decimal_text) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    int64_t r = 0;
    OK(store_add(c, "n", 5, &r));
    CHECK_EQ(r, 5);
    OK(store_add(c, "n", -7, &r));
    CHECK_EQ(r, -2);
    check_value(c, "n", "-2");
    /* ADD on text that is not a number drops that client only. */
    OK(store_set(c, "text", "abc", 3));
    CHECK(store_add(c, "text", 1, &r) == -ECONNRESET);
    store_client *d = fixture_client(&f);
    check_value(d, "n", "-2");
    store_client_close(c);
    store_client_close(d);
    fixture_stop(&f);
}

TEST(server_compare_set_follows_torch) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    uint8_t *v;
    size_t n;
    /* Missing key, empty expected: created. */
    OK(store_compare_set(c, "k", "", 0, "x", 1, &v, &n));
    CHECK_MEM(v, n, "x", 1);
    free(v);
    /* Matching expected: swapped. */
    OK(store_compare_set(c, "k", "x", 1, "y", 1, &v, &n));
    CHECK_MEM(v, n, "y", 1);
    free(v);
    /* Mismatch: unchanged, current value returned. */
    OK(store_compare_set(c, "k", "zz", 2, "q", 1, &v, &n));
    CHECK_MEM(v, n, "y", 1);
    free(v);
    /* Missing key, non-empty expected: the expected value comes back, nothing is created. */
    OK(store_compare_set(c, "missing", "e", 1, "d", 1, &v, &n));
    CHECK_MEM(v, n, "e", 1);
    free(v);
    CHECK_EQ(store_try_get(c, "missing", &v, &n), -ENOENT);
    store_client_close(c);
    fixture_stop(&f);
}

typedef struct {
    store_fixture *f;
    const char *key;
    int delay_ms;
} setter_arg;

static void *set_later(void *p) {
    setter_arg *a = p;
    sleep_ms(a->delay_ms);
    store_client *c = fixture_client(a->f);
    store_set(c, a->key, "later", 5);
    store_client_close(c);
    return NULL;
}

TEST(server_get_waits_for_a_key_set_later) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    pthread_t t;
    setter_arg a = {&f, "late", 100};
    pthread_create(&t, NULL, set_later, &a);
    check_value(c, "late", "later");
    pthread_join(t, NULL);
    store_client_close(c);
    fixture_stop(&f);
}

TEST(server_wait_timeout_cancels_and_connection_stays_usable) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    const char *keys[] = {"never"};
    CHECK_EQ(store_wait(c, 1, keys, 100), -ETIMEDOUT);
    OK(store_set(c, "after", "1", 1));
    check_value(c, "after", "1");
    /* Setting the key now must not leave a stale reply on the connection. */
    OK(store_set(c, "never", "1", 1));
    int64_t n;
    OK(store_num_keys(c, &n));
    CHECK_EQ(n, 2);
    int ready = 0;
    const char *both[] = {"after", "never"};
    OK(store_check(c, 2, both, &ready));
    CHECK_EQ(ready, 1);
    store_client_close(c);
    fixture_stop(&f);
}

static void *cancel_soon(void *arg) {
    sleep_ms(50);
    store_client_cancel(arg);
    return NULL;
}

TEST(client_cancel_ends_a_wait_under_way_and_every_later_call) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    const char *keys[] = {"never"};
    pthread_t t;
    pthread_create(&t, NULL, cancel_soon, c);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ(store_wait(c, 1, keys, 5000), -ECANCELED);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, NULL);
    /* woken by the cancel, not by the wait's 5 s */
    CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 2500);
    CHECK_EQ(store_set(c, "after", "1", 1), -ECANCELED);
    CHECK_EQ(store_client_broken(c), -ECANCELED);
    store_client_close(c);
    fixture_stop(&f);
}

TEST(server_wait_on_several_keys_and_duplicates) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    pthread_t t1, t2;
    setter_arg a = {&f, "k1", 50}, b = {&f, "k2", 120};
    pthread_create(&t1, NULL, set_later, &a);
    pthread_create(&t2, NULL, set_later, &b);
    const char *keys[] = {"k1", "k2", "k1"};
    OK(store_wait(c, 3, keys, 5000));
    int ready = 0;
    OK(store_check(c, 3, keys, &ready));
    CHECK_EQ(ready, 1);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    store_client_close(c);
    fixture_stop(&f);
}

TEST(server_append_multi_get_multi_set_list_keys) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    OK(store_append(c, "log", "ab", 2));
    OK(store_append(c, "log", "cd", 2));
    check_value(c, "log", "abcd");
    const char *keys[] = {"m1", "m2"};
    const void *vals[] = {"one", "two"};
    size_t lens[] = {3, 3};
    OK(store_multi_set(c, 2, keys, vals, lens));
    const char *get[] = {"m2", "absent", "m1"};
    uint8_t *out[3];
    size_t outn[3];
    OK(store_multi_get(c, 3, get, out, outn));
    CHECK_MEM(out[0], outn[0], "two", 3);
    CHECK_EQ(outn[1], 0);
    CHECK_MEM(out[2], outn[2], "one", 3);
    for (int i = 0; i < 3; i++) free(out[i]);
    char **list;
    size_t nk;
    OK(store_list_keys(c, &list, &nk));
    CHECK_EQ(nk, 3);
    int seen = 0;
    for (size_t i = 0; i < nk; i++)
        seen |= (!strcmp(list[i], "log")) | (!strcmp(list[i], "m1") << 1) |
                (!strcmp(list[i], "m2") << 2);
    CHECK_EQ(seen, 7);
    store_free_keys(list, nk);
    double rtt = -1;
    OK(store_ping(c, &rtt));
    CHECK(rtt >= 0);
    store_client_close(c);
    fixture_stop(&f);
}

static void *push_later(void *p) {
    setter_arg *a = p;
    sleep_ms(a->delay_ms);
    store_client *c = fixture_client(a->f);
    store_queue_push(c, a->key, "job", 3);
    store_client_close(c);
    return NULL;
}

TEST(server_queue_push_pop_len_and_blocking_pop) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    OK(store_queue_push(c, "q", "1", 1));
    OK(store_queue_push(c, "q", "22", 2));
    int64_t n;
    OK(store_queue_len(c, "q", &n));
    CHECK_EQ(n, 2);
    uint8_t *v;
    size_t len;
    OK(store_queue_pop(c, "q", 0, &v, &len));
    CHECK_MEM(v, len, "1", 1);
    free(v);
    OK(store_queue_pop(c, "q", 0, &v, &len));
    CHECK_MEM(v, len, "22", 2);
    free(v);
    CHECK_EQ(store_queue_pop(c, "q", 0, &v, &len), -ENOENT);
    /* A queue is not a key. */
    OK(store_num_keys(c, &n));
    CHECK_EQ(n, 0);
    pthread_t t;
    setter_arg a = {&f, "q", 80};
    pthread_create(&t, NULL, push_later, &a);
    OK(store_queue_pop(c, "q", 1, &v, &len));
    CHECK_MEM(v, len, "job", 3);
    free(v);
    pthread_join(t, NULL);
    store_client_close(c);
    fixture_stop(&f);
}

typedef struct {
    store_fixture *f;
    int rc;
} barrier_arg;

static void *enter_barrier(void *p) {
    barrier_arg *a = p;
    store_client *c = fixture_client(a->f);
    a->rc = store_barrier(c, "bar", 3, 5000);
    store_client_close(c);
    return NULL;
}

TEST(server_barrier_releases_all_at_world_size) {
    store_fixture f;
    fixture_start(&f, NULL);
    barrier_arg a[3];
    pthread_t t[3];
    for (int i = 0; i < 2; i++) {
        a[i] = (barrier_arg){&f, 1};
        pthread_create(&t[i], NULL, enter_barrier, &a[i]);
    }
    sleep_ms(100);
    CHECK_EQ(a[0].rc, 1); /* still waiting for the third */
    a[2] = (barrier_arg){&f, 1};
    pthread_create(&t[2], NULL, enter_barrier, &a[2]);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(a[i].rc, 0);
    }
    fixture_stop(&f);
}

TEST(server_owned_key_dies_with_its_connection) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *owner = fixture_client(&f), *watcher = fixture_client(&f);
    OK(store_set_owned(owner, "alive/node0", "1", 1, 0));
    check_value(watcher, "alive/node0", "1");
    pthread_t t;
    /* The watcher waits for the key to vanish, or for a restart key. */
    const char *keys[] = {"restart", "alive/node0"};
    const uint8_t conds[] = {STORE_COND_EXISTS, STORE_COND_ABSENT};
    size_t idx = 99;
    store_client_close(owner); /* like kill -9 of the agent */
    (void)t;
    OK(store_wait_any(watcher, 2, conds, keys, 5000, &idx));
    CHECK_EQ(idx, 1);
    uint8_t *v;
    size_t n;
    CHECK_EQ(store_try_get(watcher, "alive/node0", &v, &n), -ENOENT);
    store_client_close(watcher);
    fixture_stop(&f);
}

TEST(server_wait_any_wakes_on_first_condition) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    OK(store_set(c, "present", "1", 1));
    const char *keys[] = {"present", "later"};
    const uint8_t conds[] = {STORE_COND_ABSENT, STORE_COND_EXISTS};
    pthread_t t;
    setter_arg a = {&f, "later", 60};
    pthread_create(&t, NULL, set_later, &a);
    size_t idx = 99;
    OK(store_wait_any(c, 2, conds, keys, 5000, &idx));
    CHECK_EQ(idx, 1);
    pthread_join(t, NULL);
    /* Already satisfied: immediate, and the index of the first that holds. */
    OK(store_wait_any(c, 2, conds, keys, 5000, &idx));
    CHECK_EQ(idx, 1);
    const char *k2[] = {"nothing"};
    const uint8_t c2[] = {STORE_COND_EXISTS};
    CHECK_EQ(store_wait_any(c, 1, c2, k2, 100, &idx), -ETIMEDOUT);
    OK(store_ping(c, NULL));
    store_client_close(c);
    fixture_stop(&f);
}

/* Hundreds of leases (the buckets grow and rehash under them): each
 * renewed one is found and kept, each left alone lapses with its key, a
 * revoked one goes at once, and a lease granted with a shorter life than
 * the rest still lapses on time. The leases left alone are granted on a
 * connection of their own that then stays quiet: a lease whose connection
 * sent anything since it was due counts as renewed (store_table.c), which
 * the renewals of the others would be when the store runs late (a loaded
 * machine: this failed 1 run in 10 beside three busy loops). */
TEST(server_many_leases_each_found_by_id) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f), *quiet = fixture_client(&f);
    enum { N = 300 };
    uint64_t id[N];
    char k[32];
    for (int i = 0; i < N; i++) {
        /* the renewed ones live 1 s: granting them all may take a while */
        store_client *by = i % 2 == 0 ? c : quiet;
        OK(store_lease_grant(by, i % 2 == 0 ? 1000 : 400, &id[i]));
        snprintf(k, sizeof k, "owned/%d", i);
        OK(store_set_owned(by, k, "1", 1, id[i]));
    }
    uint64_t brief;
    OK(store_lease_grant(quiet, 50, &brief));
    OK(store_set_owned(quiet, "brief", "1", 1, brief));
    OK(store_lease_revoke(c, id[N - 2]));
    for (int round = 0; round < 6; round++) { /* 600 ms: past every unrenewed ttl */
        sleep_ms(100);
        for (int i = 0; i < N - 2; i += 2) OK(store_lease_renew(c, id[i]));
        if (round == 0) {
            uint8_t *v;
            size_t n;
            CHECK_EQ(store_try_get(c, "brief", &v, &n), -ENOENT);
        }
    }
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof k, "owned/%d", i);
        const char *key = k;
        int all = -1;
        OK(store_check(c, 1, &key, &all));
        CHECK_EQ(all, i % 2 == 0 && i != N - 2);
        CHECK_EQ(store_lease_renew(c, id[i]), i % 2 == 0 && i != N - 2 ? 0 : -ENOENT);
    }
    store_client_close(quiet);
    store_client_close(c);
    fixture_stop(&f);
}

TEST(server_lease_expires_unless_renewed) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    uint64_t kept, lapsed;
    OK(store_lease_grant(c, 300, &kept));
    OK(store_lease_grant(c, 100, &lapsed));
    CHECK(kept != lapsed);
    OK(store_set_owned(c, "kept", "1", 1, kept));
    OK(store_set_owned(c, "lapsed", "1", 1, lapsed));
    CHECK_EQ(store_set_owned(c, "x", "1", 1, 12345), -ENOENT);
    for (int i = 0; i < 5; i++) {
        sleep_ms(100);
        OK(store_lease_renew(c, kept));
    }
    uint8_t *v;
    size_t n;
    OK(store_try_get(c, "kept", &v, &n));
    free(v);
    CHECK_EQ(store_try_get(c, "lapsed", &v, &n), -ENOENT);
    CHECK_EQ(store_lease_renew(c, lapsed), -ENOENT);
    OK(store_lease_revoke(c, kept));
    CHECK_EQ(store_try_get(c, "kept", &v, &n), -ENOENT);
    /* A plain SET takes a key out of its lease. */
    uint64_t l3;
    OK(store_lease_grant(c, 100, &l3));
    OK(store_set_owned(c, "freed", "1", 1, l3));
    OK(store_set(c, "freed", "2", 1));
    sleep_ms(250);
    check_value(c, "freed", "2");
    store_client_close(c);
    fixture_stop(&f);
}

TEST(server_token_is_required_first) {
    store_fixture f;
    store_server_opts o = {.token = "s3cret"};
    fixture_start(&f, &o);
    store_client *good = fixture_client_opts(&f, (store_client_opts){.token = "s3cret"});
    OK(store_set(good, "k", "v", 1));
    store_client *c = NULL;
    store_client_opts bad = {.host = "127.0.0.1", .port = f.port, .token = "wrong",
                             .connect_timeout_ms = 2000};
    CHECK_EQ(store_client_connect(&bad, &c), -EACCES);
    /* A client with no token is dropped at its first request. */
    store_client_opts none = {.host = "127.0.0.1", .port = f.port, .no_ext = 1, .timeout_ms = 2000};
    OK(store_client_connect(&none, &c));
    int64_t n;
    CHECK(store_num_keys(c, &n) != 0);
    store_client_close(c);
    check_value(good, "k", "v");
    store_client_close(good);
    fixture_stop(&f);
}

TEST(server_speaks_torch_1_13_generation) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *old = fixture_client_opts(&f, (store_client_opts){.gen = STORE_GEN_V1});
    store_client *cur = fixture_client(&f);
    OK(store_set(old, "/k", "v1", 2));
    check_value(cur, "/k", "v1");
    int64_t r;
    OK(store_add(old, "/n", 3, &r));
    CHECK_EQ(r, 3);
    check_value(old, "/n", "3");
    CHECK_EQ(store_ping(old, NULL), -ENOTSUP); /* 1.13 has no PING */
    store_client_close(old);
    store_client_close(cur);
    fixture_stop(&f);
}

TEST(server_watch_key_reports_changes_in_1_13_format) {
    store_fixture f;
    fixture_start(&f, NULL);
    int w = fixture_raw(&f);
    /* WATCH_KEY (1.13 code 7) on "/w". */
    const uint8_t watch[] = {7, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'w'};
    raw_send(w, watch, sizeof watch);
    uint8_t r;
    CHECK_EQ(raw_recv(w, &r, 1, 2000), 1);
    CHECK_EQ(r, STORE_WATCH_CALLBACK_REGISTERED);
    store_client *c = fixture_client(&f);
    OK(store_set(c, "/w", "A", 1));
    OK(store_set(c, "/w", "BC", 2));
    int deleted;
    OK(store_delete(c, "/w", &deleted));
    /* CREATED "" -> "A", UPDATED "A" -> "BC", DELETED "BC" -> "". */
    const uint8_t expect[] = {
        1, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'w', 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'A',
        0, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'w', 1, 0, 0, 0, 0, 0, 0, 0, 'A', 2, 0, 0, 0, 0, 0, 0, 0, 'B', 'C',
        2, 2, 0, 0, 0, 0, 0, 0, 0, '/', 'w', 2, 0, 0, 0, 0, 0, 0, 0, 'B', 'C', 0, 0, 0, 0, 0, 0, 0, 0,
    };
    uint8_t got[sizeof expect];
    CHECK_EQ(raw_recv(w, got, sizeof got, 2000), sizeof got);
    CHECK_MEM(got, sizeof got, expect, sizeof expect);
    close(w);
    store_client_close(c);
    fixture_stop(&f);
}

TEST(server_holds_requests_behind_a_pending_wait) {
    store_fixture f;
    fixture_start(&f, NULL);
    int s = fixture_raw(&f);
    /* VALIDATE, then WAIT ["k"] and GETNUMKEYS pipelined in one write. */
    const uint8_t req[] = {0, 0xCE, 0xF7, 0x85, 0x3C,
                           6, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'k',
                           7};
    raw_send(s, req, sizeof req);
    uint8_t out[9];
    CHECK_EQ(raw_recv(s, out, 1, 200), 0); /* nothing until k exists */
    store_client *c = fixture_client(&f);
    OK(store_set(c, "k", "v", 1));
    CHECK_EQ(raw_recv(s, out, 9, 2000), 9);
    CHECK_EQ(out[0], STORE_WAIT_STOP_WAITING); /* the wait's reply first */
    CHECK_EQ(out[1], 1);                       /* then GETNUMKEYS = 1 */
    close(s);
    store_client_close(c);
    fixture_stop(&f);
}

TEST(server_drops_bad_clients_and_keeps_serving) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *good = fixture_client(&f);
    OK(store_set(good, "k", "v", 1));
    /* Unknown query type after a valid handshake. */
    int s = fixture_raw(&f);
    const uint8_t unknown[] = {0, 0xCE, 0xF7, 0x85, 0x3C, 0xEE};
    raw_send(s, unknown, sizeof unknown);
    CHECK(raw_closed(s, 2000));
    close(s);
    /* A 2^40-byte key: dropped at once, without waiting for the bytes. */
    s = fixture_raw(&f);
    const uint8_t huge[] = {1, 0, 0, 0, 0, 0, 1, 0, 0};
    raw_send(s, huge, sizeof huge);
    CHECK(raw_closed(s, 2000));
    close(s);
    /* Wrong magic. */
    s = fixture_raw(&f);
    const uint8_t magic[] = {0, 0xCE, 0xF7, 0x85, 0x3C, 0, 1, 2, 3, 4};
    raw_send(s, magic, sizeof magic);
    CHECK(raw_closed(s, 2000));
    close(s);
    /* Half a request, then gone. */
    s = fixture_raw(&f);
    raw_send(s, huge, 4);
    close(s);
    check_value(good, "k", "v");
    store_client_close(good);
    fixture_stop(&f);
}

TEST(server_accepts_a_request_one_byte_at_a_time) {
    store_fixture f;
    fixture_start(&f, NULL);
    int s = fixture_raw(&f);
    const uint8_t req[] = {0, 0xCE, 0xF7, 0x85, 0x3C, 1, 2, 0, 0, 0, 0, 0, 0, 0, 'k', 'k',
                           3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c'};
    for (size_t i = 0; i < sizeof req; i++) {
        raw_send(s, req + i, 1);
        sleep_ms(2);
    }
    store_client *c = fixture_client(&f);
    check_value(c, "kk", "abc");
    close(s);
    store_client_close(c);
    fixture_stop(&f);
}

TEST(server_refuses_connections_over_the_limit) {
    store_fixture f;
    store_server_opts o = {.max_conns = 3};
    fixture_start(&f, &o);
    store_client *c[3];
    for (int i = 0; i < 3; i++) c[i] = fixture_client(&f);
    int extra = fixture_raw(&f);
    CHECK(raw_closed(extra, 2000));
    close(extra);
    for (int i = 0; i < 3; i++) OK(store_ping(c[i], NULL));
    store_client_close(c[0]);
    sleep_ms(50);
    store_client *again = fixture_client(&f);
    OK(store_ping(again, NULL));
    store_client_close(again);
    for (int i = 1; i < 3; i++) store_client_close(c[i]);
    fixture_stop(&f);
}

TEST(server_table_survives_growth_and_deletion) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    enum { N = 20000 };
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "key/%d", i);
        OK(store_set(c, key, key, strlen(key)));
    }
    /* Delete every third key, then check all of them. */
    for (int i = 0; i < N; i += 3) {
        snprintf(key, sizeof key, "key/%d", i);
        int d;
        OK(store_delete(c, key, &d));
        CHECK_EQ(d, 1);
    }
    int64_t n;
    OK(store_num_keys(c, &n));
    CHECK_EQ(n, N - (N + 2) / 3);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "key/%d", i);
        uint8_t *v = NULL;
        size_t len;
        int rc = store_try_get(c, key, &v, &len);
        if (i % 3 == 0) {
            CHECK_EQ(rc, -ENOENT);
        } else {
            CHECK_EQ(rc, 0);
            CHECK_MEM(v, len, key, strlen(key));
            free(v);
        }
    }
    store_client_close(c);
    fixture_stop(&f);
}

typedef struct {
    store_fixture f;
    int port;
} late_server;

static void *start_late(void *p) {
    late_server *l = p;
    sleep_ms(300);
    store_server_opts o = {.port = l->port};
    fixture_start(&l->f, &o);
    return NULL;
}

TEST(client_connect_retries_until_the_server_is_up) {
    /* Find a free port, free it again, and start a server there late. */
    store_fixture probe;
    fixture_start(&probe, NULL);
    int port = probe.port;
    fixture_stop(&probe);
    store_client_opts o = {.host = "127.0.0.1", .port = port, .connect_timeout_ms = 100};
    store_client *c = NULL;
    CHECK_EQ(store_client_connect(&o, &c), -ECONNREFUSED);
    CHECK(c == NULL);
    late_server l = {.port = port};
    pthread_t t;
    pthread_create(&t, NULL, start_late, &l);
    o.connect_timeout_ms = 5000;
    OK(store_client_connect(&o, &c));
    OK(store_ping(c, NULL));
    pthread_join(t, NULL);
    store_client_close(c);
    fixture_stop(&l.f);
}

TEST(server_listens_on_ipv6_loopback) {
    store_fixture f;
    store_server_opts o = {.host = "::1"};
    fixture_start(&f, &o);
    store_client *c = fixture_client_opts(&f, (store_client_opts){.host = "::1"});
    OK(store_set(c, "v6", "yes", 3));
    check_value(c, "v6", "yes");
    store_client_close(c);
    fixture_stop(&f);
}

/* BARRIER as torch's server does it (measured against torch 2.15's, both
 * backends): the key's value counts the arrivals, and nothing resets it. */
TEST(server_barrier_counts_in_the_key_like_torch) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    OK(store_barrier(c, "one", 1, 1000));
    check_value(c, "one", "1");
    int64_t n = 0;
    OK(store_num_keys(c, &n));
    CHECK_EQ(n, 1);
    char **keys = NULL;
    size_t nk = 0;
    OK(store_list_keys(c, &keys, &nk));
    CHECK_EQ(nk, 1);
    CHECK_STR(keys[0], "one");
    store_free_keys(keys, nk);
    /* Entering again under the same key passes: the count is already 1. */
    OK(store_barrier(c, "one", 1, 1000));
    check_value(c, "one", "2");
    /* A count set beforehand counts too; world sizes of 0 or less pass. */
    OK(store_set(c, "pre", "4", 1));
    OK(store_barrier(c, "pre", 5, 1000));
    check_value(c, "pre", "5");
    OK(store_barrier(c, "zero", 0, 1000));
    store_client_close(c);
    fixture_stop(&f);
}

TEST(server_barrier_keeps_a_cancelled_arrival) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *a = fixture_client(&f), *b = fixture_client(&f);
    /* a enters a barrier of 2 alone and gives up; its arrival still counts
     * (torch's server does not take it back), so b's completes the two. */
    CHECK_EQ(store_barrier(a, "bar", 2, 100), -ETIMEDOUT);
    OK(store_barrier(b, "bar", 2, 100));
    check_value(b, "bar", "2");
    store_client_close(a);
    store_client_close(b);
    fixture_stop(&f);
}

typedef struct {
    store_fixture *f;
    const char *key;
    int64_t world;
    int rc;
} barrier_wait_arg;

static void *barrier_waiter(void *p) {
    barrier_wait_arg *a = p;
    store_client *c = fixture_client(a->f);
    a->rc = store_barrier(c, a->key, a->world, 5000);
    store_client_close(c);
    return NULL;
}

TEST(server_barrier_released_by_a_write_to_its_key) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    barrier_wait_arg a = {&f, "w", 3, 1}, b = {&f, "w", 10, 1};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, barrier_waiter, &a);
    pthread_create(&tb, NULL, barrier_waiter, &b);
    sleep_ms(100);
    CHECK_EQ(a.rc, 1);
    CHECK_EQ(b.rc, 1);
    /* An ADD that makes the count 3 releases the waiter for 3 only. */
    int64_t r = 0;
    OK(store_add(c, "w", 1, &r));
    CHECK_EQ(r, 3);
    pthread_join(ta, NULL);
    CHECK_EQ(a.rc, 0);
    sleep_ms(50);
    CHECK_EQ(b.rc, 1);
    /* A SET to a large enough number releases the other. */
    OK(store_set(c, "w", "10", 2));
    pthread_join(tb, NULL);
    CHECK_EQ(b.rc, 0);
    /* A barrier on a key whose value is not a number drops that client. */
    OK(store_set(c, "text", "abc", 3));
    CHECK_EQ(store_barrier(c, "text", 1, 1000), -ECONNRESET);
    store_client_close(c);
    fixture_stop(&f);
}

/* A fake server for the race below: it answers a WAIT_ANY only after the
 * client has timed out (and sent CANCEL_WAIT), as a real server does when
 * the key appears at that moment. */
static void *late_wait_server(void *arg) {
    int lfd = *(int *)arg;
    int c = accept(lfd, NULL, NULL);
    uint8_t buf[256];
    raw_recv(c, buf, 5, 2000);        /* VALIDATE */
    raw_recv(c, buf, 1 + 8 + 1 + 8 + 1, 2000); /* WAIT_ANY of one key "k" */
    sleep_ms(150);
    const uint8_t stop[] = {STORE_WAIT_STOP_WAITING, 7, 0, 0, 0, 0, 0, 0, 0};
    raw_send(c, stop, sizeof stop);
    raw_recv(c, buf, 1, 2000);        /* CANCEL_WAIT */
    const uint8_t canceled = STORE_WAIT_CANCELED;
    raw_send(c, &canceled, 1);
    sleep_ms(200);
    close(c);
    return NULL;
}

TEST(client_wait_any_that_completes_while_being_cancelled_succeeds) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    CHECK_EQ(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(lfd, 1), 0);
    getsockname(lfd, (struct sockaddr *)&a, &len);
    pthread_t t;
    pthread_create(&t, NULL, late_wait_server, &lfd);
    store_client *c = NULL;
    store_client_opts o = {.host = "127.0.0.1", .port = ntohs(a.sin_port), .timeout_ms = 2000};
    OK(store_client_connect(&o, &c));
    const char *keys[] = {"k"};
    const uint8_t conds[] = {STORE_COND_EXISTS};
    size_t idx = 0;
    OK(store_wait_any(c, 1, conds, keys, 100, &idx));
    CHECK_EQ(idx, 7);
    pthread_join(t, NULL);
    store_client_close(c);
    close(lfd);
}

/* ---- a store that stalls ---- */

typedef struct {
    int port;
    _Atomic int step; /* 1: the leases are granted; 2: the renewal is answered */
    int renewed;      /* the renewal's result */
    uint64_t lease, dead; /* renewed during the stall; never renewed */
} stalled_client;

static void *renew_across_a_stall(void *arg) {
    stalled_client *s = arg;
    store_client_opts o = {.host = "127.0.0.1", .port = s->port, .timeout_ms = 10000};
    store_client *c;
    s->renewed = -1;
    if (store_client_connect(&o, &c) != 0) return NULL;
    if (store_lease_grant(c, 300, &s->lease) == 0 &&
        store_set_owned(c, "hb", "1", 1, s->lease) == 0 &&
        store_lease_grant(c, 2500, &s->dead) == 0 &&
        store_set_owned(c, "gone", "1", 1, s->dead) == 0) {
        s->step = 1;
        sleep_ms(100); /* the store stops running meanwhile: this renewal waits in its socket */
        s->renewed = store_lease_renew(c, s->lease);
    }
    s->step = 2;
    store_client_close(c);
    return NULL;
}

/* A client whose lease's last renewal the store read just before it
 * stalled, and whose next request (any) waits in the socket meanwhile:
 * the agents' heartbeat, its time written after the renewal. */
typedef struct {
    int port;
    _Atomic int step; /* 1: the lease is granted; 2: the request is answered */
    int answered;
} busy_client;

static void *request_across_a_stall(void *arg) {
    busy_client *b = arg;
    store_client_opts o = {.host = "127.0.0.1", .port = b->port, .timeout_ms = 10000};
    store_client *c;
    uint64_t lease;
    b->answered = -1;
    if (store_client_connect(&o, &c) != 0) return NULL;
    if (store_lease_grant(c, 300, &lease) == 0 && store_set_owned(c, "busy", "1", 1, lease) == 0) {
        b->step = 1;
        sleep_ms(100);
        const char *k[] = {"hb"};
        int all;
        b->answered = store_check(c, 1, k, &all);
    }
    b->step = 2;
    store_client_close(c);
    return NULL;
}

static void run_until(uv_loop_t *loop, _Atomic int *step, int want) {
    for (int i = 0; i < 10000 && *step < want; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        sleep_ms(1);
    }
}

static uint64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A lease renewed while the store did not run is not lost for it (the
 * renewal waited in the store's socket), nor one whose renewing connection
 * sent another request meanwhile (its owner is alive, and waits for that
 * answer before it renews), and a lease nobody renews lapses when it is
 * due: the stall lends it no time (a silent loss noticed late). */
TEST(server_a_stall_of_the_store_expires_no_lease_renewed_meanwhile) {
    /* the server on the test's own loop: not running the loop is the stall */
    uv_loop_t loop;
    uv_loop_init(&loop);
    store_server srv;
    store_server_opts o = {.host = "127.0.0.1"};
    CHECK_EQ(store_server_init(&loop, &srv, &o), 0);
    stalled_client s = {.port = store_server_port(&srv)};
    busy_client b = {.port = store_server_port(&srv)};
    pthread_t t, tb;
    pthread_create(&t, NULL, renew_across_a_stall, &s);
    pthread_create(&tb, NULL, request_across_a_stall, &b);
    run_until(&loop, &s.step, 1);
    run_until(&loop, &b.step, 1);
    uint64_t granted = mono_ms();
    CHECK_EQ(s.step, 1);
    CHECK_EQ(b.step, 1);
    sleep_ms(2000); /* the store stalls for more than six of the first lease's lifetimes */
    run_until(&loop, &s.step, 2);
    run_until(&loop, &b.step, 2);
    pthread_join(t, NULL);
    pthread_join(tb, NULL);
    CHECK_EQ(s.renewed, 0);          /* the renewal sent during the stall counted */
    CHECK_EQ(b.answered, 0);
    for (int i = 0; i < 20; i++) { /* the verdict, once the sockets are read */
        uv_run(&loop, UV_RUN_NOWAIT);
        sleep_ms(1);
    }
    CHECK_EQ(srv.stats.keys, 3); /* the busy client's lease lives, and the other is not due */
    while (srv.stats.keys > 0 && mono_ms() - granted < 6000) {
        uv_run(&loop, UV_RUN_NOWAIT);
        sleep_ms(1);
    }
    /* due 2.5 s after its grant; given the stalled time back, 4.3 s */
    uint64_t lapsed = mono_ms() - granted;
    CHECK_EQ(srv.stats.keys, 0);
    CHECK(lapsed >= 2400 && lapsed < 3400);
    store_server_close(&srv, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

/* Sends one frame of a multiplexed connection. */
static void mux_send(int s, uint32_t chan, const void *p, uint32_t n) {
    uint8_t h[STORE_MUX_HDR];
    store_mux_hdr(h, chan, n);
    raw_send(s, h, sizeof h);
    if (n) raw_send(s, p, n);
}

/* Reads one frame (payload up to cap bytes): its channel and length. */
static int mux_recv(int s, uint32_t *chan, uint8_t *p, uint32_t cap) {
    uint8_t h[STORE_MUX_HDR];
    uint32_t n;
    /* (generous: a 1 MiB frame through a small receive window on a loaded
     * machine) */
    if (raw_recv(s, h, sizeof h, 10000) != sizeof h) return -1;
    store_mux_parse_hdr(h, chan, &n);
    if (n > cap || raw_recv(s, p, n, 10000) != n) return -1;
    return (int)n;
}

/* One connection, channels served as connections of their own: a request
 * split across frames, two channels' waits, a channel the server drops for
 * bad input while its neighbour goes on, and the close said by both sides. */
TEST(server_multiplexed_channels_are_connections_of_their_own) {
    store_fixture f;
    fixture_start(&f, NULL);
    int s = fixture_raw(&f);
    const uint8_t mux[] = {STORE_WIRE_MUX, 1, 0, 0, 0};
    raw_send(s, mux, sizeof mux);
    uint8_t ok = 9;
    CHECK_EQ(raw_recv(s, &ok, 1, 2000), 1);
    CHECK_EQ(ok, 0);
    /* channel 3: torch 2.x's VALIDATE, then WAIT ["k"] cut in two frames;
     * channel 5: torch 1.13's WAIT ["k"] */
    const uint8_t v2[] = {0, 0xCE, 0xF7, 0x85, 0x3C, 6, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0,
                          0, 0, 'k'};
    mux_send(s, 3, v2, 9);
    mux_send(s, 3, v2 + 9, sizeof v2 - 9);
    const uint8_t v1[] = {5, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'k'};
    mux_send(s, 5, v1, sizeof v1);
    uint8_t buf[64];
    uint32_t chan;
    CHECK_EQ(raw_recv(s, buf, 1, 200), 0); /* both wait */
    store_client *c = fixture_client(&f);
    OK(store_set(c, "k", "v", 1));
    int seen = 0;
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(mux_recv(s, &chan, buf, sizeof buf), 1);
        CHECK_EQ(buf[0], STORE_WAIT_STOP_WAITING);
        seen |= chan == 3 ? 1 : chan == 5 ? 2 : 4;
    }
    CHECK_EQ(seen, 3);
    /* channel 5 sends an unknown query: it alone is dropped, and says so */
    const uint8_t bad = 0xEE;
    mux_send(s, 5, &bad, 1);
    CHECK_EQ(mux_recv(s, &chan, buf, sizeof buf), 0);
    CHECK_EQ(chan, 5);
    mux_send(s, 5, NULL, 0); /* our side of its close */
    /* channel 3 goes on: GETNUMKEYS */
    const uint8_t nkeys = 7;
    mux_send(s, 3, &nkeys, 1);
    CHECK_EQ(mux_recv(s, &chan, buf, sizeof buf), 8);
    CHECK_EQ(chan, 3);
    CHECK_EQ(buf[0], 1);
    /* we close channel 3: the server says it back */
    mux_send(s, 3, NULL, 0);
    CHECK_EQ(mux_recv(s, &chan, buf, sizeof buf), 0);
    CHECK_EQ(chan, 3);
    /* closing a channel that is not open is a protocol error */
    mux_send(s, 8, NULL, 0);
    CHECK(raw_closed(s, 2000));
    close(s);
    /* MUX after a connection's first request: refused */
    s = fixture_raw(&f);
    const uint8_t late[] = {0, 0xCE, 0xF7, 0x85, 0x3C, STORE_WIRE_MUX, 1, 0, 0, 0};
    raw_send(s, late, sizeof late);
    CHECK(raw_closed(s, 2000));
    close(s);
    store_client_close(c);
    fixture_stop(&f);
}

/* A channel's request half-sent while its multiplexed connection is not
 * read (the proxy is slow to take its replies: the connection is
 * throttled) is waiting, not stuck: it is not dropped for the request
 * timeout, and is served once the rest comes. */
TEST(server_a_channel_behind_a_throttled_mux_is_not_dropped) {
    store_server_opts so = {.host = "127.0.0.1", .max_value = 1000, .request_timeout_ms = 1000};
    store_fixture f;
    fixture_start(&f, &so);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int small = 65536; /* (the store's replies pile up in its own buffers) */
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(connect(s, (struct sockaddr *)&a, sizeof a), 0);
    const uint8_t mux[] = {STORE_WIRE_MUX, 1, 0, 0, 0};
    raw_send(s, mux, sizeof mux);
    uint8_t ok = 9;
    CHECK_EQ(raw_recv(s, &ok, 1, 2000), 1);
    /* channel 1: torch 2.x's VALIDATE and the first half of a SET */
    const uint8_t set[] = {0, 0xCE, 0xF7, 0x85, 0x3C, 1, 1, 0, 0, 0, 0, 0, 0, 0, 'k',
                           1, 0, 0, 0, 0, 0, 0, 0, 'v'};
    mux_send(s, 1, set, 10);
    /* channel 2: a 1000-byte value, then 12,000 GETs of it, whose 12 MB of
     * replies we do not read */
    buf_t b = BUF_INIT;
    const uint8_t v2[] = {0, 0xCE, 0xF7, 0x85, 0x3C};
    buf_append(&b, v2, sizeof v2);
    static uint8_t big[1000];
    store_enc_u8(&b, 1);
    store_enc_bytes(&b, "big", 3);
    store_enc_bytes(&b, big, sizeof big);
    mux_send(s, 2, b.data, (uint32_t)b.len);
    buf_clear(&b);
    for (int i = 0; i < 12000; i++) {
        store_enc_u8(&b, 3);
        store_enc_bytes(&b, "big", 3);
    }
    for (size_t at = 0; at < b.len; at += 60000) {
        size_t n = b.len - at < 60000 ? b.len - at : 60000;
        mux_send(s, 2, b.data + at, (uint32_t)n);
    }
    buf_free(&b);
    sleep_ms(2500); /* past the request timeout, twice over */
    /* now read every reply of channel 2, then finish channel 1's SET and
     * ask it for the number of keys */
    uint8_t *frame = malloc(STORE_MUX_MAX_FRAME);
    size_t got = 0, want = 12000 * (8 + sizeof big);
    uint32_t chan;
    int n = 0;
    while (got < want && (n = mux_recv(s, &chan, frame, STORE_MUX_MAX_FRAME)) > 0) {
        CHECK_EQ(chan, 2);
        got += (size_t)n;
    }
    CHECK_EQ(got, want);
    mux_send(s, 1, set + 10, sizeof set - 10);
    const uint8_t nkeys = 7;
    mux_send(s, 1, &nkeys, 1);
    n = mux_recv(s, &chan, frame, STORE_MUX_MAX_FRAME);
    CHECK_EQ(chan, 1);
    CHECK_EQ(n, 8); /* a count, not the close of a dropped channel */
    CHECK_EQ(frame[0], 2);
    free(frame);
    close(s);
    fixture_stop(&f);
}

/* Nor while the multiplexed connection brings other channels' bytes (a
 * busy proxy: the rest may be queued behind them); a channel alone in an
 * idle connection, half-sent past the timeout, is dropped. */
TEST(server_a_channel_behind_a_busy_mux_is_not_dropped) {
    store_server_opts so = {.host = "127.0.0.1", .request_timeout_ms = 1000};
    store_fixture f;
    fixture_start(&f, &so);
    int s = fixture_raw(&f);
    const uint8_t mux[] = {STORE_WIRE_MUX, 1, 0, 0, 0};
    raw_send(s, mux, sizeof mux);
    uint8_t ok = 9, frame[64];
    CHECK_EQ(raw_recv(s, &ok, 1, 2000), 1);
    const uint8_t set[] = {0, 0xCE, 0xF7, 0x85, 0x3C, 1, 1, 0, 0, 0, 0, 0, 0, 0, 'k',
                           1, 0, 0, 0, 0, 0, 0, 0, 'v'};
    const uint8_t v2_ping[] = {0, 0xCE, 0xF7, 0x85, 0x3C};
    mux_send(s, 1, set, 10);
    mux_send(s, 2, v2_ping, sizeof v2_ping);
    uint32_t chan;
    for (int i = 0; i < 10; i++) { /* 2.5 s of channel 2's GETNUMKEYS */
        sleep_ms(250);
        const uint8_t nkeys = 7;
        mux_send(s, 2, &nkeys, 1);
        CHECK_EQ(mux_recv(s, &chan, frame, sizeof frame), 8);
        CHECK_EQ(chan, 2);
    }
    mux_send(s, 1, set + 10, sizeof set - 10);
    const uint8_t nkeys = 7;
    mux_send(s, 1, &nkeys, 1);
    CHECK_EQ(mux_recv(s, &chan, frame, sizeof frame), 8);
    CHECK_EQ(chan, 1);
    CHECK_EQ(frame[0], 1);
    /* alone now: half a request, and the connection idle past the timeout */
    mux_send(s, 1, set + 5, 5);
    sleep_ms(1800);
    CHECK_EQ(mux_recv(s, &chan, frame, sizeof frame), 0);
    CHECK_EQ(chan, 1);
    close(s);
    fixture_stop(&f);
}

/* etcd-check ENDPOINTS: every call of the etcd client (rendezvous/
 * etcd_client.c) against a real etcd, each result checked; prints one line
 * per check and exits 1 at the first that fails. Run by
 * tests/integration/etcd_client.sh, which starts the etcd.
 *   etcd-check ENDPOINTS                 the whole API
 *   etcd-check ENDPOINTS --user U --password P --expect-refused
 *                                        connecting must fail with -EACCES
 *   --cacert F --cert F --key F          TLS (https), with a client certificate */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rendezvous/etcd_client.h"

static etcd_client *c;

#define CHECK(cond, ...)                                                               \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "FAIL line %d: %s (etcd: %s): ", __LINE__, #cond,          \
                    c ? etcd_error(c) : "");                                           \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, "\n");                                                     \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static void ok(const char *what) { printf("ok   %s\n", what); }

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void *interrupt_later(void *arg) {
    sleep_ms(200);
    etcd_interrupt(arg);
    return NULL;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void check_value(const char *key, const char *want) {
    etcd_kv kv;
    int rc = etcd_get(c, key, &kv);
    CHECK(rc == 0, "get %s: %d", key, rc);
    CHECK(kv.len == strlen(want) && memcmp(kv.value, want, kv.len) == 0, "%s = '%s', not '%s'",
          key, (char *)kv.value, want);
    etcd_kv_free(&kv);
}

/* --outage PID MS: the only member listed (PID) stopped for MS ms, longer
 * than a turn of the members (each request's timeout): a request made
 * meanwhile waits for it and succeeds, as after an election or this
 * host's link down a moment, rather than failing the rendezvous. */
static int outage(int pid, int ms) {
    int64_t rev = 0;
    CHECK(etcd_put(c, "/t/outage", "1", 1, 0, &rev) == 0, "put before the outage");
    CHECK(kill(pid, SIGSTOP) == 0, "stop member %d", pid);
    pid_t child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0) {
        sleep_ms(ms);
        _exit(kill(pid, SIGCONT) == 0 ? 0 : 1);
    }
    int64_t t0 = now_ms();
    int rc = etcd_put(c, "/t/outage", "2", 1, 0, &rev);
    int64_t took = now_ms() - t0;
    int status;
    waitpid(child, &status, 0);
    kill(pid, SIGCONT);
    CHECK(rc == 0, "a put while the member was stopped for %d ms failed after %lld ms: %d", ms,
          (long long)took, rc);
    CHECK(took >= ms - 100, "the put took %lld ms, though the member was stopped for %d ms",
          (long long)took, ms);
    check_value("/t/outage", "2");
    printf("ok   the only member stopped for %d ms: a put made meanwhile waited %lld ms and "
           "succeeded\n", ms, (long long)took);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: etcd-check ENDPOINTS [--user U --password P --expect-refused]\n");
        return 2;
    }
    etcd_opts o = {.endpoints = argv[1], .timeout_ms = 2000};
    int expect_refused = 0, outage_pid = 0, outage_ms = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--user") == 0 && i + 1 < argc) o.user = argv[++i];
        else if (strcmp(argv[i], "--password") == 0 && i + 1 < argc) o.password = argv[++i];
        else if (strcmp(argv[i], "--expect-refused") == 0) expect_refused = 1;
        else if (strcmp(argv[i], "--cacert") == 0 && i + 1 < argc) o.cacert = argv[++i];
        else if (strcmp(argv[i], "--cert") == 0 && i + 1 < argc) o.cert = argv[++i];
        else if (strcmp(argv[i], "--key") == 0 && i + 1 < argc) o.key = argv[++i];
        else if (strcmp(argv[i], "--outage") == 0 && i + 2 < argc)
            outage_pid = atoi(argv[++i]), outage_ms = atoi(argv[++i]);
    }
    char err[1024];
    int rc = etcd_connect(&o, &c, err, sizeof err);
    if (outage_pid > 0) {
        CHECK(rc == 0, "connect: %s", err);
        return outage(outage_pid, outage_ms);
    }
    if (expect_refused) {
        CHECK(rc == -EACCES, "connect with a wrong password gave %d (%s)", rc, err);
        CHECK(strstr(err, o.user) != NULL, "the message names the user: %s", err);
        printf("ok   refused: %s\n", err);
        return 0;
    }
    CHECK(rc == 0, "connect: %s", err);
    printf("ok   connected to %s\n", etcd_member(c));

    int64_t rev = 0;
    CHECK(etcd_delete_prefix(c, "/t/") == 0, "clean");
    CHECK(etcd_put(c, "/t/a", "1", 1, 0, &rev) == 0 && rev > 0, "put");
    check_value("/t/a", "1");
    ok("put and get");

    etcd_kv now;
    rc = etcd_cas(c, "/t/a", rev + 100, "x", 1, 0, &now);
    CHECK(rc == -ESTALE, "cas with a wrong revision gave %d", rc);
    CHECK(now.mod_revision == rev && now.len == 1 && now.value[0] == '1', "the key's state");
    etcd_kv_free(&now);
    check_value("/t/a", "1");
    CHECK(etcd_cas(c, "/t/a", rev, "2", 1, 0, NULL) == 0, "cas with the right revision");
    check_value("/t/a", "2");
    CHECK(etcd_cas(c, "/t/new", 0, "n", 1, 0, NULL) == 0, "create");
    rc = etcd_cas(c, "/t/new", 0, "m", 1, 0, &now);
    CHECK(rc == -ESTALE && now.mod_revision > 0, "create again gave %d", rc);
    etcd_kv_free(&now);
    ok("compare-and-swap on revisions");

    etcd_kv kv;
    CHECK(etcd_get(c, "/t/missing", &kv) == -ENOENT, "a missing key");
    etcd_kv *kvs;
    size_t n;
    CHECK(etcd_get_in(c, "/t/", NULL, &kvs, &n, NULL) == 0 && n == 2, "prefix: %zu keys", n);
    CHECK(strcmp(kvs[0].key, "/t/a") == 0 && strcmp(kvs[1].key, "/t/new") == 0, "key order");
    etcd_kvs_free(kvs, n);
    unsigned char bin[256];
    for (int i = 0; i < 256; i++) bin[i] = (unsigned char)i;
    CHECK(etcd_put(c, "/t/bin", bin, sizeof bin, 0, NULL) == 0, "binary value");
    CHECK(etcd_get(c, "/t/bin", &kv) == 0 && kv.len == 256 && memcmp(kv.value, bin, 256) == 0,
          "binary value back");
    etcd_kv_free(&kv);
    ok("missing keys, prefixes, binary values");

    int64_t lease;
    int ttl = 0;
    CHECK(etcd_lease_grant(c, 5, &lease) == 0, "grant");
    CHECK(etcd_put(c, "/t/leased", "l", 1, lease, NULL) == 0, "put with a lease");
    CHECK(etcd_get(c, "/t/leased", &kv) == 0 && kv.lease == lease, "the key's lease");
    etcd_kv_free(&kv);
    CHECK(etcd_lease_keepalive(c, lease, &ttl) == 0 && ttl > 0, "keepalive: ttl %d", ttl);
    /* its time to live 1.2 s after the renewal: at most 3 of its 5 s left
     * (etcd rounds down) */
    int granted = 0;
    sleep_ms(1200);
    rc = etcd_lease_ttl(c, lease, &ttl, &granted);
    CHECK(rc == 0 && granted == 5 && ttl >= 1 && ttl <= 3, "time to live: %d, %d of %d s", rc,
          ttl, granted);
    CHECK(etcd_lease_revoke(c, lease) == 0, "revoke");
    CHECK(etcd_get(c, "/t/leased", &kv) == -ENOENT, "the key went with its lease");
    CHECK(etcd_lease_grant(c, 1, &lease) == 0, "a short lease");
    CHECK(etcd_put(c, "/t/short", "s", 1, lease, NULL) == 0, "put with it");
    sleep_ms(3000);
    CHECK(etcd_get(c, "/t/short", &kv) == -ENOENT, "the key of an expired lease");
    rc = etcd_lease_keepalive(c, lease, &ttl);
    CHECK(rc == -ENOENT, "keepalive of an expired lease gave %d", rc);
    rc = etcd_lease_ttl(c, lease, &ttl, &granted);
    CHECK(rc == -ENOENT, "time to live of an expired lease gave %d", rc);
    ok("leases: keys bound to them, keepalive, time to live, revoke, expiry");

    CHECK(etcd_put(c, "/w/base", "b", 1, 0, &rev) == 0, "put before the watch");
    pid_t child = fork();
    if (child == 0) {
        etcd_client *c2;
        sleep_ms(300);
        if (etcd_connect(&o, &c2, err, sizeof err) || etcd_put(c2, "/w/x", "1", 1, 0, NULL)) _exit(1);
        _exit(0);
    }
    int64_t seen = 0;
    rc = etcd_watch(c, "/w/", NULL, rev, 5000, NULL, 0, NULL, &seen);
    int status;
    waitpid(child, &status, 0);
    CHECK(rc == 0 && seen > rev, "watch: rc %d, revision %" PRId64 " after %" PRId64, rc, seen, rev);
    int64_t again = 0;
    rc = etcd_watch(c, "/w/", NULL, rev, 5000, NULL, 0, NULL, &again);
    CHECK(rc == 0 && again == seen, "a watch from an older revision sees the change at once");
    rc = etcd_watch(c, "/w/", NULL, seen, 300, NULL, 0, NULL, NULL);
    CHECK(rc == -ETIMEDOUT, "a watch with no change gave %d", rc);
    ok("watches: a change, one already past, none within the time");

    /* A watch for chosen keys passes over the prefix's other changes. */
    CHECK(etcd_put(c, "/w/base", "b", 1, 0, &rev) == 0, "put before the filtered watch");
    child = fork();
    if (child == 0) {
        etcd_client *c2;
        sleep_ms(200);
        if (etcd_connect(&o, &c2, err, sizeof err) || etcd_put(c2, "/w/other", "1", 1, 0, NULL))
            _exit(1);
        sleep_ms(200);
        if (etcd_put(c2, "/w/want", "1", 1, 0, NULL)) _exit(1);
        _exit(0);
    }
    const etcd_want want[] = {{"/w/gone", 1}, {"/w/want", 0}};
    size_t which = 9;
    seen = 0;
    rc = etcd_watch(c, "/w/", NULL, rev, 5000, want, 2, &which, &seen);
    waitpid(child, &status, 0);
    CHECK(rc == 0 && which == 1, "filtered watch gave %d (event %zu)", rc, which);
    CHECK(etcd_get(c, "/w/want", &kv) == 0, "get /w/want");
    CHECK(seen == kv.mod_revision, "the filtered watch woke at revision %" PRId64
          ", not at /w/want's %" PRId64, seen, kv.mod_revision);
    etcd_kv_free(&kv);
    CHECK(etcd_put(c, "/w/other", "2", 1, 0, &rev) == 0, "another write");
    rc = etcd_watch(c, "/w/", NULL, rev - 1, 300, want, 2, NULL, NULL);
    CHECK(rc == -ETIMEDOUT, "a filtered watch woke on another key: %d", rc);
    /* /w/gone is waited for to go: its put passes, its delete wakes. */
    CHECK(etcd_put(c, "/w/gone", "1", 1, 0, &rev) == 0, "put /w/gone");
    rc = etcd_watch(c, "/w/", NULL, rev - 1, 300, want, 2, NULL, NULL);
    CHECK(rc == -ETIMEDOUT, "a watch for a deletion woke on a put: %d", rc);
    CHECK(etcd_delete(c, "/w/gone") == 0, "delete /w/gone");
    rc = etcd_watch(c, "/w/", NULL, rev, 300, want, 2, &which, NULL);
    CHECK(rc == 0 && which == 0, "a watch for a deletion gave %d (event %zu)", rc, which);
    /* A watch from one key to another sees nothing beyond them. */
    CHECK(etcd_put(c, "/w/zz", "1", 1, 0, &rev) == 0, "put /w/zz");
    rc = etcd_watch(c, "/w/a", "/w/want", rev - 1, 300, NULL, 0, NULL, NULL);
    CHECK(rc == -ETIMEDOUT, "a watch up to /w/want woke on /w/zz: %d", rc);
    rc = etcd_watch(c, "/w/a", "/w/zz", rev - 1, 300, NULL, 0, NULL, NULL);
    CHECK(rc == 0, "a watch up to /w/zz (included) gave %d", rc);
    ok("watches for chosen events: woken by them only; ranges bounded by their last key");

    /* A watch started from now says the store's revision then, and goes
     * on across waits: a change made between two waits (by the same
     * client's plain request) is seen by the second. */
    int64_t created = 0, at = 0;
    const etcd_want later[] = {{"/w/later", 0}};
    CHECK(etcd_put(c, "/w/before", "1", 1, 0, &rev) == 0, "put /w/before");
    rc = etcd_watch_start(c, "/w/", NULL, 0, later, 1, &created);
    CHECK(rc == 0 && created == rev, "watch start gave %d, created at %" PRId64 " (store at %" PRId64 ")",
          rc, created, rev);
    rc = etcd_watch_wait(c, 200, NULL, NULL);
    CHECK(rc == -ETIMEDOUT && etcd_watch_active(c), "a wait with no change gave %d", rc);
    CHECK(etcd_put(c, "/w/other", "3", 1, 0, NULL) == 0, "another write while the watch is on");
    CHECK(etcd_put(c, "/w/later", "1", 1, 0, &rev) == 0, "put /w/later while the watch is on");
    rc = etcd_watch_wait(c, 5000, &which, &at);
    CHECK(rc == 0 && which == 0 && at == rev, "the next wait gave %d at %" PRId64 " (put at %" PRId64 ")",
          rc, at, rev);
    CHECK(!etcd_watch_active(c), "the watch is over after its event");
    ok("a watch from now: its revision; it goes on across waits");

    /* A watch of each wanted key alone (one stream): the writes between
     * them are not sent at all, and etcd has every key's watch before the
     * start returns. */
    const etcd_want apart[] = {{"/w/k1", 0}, {"/w/k3", 0}};
    CHECK(etcd_put(c, "/w/k0", "1", 1, 0, &rev) == 0, "put /w/k0");
    rc = etcd_watch_start(c, NULL, NULL, 0, apart, 2, &created);
    CHECK(rc == 0 && created == rev, "a watch of two keys gave %d, created at %" PRId64
          " (store at %" PRId64 ")", rc, created, rev);
    uint64_t events = etcd_watch_events(c);
    for (int i = 0; i < 3; i++)
        CHECK(etcd_put(c, "/w/k2", "1", 1, 0, NULL) == 0, "put /w/k2, between the two");
    CHECK(etcd_put(c, "/w/k3", "1", 1, 0, &rev) == 0, "put /w/k3");
    rc = etcd_watch_wait(c, 5000, &which, &at);
    CHECK(rc == 0 && which == 1 && at == rev, "the wait on two keys gave %d (event %zu at %" PRId64
          ", put at %" PRId64 ")", rc, which, at, rev);
    CHECK(etcd_watch_events(c) - events == 1, "%" PRIu64 " events came for one wanted",
          etcd_watch_events(c) - events);
    ok("a watch of keys apart: only their own events come");

    /* etcd_interrupt from another thread ends the watch at once; one
     * before the watch ends the next one; plain requests go through. */
    pthread_t th;
    int64_t t0 = now_ms();
    CHECK(pthread_create(&th, NULL, interrupt_later, c) == 0, "a thread");
    rc = etcd_watch(c, "/w/", NULL, 0, 5000, NULL, 0, NULL, NULL);
    pthread_join(th, NULL);
    CHECK(rc == -EINTR && now_ms() - t0 < 2000, "an interrupted watch gave %d after %lld ms", rc,
          (long long)(now_ms() - t0));
    etcd_interrupt(c);
    CHECK(etcd_put(c, "/w/after", "1", 1, 0, NULL) == 0, "a put after an interrupt");
    rc = etcd_watch(c, "/w/", NULL, 0, 5000, NULL, 0, NULL, NULL);
    CHECK(rc == -EINTR, "the watch after an interrupt gave %d", rc);
    rc = etcd_watch(c, "/w/", NULL, 0, 300, NULL, 0, NULL, NULL);
    CHECK(rc == -ETIMEDOUT, "an interrupt ended two watches: %d", rc);
    ok("interrupt: ends the watch in progress, or the next one, once");

    /* Counters: concurrent bumps each get their own number, 1..N. */
    enum { NBUMP = 6 };
    pid_t kids[NBUMP];
    for (int i = 0; i < NBUMP; i++) {
        if ((kids[i] = fork()) == 0) {
            etcd_client *c2;
            int64_t v = 0;
            if (etcd_connect(&o, &c2, err, sizeof err) || etcd_bump(c2, "/t/counter", &v)) _exit(99);
            _exit((int)v);
        }
    }
    int got = 0;
    for (int i = 0; i < NBUMP; i++) {
        waitpid(kids[i], &status, 0);
        int v = WIFEXITED(status) ? WEXITSTATUS(status) : 99;
        CHECK(v >= 1 && v <= NBUMP && !(got & (1 << v)), "bump %d gave %d (seen: %#x)", i, v, got);
        got |= 1 << v;
    }
    CHECK(etcd_get(c, "/t/counter", &kv) == 0 && kv.version == NBUMP, "the counter's version");
    etcd_kv_free(&kv);
    ok("counters: concurrent bumps numbered 1..N, no two alike");

    CHECK(etcd_delete(c, "/t/a") == 0 && etcd_get(c, "/t/a", &kv) == -ENOENT, "delete");
    CHECK(etcd_delete_prefix(c, "/t/") == 0 && etcd_delete_prefix(c, "/w/") == 0, "delete prefix");
    CHECK(etcd_get_in(c, "/t/", NULL, &kvs, &n, NULL) == 0 && n == 0, "nothing left");
    free(kvs);
    ok("delete, delete prefix");
    printf("talked to %s\n", etcd_member(c));
    etcd_close(c);
    return 0;
}

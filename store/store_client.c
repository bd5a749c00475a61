/* The blocking store client (see store_client.h). One non-blocking socket
 * driven with poll() so that every call honours a deadline; requests are
 * built in one buffer and sent with one write; replies come through a
 * small read buffer. After an I/O error or a timeout in the middle of a
 * reply the connection is out of step with the server, so it is marked
 * dead and every later call fails fast with -ECONNRESET
 * (store_client_broken says what broke it). store_client_cancel shuts the
 * socket down from another thread: the call under way wakes, and it and
 * every later one fail with -ECANCELED. */
#include "store/store_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/ddprun_env.h"
#include "common/log.h"

#define RBUF 65536

struct store_client {
    int fd;
    int timeout_ms;
    store_gen gen;
    int dead;          /* 0, or the error that broke the connection */
    atomic_int cancelled; /* store_client_cancel was called */
    buf_t out;
    size_t rpos, rlen;
    uint8_t rbuf[RBUF];
};

/* Waits for `events` on fd until the deadline; 0, -ETIMEDOUT or -errno.
 * Polls at least once, so a ready socket is seen even past the deadline. */
static int wait_fd(int fd, short events, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - clock_now_ms();
        if (left < 0) left = 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left > 1000000 ? 1000000 : (int)left);
        if (n > 0) return 0;
        if (n < 0 && errno != EINTR) return -errno;
        if (n == 0 && left == 0) return -ETIMEDOUT;
    }
}

/* ---- connecting ------------------------------------------------------- */

static int connect_once(const struct addrinfo *ai, int64_t deadline) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int rc = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
            goto out;
        }
        rc = wait_fd(fd, POLLOUT, deadline);
        if (rc) goto out;
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            rc = -err;
            goto out;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
out:
    close(fd);
    return rc;
}

/* Tries every address until one connects, retrying with exponential
 * backoff (10 ms doubling to 1 s) while the server is not up yet. */
static int connect_retry(const store_client_opts *o, int64_t deadline) {
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int backoff = 10, rc = -ECONNREFUSED;
    for (;;) {
        struct addrinfo *res = NULL;
        int g = getaddrinfo(o->host, port, &hints, &res);
        if (g == 0) {
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                rc = connect_once(ai, deadline);
                if (rc >= 0) break;
            }
            freeaddrinfo(res);
            if (rc >= 0) return rc;
        } else if (g != EAI_AGAIN) {
            return -EHOSTUNREACH; /* an unknown host name does not become known */
        }
        int64_t left = deadline - clock_now_ms();
        if (left <= 0) return rc == -ETIMEDOUT ? rc : (rc < 0 ? rc : -ETIMEDOUT);
        struct timespec ts = {0, (long)(backoff < left ? backoff : left) * 1000000L};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
    }
}

/* ---- raw I/O ------------------------------------------------------------ */

static int fail(store_client *c, int rc) {
    if (atomic_load(&c->cancelled)) rc = -ECANCELED; /* (the shutdown is what failed) */
    c->dead = rc < 0 ? rc : -ECONNRESET;
    return rc;
}

static int send_out(store_client *c, int64_t deadline) {
    size_t off = 0;
    while (off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + off, c->out.len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return fail(c, errno == EPIPE ? -ECONNRESET : -errno);
        int rc = wait_fd(c->fd, POLLOUT, deadline);
        if (rc) return fail(c, rc);
    }
    buf_clear(&c->out);
    return 0;
}

/* Reads exactly n bytes into dst before the deadline. With `soft`, a
 * timeout before any byte arrived leaves the connection usable (a wait
 * that can still be cancelled); any other failure puts the connection out
 * of step with the server, so it is marked dead. */
static int recv_some(store_client *c, void *dst, size_t n, int64_t deadline, int soft) {
    uint8_t *d = dst;
    size_t got = 0;
    while (got < n) {
        if (c->rpos < c->rlen) {
            size_t k = c->rlen - c->rpos < n - got ? c->rlen - c->rpos : n - got;
            memcpy(d + got, c->rbuf + c->rpos, k);
            c->rpos += k;
            got += k;
            continue;
        }
        ssize_t r = recv(c->fd, c->rbuf, RBUF, 0);
        if (r > 0) {
            c->rpos = 0;
            c->rlen = (size_t)r;
            continue;
        }
        if (r == 0) return fail(c, -ECONNRESET);
        if (errno != EAGAIN && errno != EINTR) return fail(c, -errno);
        int rc = wait_fd(c->fd, POLLIN, deadline);
        if (rc == -ETIMEDOUT && got == 0 && soft) return rc;
        if (rc) return fail(c, rc);
    }
    return 0;
}

static int recv_exact(store_client *c, void *dst, size_t n, int64_t deadline) {
    return recv_some(c, dst, n, deadline, 0);
}

static int recv_u8(store_client *c, uint8_t *v, int64_t dl) { return recv_exact(c, v, 1, dl); }

static int recv_u64(store_client *c, uint64_t *v, int64_t dl) {
    uint8_t b[8];
    int rc = recv_exact(c, b, 8, dl);
    if (rc == 0) *v = store_load_u64(b);
    return rc;
}

/* A length-prefixed value, malloc'd (NUL-terminated for convenience). */
static int recv_bytes(store_client *c, uint8_t **val, size_t *len, int64_t dl) {
    uint64_t n;
    int rc = recv_u64(c, &n, dl);
    if (rc) return rc;
    if (n > ((uint64_t)1 << 40)) return fail(c, -EPROTO);
    uint8_t *p = malloc(n + 1);
    if (!p) return fail(c, -ENOMEM);
    rc = recv_exact(c, p, n, dl);
    if (rc) {
        free(p);
        return rc;
    }
    p[n] = 0;
    if (val) *val = p;
    else free(p);
    if (len) *len = n;
    return 0;
}

/* ---- request building ----------------------------------------------------- */

static int64_t deadline_of(const store_client *c, int timeout_ms) {
    return clock_now_ms() + (timeout_ms < 0 ? c->timeout_ms : timeout_ms);
}

/* Starts a request; -ENOTSUP if this generation lacks the op. */
static int begin(store_client *c, store_op op) {
    if (!c->dead && atomic_load(&c->cancelled)) fail(c, -ECANCELED);
    if (c->dead) return c->dead == -ECANCELED ? -ECANCELED : -ECONNRESET;
    buf_clear(&c->out);
    return store_enc_op(&c->out, c->gen, op) == 0 ? 0 : -ENOTSUP;
}

int store_client_can_cancel(store_client *c) {
    buf_clear(&c->out);
    int ok = !c->dead && store_enc_op(&c->out, c->gen, STORE_OP_CANCEL_WAIT) == 0;
    buf_clear(&c->out);
    return ok;
}

static void put_str(store_client *c, const char *s) { store_enc_bytes(&c->out, s, strlen(s)); }

static void put_keys(store_client *c, size_t n, const char *const *keys) {
    store_enc_u64(&c->out, n);
    for (size_t i = 0; i < n; i++) put_str(c, keys[i]);
}

/* Sends what begin()/put_*() built; an allocation failure while building
 * shows up here as a short buffer, so check the capacity first. */
static int send_req(store_client *c, int64_t deadline) {
    if (c->out.len == 0) return -ENOMEM;
    return send_out(c, deadline);
}

/* ---- public API -------------------------------------------------------------- */

int store_client_connect(const store_client_opts *o, store_client **out) {
    *out = NULL;
    if (!o->host || o->port <= 0 || o->port > 65535) return -EINVAL;
    store_client *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 300000;
    c->gen = o->gen == STORE_GEN_V1 ? STORE_GEN_V1 : STORE_GEN_V2;
    /* A store that speaks only torch 1.13's generation (torchrun from torch
     * 1.13) cannot tell itself apart: the user says so. */
    const char *proto = getenv(DDPRUN_ENV_STORE_PROTOCOL);
    if (o->gen == STORE_GEN_UNKNOWN && proto && strcmp(proto, "1.13") == 0) c->gen = STORE_GEN_V1;
    int64_t deadline = clock_now_ms() + (o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 30000);
    int rc = connect_retry(o, deadline);
    if (rc < 0) goto fail;
    c->fd = rc;
    const char *token = o->no_ext ? NULL : (o->token ? o->token : getenv(DDPRUN_ENV_STORE_TOKEN));
    if (token && *token) {
        /* HELLO goes first: a server with a token drops anything else. */
        store_enc_u8(&c->out, STORE_WIRE_HELLO);
        store_enc_u32(&c->out, STORE_EXT_MAGIC);
        store_enc_u32(&c->out, STORE_EXT_VERSION);
        put_str(c, token);
        uint8_t status = 1, ver[4];
        if ((rc = send_req(c, deadline)) || (rc = recv_u8(c, &status, deadline)) ||
            (rc = recv_exact(c, ver, 4, deadline))) {
            rc = rc == -ECONNRESET ? -EACCES : rc; /* a wrong token: the server hangs up */
            goto fail_fd;
        }
        if (status != 0) {
            rc = -EACCES;
            goto fail_fd;
        }
    }
    if (c->gen == STORE_GEN_V2) {
        /* VALIDATE has no reply, so sending it costs no round trip. */
        store_enc_op(&c->out, STORE_GEN_V2, STORE_OP_VALIDATE);
        store_enc_u32(&c->out, STORE_VALIDATE_MAGIC);
        if ((rc = send_req(c, deadline))) goto fail_fd;
    }
    *out = c;
    return 0;
fail_fd:
    close(c->fd);
fail:
    buf_free(&c->out);
    free(c);
    return rc;
}

void store_client_close(store_client *c) {
    if (!c) return;
    close(c->fd);
    buf_free(&c->out);
    free(c);
}

int store_client_fd(const store_client *c) { return c->fd; }

void store_client_cancel(store_client *c) {
    atomic_store(&c->cancelled, 1);
    shutdown(c->fd, SHUT_RDWR); /* wakes a poll or recv under way */
}

void store_client_set_timeout(store_client *c, int timeout_ms) {
    if (timeout_ms > 0) c->timeout_ms = timeout_ms;
}

int store_set(store_client *c, const char *key, const void *val, size_t len) {
    int rc = begin(c, STORE_OP_SET);
    if (rc) return rc;
    put_str(c, key);
    store_enc_bytes(&c->out, val, len);
    return send_req(c, deadline_of(c, -1));
}

/* GET's reply, once the caller knows the key exists. */
static int get_now(store_client *c, const char *key, uint8_t **val, size_t *len, int64_t dl) {
    int rc = begin(c, STORE_OP_GET);
    if (rc) return rc;
    put_str(c, key);
    if ((rc = send_req(c, dl))) return rc;
    return recv_bytes(c, val, len, dl);
}

int store_get(store_client *c, const char *key, uint8_t **val, size_t *len) {
    int rc = store_wait(c, 1, &key, -1);
    if (rc) return rc;
    return get_now(c, key, val, len, deadline_of(c, -1));
}

int store_try_get(store_client *c, const char *key, uint8_t **val, size_t *len) {
    int ready = 0;
    int rc = store_check(c, 1, &key, &ready);
    if (rc) return rc;
    if (!ready) return -ENOENT;
    return get_now(c, key, val, len, deadline_of(c, -1));
}

int store_add(store_client *c, const char *key, int64_t delta, int64_t *result) {
    int64_t dl = deadline_of(c, -1);
    int rc = begin(c, STORE_OP_ADD);
    if (rc) return rc;
    put_str(c, key);
    store_enc_i64(&c->out, delta);
    uint64_t v;
    if ((rc = send_req(c, dl)) || (rc = recv_u64(c, &v, dl))) return rc;
    if (result) *result = (int64_t)v;
    return 0;
}

int store_compare_set(store_client *c, const char *key, const void *expected, size_t elen,
                      const void *desired, size_t dlen, uint8_t **out, size_t *olen) {
    int64_t dl = deadline_of(c, -1);
    int rc = begin(c, STORE_OP_COMPARE_SET);
    if (rc) return rc;
    put_str(c, key);
    store_enc_bytes(&c->out, expected, elen);
    store_enc_bytes(&c->out, desired, dlen);
    if ((rc = send_req(c, dl))) return rc;
    return recv_bytes(c, out, olen, dl);
}

int store_check(store_client *c, size_t n, const char *const *keys, int *ready) {
    int64_t dl = deadline_of(c, -1);
    int rc = begin(c, STORE_OP_CHECK);
    if (rc) return rc;
    put_keys(c, n, keys);
    uint8_t r;
    if ((rc = send_req(c, dl)) || (rc = recv_u8(c, &r, dl))) return rc;
    *ready = r == STORE_CHECK_READY;
    return 0;
}

/* After a wait timed out: cancel it and drain what the server says, which
 * is WAIT_CANCELED, possibly preceded by the wait's own reply (and its
 * `ntail` bytes, kept in `tail`) if the wait completed first: then the wait
 * succeeded after all. Returns 0 or -ETIMEDOUT. */
static int cancel_wait(store_client *c, uint8_t *tail, size_t ntail) {
    int64_t dl = deadline_of(c, 10000);
    int rc = begin(c, STORE_OP_CANCEL_WAIT);
    if (rc) return fail(c, -ETIMEDOUT); /* torch 1.13 cannot cancel: give up the connection */
    uint8_t r;
    if ((rc = send_req(c, dl)) || (rc = recv_u8(c, &r, dl))) return fail(c, rc);
    if (r == STORE_WAIT_CANCELED) return -ETIMEDOUT;
    if (r != STORE_WAIT_STOP_WAITING || (ntail && recv_exact(c, tail, ntail, dl)) ||
        recv_u8(c, &r, dl) || r != STORE_WAIT_CANCELED)
        return fail(c, -EPROTO);
    return 0;
}

/* Sends a built wait request and reads its reply (plus `ntail` bytes into
 * `tail`, WAIT_ANY's index). */
static int run_wait(store_client *c, int timeout_ms, uint8_t *tail, size_t ntail) {
    int64_t dl = deadline_of(c, timeout_ms);
    int rc = send_req(c, dl);
    if (rc) return rc;
    uint8_t r;
    rc = recv_some(c, &r, 1, dl, 1);
    if (rc == -ETIMEDOUT) return cancel_wait(c, tail, ntail);
    if (rc) return rc;
    if (r != STORE_WAIT_STOP_WAITING) return fail(c, -EPROTO);
    return ntail ? recv_exact(c, tail, ntail, deadline_of(c, 10000)) : 0;
}

int store_wait(store_client *c, size_t n, const char *const *keys, int timeout_ms) {
    int rc = begin(c, STORE_OP_WAIT);
    if (rc) return rc;
    put_keys(c, n, keys);
    return run_wait(c, timeout_ms, NULL, 0);
}

static int simple_i64(store_client *c, store_op op, const char *key, int64_t *out) {
    int64_t dl = deadline_of(c, -1);
    int rc = begin(c, op);
    if (rc) return rc;
    if (key) put_str(c, key);
    uint64_t v;
    if ((rc = send_req(c, dl)) || (rc = recv_u64(c, &v, dl))) return rc;
    *out = (int64_t)v;
    return 0;
}

int store_num_keys(store_client *c, int64_t *n) {
    return simple_i64(c, STORE_OP_GETNUMKEYS, NULL, n);
}

int store_delete(store_client *c, const char *key, int *deleted) {
    int64_t v = 0;
    int rc = simple_i64(c, STORE_OP_DELETE_KEY, key, &v);
    if (rc == 0 && deleted) *deleted = v > 0;
    return rc;
}

int store_append(store_client *c, const char *key, const void *val, size_t len) {
    int rc = begin(c, STORE_OP_APPEND);
    if (rc) return rc;
    put_str(c, key);
    store_enc_bytes(&c->out, val, len);
    return send_req(c, deadline_of(c, -1));
}

int store_multi_get(store_client *c, size_t n, const char *const *keys, uint8_t **vals,
                    size_t *lens) {
    int64_t dl = deadline_of(c, -1);
    int rc = begin(c, STORE_OP_MULTI_GET);
    if (rc == -ENOTSUP) { /* torch 1.13 has no MULTI_GET: one GET per key */
        for (size_t i = 0; i < n; i++) {
            if ((rc = store_get(c, keys[i], &vals[i], &lens[i]))) {
                for (size_t j = 0; j < i; j++) free(vals[j]);
                return rc;
            }
        }
        return 0;
    }
    if (rc) return rc;
    put_keys(c, n, keys);
    if ((rc = send_req(c, dl))) return rc;
    for (size_t i = 0; i < n; i++) {
        if ((rc = recv_bytes(c, &vals[i], &lens[i], dl))) {
            for (size_t j = 0; j < i; j++) free(vals[j]);
            return rc;
        }
    }
    return 0;
}

int store_multi_set(store_client *c, size_t n, const char *const *keys,
                    const void *const *vals, const size_t *lens) {
    int rc = begin(c, STORE_OP_MULTI_SET);
    if (rc) return rc;
    store_enc_u64(&c->out, n);
    for (size_t i = 0; i < n; i++) {
        put_str(c, keys[i]);
        store_enc_bytes(&c->out, vals[i], lens[i]);
    }
    return send_req(c, deadline_of(c, -1));
}

int store_client_broken(const store_client *c) { return c->dead; }

int store_ping(store_client *c, double *rtt_us) {
    int64_t t0 = clock_now_ns();
    int64_t dl = deadline_of(c, -1);
    int rc = begin(c, STORE_OP_PING);
    if (rc) return rc;
    uint32_t nonce = (uint32_t)t0;
    store_enc_u32(&c->out, nonce);
    uint8_t b[4];
    if ((rc = send_req(c, dl)) || (rc = recv_exact(c, b, 4, dl))) return rc;
    if (store_load_u32(b) != nonce) return fail(c, -EPROTO);
    if (rtt_us) *rtt_us = (double)(clock_now_ns() - t0) / 1e3;
    return 0;
}

int store_queue_push(store_client *c, const char *key, const void *val, size_t len) {
    int rc = begin(c, STORE_OP_QUEUE_PUSH);
    if (rc) return rc;
    put_str(c, key);
    store_enc_bytes(&c->out, val, len);
    return send_req(c, deadline_of(c, -1));
}

int store_queue_pop(store_client *c, const char *key, int block, uint8_t **val, size_t *len) {
    int rc;
    if (block && (rc = store_wait(c, 1, &key, -1))) return rc;
    int64_t n = 0;
    if ((rc = simple_i64(c, STORE_OP_QUEUE_POP, key, &n))) return rc;
    if (n <= 0) return -ENOENT;
    return recv_bytes(c, val, len, deadline_of(c, -1));
}

int store_queue_len(store_client *c, const char *key, int64_t *n) {
    return simple_i64(c, STORE_OP_QUEUE_LEN, key, n);
}

int store_list_keys(store_client *c, char ***keys, size_t *n) {
    int64_t count = 0;
    int rc = simple_i64(c, STORE_OP_LIST_KEYS, NULL, &count);
    if (rc) return rc;
    if (count < 0 || count > (1 << 26)) return fail(c, -EPROTO);
    char **k = calloc((size_t)count + 1, sizeof *k);
    if (!k) return fail(c, -ENOMEM);
    for (int64_t i = 0; i < count; i++) {
        if ((rc = recv_bytes(c, (uint8_t **)&k[i], NULL, deadline_of(c, -1)))) {
            store_free_keys(k, (size_t)i);
            return rc;
        }
    }
    *keys = k;
    *n = (size_t)count;
    return 0;
}

void store_free_keys(char **keys, size_t n) {
    if (!keys) return;
    for (size_t i = 0; i < n; i++) free(keys[i]);
    free(keys);
}

int store_barrier(store_client *c, const char *key, int64_t world_size, int timeout_ms) {
    int rc = begin(c, STORE_OP_BARRIER);
    if (rc) return rc;
    put_str(c, key);
    store_enc_i64(&c->out, world_size);
    return run_wait(c, timeout_ms, NULL, 0);
}

/* ---- extension ---------------------------------------------------------------- */

static int status_reply(store_client *c, int64_t dl) {
    uint8_t r;
    int rc = send_req(c, dl);
    if (rc || (rc = recv_u8(c, &r, dl))) return rc;
    return r == 0 ? 0 : -ENOENT;
}

int store_set_owned(store_client *c, const char *key, const void *val, size_t len,
                    uint64_t lease) {
    int rc = begin(c, STORE_OP_SET_OWNED);
    if (rc) return rc;
    put_str(c, key);
    store_enc_bytes(&c->out, val, len);
    store_enc_u64(&c->out, lease);
    return status_reply(c, deadline_of(c, -1));
}

int store_lease_grant(store_client *c, int64_t ttl_ms, uint64_t *lease) {
    if (ttl_ms <= 0) return -EINVAL;
    int64_t dl = deadline_of(c, -1);
    int rc = begin(c, STORE_OP_LEASE_GRANT);
    if (rc) return rc;
    store_enc_i64(&c->out, ttl_ms);
    if ((rc = send_req(c, dl))) return rc;
    return recv_u64(c, lease, dl);
}

static int lease_op(store_client *c, store_op op, uint64_t lease) {
    int rc = begin(c, op);
    if (rc) return rc;
    store_enc_u64(&c->out, lease);
    return status_reply(c, deadline_of(c, -1));
}

int store_lease_renew(store_client *c, uint64_t lease) {
    return lease_op(c, STORE_OP_LEASE_RENEW, lease);
}

int store_lease_revoke(store_client *c, uint64_t lease) {
    return lease_op(c, STORE_OP_LEASE_REVOKE, lease);
}

int store_wait_any(store_client *c, size_t n, const uint8_t *conds, const char *const *keys,
                   int timeout_ms, size_t *index) {
    int rc = begin(c, STORE_OP_WAIT_ANY);
    if (rc) return rc;
    store_enc_u64(&c->out, n);
    for (size_t i = 0; i < n; i++) {
        store_enc_u8(&c->out, conds[i]);
        put_str(c, keys[i]);
    }
    uint8_t idx[8];
    if ((rc = run_wait(c, timeout_ms, idx, 8))) return rc;
    if (index) *index = (size_t)store_load_u64(idx);
    return 0;
}

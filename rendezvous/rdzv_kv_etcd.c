/* The rendezvous' key-value interface (rdzv_kv.h) on etcd v3. What the TCP
 * store does in one operation, etcd does with a transaction:
 *   add                        a counter is the key's version (how often it
 *                              was written): one put each, numbered by
 *                              etcd, so agents that join at once never
 *                              retry each other; counters only go up
 *   append, compare_set        read, then a compare-and-swap on the key's
 *                              mod_revision, retried when another agent
 *                              wrote in between
 *   wait_any                   watch the keys' range (from the first key
 *                              to the last) from now, then read them: no
 *                              change can slip between the two; woken only
 *                              by the event waited for (a put, or a delete
 *                              for "absent"), which is the answer; the
 *                              same wait again (the caller's next slice)
 *                              waits on with the same watch; a wait that
 *                              heard nothing reads a key, so that a member
 *                              cut off silently is left for another
 *   interrupt                  ends the watch at once (another thread)
 *   a key owned by the handle  bound to the handle's newest lease, the
 *                              heartbeat's (etcd has no connections that
 *                              own keys): it goes when the agent stops
 *                              renewing it, and moves to a new lease
 * etcd's members fail over inside the client (etcd_client.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"
#include "rendezvous/etcd_client.h"
#include "rendezvous/rdzv_kv.h"

#define MAX_OWNED 8

typedef struct {
    rdzv_kv kv;
    etcd_client *c;
    int64_t session_lease; /* the newest lease granted through this handle */
    int broken;            /* -EHOSTUNREACH once no member answered */
    /* The wait whose watch is still on (it timed out, or was
     * interrupted): the same wait again waits on with it. */
    uint64_t wait_id;
    etcd_want *want; /* its events, the keys copied */
    size_t nwant;
    int probe_every_ms;    /* a quiet wait reads a key at most this often (probe) */
    int64_t last_probe_ms;
    /* The keys owned by the handle, bound to its newest lease: a new lease
     * (the old one lapsed) takes them over. */
    struct {
        char *key;
        uint8_t *val;
        size_t len;
    } owned[MAX_OWNED];
    int nowned;
} kv_etcd;

static kv_etcd *E(rdzv_kv *kv) { return (kv_etcd *)kv; }

/* Every call's result passes here: a call no member answered marks the
 * handle as cut off from etcd (what rdzv_store_broken reports). */
static int seen(kv_etcd *e, int rc) {
    if (rc == -EHOSTUNREACH) e->broken = rc;
    return rc;
}

static int e_set(rdzv_kv *kv, const char *k, const void *v, size_t n) {
    return seen(E(kv), etcd_put(E(kv)->c, k, v, n, 0, NULL));
}

static int e_try_get(rdzv_kv *kv, const char *k, uint8_t **v, size_t *n) {
    etcd_kv x;
    int rc = seen(E(kv), etcd_get(E(kv)->c, k, &x));
    if (rc) return rc;
    *v = x.value, *n = x.len;
    free(x.key);
    return 0;
}

/* Read-modify-write with a compare-and-swap on the revision read;
 * update(old, oldlen, ctx, &new, &newlen) makes the new value (malloc'd),
 * or returns 1 to leave the key as it is. */
typedef int (*update_fn)(const uint8_t *old, size_t olen, int exists, void *ctx, uint8_t **nv,
                         size_t *nlen);

static int rmw(kv_etcd *e, const char *k, update_fn update, void *ctx, uint8_t **out,
               size_t *olen) {
    for (int attempt = 0; attempt < 1000; attempt++) {
        etcd_kv cur;
        int rc = etcd_get(e->c, k, &cur);
        if (rc && rc != -ENOENT) return seen(e, rc);
        int exists = rc == 0;
        uint8_t *nv = NULL;
        size_t nlen = 0;
        int keep = update(exists ? cur.value : (const uint8_t *)"", exists ? cur.len : 0, exists,
                          ctx, &nv, &nlen);
        if (keep < 0) {
            etcd_kv_free(&cur);
            return keep;
        }
        if (keep == 1) { /* nothing to write: the present value is the answer */
            if (!out) {
                etcd_kv_free(&cur);
            } else if (exists) {
                *out = cur.value, *olen = cur.len;
                free(cur.key);
            } else {
                *olen = 0;
                if (!(*out = calloc(1, 1))) return -ENOMEM;
            }
            return 0;
        }
        int64_t expect = exists ? cur.mod_revision : 0;
        etcd_kv_free(&cur);
        rc = etcd_cas(e->c, k, expect, nv, nlen, 0, NULL);
        if (rc == 0) {
            if (out) *out = nv, *olen = nlen;
            else free(nv);
            return 0;
        }
        free(nv);
        if (rc != -ESTALE) return seen(e, rc);
    }
    return -EAGAIN;
}

/* The counter is the key's version; etcd numbers concurrent writes, so
 * each caller gets its own sum in one request. */
static int e_add(rdzv_kv *kv, const char *k, int64_t d, int64_t *out) {
    kv_etcd *e = E(kv);
    if (d < 0) return -EINVAL; /* a version only goes up */
    if (d == 0) {
        etcd_kv cur;
        int rc = etcd_get(e->c, k, &cur);
        if (rc == -ENOENT) return *out = 0, 0;
        if (rc) return seen(e, rc);
        *out = cur.version;
        etcd_kv_free(&cur);
        return 0;
    }
    for (int64_t i = 0; i < d; i++) {
        int rc = seen(e, etcd_bump(e->c, k, out));
        if (rc) return rc;
    }
    return 0;
}

typedef struct {
    const void *expected, *desired;
    size_t elen, dlen;
} cas_args;

static int cas_update(const uint8_t *old, size_t olen, int exists, void *ctx, uint8_t **nv,
                      size_t *nlen) {
    const cas_args *a = ctx;
    int match = exists ? olen == a->elen && memcmp(old, a->expected, olen) == 0 : a->elen == 0;
    if (!match) return 1;
    if (!(*nv = malloc(a->dlen + 1))) return -ENOMEM;
    memcpy(*nv, a->desired, a->dlen);
    (*nv)[a->dlen] = 0;
    *nlen = a->dlen;
    return 0;
}

static int e_compare_set(rdzv_kv *kv, const char *k, const void *ex, size_t en, const void *d,
                         size_t dn, uint8_t **out, size_t *on) {
    kv_etcd *e = E(kv);
    if (en == 0) { /* "only if missing": one create-only swap, no read first */
        etcd_kv now;
        int rc = etcd_cas(e->c, k, 0, d, dn, 0, &now);
        if (rc == 0) { /* ours is the value now */
            if (!(*out = malloc(dn + 1))) return -ENOMEM;
            memcpy(*out, d, dn);
            (*out)[dn] = 0;
            *on = dn;
            return 0;
        }
        if (rc == -ESTALE && now.len > 0) { /* another's is */
            *out = now.value, *on = now.len;
            free(now.key);
            return 0;
        }
        etcd_kv_free(&now);
        if (rc != -ESTALE) return seen(e, rc);
        /* there but empty: as good as missing; the read-then-swap decides */
    }
    cas_args a = {ex, d, en, dn};
    return rmw(e, k, cas_update, &a, out, on);
}

static int append_update(const uint8_t *old, size_t olen, int exists, void *ctx, uint8_t **nv,
                         size_t *nlen) {
    (void)exists;
    const cas_args *a = ctx; /* desired: what to append */
    if (!(*nv = malloc(olen + a->dlen + 1))) return -ENOMEM;
    memcpy(*nv, old, olen);
    memcpy(*nv + olen, a->desired, a->dlen);
    (*nv)[olen + a->dlen] = 0;
    *nlen = olen + a->dlen;
    return 0;
}

static int e_append(rdzv_kv *kv, const char *k, const void *v, size_t n) {
    cas_args a = {NULL, v, 0, n};
    return rmw(E(kv), k, append_update, &a, NULL, NULL);
}

static int e_del(rdzv_kv *kv, const char *k) { return seen(E(kv), etcd_delete(E(kv)->c, k)); }

static int e_check(rdzv_kv *kv, size_t n, const char *const *keys, int *all) {
    etcd_kv *kvs = calloc(n ? n : 1, sizeof *kvs);
    if (!kvs) return -ENOMEM;
    int rc = seen(E(kv), etcd_get_many(E(kv)->c, n, keys, kvs, NULL));
    *all = 1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!kvs[i].key) *all = 0;
        etcd_kv_free(&kvs[i]);
    }
    free(kvs);
    return rc;
}

/* The first and the last of keys in key order: one range read or watched
 * instead of a request per key. */
static void span(size_t n, const char *const *keys, const char **lo, const char **hi) {
    *lo = *hi = keys[0];
    for (size_t i = 1; i < n; i++) {
        if (strcmp(keys[i], *lo) < 0) *lo = keys[i];
        if (strcmp(keys[i], *hi) > 0) *hi = keys[i];
    }
}

/* A wait on at most this many keys watches each alone (and reads them in
 * one transaction: etcd takes 128 operations in one). */
#define WATCH_KEYS_ALONE 32

static int present(const etcd_kv *kvs, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(kvs[i].key, key) == 0) return 1;
    return 0;
}

/* Which wait: its keys and conditions, hashed. */
static uint64_t wait_id(size_t n, const uint8_t *conds, const char *const *keys) {
    uint64_t h = hash_fnv1a64(HASH_FNV1A64_INIT, conds, n);
    for (size_t i = 0; i < n; i++) h = hash_fnv1a64(h, keys[i], strlen(keys[i]) + 1);
    return h;
}

static void forget_wait(kv_etcd *e) {
    etcd_watch_stop(e->c);
    for (size_t i = 0; i < e->nwant; i++) free((char *)e->want[i].key);
    free(e->want);
    e->want = NULL, e->nwant = 0, e->wait_id = 0;
}

/* The events that meet the conditions: a put of a key waited for to exist,
 * the deletion of one waited for to go. */
static int new_wait(kv_etcd *e, size_t n, const uint8_t *conds, const char *const *keys) {
    forget_wait(e);
    if (!(e->want = calloc(n, sizeof *e->want))) return -ENOMEM;
    for (; e->nwant < n; e->nwant++) {
        e->want[e->nwant].deleted = conds[e->nwant] == STORE_COND_ABSENT;
        if (!(e->want[e->nwant].key = strdup(keys[e->nwant]))) return -ENOMEM;
    }
    return 0;
}

/* A watch that heard nothing for a whole wait says nothing of its member:
 * one cut off silently (its host lost, no reset) keeps the stream open and
 * quiet for ever. A read does say: it fails, the client moves to another
 * member, and the next wait watches there (etcd_watch_active is false).
 * At most once per probe_every_ms (twice the request timeout: about a
 * heartbeat), not after every quiet wait: waits come in slices of a
 * second or less, and a read a second from each of 1,000 agents was the
 * largest part of an idle job's load on etcd. */
static int probe(kv_etcd *e, const char *key) {
    /* With one member there is no other to move to, and the heartbeat's
     * renewals already say when it is gone: a read every two request
     * timeouts from each agent was a fifth of an idle job's load on it. */
    if (etcd_members(e->c) < 2) return 0;
    int64_t now = clock_now_ms();
    if (now - e->last_probe_ms < e->probe_every_ms) return 0;
    e->last_probe_ms = now;
    etcd_kv x;
    int rc = etcd_get(e->c, key, &x);
    if (rc == 0) etcd_kv_free(&x);
    return rc == -ENOENT ? 0 : rc;
}

static int e_wait_any(rdzv_kv *kv, size_t n, const uint8_t *conds, const char *const *keys,
                      int timeout_ms, size_t *idx) {
    kv_etcd *e = E(kv);
    if (n == 0) return -EINVAL;
    int64_t deadline = clock_now_ms() + timeout_ms;
    uint64_t id = wait_id(n, conds, keys);
    int rc, again = 1;
    if (e->wait_id == id && etcd_watch_active(e->c)) {
        /* The same wait again (the caller waits in slices): its watch is
         * still on and has kept what came meanwhile. Unless its stream
         * broke (its member died): then a new watch, on another member. */
        rc = etcd_watch_wait(e->c, (int)(deadline - clock_now_ms()), idx, NULL);
        again = rc == -EPIPE || rc == -ESTALE;
        if (again) log_debug("etcd: %s; watching again", etcd_error(e->c));
    }
    if (again && (rc = new_wait(e, n, conds, keys)) == 0) {
        /* Each key watched alone where a transaction can read them all: a
         * watch of the range from the first key to the last also carries
         * every other write in between (a round's wait spanned its members'
         * descriptions and heartbeats: each join was sent to every waiter,
         * N² events through etcd for N agents joining). */
        int alone = n <= WATCH_KEYS_ALONE;
        const char *lo = NULL, *hi = NULL;
        if (!alone) span(n, keys, &lo, &hi);
        for (;;) {
            /* The watch first, from now (a watch from the past is served
             * late: etcd catches such watches up every 100 ms), then the
             * keys. */
            if ((rc = etcd_watch_start(e->c, lo, hi, 0, e->want, n, NULL))) break;
            int hit = -1;
            if (alone) {
                etcd_kv kvs[WATCH_KEYS_ALONE];
                if ((rc = etcd_get_many(e->c, n, keys, kvs, NULL))) break;
                for (size_t i = 0; i < n; i++) {
                    if (hit < 0 && (kvs[i].key != NULL) == !e->want[i].deleted) hit = (int)i;
                    etcd_kv_free(&kvs[i]);
                }
            } else {
                etcd_kv *kvs;
                size_t m;
                if ((rc = etcd_keys_in(e->c, lo, hi, &kvs, &m, NULL))) break;
                for (size_t i = 0; i < n && hit < 0; i++)
                    if (present(kvs, m, keys[i]) == !e->want[i].deleted) hit = (int)i;
                etcd_kvs_free(kvs, m);
            }
            if (hit >= 0) {
                *idx = (size_t)hit;
                break;
            }
            rc = etcd_watch_wait(e->c, (int)(deadline - clock_now_ms()), idx, NULL);
            if (rc != -ESTALE && rc != -EPIPE) break;
            /* the stream broke: another member, and the keys read again */
        }
    }
    if (rc == -ETIMEDOUT || rc == -EINTR) e->wait_id = id; /* its watch goes on */
    else forget_wait(e);
    if (rc == -ETIMEDOUT && (rc = probe(e, keys[0])) == 0) rc = -ETIMEDOUT;
    return rc == -ETIMEDOUT || rc == -EINTR ? rc : seen(e, rc);
}

static int kv_key_cmp(const void *a, const void *b) {
    return strcmp(((const etcd_kv *)a)->key, ((const etcd_kv *)b)->key);
}

/* One range from the first key to the last, not a request per key: the
 * members' descriptions of a round are read by every agent. */
static int e_multi_get(rdzv_kv *kv, size_t n, const char *const *keys, uint8_t **vals,
                       size_t *lens) {
    kv_etcd *e = E(kv);
    if (n == 0) return 0;
    const char *lo, *hi;
    span(n, keys, &lo, &hi);
    etcd_kv *kvs = NULL;
    size_t m = 0;
    int rc = seen(e, etcd_get_in(e->c, lo, hi, &kvs, &m, NULL));
    /* each key found by bisection (etcd sends a range in key order; sorted
     * here all the same): a scan per key was n² string compares, 15 ms of
     * CPU in each of 1,000 agents reading the round's 1,000 members */
    if (rc == 0) qsort(kvs, m, sizeof *kvs, kv_key_cmp);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        vals[i] = NULL, lens[i] = 0;
        etcd_kv want = {.key = (char *)keys[i]};
        etcd_kv *hit = bsearch(&want, kvs, m, sizeof *kvs, kv_key_cmp);
        if (hit && hit->value) {
            vals[i] = hit->value, lens[i] = hit->len;
            hit->value = NULL; /* handed over */
        }
        if (!vals[i] && !(vals[i] = calloc(1, 1))) rc = -ENOMEM; /* missing: empty */
    }
    etcd_kvs_free(kvs, m);
    return rc;
}

/* One transaction of reads. */
static int e_get_longs(rdzv_kv *kv, size_t n, kv_long *q) {
    kv_etcd *e = E(kv);
    const char *keys[64] = {0};
    etcd_kv kvs[64];
    if (n > 64) return -E2BIG;
    for (size_t i = 0; i < n; i++) keys[i] = q[i].key;
    int rc = seen(e, etcd_get_many(e->c, n, keys, kvs, NULL));
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!kvs[i].key) q[i].val = q[i].dflt;
        else q[i].val = q[i].counter ? (long)kvs[i].version : strtol((char *)kvs[i].value, NULL, 10);
        etcd_kv_free(&kvs[i]);
    }
    return rc;
}

static int e_list(rdzv_kv *kv, const char *prefix, char ***keys, size_t *n) {
    etcd_kv *kvs;
    int rc = seen(E(kv), etcd_get_in(E(kv)->c, prefix, NULL, &kvs, n, NULL));
    if (rc) return rc;
    *keys = calloc(*n ? *n : 1, sizeof **keys);
    for (size_t i = 0; *keys && i < *n; i++) {
        (*keys)[i] = kvs[i].key;
        kvs[i].key = NULL;
    }
    etcd_kvs_free(kvs, *n);
    return *keys ? 0 : -ENOMEM;
}

static int e_lease_grant(rdzv_kv *kv, int64_t ttl_ms, uint64_t *lease) {
    kv_etcd *e = E(kv);
    int64_t id;
    int ttl_s = (int)((ttl_ms + 999) / 1000);
    int rc = seen(e, etcd_lease_grant(e->c, ttl_s < 2 ? 2 : ttl_s, &id));
    if (rc) return rc;
    *lease = (uint64_t)id, e->session_lease = id;
    for (int i = 0; rc == 0 && i < e->nowned; i++)
        rc = seen(e, etcd_put(e->c, e->owned[i].key, e->owned[i].val, e->owned[i].len, id, NULL));
    return rc;
}

static int e_lease_renew(rdzv_kv *kv, uint64_t lease) {
    return seen(E(kv), etcd_lease_keepalive(E(kv)->c, (int64_t)lease, NULL));
}

/* A key owned by the handle (lease 0) is bound to its newest lease, which
 * the rendezvous keeps alive (its heartbeat), and moves to the next one. */
static int e_set_owned(rdzv_kv *kv, const char *k, const void *v, size_t n, uint64_t lease) {
    kv_etcd *e = E(kv);
    if (!lease) {
        if (!e->session_lease) return -EINVAL; /* grant the heartbeat's lease first */
        if (e->nowned == MAX_OWNED) return -ENOSPC;
        char *kc = strdup(k);
        uint8_t *vc = malloc(n + 1);
        if (!kc || !vc) {
            free(kc);
            free(vc);
            return -ENOMEM;
        }
        memcpy(vc, v, n);
        e->owned[e->nowned].key = kc, e->owned[e->nowned].val = vc, e->owned[e->nowned].len = n;
        e->nowned++;
        lease = (uint64_t)e->session_lease;
    }
    return seen(e, etcd_put(e->c, k, v, n, (int64_t)lease, NULL));
}

/* From the lease's time to live: granted less what it has left. */
static int e_renewed_age(rdzv_kv *kv, const char *k, double *age_s) {
    kv_etcd *e = E(kv);
    etcd_kv x;
    int rc = seen(e, etcd_get(e->c, k, &x));
    if (rc) return rc;
    int64_t lease = x.lease;
    etcd_kv_free(&x);
    if (!lease) return -ENOENT;
    int ttl, granted;
    if ((rc = seen(e, etcd_lease_ttl(e->c, lease, &ttl, &granted)))) return rc;
    *age_s = granted > ttl ? granted - ttl : 0;
    return 0;
}

static void e_interrupt(rdzv_kv *kv) { etcd_interrupt(E(kv)->c); }
static void e_cancel(rdzv_kv *kv) { etcd_cancel(E(kv)->c); }

static int e_broken(const rdzv_kv *kv) { return ((const kv_etcd *)kv)->broken; }

static void e_close(rdzv_kv *kv) {
    kv_etcd *e = E(kv);
    forget_wait(e);
    for (int i = 0; i < e->nowned; i++) free(e->owned[i].key), free(e->owned[i].val);
    etcd_close(e->c);
    free(kv);
}

static const rdzv_kv_ops etcd_ops = {
    .set = e_set, .try_get = e_try_get, .add = e_add, .compare_set = e_compare_set,
    .del = e_del, .append = e_append, .check = e_check, .wait_any = e_wait_any,
    .interrupt = e_interrupt, .get_longs = e_get_longs, .multi_get = e_multi_get,
    .list = e_list, .lease_grant = e_lease_grant, .lease_renew = e_lease_renew,
    .set_owned = e_set_owned, .renewed_age = e_renewed_age, .broken = e_broken,
    .cancel = e_cancel, .close = e_close,
    .ranges_costly = 1,
};

int rdzv_kv_etcd_open(const rdzv_etcd_opts *o, rdzv_kv **out, char *err, size_t errlen) {
    *out = NULL;
    kv_etcd *e = calloc(1, sizeof *e);
    if (!e) return -ENOMEM;
    etcd_opts eo = {.endpoints = o->endpoints, .cacert = o->cacert, .cert = o->cert,
                    .key = o->key, .user = o->user, .password = o->password,
                    .timeout_ms = o->timeout_ms, .no_probe = o->no_probe};
    int rc = etcd_connect(&eo, &e->c, err, errlen);
    if (rc) {
        free(e);
        return rc;
    }
    e->kv.ops = &etcd_ops;
    e->probe_every_ms = 2 * (o->timeout_ms > 0 ? o->timeout_ms : 1000);
    e->last_probe_ms = clock_now_ms();
    snprintf(e->kv.where, sizeof e->kv.where, "etcd at %s", o->endpoints);
    *out = &e->kv;
    return 0;
}

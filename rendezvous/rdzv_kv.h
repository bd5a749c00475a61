/* What the rendezvous needs of a key-value store, behind one interface so
 * that the same algorithm (rdzv.c) runs on either backend:
 *   rdzv_kv_store.c  ddprun's TCP store (c10d and static backends)
 *   rdzv_kv_etcd.c   etcd v3 (the etcd-v3 backend)
 * Every call returns 0 or a negative errno. A handle serves one thread at a
 * time; the rendezvous opens one per thread that uses it. */
#ifndef DDPRUN_RENDEZVOUS_RDZV_KV_H
#define DDPRUN_RENDEZVOUS_RDZV_KV_H

#include <stddef.h>
#include <stdint.h>

#include "proto/store_proto.h" /* STORE_COND_EXISTS, STORE_COND_ABSENT */

typedef struct rdzv_kv rdzv_kv;

/* An integer for kv_get_longs: a counter (as add(key, 0) reads it) or a
 * number stored as text; dflt when the key is missing. */
typedef struct {
    const char *key;
    int counter;
    long dflt;
    long val; /* the answer */
} kv_long;

typedef struct {
    int (*set)(rdzv_kv *kv, const char *key, const void *val, size_t len);
    /* -ENOENT when the key is missing. */
    int (*try_get)(rdzv_kv *kv, const char *key, uint8_t **val, size_t *len);
    /* A counter: adds delta (>= 0) to key's count (missing: 0); *out the
     * sum. Read a counter only through add(0): etcd keeps the count in
     * the key's version, not in its value. */
    int (*add)(rdzv_kv *kv, const char *key, int64_t delta, int64_t *out);
    /* key := desired if it holds expected (or is missing and expected is
     * empty); *out (malloc'd) the value afterwards. */
    int (*compare_set)(rdzv_kv *kv, const char *key, const void *expected, size_t elen,
                       const void *desired, size_t dlen, uint8_t **out, size_t *olen);
    int (*del)(rdzv_kv *kv, const char *key);
    int (*append)(rdzv_kv *kv, const char *key, const void *val, size_t len);
    /* *all = 1 when every key exists. */
    int (*check)(rdzv_kv *kv, size_t n, const char *const *keys, int *all);
    /* Until any conds[i] holds for keys[i] (*idx: which), or -ETIMEDOUT. */
    int (*wait_any)(rdzv_kv *kv, size_t n, const uint8_t *conds, const char *const *keys,
                    int timeout_ms, size_t *idx);
    /* From another thread: ends the handle's wait_any now, or else its
     * next one, with -EINTR (once). NULL where the backend is woken only
     * by writing a key. */
    void (*interrupt)(rdzv_kv *kv);
    /* From another thread, while the handle is open: the call under way
     * ends (a wait at once, an etcd request within a second) and it and
     * every later one fail with -ECANCELED. For an orderly end: a thread
     * blocked in the store is let go, and can be joined. */
    void (*cancel)(rdzv_kv *kv);
    /* Several integers in one round trip (at most 64). NULL where the
     * backend reads them one by one (kv_get_longs does). */
    int (*get_longs)(rdzv_kv *kv, size_t n, kv_long *q);
    /* Every value (missing: empty), each malloc'd. */
    int (*multi_get)(rdzv_kv *kv, size_t n, const char *const *keys, uint8_t **vals,
                     size_t *lens);
    /* The keys starting with prefix; free with rdzv_kv_free_keys. */
    int (*list)(rdzv_kv *kv, const char *prefix, char ***keys, size_t *n);
    int (*lease_grant)(rdzv_kv *kv, int64_t ttl_ms, uint64_t *lease);
    /* -ENOENT when the lease has expired. */
    int (*lease_renew)(rdzv_kv *kv, uint64_t lease);
    /* A key that goes with its owner: the lease, or with lease 0 this
     * handle (its connection, where the store has such a thing). */
    int (*set_owned)(rdzv_kv *kv, const char *key, const void *val, size_t len,
                     uint64_t lease);
    /* Seconds since the lease that key goes with was last renewed (etcd:
     * whole seconds, an upper bound); -ENOENT when the key or its lease
     * is gone. NULL where the store cannot tell: the rendezvous then
     * writes beat/<agent> once a heartbeat interval for `ddprun status`,
     * which on etcd was a consensus write and a disk sync per agent and
     * interval, a quarter of an idle job's load there. */
    int (*renewed_age)(rdzv_kv *kv, const char *key, double *age_s);
    /* After a failed call: the error that broke the handle for good, or 0. */
    int (*broken)(const rdzv_kv *kv);
    void (*close)(rdzv_kv *kv);
    /* A range of many small keys costs the store far more to send than
     * one value of the same bytes (etcd's JSON gateway: each key an
     * object with its revisions; 1,000 descriptions took it 13 ms of CPU
     * as a range, 2.8 ms as one value): the round's members are then read
     * as one value that the node closing the round writes (rdzv.c). */
    int ranges_costly;
} rdzv_kv_ops;

struct rdzv_kv {
    const rdzv_kv_ops *ops;
    char where[256]; /* for messages: "the store at h:p", "etcd at h1:2379,..." */
};

void rdzv_kv_free_keys(char **keys, size_t n);

/* Helpers over the interface (rdzv_kv.c), for the rendezvous and for
 * those that read its keys back. */
#define RDZV_KEY_MAX 512
/* buf (RDZV_KEY_MAX bytes) := prefix followed by the formatted rest. */
const char *rdzv_key(char *buf, const char *prefix, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An integer stored as text; dflt when the key is missing. */
int kv_get_long(rdzv_kv *kv, const char *key, long dflt, long *out);
/* Each q[i].val: at once where the backend can, else one by one. */
int kv_get_longs(rdzv_kv *kv, size_t n, kv_long *q);

static inline int kv_set(rdzv_kv *kv, const char *k, const void *v, size_t n) {
    return kv->ops->set(kv, k, v, n);
}
static inline int kv_try_get(rdzv_kv *kv, const char *k, uint8_t **v, size_t *n) {
    return kv->ops->try_get(kv, k, v, n);
}
static inline int kv_add(rdzv_kv *kv, const char *k, int64_t d, int64_t *out) {
    return kv->ops->add(kv, k, d, out);
}
static inline int kv_compare_set(rdzv_kv *kv, const char *k, const void *e, size_t en,
                                 const void *d, size_t dn, uint8_t **out, size_t *on) {
    return kv->ops->compare_set(kv, k, e, en, d, dn, out, on);
}
static inline int kv_del(rdzv_kv *kv, const char *k) { return kv->ops->del(kv, k); }
static inline int kv_append(rdzv_kv *kv, const char *k, const void *v, size_t n) {
    return kv->ops->append(kv, k, v, n);
}
static inline int kv_check(rdzv_kv *kv, size_t n, const char *const *keys, int *all) {
    return kv->ops->check(kv, n, keys, all);
}
static inline int kv_wait_any(rdzv_kv *kv, size_t n, const uint8_t *conds,
                              const char *const *keys, int timeout_ms, size_t *idx) {
    return kv->ops->wait_any(kv, n, conds, keys, timeout_ms, idx);
}
static inline int kv_multi_get(rdzv_kv *kv, size_t n, const char *const *keys, uint8_t **vals,
                               size_t *lens) {
    return kv->ops->multi_get(kv, n, keys, vals, lens);
}
static inline int kv_list(rdzv_kv *kv, const char *prefix, char ***keys, size_t *n) {
    return kv->ops->list(kv, prefix, keys, n);
}
static inline int kv_lease_grant(rdzv_kv *kv, int64_t ttl_ms, uint64_t *lease) {
    return kv->ops->lease_grant(kv, ttl_ms, lease);
}
static inline int kv_lease_renew(rdzv_kv *kv, uint64_t lease) {
    return kv->ops->lease_renew(kv, lease);
}
static inline int kv_set_owned(rdzv_kv *kv, const char *k, const void *v, size_t n,
                               uint64_t lease) {
    return kv->ops->set_owned(kv, k, v, n, lease);
}
static inline int kv_broken(const rdzv_kv *kv) { return kv->ops->broken(kv); }
static inline void kv_close(rdzv_kv *kv) {
    if (kv) kv->ops->close(kv);
}

/* ddprun's TCP store at host:port. */
int rdzv_kv_store_open(const char *host, int port, int connect_timeout_ms, rdzv_kv **out);

/* etcd v3: every member, TLS and authentication as etcd names them. */
typedef struct {
    const char *endpoints; /* "h1:2379,h2:2379,h3:2379" */
    const char *cacert, *cert, *key, *user, *password;
    int timeout_ms;
    int no_probe; /* 1: another handle has just found etcd there; do not ask again */
} rdzv_etcd_opts;
int rdzv_kv_etcd_open(const rdzv_etcd_opts *o, rdzv_kv **out, char *err, size_t errlen);

#endif

/* The rendezvous' key-value interface (rdzv_kv.h) on ddprun's TCP store:
 * each call is the store's own operation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rendezvous/rdzv_kv.h"
#include "store/store_client.h"

typedef struct {
    rdzv_kv kv;
    store_client *c;
} kv_store;

static store_client *sc(rdzv_kv *kv) { return ((kv_store *)kv)->c; }

static int s_set(rdzv_kv *kv, const char *k, const void *v, size_t n) {
    return store_set(sc(kv), k, v, n);
}
static int s_try_get(rdzv_kv *kv, const char *k, uint8_t **v, size_t *n) {
    return store_try_get(sc(kv), k, v, n);
}
static int s_add(rdzv_kv *kv, const char *k, int64_t d, int64_t *out) {
    return store_add(sc(kv), k, d, out);
}
static int s_compare_set(rdzv_kv *kv, const char *k, const void *e, size_t en, const void *d,
                         size_t dn, uint8_t **out, size_t *on) {
    return store_compare_set(sc(kv), k, e, en, d, dn, out, on);
}
static int s_del(rdzv_kv *kv, const char *k) { return store_delete(sc(kv), k, NULL); }
static int s_append(rdzv_kv *kv, const char *k, const void *v, size_t n) {
    return store_append(sc(kv), k, v, n);
}
static int s_check(rdzv_kv *kv, size_t n, const char *const *keys, int *all) {
    return store_check(sc(kv), n, keys, all);
}
static int s_wait_any(rdzv_kv *kv, size_t n, const uint8_t *conds, const char *const *keys,
                      int timeout_ms, size_t *idx) {
    return store_wait_any(sc(kv), n, conds, keys, timeout_ms, idx);
}
static int s_multi_get(rdzv_kv *kv, size_t n, const char *const *keys, uint8_t **vals,
                       size_t *lens) {
    return store_multi_get(sc(kv), n, keys, vals, lens);
}
static int s_list(rdzv_kv *kv, const char *prefix, char ***keys, size_t *n) {
    int rc = store_list_keys(sc(kv), keys, n);
    if (rc) return rc;
    size_t k = 0, plen = strlen(prefix);
    for (size_t i = 0; i < *n; i++) {
        if (strncmp((*keys)[i], prefix, plen) == 0) (*keys)[k++] = (*keys)[i];
        else free((*keys)[i]);
    }
    *n = k;
    return 0;
}
static int s_lease_grant(rdzv_kv *kv, int64_t ttl_ms, uint64_t *lease) {
    return store_lease_grant(sc(kv), ttl_ms, lease);
}
static int s_lease_renew(rdzv_kv *kv, uint64_t lease) { return store_lease_renew(sc(kv), lease); }
static int s_set_owned(rdzv_kv *kv, const char *k, const void *v, size_t n, uint64_t lease) {
    return store_set_owned(sc(kv), k, v, n, lease);
}
static int s_broken(const rdzv_kv *kv) { return store_client_broken(((const kv_store *)kv)->c); }
static void s_cancel(rdzv_kv *kv) { store_client_cancel(sc(kv)); }
static void s_close(rdzv_kv *kv) {
    store_client_close(sc(kv));
    free(kv);
}

static const rdzv_kv_ops store_ops = {
    .set = s_set, .try_get = s_try_get, .add = s_add, .compare_set = s_compare_set,
    .del = s_del, .append = s_append, .check = s_check, .wait_any = s_wait_any,
    .multi_get = s_multi_get, .list = s_list, .lease_grant = s_lease_grant,
    .lease_renew = s_lease_renew, .set_owned = s_set_owned, .broken = s_broken,
    .cancel = s_cancel, .close = s_close,
};

int rdzv_kv_store_open(const char *host, int port, int connect_timeout_ms, rdzv_kv **out) {
    *out = NULL;
    kv_store *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    store_client_opts co = {.host = host, .port = port, .connect_timeout_ms = connect_timeout_ms,
                            .timeout_ms = 60000};
    int rc = store_client_connect(&co, &s->c);
    if (rc) {
        free(s);
        return rc;
    }
    s->kv.ops = &store_ops;
    snprintf(s->kv.where, sizeof s->kv.where, "the store at %s:%d", host, port);
    *out = &s->kv;
    return 0;
}


/* See rdzv_kv.h: what both sides of the interface share. */
#include "rendezvous/rdzv_kv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void rdzv_kv_free_keys(char **keys, size_t n) {
    for (size_t i = 0; keys && i < n; i++) free(keys[i]);
    free(keys);
}

const char *rdzv_key(char *buf, const char *prefix, const char *fmt, ...) {
    int n = snprintf(buf, RDZV_KEY_MAX, "%s", prefix);
    if (n < 0 || n >= RDZV_KEY_MAX) return buf;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, RDZV_KEY_MAX - (size_t)n, fmt, ap);
    va_end(ap);
    return buf;
}

int kv_get_long(rdzv_kv *kv, const char *key, long dflt, long *out) {
    uint8_t *v = NULL;
    size_t n;
    int rc = kv_try_get(kv, key, &v, &n);
    if (rc == -ENOENT) {
        *out = dflt;
        return 0;
    }
    if (rc) return rc;
    *out = strtol((char *)v, NULL, 10);
    free(v);
    return 0;
}

int kv_get_longs(rdzv_kv *kv, size_t n, kv_long *q) {
    if (kv->ops->get_longs) return kv->ops->get_longs(kv, n, q);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!q[i].counter) {
            rc = kv_get_long(kv, q[i].key, q[i].dflt, &q[i].val);
            continue;
        }
        int64_t v = 0;
        rc = kv_add(kv, q[i].key, 0, &v);
        q[i].val = v ? (long)v : q[i].dflt; /* a counter never written reads 0 */
    }
    return rc;
}

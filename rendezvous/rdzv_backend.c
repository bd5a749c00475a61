/* See rdzv_backend.h. */
#include "rendezvous/rdzv_backend.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int open_store(const rdzv_endpoint *e, int quiet, rdzv_kv **kv, char *err,
                      size_t errlen) {
    (void)quiet;
    int rc = rdzv_kv_store_open(e->host, e->port, e->connect_timeout_ms, kv);
    if (rc)
        snprintf(err, errlen, "cannot reach the rendezvous store at %s:%d: %s", e->host, e->port,
                 strerror(-rc));
    return rc;
}

static int open_etcd(const rdzv_endpoint *e, int quiet, rdzv_kv **kv, char *err,
                     size_t errlen) {
    rdzv_etcd_opts o = {.endpoints = e->endpoints, .cacert = e->cacert, .cert = e->cert,
                        .key = e->key, .user = e->user, .password = e->password,
                        .timeout_ms = e->request_timeout_ms, .no_probe = quiet};
    char why[1024] = "";
    int rc = rdzv_kv_etcd_open(&o, kv, why, sizeof why);
    if (rc)
        snprintf(err, errlen, "cannot use etcd at %s for the rendezvous: %s", e->endpoints,
                 why[0] ? why : strerror(-rc));
    return rc;
}

static const rdzv_backend backends[] = {
    {.name = "static", .aliases = "", .endpoint = "HOST[:PORT], node 0's store",
     .flags = RDZV_IN_JOB_STORE | RDZV_FIXED_RANKS, .open = open_store},
    {.name = "c10d", .aliases = "",
     .endpoint = "HOST[:PORT], the store every node meets at (or --standalone on a single node)",
     .flags = RDZV_IN_JOB_STORE, .open = open_store},
    {.name = "etcd-v3", .aliases = "etcd,etcd-v2",
     .alias_says = "ddprun speaks etcd's v3 API to",
     .alias_why = "torchrun's etcd and etcd-v2 backends spoke the v2 API, which etcd 3.6 removed",
     .endpoint = "HOST:PORT[,HOST:PORT...], every member of the etcd cluster",
     .flags = RDZV_MANY_ENDPOINTS, .open = open_etcd},
};
#define NBACKENDS (sizeof backends / sizeof backends[0])

/* Whether name is one of the comma-separated list. */
static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0) return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

const rdzv_backend *rdzv_backend_find(const char *name, int *alias) {
    if (alias) *alias = 0;
    for (size_t i = 0; i < NBACKENDS; i++)
        if (strcmp(backends[i].name, name) == 0) return &backends[i];
    for (size_t i = 0; i < NBACKENDS; i++)
        if (listed(backends[i].aliases, name)) {
            if (alias) *alias = 1;
            return &backends[i];
        }
    return NULL;
}

static void names(char *out, size_t len, const char *sep, const char *last) {
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < NBACKENDS && k < len; i++)
        k += (size_t)snprintf(out + k, len - k, "%s%s",
                              i == 0 ? "" : i + 1 == NBACKENDS ? last : sep, backends[i].name);
}

void rdzv_backend_names(char *out, size_t len) { names(out, len, ", ", " or "); }

void rdzv_backend_names_joined(char *out, size_t len, const char *sep) {
    names(out, len, sep, sep);
}

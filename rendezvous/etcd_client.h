/* A client of etcd's v3 API through its JSON gateway (HTTP/1.1 POSTs to
 * /v3/..., keys and values base64), with libcurl for HTTP (and TLS) and
 * jansson for JSON: no hand-written HTTP and no protobuf. Why the gateway
 * rather than gRPC: every etcd 3.x serves it by default, it needs no code
 * generation and no C++ runtime, and the rendezvous makes a handful of
 * requests a second, where its cost does not show.
 *
 * The client knows every member of the cluster (--rdzv-endpoint
 * h1:2379,h2:2379,h3:2379) and fails over: a request that cannot reach its
 * member (refused, timed out, the member gone) is retried on the next, so
 * the loss of one member goes unnoticed. Only a request that no member
 * answers fails, with -EHOSTUNREACH and a message naming them all.
 *
 * One client serves one thread at a time (etcd_interrupt excepted). */
#ifndef DDPRUN_RENDEZVOUS_ETCD_CLIENT_H
#define DDPRUN_RENDEZVOUS_ETCD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct etcd_client etcd_client;

typedef struct {
    const char *endpoints;  /* "host:port,host:port" (http unless a cacert is given) */
    const char *cacert;     /* TLS: the CA file, or NULL for plain HTTP */
    const char *cert, *key; /* TLS client certificate and key, or NULL */
    const char *user, *password; /* etcd's own authentication, or NULL */
    int timeout_ms;         /* per request and member (default 5000); with one member, an
                             * answer is waited for up to patience_ms (no other to ask) */
    int patience_ms;        /* a request's or a watch's, while every member fails or says
                             * "not now" (an election, this host's link down a moment):
                             * tried again until then (default the larger of 10 s and
                             * twice timeout_ms; members out of reach are waited for
                             * only once one answered: a list or a certificate wrong is
                             * said at once) */
    int no_probe;           /* 1: do not ask a member at connect whether it is etcd (another */
                            /* client of the caller has just done so) */
} etcd_opts;

/* A key's value and revisions. */
typedef struct {
    char *key;
    unsigned char *value; /* malloc'd, NUL-terminated (not counted in len) */
    size_t len;
    int64_t create_revision, mod_revision, lease;
    int64_t version; /* writes since the key was created (1 after the first) */
} etcd_kv;

/* Connects (asks a member for the cluster's state; authenticates when a
 * user is given). 0, or a negative errno with a message in err. */
int etcd_connect(const etcd_opts *o, etcd_client **out, char *err, size_t errlen);
void etcd_close(etcd_client *c);
/* The message of the last failure ("" after a success). */
const char *etcd_error(const etcd_client *c);
/* The member the client talks to now ("h2:2379"). */
const char *etcd_member(const etcd_client *c);
/* How many members the client was given. */
int etcd_members(const etcd_client *c);

/* Every call returns 0 or a negative errno (etcd_error says more):
 * -EHOSTUNREACH no member answered, -EACCES authentication refused,
 * -EPROTO an answer it cannot read. */

/* key := value, bound to lease (0: none). *revision (may be NULL): the
 * store's revision after the write. */
int etcd_put(etcd_client *c, const char *key, const void *val, size_t len, int64_t lease,
             int64_t *revision);
/* A counter without contention: writes key (value "+") and sets *version
 * to its version after the write, the number of writes since it was
 * created. Concurrent callers each get a different number, in one request
 * each: etcd orders the writes, nobody retries. */
int etcd_bump(etcd_client *c, const char *key, int64_t *version);
/* The value of key: -ENOENT when it has none. */
int etcd_get(etcd_client *c, const char *key, etcd_kv *kv);
/* Several keys at once, in one transaction: kvs[i] is keys[i]'s (key
 * NULL, revisions 0 when it has none). *revision (may be NULL): the
 * store's. At most 128 keys (etcd's --max-txn-ops). */
int etcd_get_many(etcd_client *c, size_t n, const char *const *keys, etcd_kv *kvs,
                  int64_t *revision);
/* The keys from first to last (both included; last NULL: every key
 * starting with first), in key order, and the store's revision. */
int etcd_get_in(etcd_client *c, const char *first, const char *last, etcd_kv **kvs, size_t *n,
                int64_t *revision);
/* The same without the values (empty): less to send where only presence
 * counts. */
int etcd_keys_in(etcd_client *c, const char *first, const char *last, etcd_kv **kvs, size_t *n,
                 int64_t *revision);
/* key := value only if key's mod_revision is expect (0: only if the key
 * does not exist). -ESTALE when it is not, with the key's present state in
 * *now (when not NULL; now->mod_revision 0 if it has none). */
int etcd_cas(etcd_client *c, const char *key, int64_t expect, const void *val, size_t len,
             int64_t lease, etcd_kv *now);
/* Deletes key (no error if it has none). */
int etcd_delete(etcd_client *c, const char *key);
/* Deletes every key starting with prefix. */
int etcd_delete_prefix(etcd_client *c, const char *prefix);

/* A lease of ttl_s seconds: keys bound to it vanish when it is not kept
 * alive. */
int etcd_lease_grant(etcd_client *c, int ttl_s, int64_t *id);
/* Renews the lease; -ENOENT when it has expired. *ttl_s (may be NULL): the
 * seconds it now has. */
int etcd_lease_keepalive(etcd_client *c, int64_t id, int *ttl_s);
int etcd_lease_revoke(etcd_client *c, int64_t id);
/* The seconds the lease has left (etcd counts whole ones, rounded down) and
 * those it was granted; -ENOENT when it has expired. */
int etcd_lease_ttl(etcd_client *c, int64_t id, int *ttl_s, int *granted_s);

/* An event a watch waits for: key written, or (deleted) removed, by a
 * delete or its lease's end. */
typedef struct {
    const char *key;
    int deleted;
} etcd_want;
/* A watch of the keys from first to last (both included; last NULL:
 * every key starting with first), or with first NULL of each wanted key
 * alone (a watch per key on the one stream: only their changes come),
 * one per client, on a stream of its own beside the client's other
 * requests. etcd_watch_start returns once etcd
 * has it: *created (may be NULL) is the store's revision then, and the
 * watch sees every change after it (with after > 0: after that revision
 * instead, which etcd replays, though only every 100 ms or so). Only the
 * events in want count (any event when nwant is 0); the range's other
 * changes are passed over in the stream. want must last as long as the
 * watch. */
int etcd_watch_start(etcd_client *c, const char *first, const char *last, int64_t after,
                     const etcd_want *want, size_t nwant, int64_t *created);
/* Waits up to timeout_ms for a wanted event: 0 (*which: the one seen,
 * *revision: its revision; either may be NULL) and the watch is over.
 * -ETIMEDOUT, or -EINTR (etcd_interrupt): the watch goes on, and a later
 * wait sees what came meanwhile. Otherwise the watch is over: -ESTALE etcd
 * no longer has its start revision (compacted), -EPIPE the member's stream
 * ended. */
int etcd_watch_wait(etcd_client *c, int timeout_ms, size_t *which, int64_t *revision);
/* Whether a watch is on, from the member the client talks to now (a
 * plain request that failed over from the watch's member found it gone). */
int etcd_watch_active(const etcd_client *c);
void etcd_watch_stop(etcd_client *c);
/* How many events the client's watches have brought so far, wanted or
 * passed over. */
uint64_t etcd_watch_events(const etcd_client *c);
/* The three at once: one wait for a change after revision after. */
int etcd_watch(etcd_client *c, const char *first, const char *last, int64_t after,
               int timeout_ms, const etcd_want *want, size_t nwant, size_t *which,
               int64_t *revision);

/* From any thread: ends the client's wait for a watch's event now, or
 * else its next one, with -EINTR (once). Plain requests are not
 * interrupted. */
void etcd_interrupt(etcd_client *c);
/* From any thread, while the client is open: the request or wait under
 * way ends (a wait at once, a request within a second), and it and every
 * later one fail with -ECANCELED. */
void etcd_cancel(etcd_client *c);

void etcd_kv_free(etcd_kv *kv);
void etcd_kvs_free(etcd_kv *kvs, size_t n);

#endif

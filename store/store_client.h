/* A blocking C client for the store (ddprun-store, or PyTorch's TCPStore
 * server for the operations that server has). Every call has a timeout;
 * connecting retries with exponential backoff until its own deadline, so
 * a client may start before the server. Functions return 0 or a negative
 * errno-style code: -ETIMEDOUT, -ECONNREFUSED, -ECONNRESET (server gone),
 * -EPROTO (unexpected reply), -ENOENT (no such key), -EACCES (token
 * refused), -EINVAL (bad argument), -ENOMEM.
 *
 * One client is one TCP connection and is not thread-safe; use one per
 * thread. Keys are NUL-terminated strings; values are byte ranges. Values
 * returned through uint8_t ** are malloc'd and owned by the caller. */
#ifndef DDPRUN_STORE_STORE_CLIENT_H
#define DDPRUN_STORE_STORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "proto/store_proto.h"

typedef struct store_client store_client;

typedef struct {
    const char *host;       /* name or address, IPv4 or IPv6 */
    int port;
    int connect_timeout_ms; /* total time to keep retrying; 0: 30 s */
    int timeout_ms;         /* default per-call timeout; 0: 300 s (torch's default) */
    const char *token;      /* shared secret; NULL: $DDPRUN_STORE_TOKEN if set */
    store_gen gen;          /* STORE_GEN_V2 (default when 0) or STORE_GEN_V1 */
    int no_ext;             /* 1: never send our extension's HELLO (talk to torch's server) */
} store_client_opts;

int store_client_connect(const store_client_opts *opts, store_client **out);
void store_client_close(store_client *c);
/* The socket, e.g. for a test that wants to see the server hang up. */
int store_client_fd(const store_client *c);
/* From another thread, while the handle is open: the call under way (a
 * wait, a read the store holds) ends at once, and it and every later call
 * fail with -ECANCELED. The handle still needs store_client_close. */
void store_client_cancel(store_client *c);
/* Change the per-call timeout. */
void store_client_set_timeout(store_client *c, int timeout_ms);

int store_set(store_client *c, const char *key, const void *val, size_t len);
/* Waits (up to the timeout) for the key to exist, then returns its value. */
int store_get(store_client *c, const char *key, uint8_t **val, size_t *len);
/* GET without waiting: -ENOENT if the key is missing (uses CHECK first). */
int store_try_get(store_client *c, const char *key, uint8_t **val, size_t *len);
int store_add(store_client *c, const char *key, int64_t delta, int64_t *result);
/* Sets key to `desired` if it holds `expected` (or is missing and
 * `expected` is empty); *out receives the value stored afterwards. */
int store_compare_set(store_client *c, const char *key, const void *expected, size_t elen,
                      const void *desired, size_t dlen, uint8_t **out, size_t *olen);
/* *ready = 1 if all keys exist. */
int store_check(store_client *c, size_t n, const char *const *keys, int *ready);
/* Whether a wait that times out can be cancelled with the connection kept
 * (ddprun-store, torch 2.x's TCPStore; not torch 1.13's): then a long wait
 * may be cut into short ones, to look at something else in between. */
int store_client_can_cancel(store_client *c);
/* Waits for all keys; timeout_ms < 0 means the client's default. On a
 * timeout sends CANCEL_WAIT, drains the reply and returns -ETIMEDOUT with
 * the connection still usable. */
int store_wait(store_client *c, size_t n, const char *const *keys, int timeout_ms);
int store_num_keys(store_client *c, int64_t *n);
/* *deleted = 1 if the key existed. */
int store_delete(store_client *c, const char *key, int *deleted);
int store_append(store_client *c, const char *key, const void *val, size_t len);
/* vals[i]/lens[i] receive each value (empty if missing). */
int store_multi_get(store_client *c, size_t n, const char *const *keys, uint8_t **vals,
                    size_t *lens);
int store_multi_set(store_client *c, size_t n, const char *const *keys,
                    const void *const *vals, const size_t *lens);
/* Round trip; *rtt_us receives the time taken if not NULL. */
/* 0 while the connection is usable; once a call broke it (every later call
 * then fails with -ECONNRESET), the error that did: -ETIMEDOUT when the
 * server stopped answering in the middle of a reply, say. */
int store_client_broken(const store_client *c);
int store_ping(store_client *c, double *rtt_us);
int store_queue_push(store_client *c, const char *key, const void *val, size_t len);
/* Pops the oldest value; with block=1 waits (up to timeout) for one. */
int store_queue_pop(store_client *c, const char *key, int block, uint8_t **val, size_t *len);
int store_queue_len(store_client *c, const char *key, int64_t *n);
/* *keys receives a malloc'd array of malloc'd strings. */
int store_list_keys(store_client *c, char ***keys, size_t *n);
void store_free_keys(char **keys, size_t n);
/* Returns once world_size callers have entered the barrier `key`. */
int store_barrier(store_client *c, const char *key, int64_t world_size, int timeout_ms);

/* --- ddprun extension (needs ddprun-store) ------------------------------ */
/* Sets a key owned by a lease (lease != 0) or, with lease == 0, by this
 * connection: the server deletes it when the owner goes away. */
int store_set_owned(store_client *c, const char *key, const void *val, size_t len,
                    uint64_t lease);
int store_lease_grant(store_client *c, int64_t ttl_ms, uint64_t *lease);
/* -ENOENT if the lease is unknown or has already expired. */
int store_lease_renew(store_client *c, uint64_t lease);
int store_lease_revoke(store_client *c, uint64_t lease);
/* Waits until any condition holds (conds[i] is STORE_COND_EXISTS or
 * STORE_COND_ABSENT for keys[i]); *index receives which. */
int store_wait_any(store_client *c, size_t n, const uint8_t *conds, const char *const *keys,
                   int timeout_ms, size_t *index);

#endif

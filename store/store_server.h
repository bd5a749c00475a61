/* The store server: an in-memory key-value store over TCP, wire-compatible
 * with PyTorch's TCPStore (both protocol generations, told apart per
 * connection), plus ddprun's extension (connection- and lease-owned keys,
 * WAIT_ANY, a shared-secret handshake). Single-threaded on a libuv loop
 * the caller owns, so the agent can embed it; ddprun-store wraps it in a
 * main. A misbehaving client is logged in one line and dropped; everyone
 * else keeps being served. */
#ifndef DDPRUN_STORE_STORE_SERVER_H
#define DDPRUN_STORE_STORE_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/log.h"
#include "proto/store_proto.h"

typedef struct {
    const char *host;   /* address or name to bind; NULL: "::" (dual stack), else 0.0.0.0 */
    int port;           /* 0: pick a free port (see store_server_port) */
    uint32_t max_key;   /* 0: STORE_DEFAULT_MAX_KEY */
    uint32_t max_value; /* 0: STORE_DEFAULT_MAX_VALUE */
    int max_conns;      /* 0: 65536 */
    const char *token;  /* shared secret clients must present first; NULL/"": none */
    int listen_fd;      /* > 0: serve this already-bound listening socket instead */
    int request_timeout_ms; /* a request begun and not finished in this long drops
                             * the client; 0: 60 s */
    int stall_report_ms;    /* > 0: clients that have waited this long for keys nobody
                             * has set (not the agents' /ddprun/ keys) are named in a
                             * warning, with the pid and RANK of local ones: a worker
                             * set-up that hangs says who waits for what; 0: off */
} store_server_opts;

typedef struct store_conn store_conn;
typedef struct store_entry store_entry;
typedef struct store_lease store_lease;

/* The key table's state: open addressing over entries, and the leases
 * that own keys. Only store_table.c reads it. */
typedef struct {
    store_entry **slots;
    size_t nslots, nentries;
    store_lease *leases;
    uint64_t next_lease_id;
    uint64_t hash_seed;
} store_table;

/* Counters for logs, tests and benchmarks. */
typedef struct {
    uint64_t requests;
    uint64_t conns_accepted;
    uint64_t conns_dropped; /* closed by the server for bad input or limits */
    uint64_t conns_open;
    uint64_t keys;          /* keys holding a value */
} store_stats;

/* The caller owns this storage; fields are private. */
typedef struct store_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_timer_t lease_timer;
    uv_idle_t pending_idle; /* flushes woken connections */
    uv_timer_t sweep_timer; /* drops clients stuck in the middle of a request */
    int request_timeout_ms;
    int stall_report_ms;
    store_conn *pending;
    store_limits limits;
    int max_conns;
    char *token;
    int port;
    int closing;
    void (*close_cb)(struct store_server *);
    int handles_open;
    store_table table; /* the keys, their waiters and leases (store_table.c) */
    store_conn *conns; /* doubly linked list of open connections */
    uint64_t next_conn_id;
    uint8_t *rbuf; /* shared receive buffer for connections with no partial frame */
    int rbuf_busy;
    log_rate conn_log; /* warnings about one client's connection */
    store_stats stats;
} store_server;

/* Binds, listens and starts serving on `loop`. 0 or a negative errno. */
int store_server_init(uv_loop_t *loop, store_server *srv, const store_server_opts *opts);
/* The port actually bound (useful with port 0). */
int store_server_port(const store_server *srv);
/* Stops listening, closes every connection, frees all keys; `cb` (may be
 * NULL) runs once every handle is closed and `srv` may be freed. */
void store_server_close(store_server *srv, void (*cb)(store_server *));
void store_server_stats(const store_server *srv, store_stats *out);

#endif

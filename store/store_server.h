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

#include "store/store_state.h"

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

/* Binds, listens and starts serving on `loop`. 0 or a negative errno. */
int store_server_init(uv_loop_t *loop, store_server *srv, const store_server_opts *opts);
/* The port actually bound (useful with port 0). */
int store_server_port(const store_server *srv);
/* Stops listening, closes every connection, frees all keys; `cb` (may be
 * NULL) runs once every handle is closed and `srv` may be freed. */
void store_server_close(store_server *srv, void (*cb)(store_server *));
void store_server_stats(const store_server *srv, store_stats *out);

#endif

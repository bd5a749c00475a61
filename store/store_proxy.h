/* A per-node store proxy: serves a node's store clients (its workers'
 * TCPStore connections, torch 1.13 or 2.x, or ddprun's) on a local port and
 * carries them all to the job's store over one connection, multiplexed
 * (STORE_OP_MUX, proto/store_proto.h). Each client's bytes travel as they
 * are, and the store serves each channel exactly as a connection of its
 * own (its generation, waits, timeouts, owned keys), so every operation
 * keeps its meaning. The job's store sees one connection per node instead
 * of one per rank, and reads and writes many clients' requests and replies
 * in one system call. The same WAIT, GET or MULTI_GET from several clients
 * at once goes to the store once, and each gets the reply (store_proxy.c
 * says why that keeps every request's meaning).
 *
 * Runs on a libuv loop the caller owns. The upstream connection is made
 * when the first client comes; if it breaks (the store is gone), every
 * client is disconnected, as it would be from the store itself, and the
 * next client connects again. */
#ifndef DDPRUN_STORE_STORE_PROXY_H
#define DDPRUN_STORE_STORE_PROXY_H

#include <stdint.h>
#include <uv.h>

typedef struct store_proxy store_proxy;

typedef struct {
    const char *host;          /* where to listen; NULL: 127.0.0.1 (this node's clients) */
    int port;                  /* 0: a free port (store_proxy_port) */
    const char *upstream_host; /* the job's store (ddprun's, which multiplexes) */
    int upstream_port;
    const char *token;         /* presented upstream first (DDPRUN_STORE_TOKEN); NULL: none */
    int stall_report_ms;       /* > 0: clients that have waited this long in a WAIT are
                                * named in a warning, with their rank and pid (as the
                                * store's own report, which names this proxy); 0: off */
} store_proxy_opts;

typedef struct {
    uint64_t clients_accepted;
    uint64_t clients_open;
    uint64_t upstream_connects; /* connections made to the store */
    uint64_t bytes_up, bytes_down;
    uint64_t requests_shared; /* requests that went to the store in a group (below) */
    uint64_t shared_sent;     /* the groups: one request for several clients' same one */
} store_proxy_stats;

/* Listens and serves on `loop`. 0 or a negative errno. */
int store_proxy_start(uv_loop_t *loop, const store_proxy_opts *o, store_proxy **out);
int store_proxy_port(const store_proxy *p);
/* Points the proxy at another store (a new round's): its clients of the
 * old one are disconnected. 0 or a negative errno. */
int store_proxy_retarget(store_proxy *p, const char *host, int port);
void store_proxy_stats_get(const store_proxy *p, store_proxy_stats *out);
/* Closes every connection and the listener; `cb` runs once all are closed
 * (p is freed then). */
void store_proxy_close(store_proxy *p, void (*cb)(void *arg), void *arg);

#endif

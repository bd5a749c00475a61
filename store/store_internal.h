/* Private to the store server: the connection type shared by
 * store_server.c (the network side) and store_table.c (the data and its
 * semantics), and what each asks of the other. The table is below the
 * network: it calls the network only through store_net, which the server
 * fills in. Not for use outside store/store_*.c. */
#ifndef DDPRUN_STORE_STORE_INTERNAL_H
#define DDPRUN_STORE_STORE_INTERNAL_H

#include <stdarg.h>

#include "common/buf.h"
#include "store/store_state.h"

typedef struct store_waiter store_waiter;
typedef struct store_wnode store_wnode;
typedef struct store_mux store_mux;

struct store_conn {
    uv_tcp_t tcp;         /* unused by a channel (mux set): its bytes ride on mux's */
    store_conn *mux;      /* a channel of a multiplexed connection: that connection */
    uint32_t chan;        /* and its number there */
    store_mux *chans;     /* a multiplexed connection (STORE_OP_MUX): its channels */
    store_conn *dead_next;/* a closed channel, freed from the loop's idle phase */
    store_server *srv;
    store_conn *prev, *next;
    uint64_t id;
    char peer[64];
    int peer_port;        /* the client's own port (0: unknown) */
    store_gen gen;
    int authed;
    int closing;
    int writing;
    int oom;              /* a reply could not be buffered: drop the client */
    int pending;          /* on the server's pending list (flush / resume soon) */
    store_conn *pend_prev, *pend_next;
    buf_t in;             /* an incomplete request, or requests held behind a wait */
    buf_t out;            /* replies not yet handed to the kernel */
    store_waiter *wait;   /* the pending WAIT / WAIT_ANY / BARRIER, if any */
    store_entry *owned;   /* keys this connection owns (SET_OWNED with lease 0) */
    store_wnode *watches; /* torch 1.13 WATCH_KEY registrations */
    int nwatches;
    size_t inflight;      /* reply bytes handed to libuv, not yet written */
    int throttled;        /* reading stopped: too many replies unsent */
    const char *refused;  /* set by the table: why the connection must go */
    uint64_t progress_ms; /* when the last whole request was read (uv_now); the
                           * leases it renews are judged by it too */
    unsigned leases;      /* leases whose renewals come through it (store_table.c) */
};

/* Back-pressure: a client that sends requests and does not read the
 * replies must not make the server queue gigabytes. Past the soft limit of
 * unsent reply bytes the server reads no more of that connection's
 * requests (TCP then holds the client back), and reads again once half of
 * it has gone out; a reply is made whole, so at most the limit plus one
 * reply is queued. What others' requests cause (torch 1.13's watch
 * events) cannot be held back that way: past the hard limit the
 * connection is dropped. */
static inline size_t store_conn_unsent(const store_conn *c) { return c->out.len + c->inflight; }
static inline size_t store_out_soft(const store_server *srv) {
    return (size_t)srv->limits.max_value + ((size_t)1 << 20);
}
static inline size_t store_out_hard(const store_server *srv) {
    return 4 * (size_t)srv->limits.max_value + ((size_t)16 << 20);
}
/* torch 1.13's WATCH_KEY registrations one connection may hold. */
#define STORE_MAX_WATCHES 1024

/* The network side, as the table uses it (store_server.c's). */
typedef struct store_net {
    /* Drops c: logs why (rate-limited) and closes it. */
    void (*drop)(store_conn *c, const char *why);
    /* Queues c to be flushed (and its held requests resumed) from the
     * loop's idle phase: wakeups never write or recurse into another
     * connection while the table is in the middle of an operation. */
    void (*wake)(store_conn *c);
} store_net;

/* A client's wait, on a key nobody has set, older than asked for. */
typedef struct {
    store_conn *conn;
    char key[128]; /* cut if longer */
    uint64_t waited_ms;
} store_stall;

/* Table side, used by the network. */
int store_table_init(store_server *srv);
void store_table_free(store_server *srv);
void store_table_handle(store_conn *c, const store_req *req);
void store_table_conn_gone(store_server *srv, store_conn *c);
/* Ends c's pending wait without replying. */
void store_table_cancel_wait(store_conn *c);
/* Whether byte `code` is CANCEL_WAIT in c's generation. */
int store_table_is_cancel(const store_conn *c, uint8_t code);
/* The waits begun before now - older_than on keys that do not exist, but
 * not the agents' own (/ddprun/...) nor barriers, each reported once (a
 * wait is not listed again): at most max into out, their number. */
size_t store_table_stalls(store_server *srv, uint64_t now, uint64_t older_than,
                          store_stall *out, size_t max);

#endif

/* The store server's state (store_server.h's functions run it): its
 * connections, its key table, its limits and counters. Declared apart from
 * the server's functions so that the key table (store_table.c), which
 * works on this state, needs nothing of the network side's code. The
 * caller owns the storage; the fields are private to store/. */
#ifndef DDPRUN_STORE_STORE_STATE_H
#define DDPRUN_STORE_STORE_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/log.h"
#include "proto/store_proto.h"

typedef struct store_conn store_conn;
typedef struct store_entry store_entry;
typedef struct store_lease store_lease;

/* The key table's state: open addressing over entries, and the leases
 * that own keys. Only store_table.c reads it. */
typedef struct {
    store_entry **slots;
    size_t nslots, nentries;
    store_lease *leases;          /* every lease, doubly linked */
    store_lease **lease_buckets;  /* and by id: lease_buckets[id & (nbuckets - 1)] */
    size_t lease_nbuckets, nleases;
    uint64_t next_lease_id;
    uint64_t lease_due; /* when the lease timer is due (the loop's clock, ms) */
    uint64_t hash_seed;
} store_table;

/* Counters for logs, tests and benchmarks. */
typedef struct {
    uint64_t requests;
    uint64_t conns_accepted;
    uint64_t conns_dropped; /* closed by the server for bad input or limits */
    uint64_t conns_open;    /* channels of multiplexed connections included */
    uint64_t chans_open;    /* of which channels (they hold no descriptor) */
    uint64_t keys;          /* keys holding a value */
} store_stats;

/* The caller owns this storage; fields are private. */
typedef struct store_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_timer_t lease_timer;
    uv_idle_t pending_idle; /* flushes woken connections */
    uv_check_t poll_check;  /* notes polled_ms after each poll of the sockets */
    uint64_t polled_ms;     /* when the loop last polled its sockets (uv_now) */
    uv_timer_t sweep_timer; /* drops clients stuck in the middle of a request */
    int request_timeout_ms;
    int stall_report_ms;
    store_conn *pending;
    store_conn *dead;       /* closed channels of multiplexed connections, to free */
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
    const struct store_net *net; /* what the table asks of the network side */
} store_server;

#endif

/* Where the job's store lives, and this node's part in it. Every backend
 * needs a TCPStore for the workers (torch's MASTER_ADDR:MASTER_PORT); the
 * c10d and static backends meet in it too. One agent hosts it on a thread
 * of its own process, the others find it; with etcd-v3 every agent hosts
 * one for its own workers and the round names node rank 0's. */
#ifndef DDPRUN_AGENT_AGENT_STORE_H
#define DDPRUN_AGENT_AGENT_STORE_H

#include <uv.h>

#include "agent/agent_config.h"
#include "rendezvous/rdzv.h"
#include "store/store_proxy.h"
#include "store/store_thread.h"

typedef struct {
    char addr[256];     /* where the store is (as the workers are told) */
    int port;           /* its port (the one bound, when this agent hosts it) */
    store_thread *host; /* the server when this agent hosts it; NULL: another does */
    store_proxy *proxy; /* --store-proxy: this node's workers' way to it; NULL: none */
} agent_store;

/* Decides who hosts the store and where it is, and starts it when this
 * agent is the host (or finds that another agent of this host serves it).
 * 0, or a negative errno after logging why. */
int agent_store_setup(const agent_config *c, const char *hostname, agent_store *s);

/* The store's host lingers (at most 5 s) until the other agents have gone,
 * after success and after failure alike: they may still be in the exit
 * barrier, or reading the failures the store holds for their summary.
 * Nothing when this agent does not host it. */
void agent_store_linger(const agent_store *s, const char *rdzv_id, const char *agent_id);

/* --store-proxy (agent_config_store_proxy): starts this node's proxy to
 * the store on `loop` (nothing when off). 0, or a negative errno after
 * logging why. */
int agent_store_proxy_start(agent_store *s, const agent_config *c, uv_loop_t *loop);

/* The proxy's port for round r's workers, pointed at the round's store
 * (etcd-v3: node rank 0's); 0 when they do without: no proxy, or their
 * rank 0 hosts their store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE). */
int agent_store_proxy_round(agent_store *s, const rdzv_result *r);

/* Stops the store this agent hosts (its thread joined), and closes the
 * proxy (done once the loop has run its close callbacks). */
void agent_store_stop(agent_store *s);

#endif

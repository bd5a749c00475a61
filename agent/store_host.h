/* The agent's embedded store: the store server on a thread of its own
 * (with its own libuv loop), so the rendezvous thread's blocking calls and
 * the agent's loop never wait on each other. */
#ifndef DDPRUN_AGENT_STORE_HOST_H
#define DDPRUN_AGENT_STORE_HOST_H

#include <stddef.h>

#include "rendezvous/store_server.h"

typedef struct store_host store_host;

/* Starts serving with `opts` (host NULL: every address; port 0: a free
 * one) until stopped. Returns 0 and the bound port, or -EADDRINUSE (the
 * caller decides what that means) or another negative errno. */
int store_host_start(const store_server_opts *opts, store_host **out, int *bound_port);
void store_host_stop(store_host *h);

#endif

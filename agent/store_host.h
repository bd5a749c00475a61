/* The agent's embedded store: the store server on a thread of its own
 * (with its own libuv loop), so the rendezvous thread's blocking calls and
 * the agent's loop never wait on each other. */
#ifndef DDPRUN_AGENT_STORE_HOST_H
#define DDPRUN_AGENT_STORE_HOST_H

#include <stddef.h>

typedef struct store_host store_host;

/* Binds host:port (host NULL: every address; port 0: a free one) and
 * serves until stopped. Returns 0 and the bound port, or -EADDRINUSE (the
 * caller decides what that means) or another negative errno. */
int store_host_start(const char *host, int port, store_host **out, int *bound_port);
void store_host_stop(store_host *h);

#endif

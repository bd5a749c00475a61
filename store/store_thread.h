/* The store server on a thread of its own, with its own libuv loop: the
 * agent's embedded store (so the rendezvous thread's blocking calls and the
 * agent's loop never wait on each other), and rank 0's store when
 * ddp-train runs without an agent. */
#ifndef DDPRUN_STORE_STORE_THREAD_H
#define DDPRUN_STORE_STORE_THREAD_H

#include <stddef.h>

#include "store/store_server.h"

typedef struct store_thread store_thread;

/* Starts serving with `opts` (host NULL: every address; port 0: a free
 * one) until stopped. Returns 0 and the bound port, or -EADDRINUSE (the
 * caller decides what that means) or another negative errno. */
int store_thread_start(const store_server_opts *opts, store_thread **out, int *bound_port);
void store_thread_stop(store_thread *h);

#endif

/* Calls the agent's loop must not wait for: store calls, which a store
 * whose host is lost can hold for the whole read timeout. A thread of
 * their own, started on the first call, runs them one after another, and
 * each one's `after` comes back to the loop (a uv_async), in the order they
 * ran. The loop goes on meanwhile: the rendezvous thread finds a loss and
 * the agent ends. (Not libuv's thread pool: at exit libuv joins its
 * threads, and would wait for the store.) */
#ifndef DDPRUN_AGENT_SIDE_CALLS_H
#define DDPRUN_AGENT_SIDE_CALLS_H

#include <uv.h>

typedef struct side_calls side_calls;

/* work(ctx, arg) on the thread; after(ctx, arg) on the loop. */
typedef void (*side_fn)(void *ctx, void *arg);

/* On loop, handing ctx to every call. 0, or -errno. */
int side_calls_start(uv_loop_t *loop, void *ctx, side_calls **out);
/* Queues work for the thread, then after on the loop (NULL: none). 0, or
 * -errno (after is not called). */
int side_calls_run(side_calls *s, side_fn work, side_fn after, void *arg);
/* Stops, on the loop's thread: calls not begun are not run; the thread
 * ends once the call under way (if any) returns. If it ends within
 * wait_ms, every queued call's after runs (here, in order: each frees its
 * arg), the loop handle is closed and s is freed when the loop next runs
 * its close callbacks; 0. Else -ETIMEDOUT: a call is still held by the
 * store; let it go (rdzv_cancel) and stop again, or leave it and s to the
 * process's end. NULL: nothing. */
int side_calls_stop(side_calls *s, int wait_ms);

#endif

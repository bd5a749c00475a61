/* torchrun's worker watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1): the agent
 * serves torch's FileTimerServer protocol on a named pipe, so a worker
 * using torch.distributed.elastic.timer.FileTimerClient (or ddp-train's
 * --step-timeout) asks the agent to kill it if a scope runs past its
 * deadline.
 *
 * The protocol, as torch's client speaks it: each request is one line of
 * JSON written whole (at most PIPE_BUF bytes) to the FIFO at
 * TORCHELASTIC_TIMER_FILE, {"version": 1, "pid": P, "scope_id": S,
 * "expiration_time": T (seconds since the epoch; negative: release S),
 * "signal": N}. A timer that expires with a signal > 0 gets that signal
 * sent to its pid, and every other timer of that pid is dropped.
 *
 * Unlike torch's server, which then kills its own agent with the same
 * signal, the agent lives on: the killed worker is a failure like any
 * other, and the group restarts within --max-restarts. Only the agent's
 * own workers (a pid whose process group is one of theirs) are ever
 * signalled; a request naming another process is ignored with a
 * warning. */
#ifndef DDPRUN_AGENT_FILE_TIMER_H
#define DDPRUN_AGENT_FILE_TIMER_H

#include <sys/types.h>
#include <uv.h>

typedef struct file_timer file_timer;

/* Whether a process may be signalled (it is one of ours), and what to call
 * it in messages ("local rank 1 (pid 42)"). */
typedef int (*file_timer_owner_fn)(void *ctx, pid_t pid, char *name, size_t len);

/* Creates the FIFO at path (replacing whatever is there) and starts
 * serving it on loop. NULL with a message in err on failure. */
file_timer *file_timer_start(uv_loop_t *loop, const char *path, file_timer_owner_fn owner,
                             void *ctx, char *err, size_t errlen);
/* Before a process is killed for an expired timer, ask(ctx) is called
 * (the agent asks every worker for its stack: the hung one and those
 * waiting for it) and, if it asked any, the kill waits grace_s seconds for
 * the stacks to be written. */
void file_timer_before_kill(file_timer *t, int (*ask)(void *ctx), double grace_s);
/* Whether pid is the process the watchdog killed (of several killed at
 * once, the one whose deadline passed first), and the scope that expired;
 * cleared once it says yes. */
int file_timer_killed(file_timer *t, pid_t pid, char *scope, size_t len);
/* Stops serving and removes the FIFO. */
void file_timer_stop(file_timer *t);

#endif

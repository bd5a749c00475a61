/* ddp-train's side of the launcher's worker watchdog (torchrun's
 * TORCHELASTIC_ENABLE_FILE_TIMER=1, served by ddprun and by torchrun
 * alike): before each step, evaluation and checkpoint the rank asks, through
 * the FIFO named by TORCHELASTIC_TIMER_FILE, to be killed (SIGKILL) if it has
 * not asked again within --step-timeout seconds, so that a step that hangs
 * outside any collective (a deadlock, a stuck device) still ends, and the
 * launcher restarts the group. The request is torch's FileTimerRequest, one
 * JSON line; renewing the same scope replaces its deadline. */
#ifndef DDPRUN_WORKER_TRAIN_WATCHDOG_H
#define DDPRUN_WORKER_TRAIN_WATCHDOG_H

#include <stdint.h>

typedef struct {
    char path[512]; /* "" : no watchdog */
    int timeout_s;
    int64_t armed_ns; /* when the deadline was last moved (monotonic), 0: never */
} watchdog;

/* path: TORCHELASTIC_TIMER_FILE (NULL or "": none); timeout_s 0: off. */
void watchdog_init(watchdog *w, const char *path, int timeout_s);
/* Moves the scope's deadline to now + timeout, unless it was moved less
 * than a quarter of the timeout ago (one request per step would cost a
 * write to the launcher each step for nothing): a rank is killed after
 * between 3/4 of the timeout and the whole of it without progress. A
 * launcher that stopped listening only costs a warning, once; the watchdog
 * is then off. */
void watchdog_arm(watchdog *w, const char *scope);
/* Removes the scope's deadline. */
void watchdog_release(watchdog *w, const char *scope);

#endif

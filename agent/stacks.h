/* Asking workers for their stacks: the signal the agent names in each
 * worker's DDPRUN_STACK_SIGNAL (a real-time signal, SIGRTMIN + 2), sent
 * only to a process whose caught-signal mask (/proc/PID/status, SigCgt)
 * has it: to a worker that did not install a handler the signal would be
 * fatal. ddp-train installs one (worker/train/stacks.h); a Python worker
 * does with faulthandler.register(int(os.environ["DDPRUN_STACK_SIGNAL"]),
 * all_threads=True). The stacks go to the worker's stderr: its log. */
#ifndef DDPRUN_AGENT_STACKS_H
#define DDPRUN_AGENT_STACKS_H

#include <sys/types.h>

/* The signal's number. */
int stacks_signal(void);

/* Sends it to pid if pid catches it: 1 sent, 0 not (no handler, or gone). */
int stacks_ask(pid_t pid);

#endif

/* How each worker starts: the agent spawns ddprun-exec (or, without it
 * beside ddprun, ddprun's own hidden `__exec-worker` entry) with the
 * worker's command line; it sets the parent-death signal (the worker dies
 * with its agent, even under kill -9), applies --numa-binding's CPUs, and
 * execs the worker. */
#ifndef DDPRUN_AGENT_WORKER_EXEC_H
#define DDPRUN_AGENT_WORKER_EXEC_H

#include <stddef.h>

/* The helper's name beside ddprun. */
#define WORKER_EXEC_PROGRAM "ddprun-exec"

/* The helper to spawn workers through: WORKER_EXEC_PROGRAM beside
 * self_exe (ddprun's own path) when it is there (in buf), else self_exe
 * itself (its `__exec-worker` entry does the same, more slowly). Either
 * way the arguments are: HELPER __exec-worker PROGRAM [ARGS...]. */
const char *worker_exec_program(const char *self_exe, char *buf, size_t len);

/* Sets the parent-death signal, binds the CPUs, then execs argv[0].
 * Returns only on failure (with the exit code to use). */
int worker_exec_helper(char **argv);

#endif

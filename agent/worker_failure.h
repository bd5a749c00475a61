/* What a failed worker's exit says, as a failure record (failure.h): its
 * error file's traceback where it wrote one (torch's @record); else the
 * stacks it wrote when the watchdog asked before its kill, or the last
 * lines of its stderr; and the causes known to ddprun said plainly (a
 * torch.distributed script that ended with its process group alive; the
 * worker watchdog's kill). */
#ifndef DDPRUN_AGENT_WORKER_FAILURE_H
#define DDPRUN_AGENT_WORKER_FAILURE_H

#include "agent/failure.h"
#include "agent/worker_group.h"

/* f (freed first) := w's failure on host in round; watchdog_scope: what
 * the worker watchdog killed it for (NULL: not the watchdog). */
void worker_failure(failure *f, worker *w, const char *host, int round,
                    const char *watchdog_scope);

#endif

/* What a failed worker's exit says, as a failure record (failure.h): its
 * error file's traceback where it wrote one (torch's @record); else the
 * stacks it wrote when the watchdog asked before its kill, or the last
 * lines of its stderr; and the causes known to ddprun said plainly (a
 * torch.distributed script that ended with its process group alive; the
 * worker watchdog's kill). */
#ifndef DDPRUN_AGENT_WORKER_FAILURE_H
#define DDPRUN_AGENT_WORKER_FAILURE_H

#include "agent/coll_blame.h"
#include "agent/failure.h"
#include "agent/worker_group.h"

/* f (freed first) := w's failure on host in round; watchdog_scope: what
 * the worker watchdog killed it for (NULL: not the watchdog). */
void worker_failure(failure *f, worker *w, const char *host, int round,
                    const char *watchdog_scope);

/* The ranks a hang's verdict v blames that are not among the failures
 * known[0..nknown) (the watchdog killed them with the others but their
 * exits come later, they still run, or they are another node's): each a
 * failure of its own at out (room entries), so that the summary names it
 * as the cause (the summary keeps one failure per rank); this node's
 * workers are wg's (rank_offset: its first global rank). How many. */
int worker_failures_hung(failure *out, int room, const failure *known, int nknown,
                         const coll_verdict *v, const worker_group *wg, int rank_offset,
                         const char *host, int round);
/* The root cause's message says what the collective records found: that
 * it is the rank the others waited for (f->hung), or that it waited for
 * one. */
void worker_failure_note_hang(failure *f, const coll_verdict *v);

/* Whether w said that its work is done and kept (DDPRUN_FINISHED_FILE). */
int worker_said_finished(const worker *w);
/* Whether w, exiting non-zero, had said it finished its work before (then
 * its failure was on its way out; logged as such). */
int worker_finished_first(const worker *w);

#endif

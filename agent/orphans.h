/* The processes a worker group leaves behind. A worker may start a daemon
 * in a session of its own (`setsid prog &`), out of reach of the signal to
 * its process group; when the worker exits, such a process would be
 * re-parented to init and outlive the job. The agent adopts them instead
 * (PR_SET_CHILD_SUBREAPER) and ends them when its group stops. */
#ifndef DDPRUN_AGENT_ORPHANS_H
#define DDPRUN_AGENT_ORPHANS_H

#include <sys/types.h>

/* Makes this process the parent of every orphan below it. */
void orphans_adopt(void);

/* SIGKILLs every process below this one and reaps those that become its
 * children, until none is left or about a second has passed. Returns how
 * many were still running outside the process groups in `groups` (those
 * were already killed: they are only reaped); the first `max` of their
 * pids go to pids. Call it only when no child of this process is one that
 * something else will wait for. */
int orphans_end(const pid_t *groups, int ngroups, pid_t *pids, int max);

/* Tests: 0 reads every /proc entry, as on a kernel without children
 * lists (CONFIG_PROC_CHILDREN); 1 (the default) uses them where they are. */
void orphans_use_children_lists(int on);

#endif

/* The node's directories, and what removes them: the log root (torchrun's
 * layout under --log-dir, a new <run id>_XXXXXX each run; without it a
 * directory of our own under /tmp, removed at the end unless a worker
 * failed), the workers' snapshot directory (in memory, or on disk with a
 * warning), the note by which `ddprun status` finds this job, and the
 * janitor that removes them (and ends the workers' process groups) if the
 * agent is killed. A service of the agent's: it owns this state. */
#ifndef DDPRUN_AGENT_NODE_DIRS_H
#define DDPRUN_AGENT_NODE_DIRS_H

#include <sys/types.h>

#include "agent/local_jobs.h"
#include "agent/snapshot_dir.h"

typedef struct node_dirs node_dirs;

/* In a kept /tmp directory: why it is there (and for the tests, that it
 * was kept on purpose, not leaked). */
#define KEPT_LOGS_NOTE "why_kept.txt"

/* Makes them for job run_id (log_dir NULL: our own under /tmp; shm_dir:
 * where memory is, /dev/shm) and starts the janitor. 0, or -errno after
 * logging why. */
int node_dirs_make(const char *log_dir, const char *run_id, const char *shm_dir,
                   node_dirs **out);
const char *node_dirs_log_root(const node_dirs *d);
const snapshot_dir *node_dirs_snapshots(const node_dirs *d);
/* Leaves the note for `ddprun status` (the job runs on without it). */
void node_dirs_note_job(node_dirs *d, const local_job *j);
/* The janitor ends process group pgid with the agent (on 1), or not. */
void node_dirs_track(node_dirs *d, pid_t pgid, int on);
/* A worker failed: the /tmp directory stays, and says where, once. */
void node_dirs_keep_logs(node_dirs *d);
void node_dirs_tell_kept_logs(node_dirs *d);
/* The end: the snapshot directory and the note removed, the /tmp
 * directory too unless kept; the janitor let go; d freed. NULL: nothing. */
void node_dirs_close(node_dirs *d);

#endif

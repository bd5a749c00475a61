/* The jobs whose agents run on this machine, for `ddprun status` without
 * an endpoint: each agent leaves a note (one JSON file named for its pid)
 * in a directory of the user's, $DDPRUN_JOBS_DIR, else
 * $XDG_RUNTIME_DIR/ddprun-jobs, else /tmp/ddprun-jobs-<uid>, saying where
 * its job's rendezvous is; it removes the note when it ends (its janitor
 * does, if it is killed), and a note whose agent is gone is passed over. */
#ifndef DDPRUN_AGENT_LOCAL_JOBS_H
#define DDPRUN_AGENT_LOCAL_JOBS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;          /* the agent's */
    char backend[32];   /* c10d, etcd-v3, static */
    char endpoint[512]; /* as --rdzv-endpoint takes it */
    char run_id[256];
    char key_prefix[256]; /* "" for the default */
} local_job;

/* Leaves this agent's note; its path goes to path (for local_job_remove
 * and the janitor). 0, or a negative errno (the job runs on: only status
 * cannot find it by itself). */
int local_job_note(const local_job *j, char *path, size_t pathlen);
void local_job_remove(const char *path);

/* The jobs of live agents (malloc'd array; *n of them), in order
 * by pid. A note of an agent that is gone is removed. */
int local_jobs_list(local_job **out, size_t *n);

#endif

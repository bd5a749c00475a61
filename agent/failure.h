/* Worker failures as torchrun reports them: what one failure is (read
 * from the worker's exit and its TORCHELASTIC_ERROR_FILE), its JSON form
 * (shared with the other agents through the store), and the summary block
 * printed when restarts are exhausted. */
#ifndef DDPRUN_AGENT_FAILURE_H
#define DDPRUN_AGENT_FAILURE_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    double time;    /* when it failed (error file timestamp, else exit time), epoch s */
    char host[128];
    int rank, local_rank;
    int exitcode;   /* negative: killed by that signal */
    int pid;
    int round;
    char error_file[4096]; /* "" if the worker wrote none */
    char *message;   /* malloc'd */
    char *traceback; /* malloc'd; NULL if none */
    int watchdog;    /* the agent's watchdog killed it (this node's only: not in the JSON) */
    int hung;        /* the rank the others waited for in a collective (agent/coll_blame.h) */
} failure;

/* Builds a failure from a worker's exit, reading its error file if it
 * wrote one ({"message": {"message": ..., "extraInfo": {"py_callstack":
 * ..., "timestamp": ...}}}). */
void failure_from_exit(failure *f, const char *host, int rank, int local_rank, int pid,
                       int64_t exit_status, int term_signal, double exit_time,
                       const char *error_file, int round);
/* One JSON line (malloc'd) / back. */
char *failure_to_json(const failure *f);
int failure_from_json(const char *line, failure *f);
void failure_free(failure *f);
/* Which of n failures of one round caused the others: the rank the
 * others waited for in a collective (hung), else the worker the
 * watchdog killed (of several, the one whose deadline passed first), else
 * the earliest killed by a signal (a crash, the OOM killer, kill -9), else
 * the earliest. A worker that exits with a code may have been
 * reacting to another's death (its collective lost a peer), and it tells
 * its exit time more precisely than the agent can tell a killed one's, so
 * times alone would blame the survivor. -1 when n is 0. */
int failure_root_cause(const failure *fs, int n);
/* torchrun's block: "<program> FAILED", Failures, Root Cause (the earliest). */
void failure_print_summary(FILE *out, const char *program, failure *fs, int n);

#endif

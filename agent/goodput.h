/* Goodput: the share of a job's wall time spent in training steps that
 * were kept, and where the rest went. The agent keeps it for its node from
 * its own timeline (rendezvous, worker groups started and stopped) and its
 * local rank 0's collective record (common/coll_record.h: the steps it
 * finished, their time, the waits for data and checkpoints within them, the
 * first step it ran). A step finished twice (an attempt resumed from before
 * it) counts once: the second time is redone work. Times are monotonic
 * seconds.
 *
 *   kept        the steps' time, less the redone steps' and the waits
 *   redone      steps done again after a restart
 *   rendezvous  joining rounds
 *   start-up    the first group starting, up to its first step (process
 *               start, set-up, loading a checkpoint)
 *   restarts    a failed or changed group stopping, and each later group
 *               starting up to its first step (the same, and resuming); the
 *               last group's stopping at the job's end is the end's (other)
 *   data        steps waiting for their batch
 *   checkpoints steps waiting for a checkpoint or snapshot to be handed over
 *   other       the rest: evaluation, a step cut short by a failure, the end
 *   stragglers  of the kept time, what stragglers added (node rank 0's
 *               straggler watch: their compute over the median's, per step) */
#ifndef DDPRUN_AGENT_GOODPUT_H
#define DDPRUN_AGENT_GOODPUT_H

#include <stddef.h>
#include <stdint.h>

/* One worker group, as its local rank 0's record showed it. */
typedef struct {
    double started;     /* the group was started */
    double first_step;  /* its first step began (0: none did) */
    double ended;       /* it began to stop (a failure, a change, the end); 0: running */
    int64_t first;      /* the first step it ran (0: none) */
    int64_t steps;      /* steps it finished */
    double step_s, data_s, ckpt_s; /* their time, and the waits within them */
    int recorded;       /* its workers keep a step record (ddp-train's collective record) */
} goodput_attempt;

typedef struct {
    double start;         /* the agent started */
    double rendezvous_s;  /* rendezvous, finished rounds */
    double startup_s;     /* the first group starting up */
    double restart_s;     /* groups stopping for another, and later ones starting up */
    double stop_s;        /* the last group's stopping: a restart's once another comes */
    double step_s, redone_s, data_s, ckpt_s, straggler_s;
    int64_t redone_steps;
    int64_t done_max;     /* the highest step finished so far (0: none) */
    int attempts;
    int recorded;         /* some attempt's workers kept a step record */
    double run_s;         /* the groups' lives, start to gone */
} goodput;

/* A group is gone (stopped at `gone`): its figures added. */
void goodput_attempt_end(goodput *g, const goodput_attempt *a, double gone);

typedef struct {
    double wall;          /* since the agent started */
    double kept, redone, rendezvous, startup, restarts, data, checkpoints, other, stragglers;
    int64_t redone_steps;
    double ratio;         /* kept / wall */
    int recorded;         /* the steps are known (else only wall, run, rendezvous, attempts) */
    double run;           /* the worker groups' lives */
    int attempts;
} goodput_view;

/* The figures now, with the running group's (live: NULL when none) and
 * the rendezvous under way since rdzv_since (0: none; with one, the last
 * group's stopping was a restart's). */
void goodput_now(const goodput *g, const goodput_attempt *live, double rdzv_since, double now,
                 goodput_view *v);

/* One line for the log: "goodput 93.1% of 120.4 s: kept 112.1 s, ...";
 * where no worker kept a step record (a script, not ddp-train), what is
 * known: "goodput unknown: ..., workers ran 2.80 s in 1 attempt (no
 * restart), rendezvous 0.06 s". */
void goodput_line(const goodput_view *v, char *out, size_t len);

#endif

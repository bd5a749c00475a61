/* Stragglers: ranks whose compute is persistently slower than the rest.
 *
 * Each rank's collective record (common/coll_record.h) sums the time of
 * its steps and the time it spent blocked in collectives; a step's compute
 * is the difference: the part of the step that is the rank's own work.
 * (Its wait is not: a slow rank keeps the others waiting, and waits
 * little itself.) Once a window (--straggler-window seconds) each agent
 * takes its ranks' compute per step over the window and publishes it; the
 * agents compare every rank's with the median of all of them. A rank
 * slower than the median by more than --straggler-threshold percent in
 * STRAGGLER_WINDOWS windows running is a straggler, until it is back
 * within the threshold for as many windows. */
#ifndef DDPRUN_AGENT_STRAGGLER_H
#define DDPRUN_AGENT_STRAGGLER_H

#include <stdint.h>

#define STRAGGLER_WINDOWS 3

/* One rank's compute over a window. */
typedef struct {
    int rank, local_rank;
    char host[128];
    double compute;  /* s per step (< 0: no step finished in the window) */
    int64_t steps;   /* in the window */
} rank_speed;

/* A rank's standing across windows. */
typedef struct {
    int rank;
    int slow_windows, fast_windows; /* running counts */
    int straggler;                  /* reported as one */
    double compute, median;         /* the last window's: s per step, and what it was */
                                    /* compared with */
} straggler_state;

/* What an agent knows of its own rank's standing (from node rank 0). */
typedef struct {
    int straggler;
    double compute, median; /* s per step, when it became one */
} straggler_mark;

/* The windows so far of up to n ranks (rank i's state in st[i]). */
typedef struct {
    double threshold; /* fraction: 0.15 */
    int n;
    straggler_state *st;
} straggler_watch;

/* Compares the window's speeds (any order, any subset of ranks; ranks
 * outside [0, watch->n) are left out) with their median (of two ranks,
 * each with the other's) and updates each
 * rank's standing. The ranks whose standing changed are written to
 * changed[] (up to max): became a straggler, or stopped being one. */
int straggler_update(straggler_watch *w, const rank_speed *sp, int n, int *changed, int max);

/* The median of n values (sorted in place). */
double straggler_median(double *v, int n);

#endif

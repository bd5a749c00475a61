/* Rank 0's account of the run: a line per --log-every steps (and at each
 * epoch's end), a bar redrawn in place between them on a terminal, a JSON
 * line per step and per evaluation in --metrics, and the throughput, which
 * leaves out the first --throughput-warmup steps. */
#ifndef DDPRUN_WORKER_TRAIN_PROGRESS_H
#define DDPRUN_WORKER_TRAIN_PROGRESS_H

#include "worker/train/trainer.h"

/* Opens --metrics (rank 0) and starts the clocks. */
int progress_start(trainer *t);
/* Counts a finished global step's images. */
void progress_count(trainer *t);
/* Rank 0, after a step: the all-rank mean loss and accuracy, the learning
 * rate, and the step's number within its epoch (1-based). */
void progress_step(trainer *t, double loss, double acc, double lr, int64_t step_in_epoch);
/* Rank 0, after an evaluation over `images` test images. */
void progress_test(trainer *t, double loss, double acc, int64_t images);
/* Rank 0, at the end: "done: N steps, img/s=X". */
void progress_done(trainer *t);
/* Takes the bar off the terminal before other output. */
void progress_bar_clear(train_progress *p);

#endif

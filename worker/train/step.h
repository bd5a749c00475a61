/* The work of a step: this rank's share of the global batch up to the
 * backend, forward, backward with DDP's all-reduce and SGD (recorded once
 * as a CUDA graph where the backend can, then replayed), the loss back;
 * and the evaluation over the test set. */
#ifndef DDPRUN_WORKER_TRAIN_STEP_H
#define DDPRUN_WORKER_TRAIN_STEP_H

#include "worker/train/trainer.h"

/* One global step at t->at. stats gets this rank's loss sum, correct
 * count, samples and whether SIGTERM arrived (for the all-rank sum). */
int step_train(trainer *t, float stats[4]);
/* Test loss and accuracy over the whole test set, each rank a disjoint
 * share, summed over ranks and shown by rank 0. 0 without a test set.
 * Told to stop (a signal on any rank), every rank abandons it: 1, with
 * nothing shown (the evaluation runs when the job resumes). */
int step_evaluate(trainer *t);
/* The learning rate at the run's position. */
double step_lr(const trainer *t);
/* In-place sum of a few floats over all ranks. */
int step_allreduce_small(trainer *t, float *v, size_t n);

#endif

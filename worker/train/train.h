/* ddp-train's training run: the loop (data, forward, backward with DDP,
 * SGD, evaluation, metrics, checkpoints, SIGTERM) that train_run executes
 * on one rank, with the configuration its flags fill in
 * (train_config.h). */
#ifndef DDPRUN_WORKER_TRAIN_TRAIN_H
#define DDPRUN_WORKER_TRAIN_TRAIN_H

#include "worker/train/train_config.h"

/* Runs training on this rank; returns the process exit code: 0 success,
 * 1 failure with the error file written (a bad command line is main's
 * exit 2, before this runs). */
int train_run(const train_config *c);

#endif

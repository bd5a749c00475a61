/* The run in checkpoints: what the trainer saves (weights, momentum, batch
 * norm's statistics, where the run stands) and how a new run resumes from
 * it. The file format is checkpoint.c's. */
#ifndef DDPRUN_WORKER_TRAIN_SNAPSHOT_H
#define DDPRUN_WORKER_TRAIN_SNAPSHOT_H

#include "worker/train/trainer.h"

/* Rank 0 writes a checkpoint of the run as it stands (others return 0);
 * nothing without --ckpt-dir. */
int snapshot_save(trainer *t);
/* Rank 0 reads the newest valid checkpoint in --ckpt-dir and broadcasts
 * it, so no shared file system is needed; every rank takes its weights,
 * momentum and position. 0 with nothing changed when there is none. */
int snapshot_resume(trainer *t);

#endif

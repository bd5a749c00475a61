/* The run in checkpoints: what the trainer saves (weights, momentum, batch
 * norm's statistics, where the run stands) and how a new run resumes from
 * it. The file format is checkpoint.c's. */
#ifndef DDPRUN_WORKER_TRAIN_SNAPSHOT_H
#define DDPRUN_WORKER_TRAIN_SNAPSHOT_H

#include "worker/train/trainer.h"

/* Rank 0 takes --ckpt-dir for this job (common/dir_lock.h) before it
 * reads, writes or deletes anything there; others return 0, and so does a
 * run without --ckpt-dir. Another job's process holding it is an error
 * naming the directory and that process, at once; a process of this same
 * run (TORCHELASTIC_RUN_ID: the group's previous rank 0 still stopping,
 * perhaps on another host of a shared file system) is waited for, up to
 * SNAPSHOT_LOCK_WAIT_S. Held until trainer_cleanup or the process's end. */
#define SNAPSHOT_LOCK_WAIT_S 30
int snapshot_lock(trainer *t);

/* Rank 0 writes a checkpoint of the run as it stands (others return 0);
 * nothing without --ckpt-dir. */
int snapshot_save(trainer *t);
/* Rank 0 reads the newest valid checkpoint in --ckpt-dir and broadcasts
 * it, so no shared file system is needed; every rank takes its weights,
 * momentum and position. 0 with nothing changed when there is none. */
int snapshot_resume(trainer *t);

#endif

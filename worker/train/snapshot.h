/* The run in checkpoints: what the trainer saves (weights, momentum, batch
 * norm's statistics, where the run stands), in each node's memory and in
 * each node's --ckpt-dir; resume.h is how a new run picks one up. The file
 * format is checkpoint.c's. */
#ifndef DDPRUN_WORKER_TRAIN_SNAPSHOT_H
#define DDPRUN_WORKER_TRAIN_SNAPSHOT_H

#include <stdint.h>

#include "worker/train/trainer.h"

/* Rank 0 takes --ckpt-dir for this job (common/dir_lock.h) before it
 * reads, writes or deletes anything there (other nodes' local rank 0 take
 * theirs at their first checkpoint: snapshot_save); others return 0, and
 * so does a run without --ckpt-dir. Another job's process holding it is an error
 * naming the directory and that process, at once; a process of this same
 * run (TORCHELASTIC_RUN_ID: the group's previous rank 0 still stopping,
 * perhaps on another host of a shared file system) is waited for, up to
 * SNAPSHOT_LOCK_WAIT_S. Held until trainer_cleanup or the process's end. */
#define SNAPSHOT_LOCK_WAIT_S 30
int snapshot_lock(trainer *t);

/* A checkpoint of the run as it stands, in --ckpt-dir (nothing without
 * it), called by every rank at the same step: local rank 0 of every node
 * writes its own node's directory (no shared file system needed), in the
 * background: the step copies the state to host memory and a thread of its
 * own writes the file (atomic, checksummed, --keep kept) while training
 * goes on. A directory held by another process (rank 0's node sharing it)
 * is left to that process, said once. One write at a time: a checkpoint
 * due while the last is still being written waits for it.
 * snapshot_save_report logs each file once written ("checkpoint PATH
 * (epoch E, step S)"; a failed write fails the run) and is called after
 * every step; snapshot_save_flush waits for the write under way and
 * reports it, before the process ends. */
int snapshot_save(trainer *t);
int snapshot_save_report(trainer *t);
int snapshot_save_flush(trainer *t);
/* Snapshots in this node's memory (--snapshot-dir, DDPRUN_SNAPSHOT_DIR:
 * a directory on tmpfs that ddprun's agent keeps for its workers across
 * their restarts), kept by local rank 0 of every node, so that every node
 * holds the newest state: snapshot_keep_start decides whether this rank
 * keeps them; snapshot_keep takes one and is called every --snapshot-every
 * steps: the step copies the state to host memory, and a thread of its own
 * writes it as a checkpoint file (atomic and checksummed, the newest two
 * kept; snapshot_writer.h), one at a time: a snapshot due while the last is
 * still being written waits for it with --snapshot-every N, and is skipped
 * under the automatic interval. A snapshot that cannot be written (memory full) is said once and
 * ends the snapshots, not the run. snapshot_keep_report logs what they
 * cost: each, and as a share of run_s (the training's time, or 0). */
void snapshot_keep_start(trainer *t);
/* Rank 0: whether a snapshot is due after this step (step_ns: its time):
 * every --snapshot-every steps, or by default as often as they cost at
 * most 1% of rank 0's step time (every step while they cost less). Rank 0
 * decides for every node, so that all keep snapshots of the same steps. */
int snapshot_due(trainer *t, int64_t step_ns);
int snapshot_keep(trainer *t);
void snapshot_keep_report(const trainer *t, double run_s);
/* The snapshot being written is on file when this returns. */
void snapshot_keep_flush(trainer *t);

#endif

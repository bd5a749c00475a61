/* The run in checkpoints: what the trainer saves (weights, momentum, batch
 * norm's statistics, where the run stands), in each node's memory and in
 * each node's --ckpt-dir; resume.h is how a new run picks one up. The file
 * format is checkpoint.c's. */
#ifndef DDPRUN_WORKER_TRAIN_SNAPSHOT_H
#define DDPRUN_WORKER_TRAIN_SNAPSHOT_H

#include <stdint.h>

#include "worker/train/trainer.h"

/* Rank 0 takes --ckpt-dir for this job (common/dir_lock.h) before it
 * reads, writes or deletes anything there; others return 0, and so does a
 * run without --ckpt-dir. A process of this same run holding it
 * (TORCHELASTIC_RUN_ID: the group's previous rank 0 still stopping,
 * perhaps on another host of a shared file system) is waited for, up to
 * SNAPSHOT_LOCK_WAIT_S, and an error after. A directory another job
 * holds, or that cannot be used at all (read-only, not a directory), is
 * not an error here: the node neither reads nor writes it
 * (t->disk.foreign, its reason in t->disk.why, said once), and the run
 * fails only where no node at all can keep its checkpoints (resume.c
 * decides, with every node's word). Held until trainer_cleanup or the
 * process's end. */
#define SNAPSHOT_LOCK_WAIT_S 30
int snapshot_lock(trainer *t);

/* The other nodes' local rank 0, once rank 0 has its lock (after a
 * barrier: a directory shared with rank 0's node is then held by rank 0):
 * takes this node's --ckpt-dir before reading it. Held by a process of
 * this run (rank 0 sharing it, or this node's previous worker still
 * stopping), it is read and left to that process to write (snapshot_save
 * tries again at each checkpoint); held by another job, or unusable, it
 * is foreign, as above. */
void snapshot_claim(trainer *t);

/* Collective: whether some node keeps this job's checkpoints (local rank
 * 0 whose --ckpt-dir is this job's and whose writes have not failed; with
 * step >= 0, one whose directory holds that step: written, found there at
 * the start, or shared with the node that writes it). 0 if one does; else
 * the run fails, saying why (this node's reason, or that every node
 * said its own). */
int snapshot_keepers(trainer *t, int64_t step);

/* This node's --ckpt-dir is not this job's to read or write: why (what
 * snapshot_lock found, or the checkpoints of another job that resume.c
 * found there), said once. */
void snapshot_dir_foreign(trainer *t, const char *why);

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

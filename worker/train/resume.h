/* Where a new run picks up: the newest state any rank can offer, from its
 * node's memory (the snapshots of snapshot.h) or from a node's own
 * --ckpt-dir, sent by its holder to the others, so that no shared file
 * system is needed. */
#ifndef DDPRUN_WORKER_TRAIN_RESUME_H
#define DDPRUN_WORKER_TRAIN_RESUME_H

#include <stdint.h>

#include "worker/train/trainer.h"

/* What one rank can resume from: the newest snapshot in its node's memory
 * or checkpoint in its node's --ckpt-dir (local rank 0 of each node looks),
 * whichever is newer.
 * Every rank's offer goes to every rank (an all-gather of this struct, the
 * first thing the ranks exchange when they resume), so all choose the same
 * one. */
typedef struct {
    int64_t step;      /* its global step; -1: nothing */
    int32_t rank;
    int32_t in_memory; /* 1: the node's memory; 0: its disk */
    int32_t keeps;     /* this rank keeps its node's --ckpt-dir (local rank 0, the
                        * directory this job's) */
    char host[48];     /* the holder's host, for the message */
} resume_offer;

/* Resumes from the newest state any rank can offer: the snapshots in its
 * node's memory or the checkpoints in its node's --ckpt-dir. The
 * ranks agree on the newest (an all-gather of what each has), its holder
 * reads it and sends it to the others (no shared file system is needed),
 * and every rank takes its weights, momentum and position; *root is the
 * holder, from which the weights are then broadcast (-1 when there was
 * nothing: a fresh start, whose weights are still to be drawn). The
 * holder says where it resumed from: "resuming from PATH: epoch E, step S
 * (memory of node H)". */
int resume_newest(trainer *t, int *root);

#endif

/* Which device a rank trains on: --device against the GPUs it sees and
 * the ranks on its node. NCCL takes one GPU per rank; a node's ranks
 * either share one view of all its GPUs (rank i takes GPU i) or each get
 * a view of their own GPU alone (ddprun --virtual-local-rank, srun
 * --gpus-per-task=1, one-GPU containers), which CUDA_VISIBLE_DEVICES
 * naming a single device tells. A pure function, so every case has a
 * unit test without a GPU. */
#ifndef DDPRUN_WORKER_TRAIN_DEVICE_CHOICE_H
#define DDPRUN_WORKER_TRAIN_DEVICE_CHOICE_H

#include <stddef.h>

#include "worker/backend/backend.h"

typedef struct {
    backend_kind requested; /* --device: AUTO, CPU, CPU_REFERENCE or CUDA */
    int gpus;               /* cuda_device_count(): >= 0 here */
    int local_rank, local_world;
    int visible_gpus_named; /* dist_env's: entries of CUDA_VISIBLE_DEVICES, -1 unset */
} device_request;

typedef struct {
    backend_kind kind; /* what to create: CPU, CPU_REFERENCE or CUDA (AUTO resolved) */
    int device;        /* the CUDA ordinal */
    char note[256];    /* a warning for the log (auto fell back to the CPU), or empty */
} device_choice;

/* 0, or -EINVAL with err saying why --device cuda cannot work. */
int device_choose(const device_request *r, device_choice *out, char *err, size_t errlen);

#endif

/* What the CUDA backend shares with the rest of worker/backend/cuda/: the NCCL
 * communicator (nccl_comm.c) runs on the backend's device and orders its
 * work against the backend's compute stream. Only worker/backend/cuda/ includes
 * this (it needs CUDA's headers); everyone else sees backend.h. */
#ifndef DDPRUN_WORKER_BACKEND_CUDA_CUDA_BACKEND_H
#define DDPRUN_WORKER_BACKEND_CUDA_CUDA_BACKEND_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdio.h>

#include "worker/backend/backend.h"

/* The device ordinal the backend runs on. */
int cuda_backend_device(const backend *b);
/* The stream every backend operation is queued on. */
cudaStream_t cuda_backend_stream(const backend *b);
/* Says that [p, p + bytes) of device memory is being written other than
 * by a backend operation (by NCCL), so the backend's converted copies of
 * any weights there are stale (cuda_weights.c). */
void cuda_backend_written(const backend *b, const void *p, size_t bytes);
/* Destroys the backend's recorded step, if any; a later replay fails with
 * -ESTALE. CUDA documents that a replay still running is freed when it
 * completes, but the call was seen to wait for it (an H200, driver 580, a
 * replay stuck in an all-reduce). NCCL calls this when finalising or
 * aborting its communicator: a recording that holds collectives keeps a
 * reference on the communicator, and NCCL's finalise and abort wait (with
 * no timeout) until every graph holding one has been destroyed (so an
 * abort runs beside it: nccl_comm.c's nc_abort). */
void cuda_backend_drop_recording(const backend *b);
/* Writes, for every convolution shape the backend has run, each
 * direction's candidate algorithms in order of preference (number, math,
 * workspace) and the one in use; returns how many shapes had a direction
 * with no candidate (the GPU pre-flight, tests/gpu/preflight.c). */
int cuda_backend_conv_report(const backend *b, FILE *out);

#endif

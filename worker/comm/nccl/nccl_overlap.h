/* ddp-train --overlap-report: how much of one step's all-reduces ran on
 * the device while the compute stream was still working through backward.
 *
 * DDP's promise is that gradient buckets are all-reduced during the
 * backward pass, not after it. Whether they are is a question about the
 * device's timeline, which the host does not see: it issues everything
 * ahead of the GPU. So the communicator times one step's all-reduces with
 * CUDA events: where the compute stream stood when each was issued, and
 * when each started and ended on NCCL's stream. The last all-reduce is
 * issued once backward has ended (DDP launches the last bucket, or what is
 * left, after the last gradient), so its issue point on the compute stream
 * marks backward's end; whatever NCCL time lies before it overlapped the
 * backward pass.
 *
 * A diagnostic: failures of its own CUDA calls are logged and end the
 * timing, never the training. Not for recorded steps (a CUDA graph's
 * events are not timed), hence the second step, the last run op by op. */
#ifndef DDPRUN_WORKER_COMM_NCCL_NCCL_OVERLAP_H
#define DDPRUN_WORKER_COMM_NCCL_NCCL_OVERLAP_H

#include <cuda_runtime.h>
#include <stdint.h>

typedef struct nccl_overlap nccl_overlap;

/* Times the all-reduces of the step-th step (the step-th sync); step 0:
 * none, and *out is NULL (every function then does nothing). 0 or
 * -ENOMEM. */
int nccl_overlap_create(int step, nccl_overlap **out);
/* Whether the all-reduce about to be issued is timed. */
int nccl_overlap_timing(const nccl_overlap *o);
/* Around one all-reduce of `bytes`: `before` once NCCL's stream has been
 * made to wait for the compute stream's work so far, `after` once the
 * collective is on NCCL's stream. */
void nccl_overlap_before(nccl_overlap *o, cudaStream_t compute, cudaStream_t nccl,
                         uint64_t bytes);
void nccl_overlap_after(nccl_overlap *o, cudaStream_t nccl);
/* A step synced (everything issued has completed): on the timed step's
 * sync, the report, logged by rank 0. */
void nccl_overlap_synced(nccl_overlap *o, int rank);
void nccl_overlap_destroy(nccl_overlap *o);

#endif

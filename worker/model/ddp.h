/* Distributed data parallel: parameters and buffers broadcast from rank 0
 * at the start; gradients grouped in buckets in reverse layer order (the
 * first about 1 MiB so communication starts early, then about 25 MiB) and
 * each bucket all-reduced as soon as backward has produced it, while
 * backward goes on; averaged over the world size at the end. Also the
 * SyncBatchNorm all-reduce.
 *
 * Ranks may hold unequal shares of the global batch (a world size that does
 * not divide it: some ranks take one sample more). Each rank's gradient is
 * then a mean over fewer or more samples, so it is weighted by its share
 * (ddp_set_share) before the sum: the update is the mean over the whole
 * global batch, the same as with any other world size. */
#ifndef DDPRUN_WORKER_MODEL_DDP_H
#define DDPRUN_WORKER_MODEL_DDP_H

#include <stddef.h>
#include <stdint.h>

#include "worker/comm/devcomm.h"
#include "worker/model/model.h"

typedef struct ddp ddp;

/* Plugs into the model's hooks. bucket bytes 0: the defaults. Collective
 * (every rank calls it alike): where the communicator has memory that its
 * collectives read in place (devcomm's alloc), the model's gradients move
 * there until ddp_destroy. 0, or -errno and err. */
int ddp_create(model *m, devcomm *c, size_t first_bucket_bytes, size_t bucket_bytes, int sync_bn,
               ddp **out, char *err, size_t errlen);
void ddp_destroy(ddp *d);
/* Rank root's parameters and buffers to everyone. */
int ddp_broadcast_model(ddp *d, int root);
/* This rank's share of the global batch (mine of global samples): its
 * gradient is weighted by mine * world / global (1 when the shares are
 * equal), and SyncBatchNorm's counts are all ranks' rows. */
void ddp_set_share(ddp *d, int mine, int global);
/* Called before each backward. */
void ddp_begin(ddp *d);
/* After backward: launches what is left, waits for every bucket, and
 * divides by the world size. */
int ddp_finish(ddp *d);
/* Where the gradients live, for logs: "gradients in shared memory",
 * "gradients in own memory" (the communicator has shared memory but it
 * could not be had: ddp_grad_why says why), or "" (one rank, or a
 * communicator without such memory). */
const char *ddp_grad_memory(const ddp *d);
const char *ddp_grad_why(const ddp *d);
/* The time ddp_finish waited for the all-reduce of the buckets (after
 * backward, which hides the rest), summed, and how many waits: host
 * time, so a step replayed as a CUDA graph, which never calls
 * ddp_finish, adds nothing. */
void ddp_stats(const ddp *d, int64_t *wait_ns, int64_t *waits);
/* Number of buckets and the size of the largest, for logs. */
int ddp_buckets(const ddp *d, size_t *largest_bytes);

#endif

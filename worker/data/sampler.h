/* The distributed sampler: which samples of an epoch each rank takes for
 * each step. Like the data sets, it is a pure function of (seed, epoch,
 * position), never of the rank alone, so the same global batch is the same
 * data however many ranks share it. */
#ifndef DDPRUN_WORKER_DATA_SAMPLER_H
#define DDPRUN_WORKER_DATA_SAMPLER_H

#include <stdint.h>

/* The sampler (torch's DistributedSampler semantics, rank-independent
 * order): an epoch's order is a permutation of 0..n-1 seeded by (seed,
 * epoch) (identity without shuffle); the global batch at position pos is
 * order[pos .. pos + world*batch), and rank r takes order[pos + r + world*j]
 * for j < batch; positions past n wrap around to the start, like
 * DistributedSampler's padding. */
void sampler_epoch_order(int64_t n, uint64_t seed, int epoch, int shuffle, int64_t *order);
void sampler_rank_batch(const int64_t *order, int64_t n, int64_t pos, int world, int rank,
                        int batch, int64_t *idx);
/* Global steps in an epoch of n samples: ceil(n / (world*batch)) (with
 * drop_last: floor). */
int64_t sampler_steps(int64_t n, int world, int batch, int drop_last);

#endif

/* The distributed sampler: which samples each rank trains on at each step.
 * It follows torch's DistributedSampler (one permutation per epoch, ranks
 * interleaved, the tail padded by wrapping around), except that the
 * permutation depends only on (seed, epoch), never on the world size, so a
 * global batch holds the same samples however many ranks share it. */
#include "worker/data/sampler.h"

#include "common/rng.h"

#include <assert.h>

/* The third seed word that marks the shuffle's stream apart from the
 * per-sample streams (augmentation, synthetic data). */
#define SAMPLER_STREAM 0x5A17

void sampler_epoch_order(int64_t n, uint64_t seed, int epoch, int shuffle, int64_t *order) {
    for (int64_t i = 0; i < n; i++) order[i] = i;
    if (!shuffle) return;
    rng_t r;
    rng_seed(&r, seed, (uint64_t)(int64_t)epoch, SAMPLER_STREAM);
    /* Fisher-Yates, from the end: every permutation equally likely. */
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* Rank r's j-th sample sits at global position pos + r + world*j, so that
 * the ranks together cover order[pos .. pos + world*batch) exactly once. */
void sampler_rank_batch(const int64_t *order, int64_t n, int64_t pos, int world, int rank,
                        int batch, int64_t *idx) {
    assert(n > 0 && pos >= 0 && world > 0 && rank >= 0 && rank < world && batch >= 0);
    for (int j = 0; j < batch; j++) {
        int64_t p = pos + rank + (int64_t)world * j;
        idx[j] = order[p % n];
    }
}

int64_t sampler_steps(int64_t n, int world, int batch, int drop_last) {
    assert(n >= 0 && world > 0 && batch > 0);
    int64_t global = (int64_t)world * batch;
    return drop_last ? n / global : (n + global - 1) / global;
}

/* Batch norm's per-channel finalisation, shared by the CPU backend (C) and
 * the CUDA backend's kernel (CUDA C++), so both compute it with the same
 * expressions in the same types: mean and invstd from the sums, and the
 * running statistics updated as PyTorch does (unbiased variance). */
#ifndef DDPRUN_WORKER_BACKEND_BN_MATH_H
#define DDPRUN_WORKER_BACKEND_BN_MATH_H

#include "worker/backend/backend.h"

#ifdef __CUDACC__
#define BN_MATH_FN static inline __host__ __device__
#else
#include <math.h>
#define BN_MATH_FN static inline
#endif

/* Channel j of a->c (backend.h's bn_finalize): a->sum[j] and a->sumsq[j]
 * over a->count rows in, a->mean[j], a->invstd[j] and a->running[j]
 * (mean), a->running[c + j] (variance) out. */
BN_MATH_FN void bn_finalize_channel(int j, const bn_args *a) {
    int c = a->c;
    double count = a->count;
    float eps = a->eps, momentum = a->momentum;
    float *running = a->running;
    double mu = a->sum[j] / count, var = a->sumsq[j] / count - mu * mu;
    if (var < 0) var = 0;
    a->mean[j] = (float)mu;
    a->invstd[j] = (float)(1.0 / sqrt(var + eps));
    double unbiased = count > 1 ? var * count / (count - 1) : var;
    running[j] = (1 - momentum) * running[j] + momentum * (float)mu;
    running[c + j] = (1 - momentum) * running[c + j] + momentum * (float)unbiased;
}

#endif

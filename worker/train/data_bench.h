/* ddp-train data-bench: the input pipeline alone (the data set, its
 * decoding and transforms, the loader's threads, the layout conversion),
 * timed without a model, so a user can tell whether their disk and CPUs
 * can feed their GPUs: "img/s=N" at the end, and per loader thread. It
 * takes the training's options (--data, --data-dir, --image-size,
 * --batch-size, --loader-threads, --seed; --steps N, 50 by default). */
#ifndef DDPRUN_WORKER_TRAIN_DATA_BENCH_H
#define DDPRUN_WORKER_TRAIN_DATA_BENCH_H

#include "worker/train/train_config.h"

/* 0, or 1 after logging what failed. */
int data_bench_run(const train_config *c);

#endif

/* See data_bench.h. */
#include "worker/train/data_bench.h"

#include <errno.h>
#include <stdio.h>

#include "common/clock.h"
#include "common/log.h"
#include "worker/backend/backend.h"
#include "worker/data/dataset.h"
#include "worker/train/loader.h"

/* Batches drawn before the clock starts: the threads' first batches and
 * the files' first reads. */
#define WARMUP 2
#define DEFAULT_STEPS 50

int data_bench_run(const train_config *c) {
    char err[1024];
    dataset_opts o = train_config_data(c, 1);
    dataset *ds = NULL;
    backend *be = NULL;
    loader *l = NULL;
    int rc = dataset_open(&o, &ds, err, sizeof err);
    if (rc == 0) rc = cpu_backend_create(0, 1, &be, err, sizeof err);
    int threads = c->loader_threads >= 0 ? c->loader_threads : 1;
    int64_t steps = c->max_steps > 0 ? c->max_steps : DEFAULT_STEPS, n = 0;
    if (rc == 0) {
        n = dataset_size(ds);
        loader_opts lo = {.ds = ds, .batch = c->batch, .world = 1, .rank = 0, .seed = c->seed,
                          .augment = c->augment, .epochs = 1 << 30, .threads = threads,
                          .depth = 2, .be = be};
        rc = loader_create(&lo, &l, err, sizeof err);
    }
    int epoch = 0;
    int64_t pos = 0, t0 = 0;
    for (int64_t s = 0; rc == 0 && s < steps + WARMUP; s++) {
        if (s == WARMUP) t0 = clock_now_ns();
        const void *x;
        const int32_t *y;
        if (pos + c->batch > n) epoch++, pos = 0;
        rc = loader_get(l, epoch, pos, &x, &y, err, sizeof err);
        pos += c->batch;
    }
    if (rc == 0) {
        double secs = (double)(clock_now_ns() - t0) / 1e9;
        int ch, h, w;
        dataset_shape(ds, &ch, &h, &w);
        double ips = (double)steps * c->batch / secs;
        printf("data-bench: %s, %dx%dx%d, batch %d, %d loader thread%s: %lld batches in %.2f s, "
               "img/s=%.1f (%.1f per thread)\n",
               c->data, ch, h, w, c->batch, threads, threads == 1 ? "" : "s", (long long)steps,
               secs, ips, ips / (threads > 0 ? threads : 1));
    } else {
        log_error("data-bench: %s", err);
    }
    loader_destroy(l);
    if (be) be->ops->destroy(be);
    dataset_close(ds);
    return rc ? 1 : 0;
}

/* See train_config.h. */
#include "worker/train/train_config.h"

#include <stdio.h>
#include <string.h>

dataset_opts train_config_data(const train_config *c, int train) {
    return (dataset_opts){.name = c->data, .dir = c->data_dir[0] ? c->data_dir : NULL,
                          .train = train, .c = c->in_c, .h = c->in_h, .w = c->in_w,
                          .classes = c->classes, .seed = c->seed, .image_size = c->image_size,
                          .image_plain = c->image_plain,
                          .size = train || !c->synthetic_size ? c->synthetic_size
                                                              : c->synthetic_size / 6 + 1};
}

void train_config_defaults(train_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->model, sizeof c->model, "resnet20");
    c->loader_threads = -1;
    c->precision = PRECISION_UNSET;
    snprintf(c->data, sizeof c->data, "fashion-mnist");
    c->in_c = 3, c->in_h = 32, c->in_w = 32;
    c->classes = 10;
    c->epochs = 1;
    c->batch = 128;
    c->lr = (lr_opts){.lr = 0.1, .schedule = SCHED_COSINE, .gamma = 0.1};
    c->momentum = 0.9;
    c->weight_decay = 5e-4;
    c->augment = 1;
    c->keep = 3;
    c->snapshot_every = -1; /* as often as costs at most 1% of the step time */
    c->log_every = 50;
    c->eval = 1;
    c->timeout_s = 600;
    c->step_timeout_s = 600;
    c->warmup_steps = 5;
    c->legacy_local_rank = -1;
}

/* SGD's learning-rate schedule: linear warm-up, then cosine or step
 * decay, optionally scaled linearly with the global batch. (The update
 * itself is the backend's fused sgd over the whole parameter buffer.) */
#ifndef DDPRUN_WORKER_MODEL_OPTIM_H
#define DDPRUN_WORKER_MODEL_OPTIM_H

typedef enum { SCHED_COSINE, SCHED_STEP, SCHED_CONSTANT } lr_schedule;

#define OPTIM_MAX_MILESTONES 16

typedef struct {
    double lr;            /* base learning rate */
    double warmup_epochs; /* linear from 0 to lr over this many epochs */
    lr_schedule schedule;
    double epochs;        /* the run's length, for cosine */
    double gamma;         /* step: factor at each milestone */
    int milestones[OPTIM_MAX_MILESTONES]; /* step: epochs */
    int nmilestones;
} lr_opts;

/* The learning rate at a point of training, `epoch` counting fractions
 * (global step / steps per epoch). */
double lr_at(const lr_opts *o, double epoch);

/* --lr-scale: lr * global_batch / reference_batch (Goyal et al.). */
double lr_scaled(double lr, int global_batch, int reference_batch);

#endif

/* One rank's metrics for the agent's /metrics: when the launcher's agent
 * exports metrics it names a directory in DDPRUN_METRICS_DIR, and each
 * rank keeps its series there as rank_<RANK>.prom in Prometheus' text
 * format, labelled rank and local_rank: the step, this rank's loss and
 * accuracy, images per second, step, all-reduce and checkpoint times, the
 * gradient bytes it all-reduced. The file is replaced atomically (a
 * temporary file renamed over it) at most once a second; between writes a
 * step costs a few additions, and the clock read the step's timing makes
 * anyway. Without DDPRUN_METRICS_DIR everything here does nothing. */
#ifndef DDPRUN_WORKER_TRAIN_RANK_METRICS_H
#define DDPRUN_WORKER_TRAIN_RANK_METRICS_H

#include <stdint.h>

typedef struct {
    char path[1024];      /* rank_<N>.prom; "" when off */
    int rank, local_rank;
    int64_t last_write_ns; /* 0: never written */
    /* what a step reports */
    int64_t global_step;
    int epoch;
    double loss, acc;     /* this rank's last batch */
    int64_t images;       /* this rank's, in this process */
    int64_t images_at_write;
    double images_per_s;  /* over the time between the last two writes */
    int64_t steps;
    double step_s;        /* sum over steps */
    int64_t allreduce_ns; /* DDP's wait for the gradients' all-reduce, summed */
    int64_t allreduce_waits;
    uint64_t allreduce_bytes;
    int64_t ckpts;
    double ckpt_s;
} rank_metrics;

/* A finished step as this rank saw it. */
typedef struct {
    int64_t global_step;
    int epoch;
    int images;              /* this rank's batch */
    double loss, acc;        /* this rank's batch: mean loss, accuracy */
    int64_t allreduce_ns;    /* DDP's totals so far (ddp_stats) */
    int64_t allreduce_waits;
    uint64_t allreduce_bytes; /* the gradient bytes this step all-reduced */
} rank_step;

/* Reads DDPRUN_METRICS_DIR; off without it. */
void rank_metrics_init(rank_metrics *rm, int rank, int local_rank);
/* After a step that took step_ns and ended at now_ns (clock_now_ns);
 * writes the file when a second has passed since the last write. */
void rank_metrics_step(rank_metrics *rm, int64_t now_ns, int64_t step_ns, const rank_step *s);
/* A checkpoint written in ns. */
void rank_metrics_checkpoint(rank_metrics *rm, int64_t ns);
/* Writes the file now (at the end of the run). */
void rank_metrics_flush(rank_metrics *rm, int64_t now_ns);

#endif

/* One rank's training run, as the files of worker/train share it: the
 * parts it is set up from (trainer.c), where it stands (saved in
 * checkpoints by snapshot.c), the step's buffers and recording (step.c),
 * and its progress output (progress.c). Private to worker/train/.
 *
 * Errors, one convention: every function returns 0 or a negative errno.
 * The first function that sees a failure reports it with trainer_fail
 * (one log line, the error file for the agent) and returns its code; its
 * callers pass the code up without reporting again. train_run turns any
 * code into exit status 1 (143 after SIGTERM), and reports one itself if
 * nothing did. */
#ifndef DDPRUN_WORKER_TRAIN_TRAINER_H
#define DDPRUN_WORKER_TRAIN_TRAINER_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/dir_lock.h"
#include "store/store_thread.h"
#include "worker/backend/backend.h"
#include "worker/comm/comm.h"
#include "worker/comm/devcomm.h"
#include "worker/data/dataset.h"
#include "worker/model/ddp.h"
#include "worker/model/model.h"
#include "worker/train/dist_env.h"
#include "worker/train/snapshot_writer.h"
#include "worker/train/loader.h"
#include "worker/train/rank_metrics.h"
#include "worker/train/sample_log.h"
#include "worker/train/watchdog.h"
#include "worker/train/train_config.h"

/* Where the run stands: what a checkpoint saves and a resume restores. */
typedef struct {
    int epoch;
    int64_t pos;          /* samples of this epoch already consumed, globally */
    int64_t global_step;
    int64_t optimizer_steps;
    int global_batch;     /* 0 until chosen (or taken from a checkpoint) */
} train_position;

/* One step's inputs in host and backend memory. */
typedef struct {
    int64_t *idx;           /* an evaluation batch's samples */
    float *x_nchw, *x_host; /* an evaluation batch as the data set gives it; as NHWC (or bf16) */
    void *x;                /* the model's input, on the backend */
    int32_t *y;             /* an evaluation batch's labels */
    loader *loader;         /* the training batches, built ahead */
    const int32_t *y_step;  /* the training step's labels, in the loader's memory */
    float *lr_host;         /* the step's learning rate in alloc_host memory (upload_async) */
    float *lr;              /* the step's learning rate, on the backend */
    int fixed_ready;        /* --fixed-batch: x and y hold the one batch */
    jpeg_decoder *jpeg;     /* --decode gpu: the device's decoder, else NULL */
    unsigned char *jpeg_ok; /* per sample: the decoder decoded it */
    void *x_redo;           /* alloc_host: samples the decoder could not, drawn on the host */
    struct {                /* --decode gpu: the next step's batch, got from the loader and */
        int ready;          /* its decoding begun while this step runs (step.c) */
        int epoch;
        int64_t pos;
        const void *x;
        const int32_t *y;
    } ahead;
} train_batch;

/* Gradient accumulation: where the job shrank and a rank's share of the
 * global batch is more than --batch-size, the rank trains it in k
 * micro-batches of at most that many, every rank the same k (SyncBN's
 * all-reduces must pair up), and sums their gradients, each weighted by
 * its share of the rank's batch, before the all-reduce: the same update,
 * in no more memory than the job started with. Micro-batch j holds the
 * rank's samples j, j + k, ...: where the world size went from W to W/k,
 * micro-batch j of rank r holds what rank r + j * W/k held, so batch norm
 * normalises over the same groups as before. */
typedef struct {
    int k;              /* micro-batches a step (1: none) */
    int max;            /* the largest one's samples (the model's activations) */
    float *acc;         /* on the backend: their gradients summed (fp32, nparam) */
    int32_t *labels;    /* on the backend: the step's labels in micro-batch order */
    int32_t *y_host;    /* alloc_host: the same on the host, for upload_async */
    backend_loss *loss; /* on the backend: each micro-batch's loss */
    int strided;        /* the inputs are in micro-batch order (not: --decode gpu's, in
                         * the loader's order, each micro-batch a run of them) */
} train_micro;

/* The step recorded once (a CUDA graph) and replayed. */
typedef struct {
    int eager_steps;   /* steps run without a recording, in this process */
    int recorded;      /* the backend holds a recording of the step */
    int recordings;    /* made so far (the first is logged) */
    int failed;        /* the last recording failed */
} train_recording;

/* How long this process took to start training (CLOCK_MONOTONIC marks, 0
 * until reached): what a restart costs before its first step, said once
 * by rank 0. */
typedef struct {
    int64_t begin;     /* train_run began */
    int64_t data;      /* the job's environment read, its data sets opened */
    int64_t backend;   /* the backend made (a GPU's context, cuDNN, cuBLAS) */
    int64_t model;     /* the model's memory (its weights are drawn later), while
                          NCCL sets itself up */
    int64_t host_comm; /* the host communicator set up */
    int64_t comm;      /* and DDP (NCCL's set-up goes on: its first collective
                          waits for it) */
    int64_t resumed;   /* the newest state loaded (or none found) */
    int64_t ready;     /* weights drawn or broadcast, the first batch's memory */
    int said;       /* the first step's line was written */
} train_startup;

/* Rank 0's output: the progress lines, the bar, the metrics file, img/s. */
typedef struct {
    FILE *metrics;
    int tty, bar_shown;          /* stdout is a terminal; the bar is on it */
    double t_start, t_measure;   /* clock_now_s() at start, after the warm-up */
    int64_t measure_from_step;
    int64_t measured_images;     /* since t_measure */
    int64_t images;              /* every step's, in this process */
} train_progress;

typedef struct {
    const train_config *cfg;
    dist_env env;
    watchdog wd;         /* the launcher's worker watchdog (--step-timeout) */
    store_thread *store; /* rank 0's, when no agent hosts one */
    backend *be;
    dataset *train, *test;
    model *m;
    comm *comm;          /* host data: checkpoint headers, the step's loss */
    coll_record *coll;   /* DDPRUN_COLL_RECORD: where this rank stands in its collectives */
    devcomm *dcomm;      /* backend memory: gradients, weights, SyncBN */
    char comm_prefix[96]; /* the communicators' keys in the store (this attempt's) */
    ddp *ddp;
    int batch;           /* this rank's share of the global batch */
    int batch_max;       /* the largest share (evaluation batches, buffers) */
    train_micro micro;   /* k > 1: this rank's share in micro-batches */
    int64_t n;           /* training samples */
    int64_t steps_per_epoch;
    train_position at;
    train_batch buf;
    train_recording rec;
    train_startup startup;
    train_progress progress;
    rank_metrics rm;     /* DDPRUN_METRICS_DIR: this rank's series for the agent */
    sample_log samples;  /* --sample-log: which samples each step trained */
    dir_lock ckpt_lock;  /* this node's hold on --ckpt-dir (snapshot_lock, snapshot_save) */
    struct {
        snapshot_writer *w; /* this rank keeps the node's snapshots (local rank 0) */
        const char *dir;    /* where: --snapshot-dir, or the disk's when memory is full */
        int64_t taken, ns;  /* how many, and the time the steps spent on them */
        int64_t skipped;    /* the last one was still being written */
        int64_t last;       /* the global step of the last one */
        int64_t every;      /* the interval in use, in steps */
        int64_t step_ns;    /* a step's time, smoothed (for the automatic interval) */
    } mem;               /* snapshots in this node's memory (snapshot_keep) */
    struct {
        snapshot_writer *w; /* this rank writes the node's --ckpt-dir (local rank 0) */
        int refused;        /* the directory is another process's: said once */
        int foreign;        /* not this job's: another job's files or lock, or unusable */
        char why[3000];     /* why, for the messages */
        int64_t step;       /* handed over and not yet reported written, or -1 */
        int epoch;          /* its epoch */
        int64_t handed;     /* the last step handed to the writer in this process, or -1 */
        int64_t written;    /* the last step reported written, or -1 */
        int64_t found;      /* local rank 0: the newest step in this node's --ckpt-dir
                             * when this process started (-1: none) */
    } disk;              /* checkpoints in each node's --ckpt-dir (snapshot_save) */
    int64_t buffers_step; /* the step whose batch-norm statistics are rank 0's, or -1 */
    char *header_fixed;  /* the checkpoint header's fixed part, made once (snapshot.c) */
    char err[1024];      /* the first failure's message */
    int stopped;         /* a failure came after SIGTERM: a stop, not an error */
} trainer;

/* The stop signal received (SIGTERM, SIGUSR1, SIGUSR2), 0 before: every
 * rank stops after the step all of them agree on. */
extern volatile sig_atomic_t trainer_stop_requested;
/* Set by SIGTERM too: when the host communicator gives up on a collective
 * that does not finish (comm_opts.abort_at_ns). */
extern _Atomic int64_t trainer_abort_at_ns;

/* Reports a failure (see above) and returns rc, which must be negative.
 * After SIGTERM a failure is a stop: logged as a warning, no error file,
 * and t->stopped set. */
int trainer_fail(trainer *t, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Why a collective failed: what the communicator said (comm_error,
 * devcomm_error: it names the peer), else the error code's words. */
static inline const char *trainer_why(const char *said, int rc) {
    return said[0] ? said : strerror(-rc);
}

/* The job (ranks, store), the data, the backend, model and communicators. */
int trainer_setup(trainer *t);
/* The per-rank batch: --batch-size, or, when resuming a run that had
 * another world size, whatever keeps its global batch; and its buffers. */
int trainer_setup_batch(trainer *t);
void trainer_cleanup(trainer *t);

#endif

/* ddp-train's configuration: what its flags fill in (worker/main.c's
 * option table), its defaults, and the data set it names. Read by the run
 * (train.c) and the trainer's set-up (trainer.c). */
#ifndef DDPRUN_WORKER_TRAIN_TRAIN_CONFIG_H
#define DDPRUN_WORKER_TRAIN_TRAIN_CONFIG_H

#include <stdint.h>

#include "worker/backend/backend.h"
#include "worker/data/dataset.h"
#include "worker/model/optim.h"

/* --precision not given: tf32 on a GPU, fp32 on the CPU (trainer.c). */
#define PRECISION_UNSET ((backend_precision)-1)

typedef struct {
    char model[32];        /* --model */
    char data[32];         /* --data: a format's name (worker/data/ds_table.c) */
    char data_dir[1024];   /* --data-dir */
    int in_c, in_h, in_w;  /* --input-shape (synthetic; else from the data) */
    int classes;           /* --classes (synthetic) */
    int64_t synthetic_size; /* --synthetic-size */
    int image_size;        /* --image-size (imagefolder) */
    int image_plain;       /* --image-recipe plain (imagefolder; 0: resnet) */
    int skip_bad;          /* --skip-bad-images */
    int decode_gpu;        /* --decode gpu: JPEGs decoded on the training device */
    double decode_share;   /* --decode-share: the fraction of them (0: unset, all) */
    int epochs;            /* --epochs */
    int64_t max_steps;     /* --max-steps: stop after this many global steps (0: none) */
    int batch;             /* --batch-size, per rank */
    lr_opts lr;            /* --lr --warmup-epochs --schedule --lr-gamma --lr-milestones */
    int lr_scale_batch;    /* --lr-scale-batch: scale lr by global batch / this (0: off) */
    double momentum;       /* --momentum */
    double weight_decay;   /* --weight-decay */
    int nesterov;          /* --nesterov */
    int decay_all;         /* --decay-bn-and-bias */
    double label_smoothing; /* --label-smoothing */
    int augment;           /* --augment / --no-augment */
    uint64_t seed;         /* --seed */
    char ckpt_dir[1024];   /* --ckpt-dir ("" = no checkpoints) */
    int64_t ckpt_every;    /* --ckpt-every steps (0: only at epoch ends) */
    int keep;              /* --keep */
    char snapshot_dir[1024]; /* --snapshot-dir, or DDPRUN_SNAPSHOT_DIR: this node's memory */
                           /* ("" = none) */
    char snapshot_disk_dir[1024]; /* DDPRUN_SNAPSHOT_DISK_DIR: where snapshots go when the */
                           /* memory is full ("" = nowhere: they stop) */
    int64_t snapshot_every; /* --snapshot-every steps (0: none; -1: as often as costs at */
                           /* most 1% of the step time) */
    char metrics[1024];    /* --metrics FILE */
    char sample_log[1024]; /* --sample-log DIR ("" = none): sample_log.h */
    int sync_bn;           /* --sync-bn */
    int log_every;         /* --log-every steps */
    int threads;           /* --threads (0: OMP_NUM_THREADS or all cores) */
    int loader_threads;    /* --loader-threads (-1: chosen from the cores and the device) */
    int eval;              /* --eval / --no-eval at epoch ends */
    int reference;         /* --reference-kernels (slow; tests) */
    backend_kind device;   /* --device (BACKEND_AUTO by default) */
    backend_precision precision; /* --precision; PRECISION_UNSET: by the device */
    int no_shm;            /* --no-shm */
    int no_cuda_graph;     /* --no-cuda-graph: run every step op by op */
    int fixed_batch;       /* --fixed-batch: one batch, made once, at every step */
    int cudnn_benchmark;   /* --cudnn-benchmark: time convolution algorithms */
    char cudnn_cache[1024]; /* --cudnn-cache: "" = the default, "none" = none */
    int overlap_report;    /* --overlap-report: time the second step's all-reduces on the GPU */
    int unfused;           /* --unfused: no fused residual sums (model_spec's) */
    int64_t bucket_bytes;  /* --bucket-mb */
    int timeout_s;         /* --timeout: a collective longer than this fails */
    int step_timeout_s;    /* --step-timeout: the launcher's watchdog kills a longer step */
    int warmup_steps;      /* --throughput-warmup: steps left out of img/s */
    int legacy_local_rank; /* --local_rank (torch.distributed.launch) */
} train_config;

/* Defaults: resnet20 on Fashion-MNIST, 1 epoch, batch 128, lr 0.1 cosine,
 * momentum 0.9, weight decay 5e-4 (not on BN and bias), seed 0. */
void train_config_defaults(train_config *c);

/* The data set the options name: its training split (train 1) or its test
 * split (train 0, synthetic: a sixth of the training size, plus one). */
dataset_opts train_config_data(const train_config *c, int train);

#endif

/* ddp-train: data-parallel ResNet training in C, one process per rank,
 * started by ddprun, torchrun, mpirun or srun (or alone).
 *
 *   ddp-train [options]            train (see --help)
 *   ddp-train inspect PATH         print a checkpoint's header as JSON
 */
#include <errno.h>
#include <math.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "worker/train/checkpoint.h"
#include "worker/train/train.h"

static const char usage[] =
    "usage: ddp-train [options]\n"
    "       ddp-train inspect CHECKPOINT|DIRECTORY\n"
    "\n"
    "Data-parallel ResNet training. Run one process per rank under ddprun, torchrun,\n"
    "mpirun or srun (ranks come from their environment), or alone.\n"
    "\n"
    "Model and data:\n"
    "  --model NAME            resnet20|32|44|56|110 (CIFAR-style) or resnet18|34|50|101|152\n"
    "                          (default resnet20)\n"
    "  --data NAME             fashion-mnist (default), mnist, cifar10 or synthetic\n"
    "  --data-dir DIR          where the data set's files are (fashion-mnist default:\n"
    "                          /usr/share/datasets/fashion-mnist)\n"
    "  --input-shape CxHxW     synthetic images' shape (default 3x32x32)\n"
    "  --classes N             synthetic classes (default 10)\n"
    "  --synthetic-size N      synthetic training samples (default 60000)\n"
    "  --no-augment            no random crop and flip\n"
    "\n"
    "Training:\n"
    "  --epochs N              (default 1)     --max-steps N   stop after N global steps\n"
    "  --batch-size N          per rank (default 128)\n"
    "  --lr X                  (default 0.1)   --lr-scale-batch B: lr * global batch / B\n"
    "  --warmup-epochs X       linear warm-up (default 0)\n"
    "  --schedule S            cosine (default), step or constant\n"
    "  --lr-milestones E,E,... step schedule's epochs   --lr-gamma X (default 0.1)\n"
    "  --momentum X            (default 0.9)   --nesterov\n"
    "  --weight-decay X        (default 5e-4; not on batch norm and biases unless\n"
    "                          --decay-bn-and-bias)\n"
    "  --label-smoothing X     (default 0)\n"
    "  --sync-bn               batch norm statistics over all ranks\n"
    "  --seed N                (default 0)\n"
    "  --no-eval               skip the test set at epoch ends\n"
    "\n"
    "Checkpoints and output:\n"
    "  --ckpt-dir DIR          resume from the newest valid checkpoint here, and write there\n"
    "  --ckpt-every N          also every N steps (default: epoch ends only)\n"
    "  --keep N                checkpoints kept (default 3)\n"
    "  --metrics FILE          one JSON line per step (rank 0)\n"
    "  --log-every N           progress line every N steps (default 50)\n"
    "  --throughput-warmup N   steps left out of the final img/s (default 5)\n"
    "\n"
    "Runtime:\n"
    "  --device D              auto (default: a GPU when this build has CUDA and one is\n"
    "                          visible, else the CPU), cpu or cuda; on a GPU each rank\n"
    "                          takes GPU LOCAL_RANK mod the GPUs visible\n"
    "  --precision P           fp32 (default), tf32 (GPU only) or bf16 (mixed precision;\n"
    "                          on the CPU emulated, for checking numerics)\n"
    "  --no-cuda-graph         on a GPU, run every step op by op instead of replaying\n"
    "                          a CUDA graph of it (recorded from the third step on)\n"
    "  --cudnn-benchmark       on a GPU, choose convolution algorithms by timing them\n"
    "                          (torch.backends.cudnn.benchmark): faster, but runs may\n"
    "                          choose differently and differ in the last bits\n"
    "  --threads N             compute threads (default: OMP_NUM_THREADS, else all cores)\n"
    "  --timeout S             a collective taking longer fails the rank (default 600)\n"
    "  --bucket-mb N           gradient bucket size after the first 1 MiB (default 25)\n"
    "  --no-shm                TCP between ranks on one host too\n"
    "  --reference-kernels     plain-C convolution instead of oneDNN (slow; for tests)\n"
    "  --local_rank N          accepted from torch.distributed.launch\n"
    "\n"
    "SIGTERM: the current step finishes, a checkpoint is written, and ddp-train exits 0.\n";

enum {
    O_MODEL = 256, O_DATA, O_DATA_DIR, O_SHAPE, O_CLASSES, O_SYNTH, O_NO_AUG, O_EPOCHS, O_MAX_STEPS,
    O_BATCH, O_LR, O_LR_SCALE, O_WARMUP, O_SCHEDULE, O_MILESTONES, O_GAMMA, O_MOMENTUM,
    O_NESTEROV, O_WD, O_DECAY_ALL, O_SMOOTH, O_SYNC_BN, O_SEED, O_NO_EVAL, O_CKPT_DIR,
    O_CKPT_EVERY, O_KEEP, O_METRICS, O_LOG_EVERY, O_THREADS, O_TIMEOUT, O_BUCKET, O_NO_SHM,
    O_REFERENCE, O_LOCAL_RANK, O_TPUT_WARMUP, O_DEVICE, O_PRECISION, O_NO_GRAPH, O_BENCHMARK, O_HELP,
};

static const struct option options[] = {
    {"model", 1, 0, O_MODEL}, {"data", 1, 0, O_DATA}, {"data-dir", 1, 0, O_DATA_DIR},
    {"input-shape", 1, 0, O_SHAPE}, {"classes", 1, 0, O_CLASSES},
    {"synthetic-size", 1, 0, O_SYNTH}, {"no-augment", 0, 0, O_NO_AUG},
    {"epochs", 1, 0, O_EPOCHS}, {"max-steps", 1, 0, O_MAX_STEPS},
    {"batch-size", 1, 0, O_BATCH}, {"lr", 1, 0, O_LR}, {"lr-scale-batch", 1, 0, O_LR_SCALE},
    {"warmup-epochs", 1, 0, O_WARMUP}, {"schedule", 1, 0, O_SCHEDULE},
    {"lr-milestones", 1, 0, O_MILESTONES}, {"lr-gamma", 1, 0, O_GAMMA},
    {"momentum", 1, 0, O_MOMENTUM}, {"nesterov", 0, 0, O_NESTEROV},
    {"weight-decay", 1, 0, O_WD}, {"decay-bn-and-bias", 0, 0, O_DECAY_ALL},
    {"label-smoothing", 1, 0, O_SMOOTH}, {"sync-bn", 0, 0, O_SYNC_BN}, {"seed", 1, 0, O_SEED},
    {"no-eval", 0, 0, O_NO_EVAL}, {"ckpt-dir", 1, 0, O_CKPT_DIR},
    {"ckpt-every", 1, 0, O_CKPT_EVERY}, {"keep", 1, 0, O_KEEP}, {"metrics", 1, 0, O_METRICS},
    {"log-every", 1, 0, O_LOG_EVERY}, {"threads", 1, 0, O_THREADS},
    {"timeout", 1, 0, O_TIMEOUT}, {"bucket-mb", 1, 0, O_BUCKET}, {"no-shm", 0, 0, O_NO_SHM},
    {"reference-kernels", 0, 0, O_REFERENCE}, {"local_rank", 1, 0, O_LOCAL_RANK},
    {"local-rank", 1, 0, O_LOCAL_RANK}, {"throughput-warmup", 1, 0, O_TPUT_WARMUP},
    {"device", 1, 0, O_DEVICE}, {"precision", 1, 0, O_PRECISION},
    {"no-cuda-graph", 0, 0, O_NO_GRAPH}, {"cudnn-benchmark", 0, 0, O_BENCHMARK},
    {"help", 0, 0, O_HELP}, {0, 0, 0, 0},
};

static int bad(const char *flag, const char *value, const char *want) {
    fprintf(stderr, "ddp-train: --%s: '%s' is not %s (see --help)\n", flag, value, want);
    return -EINVAL;
}

/* A number in [lo, hi]; a count (integral) must also be whole: 2.5
 * epochs is an error, not 2. */
static int parse_number(const char *flag, const char *s, double lo, double hi, int integral,
                        double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi || (integral && v != floor(v))) {
        char want[96];
        snprintf(want, sizeof want, integral ? "a whole number from %.0f to %.0f"
                                             : "a number from %g to %g", lo, hi);
        return bad(flag, s, want);
    }
    *out = v;
    return 0;
}

static int num(const char *flag, const char *s, double lo, double hi, double *out) {
    return parse_number(flag, s, lo, hi, 0, out);
}

static int whole(const char *flag, const char *s, double lo, double hi, double *out) {
    return parse_number(flag, s, lo, hi, 1, out);
}

static int copy_str(char *dst, size_t n, const char *flag, const char *s) {
    if (strlen(s) >= n) return bad(flag, s, "short enough");
    snprintf(dst, n, "%s", s);
    return 0;
}

static int parse_list(train_config *c, const char *s) {
    c->lr.nmilestones = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || c->lr.nmilestones == OPTIM_MAX_MILESTONES)
            return bad("lr-milestones", s, "a list of epochs like 100,150");
        c->lr.milestones[c->lr.nmilestones++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return bad("lr-milestones", s, "a list of epochs like 100,150");
    }
    return 0;
}

/* One option; 0, 1 for --help, or -EINVAL (message printed). */
static int apply(train_config *c, int opt, const char *a) {
    double v;
    int rc = 0;
    switch (opt) {
    case O_MODEL: return copy_str(c->model, sizeof c->model, "model", a);
    case O_DATA:
        if (strcmp(a, "fashion-mnist") && strcmp(a, "mnist") && strcmp(a, "cifar10") && strcmp(a, "synthetic"))
            return bad("data", a, "fashion-mnist, mnist, cifar10 or synthetic");
        return copy_str(c->data, sizeof c->data, "data", a);
    case O_DATA_DIR: return copy_str(c->data_dir, sizeof c->data_dir, "data-dir", a);
    case O_SHAPE:
        if (sscanf(a, "%dx%dx%d", &c->in_c, &c->in_h, &c->in_w) != 3 || c->in_c < 1 ||
            c->in_h < 1 || c->in_w < 1 || c->in_c > 64 || c->in_h > 4096 || c->in_w > 4096)
            return bad("input-shape", a, "CxHxW with positive sizes, like 3x32x32");
        return 0;
    case O_CLASSES: rc = whole("classes", a, 2, 100000, &v), c->classes = (int)v; break;
    case O_SYNTH: rc = whole("synthetic-size", a, 1, 1e9, &v), c->synthetic_size = (int64_t)v; break;
    case O_NO_AUG: c->augment = 0; break;
    case O_EPOCHS: rc = whole("epochs", a, 1, 1e6, &v), c->epochs = (int)v; break;
    case O_MAX_STEPS: rc = whole("max-steps", a, 1, 1e15, &v), c->max_steps = (int64_t)v; break;
    case O_BATCH: rc = whole("batch-size", a, 1, 1 << 20, &v), c->batch = (int)v; break;
    case O_LR: rc = num("lr", a, 0, 1e3, &c->lr.lr); break;
    case O_LR_SCALE: rc = whole("lr-scale-batch", a, 1, 1 << 24, &v), c->lr_scale_batch = (int)v; break;
    case O_WARMUP: rc = num("warmup-epochs", a, 0, 1e6, &c->lr.warmup_epochs); break;
    case O_SCHEDULE:
        if (!strcmp(a, "cosine")) c->lr.schedule = SCHED_COSINE;
        else if (!strcmp(a, "step")) c->lr.schedule = SCHED_STEP;
        else if (!strcmp(a, "constant")) c->lr.schedule = SCHED_CONSTANT;
        else return bad("schedule", a, "cosine, step or constant");
        return 0;
    case O_MILESTONES: return parse_list(c, a);
    case O_GAMMA: rc = num("lr-gamma", a, 0, 1, &c->lr.gamma); break;
    case O_MOMENTUM: rc = num("momentum", a, 0, 1, &c->momentum); break;
    case O_NESTEROV: c->nesterov = 1; break;
    case O_WD: rc = num("weight-decay", a, 0, 1, &c->weight_decay); break;
    case O_DECAY_ALL: c->decay_all = 1; break;
    case O_SMOOTH: rc = num("label-smoothing", a, 0, 0.99, &c->label_smoothing); break;
    case O_SYNC_BN: c->sync_bn = 1; break;
    case O_SEED: rc = whole("seed", a, 0, 9e15, &v), c->seed = (uint64_t)v; break;
    case O_NO_EVAL: c->eval = 0; break;
    case O_CKPT_DIR: return copy_str(c->ckpt_dir, sizeof c->ckpt_dir, "ckpt-dir", a);
    case O_CKPT_EVERY: rc = whole("ckpt-every", a, 1, 1e15, &v), c->ckpt_every = (int64_t)v; break;
    case O_KEEP: rc = whole("keep", a, 1, 1e6, &v), c->keep = (int)v; break;
    case O_METRICS: return copy_str(c->metrics, sizeof c->metrics, "metrics", a);
    case O_LOG_EVERY: rc = whole("log-every", a, 1, 1e9, &v), c->log_every = (int)v; break;
    case O_THREADS: rc = whole("threads", a, 1, 4096, &v), c->threads = (int)v; break;
    case O_TIMEOUT: rc = whole("timeout", a, 1, 1e6, &v), c->timeout_s = (int)v; break;
    case O_BUCKET: rc = whole("bucket-mb", a, 1, 4096, &v), c->bucket_bytes = (int64_t)v << 20; break;
    case O_NO_SHM: c->no_shm = 1; break;
    case O_NO_GRAPH: c->no_cuda_graph = 1; break;
    case O_BENCHMARK: c->cudnn_benchmark = 1; break;
    case O_REFERENCE: c->reference = 1; break;
    case O_LOCAL_RANK: rc = whole("local_rank", a, 0, 1e6, &v), c->legacy_local_rank = (int)v; break;
    case O_TPUT_WARMUP: rc = whole("throughput-warmup", a, 0, 1e9, &v), c->warmup_steps = (int)v; break;
    case O_DEVICE:
        if (!strcmp(a, "auto")) c->device = BACKEND_AUTO;
        else if (!strcmp(a, "cpu")) c->device = BACKEND_CPU;
        else if (!strcmp(a, "cuda") || !strcmp(a, "gpu")) c->device = BACKEND_CUDA;
        else return bad("device", a, "auto, cpu or cuda");
        return 0;
    case O_PRECISION:
        if (!strcmp(a, "fp32")) c->precision = PRECISION_FP32;
        else if (!strcmp(a, "tf32")) c->precision = PRECISION_TF32;
        else if (!strcmp(a, "bf16")) c->precision = PRECISION_BF16;
        else return bad("precision", a, "fp32, tf32 or bf16");
        return 0;
    case O_HELP: fputs(usage, stdout); return 1;
    default: return -EINVAL;
    }
    return rc;
}

static int parse(int argc, char **argv, train_config *c) {
    train_config_defaults(c);
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (opt == 'h') opt = O_HELP;
        if (opt == ':') {
            fprintf(stderr, "ddp-train: %s needs a value (see --help)\n", argv[optind - 1]);
            return -EINVAL;
        }
        if (opt == '?') {
            fprintf(stderr, "ddp-train: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return -EINVAL;
        }
        int rc = apply(c, opt, optarg);
        if (rc) return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "ddp-train: unexpected argument '%s' (see --help)\n", argv[optind]);
        return -EINVAL;
    }
    return 0;
}

static int inspect(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: ddp-train inspect CHECKPOINT|DIRECTORY\n");
        return 2;
    }
    char err[1024];
    if (ckpt_inspect(argv[2], stdout, err, sizeof err) != 0) {
        fprintf(stderr, "ddp-train: %s\n", err);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    log_init("ddp-train");
    if (argc >= 2 && strcmp(argv[1], "inspect") == 0) return inspect(argc, argv);
    train_config c;
    int rc = parse(argc, argv, &c);
    if (rc == 1) return 0;
    if (rc) return 2;
    return train_run(&c);
}

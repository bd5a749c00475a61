/* ddp-train: data-parallel ResNet training in C, one process per rank,
 * started by ddprun, torchrun, mpirun or srun (or alone).
 *
 *   ddp-train [options]            train (see --help)
 *   ddp-train inspect PATH         print a checkpoint's header as JSON
 *   ddp-train plot METRICS         draw a --metrics file's training curve
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/build_info.h"
#include "common/ddprun_env.h"
#include "common/log.h"
#include "common/opts.h"
#include "worker/data/dataset.h"
#include "worker/model/arch.h"
#include "worker/plot/plot.h"
#include "worker/train/checkpoint.h"
#include "worker/train/data_bench.h"
#include "worker/train/train.h"

/* OPTS_CHOICE writes an int; these enums are stored through it. */
_Static_assert(sizeof(backend_kind) == sizeof(int), "backend_kind is not an int");
_Static_assert(sizeof(backend_precision) == sizeof(int), "backend_precision is not an int");
_Static_assert(sizeof(lr_schedule) == sizeof(int), "lr_schedule is not an int");

static const char usage_head[] =
    "usage: ddp-train [options]\n"
    "       ddp-train inspect CHECKPOINT|DIRECTORY\n"
    "       ddp-train plot METRICS [-o FILE] [--size WxH] [--title TEXT] [--refresh S]\n"
    "       ddp-train data-bench [options] [--steps N]   the input pipeline alone: img/s\n"
    "\n"
    "Data-parallel ResNet training. Run one process per rank under ddprun, torchrun,\n"
    "mpirun or srun (ranks come from their environment), or alone. Options are\n"
    "spelled out in full (--a-b or --a_b), with --opt VALUE or --opt=VALUE.\n"
    "\n";

static const char usage_tail[] =
    "\n"
    "SIGTERM: the current step finishes, a checkpoint is written, and ddp-train exits 0.\n";

/* The most names one table (data sets, models) may hold here, and the
 * width of a help text's lines (they start in column 28 of 80). */
#define MAX_NAMES 64
#define HELP_WIDTH 52
static const opts_choice schedules[] = {
    {"cosine", SCHED_COSINE}, {"step", SCHED_STEP}, {"constant", SCHED_CONSTANT}, {NULL, 0}};
static const opts_choice recipes[] = {{"resnet", 0}, {"plain", 1}, {NULL, 0}};
static const opts_choice decoders[] = {{"cpu", 0}, {"gpu", 1}, {NULL, 0}};
static const opts_choice devices[] = {{"auto", BACKEND_AUTO}, {"cpu", BACKEND_CPU},
                                      {"cuda", BACKEND_CUDA}, {"gpu", BACKEND_CUDA}, {NULL, 0}};
static const opts_choice precisions[] = {
    {"fp32", PRECISION_FP32}, {"tf32", PRECISION_TF32}, {"bf16", PRECISION_BF16}, {NULL, 0}};

static train_config *config_of(const opts_arg *a) { return a->ctx; }

/* A name table's names (name(0) up to the first NULL) as an option's
 * choices, ending with {NULL, 0}: what the option takes is what the
 * table holds, and its error says so. */
static void choices_of(const char *(*name)(size_t), opts_choice *out, size_t max) {
    size_t i = 0;
    for (; name(i) && i + 1 < max; i++) out[i] = (opts_choice){name(i), 0};
    assert(!name(i)); /* MAX_NAMES is too small for the table */
    out[i] = (opts_choice){NULL, 0};
}

/* "a (default), b, c or d": a table's names for a help text, the default
 * marked, a line broken before a name that would take it (and the
 * separator after the name, which may end it) past HELP_WIDTH. */
static const char *names_help(const char *(*name)(size_t), const char *dflt, char *buf,
                              size_t len) {
    size_t n = 0, col = 0;
    buf[0] = '\0';
    for (size_t i = 0; name(i) && n < len; i++) {
        const char *sep = i == 0 ? "" : name(i + 1) ? ", " : " or ";
        const char *mark = strcmp(name(i), dflt) == 0 ? " (default)" : "";
        size_t item = strlen(name(i)) + strlen(mark);
        size_t next = !name(i + 1) ? 0 : !name(i + 2) ? strlen(" or") : strlen(",");
        if (i > 0 && col + strlen(sep) + item + next > HELP_WIDTH) {
            /* The separator, less its last space, ends the line. */
            n += (size_t)snprintf(buf + n, len - n, "%.*s\n", (int)strlen(sep) - 1, sep);
            sep = "", col = 0;
        }
        if (n < len) n += (size_t)snprintf(buf + n, len - n, "%s%s%s", sep, name(i), mark);
        col += strlen(sep) + item;
    }
    return buf;
}

/* --input-shape CxHxW, the whole value. */
static int apply_shape(const opts_arg *a) {
    train_config *c = config_of(a);
    int n = 0;
    if (sscanf(a->val, "%dx%dx%d%n", &c->in_c, &c->in_h, &c->in_w, &n) != 3 || a->val[n] ||
        c->in_c < 1 || c->in_h < 1 || c->in_w < 1 || c->in_c > 64 || c->in_h > 4096 ||
        c->in_w > 4096)
        return opts_bad(a, "CxHxW with positive sizes, like 3x32x32");
    return 0;
}

/* --lr-milestones E,E,...: epochs, each a whole number. */
static int apply_milestones(const opts_arg *a) {
    lr_opts *lr = &config_of(a)->lr;
    lr->nmilestones = 0;
    for (const char *p = a->val; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1000000 || (*end && *end != ',') ||
            lr->nmilestones == OPTIM_MAX_MILESTONES)
            return opts_bad(a, "a list of epochs like 100,150");
        lr->milestones[lr->nmilestones++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

static int apply_bucket_mb(const opts_arg *a) {
    int mb;
    if (opts_parse_int(a->val, 1, 4096, &mb)) return opts_bad(a, "a whole number from 1 to 4096");
    config_of(a)->bucket_bytes = (int64_t)mb << 20;
    return 0;
}

static int print_usage(const opts_spec *spec) {
    int rc = opts_print_help(spec, usage_head, usage_tail, stdout);
    return rc ? rc : 1;
}

/* Reads the command line into c (after its defaults); 0, 1 after --help,
 * or -EINVAL with the message printed. */
static int parse(int argc, char **argv, train_config *c) {
    train_config_defaults(c);
    const char *snap = getenv(DDPRUN_ENV_SNAPSHOT_DIR); /* ddprun's: this node's memory */
    if (snap) snprintf(c->snapshot_dir, sizeof c->snapshot_dir, "%s", snap);
    const char *disk = getenv(DDPRUN_ENV_SNAPSHOT_DISK_DIR); /* for a full memory */
    if (disk) snprintf(c->snapshot_disk_dir, sizeof c->snapshot_disk_dir, "%s", disk);
    /* The models and data sets are their tables' (arch.c, ds_table.c). An
     * unknown model is arch_build's error, after the command line. */
    opts_choice data_sets[MAX_NAMES];
    char names[256], model_help[300], data_help[512];
    choices_of(dataset_format_name, data_sets, MAX_NAMES);
    arch_help(names, sizeof names);
    snprintf(model_help, sizeof model_help, "%s;\ndefault %s", names, c->model);
    names_help(dataset_format_name, c->data, data_help, sizeof data_help);
    const opts_opt table[] = {
        {"model", 0, OPTS_BUF, .target = c->model, .size = sizeof c->model, .metavar = "NAME",
         .section = "Model and data:", .help = model_help},
        {"data", 0, OPTS_BUF, .target = c->data, .size = sizeof c->data, .choices = data_sets,
         .metavar = "NAME", .help = data_help},
        {"data-dir", 0, OPTS_BUF, .target = c->data_dir, .size = sizeof c->data_dir,
         .metavar = "DIR", .help = "where the data set's files are (fashion-mnist\n"
                                   "default: /usr/share/datasets/fashion-mnist;\n"
                                   "imagefolder: the folder with train/ and val/)"},
        {"input-shape", 0, OPTS_CALL, .apply = apply_shape, .metavar = "CxHxW",
         .help = "synthetic images' shape (default 3x32x32)"},
        {"classes", 0, OPTS_INT, .target = &c->classes, .lo = 2, .hi = 100000, .metavar = "N",
         .help = "synthetic classes (default 10)"},
        {"synthetic-size", 0, OPTS_I64, .target = &c->synthetic_size, .lo = 1, .hi = 1e9,
         .metavar = "N", .help = "synthetic training samples (default 60000)"},
        {"image-size", 0, OPTS_INT, .target = &c->image_size, .lo = 8, .hi = 4096, .metavar = "P",
         .help = "imagefolder: the side of the square the images are\ncropped and resized to "
                 "(default 224)"},
        {"image-recipe", 0, OPTS_CHOICE, .target = &c->image_plain, .choices = recipes,
         .metavar = "R", .help = "imagefolder: resnet (RandomResizedCrop + flip;\nResize + "
                                 "CenterCrop for val; the default) or\nplain (resized to PxP "
                                 "whole; a padded\nrandom crop and flip, as for the small sets)"},
        {"no-augment", 0, OPTS_FLAG_CLEAR, .target = &c->augment,
         .help = "no random crop and flip"},
        {"decode", 0, OPTS_CHOICE, .target = &c->decode_gpu, .choices = decoders,
         .metavar = "D", .help = "imagefolder: where JPEGs are decoded: cpu (the\n"
                                 "loader's threads; the default) or gpu (nvJPEG\n"
                                 "on the training GPU, the crop and resize there\n"
                                 "too; PNGs and CMYK JPEGs stay on the CPU)"},
        {"decode-share", 0, OPTS_DOUBLE, .target = &c->decode_share, .lo = 0.01, .hi = 1,
         .metavar = "F", .help = "--decode gpu: the fraction of each batch's JPEGs\n"
                                 "the GPU decodes, the rest decoded by the loader's\n"
                                 "threads beside it, spread through the batch\n"
                                 "(default 1: all; where the GPU's decoder is\n"
                                 "slower than the step, the host takes a share)"},
        {"skip-bad-images", 0, OPTS_FLAG, .target = &c->skip_bad,
         .help = "a damaged or unreadable image is replaced by the\nnext good one and counted "
                 "(said at each epoch's\nend) instead of stopping the run"},
        {"fixed-batch", 0, OPTS_FLAG, .target = &c->fixed_batch,
         .help = "benchmarks: make the first batch once and train\n"
                 "on it at every step (the step's speed without\n"
                 "the input pipeline; the model learns nothing)"},
        {"epochs", 0, OPTS_INT, .target = &c->epochs, .lo = 1, .hi = 1e6, .metavar = "N",
         .section = "Training:", .help = "passes over the training set (default 1)"},
        {"max-steps", 0, OPTS_I64, .target = &c->max_steps, .lo = 1, .hi = 1e15, .metavar = "N",
         .help = "stop after N global steps"},
        {"batch-size", 0, OPTS_INT, .target = &c->batch, .lo = 1, .hi = 1 << 20, .metavar = "N",
         .help = "per rank (default 128)"},
        {"lr", 0, OPTS_DOUBLE, .target = &c->lr.lr, .lo = 0, .hi = 1e3, .metavar = "X",
         .help = "learning rate (default 0.1)"},
        {"lr-scale-batch", 0, OPTS_INT, .target = &c->lr_scale_batch, .lo = 1, .hi = 1 << 24,
         .metavar = "B", .help = "lr * global batch / B"},
        {"warmup-epochs", 0, OPTS_DOUBLE, .target = &c->lr.warmup_epochs, .lo = 0, .hi = 1e6,
         .metavar = "X", .help = "linear warm-up (default 0)"},
        {"schedule", 0, OPTS_CHOICE, .target = &c->lr.schedule, .choices = schedules,
         .metavar = "S", .help = "cosine (default), step or constant"},
        {"lr-milestones", 0, OPTS_CALL, .apply = apply_milestones, .metavar = "E,E,...",
         .help = "step schedule's epochs"},
        {"lr-gamma", 0, OPTS_DOUBLE, .target = &c->lr.gamma, .lo = 0, .hi = 1, .metavar = "X",
         .help = "step schedule's factor (default 0.1)"},
        {"momentum", 0, OPTS_DOUBLE, .target = &c->momentum, .lo = 0, .hi = 1, .metavar = "X",
         .help = "SGD momentum (default 0.9)"},
        {"nesterov", 0, OPTS_FLAG, .target = &c->nesterov, .help = "Nesterov momentum"},
        {"weight-decay", 0, OPTS_DOUBLE, .target = &c->weight_decay, .lo = 0, .hi = 1,
         .metavar = "X", .help = "weight decay (default 5e-4; not on batch norm\n"
                                 "and biases unless --decay-bn-and-bias)"},
        {"decay-bn-and-bias", 0, OPTS_FLAG, .target = &c->decay_all,
         .help = "weight decay on batch norm and biases too"},
        {"label-smoothing", 0, OPTS_DOUBLE, .target = &c->label_smoothing, .lo = 0, .hi = 0.99,
         .metavar = "X", .help = "of the loss's targets (default 0)"},
        {"sync-bn", 0, OPTS_FLAG, .target = &c->sync_bn,
         .help = "batch norm statistics over all ranks"},
        {"seed", 0, OPTS_I64, .target = &c->seed, .lo = 0, .hi = 9e15, .metavar = "N",
         .help = "weights, data order and augmentation (default 0)"},
        {"no-eval", 0, OPTS_FLAG_CLEAR, .target = &c->eval,
         .help = "skip the test set at epoch ends"},
        {"ckpt-dir", 0, OPTS_BUF, .target = c->ckpt_dir, .size = sizeof c->ckpt_dir,
         .metavar = "DIR", .section = "Checkpoints and output:",
         .help = "resume from the newest valid checkpoint here,\n"
                 "and write there"},
        {"ckpt-every", 0, OPTS_I64, .target = &c->ckpt_every, .lo = 1, .hi = 1e15,
         .metavar = "N", .help = "also every N steps (default: epoch ends only)"},
        {"keep", 0, OPTS_INT, .target = &c->keep, .lo = 1, .hi = 1e6, .metavar = "N",
         .help = "checkpoints kept (default 3)"},
        {"sample-log", 0, OPTS_BUF, .target = c->sample_log, .size = sizeof c->sample_log,
         .metavar = "DIR", .help = "each rank appends the samples of each step it\n"
                                   "trains to DIR/samples.<rank>.<pid>.log (to count\n"
                                   "that every sample is trained once)"},
        {"snapshot-dir", 0, OPTS_BUF, .target = c->snapshot_dir, .size = sizeof c->snapshot_dir,
         .metavar = "DIR", .help = "this node's snapshots, in memory (default\n"
                                   "$" DDPRUN_ENV_SNAPSHOT_DIR ", which ddprun sets)"},
        {"snapshot-every", 0, OPTS_I64, .target = &c->snapshot_every, .lo = 0, .hi = 1e15,
         .metavar = "N", .help = "a snapshot every N steps (0: none; default:\n"
                                 "as often as costs at most 1% of a step)"},
        {"metrics", 0, OPTS_BUF, .target = c->metrics, .size = sizeof c->metrics,
         .metavar = "FILE", .help = "one JSON line per step (rank 0)"},
        {"log-every", 0, OPTS_INT, .target = &c->log_every, .lo = 1, .hi = 1e9, .metavar = "N",
         .help = "progress line every N steps (default 50)"},
        {"throughput-warmup", 0, OPTS_INT, .target = &c->warmup_steps, .lo = 0, .hi = 1e9,
         .metavar = "N", .help = "steps left out of the final img/s (default 5)"},
        {"device", 0, OPTS_CHOICE, .target = &c->device, .choices = devices,
         .want = "auto, cpu or cuda", .metavar = "D", .section = "Runtime:",
         .help = "auto (default: a GPU when this build has CUDA\n"
                 "and one is visible, else the CPU), cpu or cuda;\n"
                 "on a GPU each rank takes GPU LOCAL_RANK mod the\n"
                 "GPUs visible"},
        {"precision", 0, OPTS_CHOICE, .target = &c->precision, .choices = precisions,
         .metavar = "P", .help = "fp32, tf32 (GPU only) or bf16 (mixed precision;\n"
                                 "on the CPU emulated, for checking numerics);\n"
                                 "default tf32 on a GPU (PyTorch's default: TF32\n"
                                 "convolutions), fp32 on the CPU"},
        {"no-cuda-graph", 0, OPTS_FLAG, .target = &c->no_cuda_graph,
         .help = "on a GPU, run every step op by op instead of\n"
                 "replaying a CUDA graph of it (recorded from the\n"
                 "third step on)"},
        {"cudnn-benchmark", 0, OPTS_FLAG, .target = &c->cudnn_benchmark,
         .help = "on a GPU, choose convolution algorithms by timing\n"
                 "them (torch.backends.cudnn.benchmark): faster, but\n"
                 "runs may choose differently and differ in the last\n"
                 "bits"},
        {"cudnn-cache", 0, OPTS_BUF, .target = c->cudnn_cache, .size = sizeof c->cudnn_cache,
         .metavar = "DIR",
         .help = "with --cudnn-benchmark, keep the timed choices in\n"
                 "DIR, so that this machine times each convolution\n"
                 "once, not in every process or restart (default\n"
                 "$XDG_CACHE_HOME/ddprun, else ~/.cache/ddprun;\n"
                 "none: time them in every process)"},
        {"unfused", 0, OPTS_FLAG, .target = &c->unfused,
         .help = "every operation writes its own output: no residual\n"
                 "sum folded into the batch norm before it, no\n"
                 "gradient blended into a convolution's (the same\n"
                 "results, more memory traffic: for comparisons)"},
        {"loader-threads", 0, OPTS_INT, .target = &c->loader_threads, .lo = 0, .hi = 1024,
         .metavar = "N", .help = "threads that build the next batches while a step\n"
                                 "runs (default: on a GPU, the cores per rank less\n"
                                 "one, at most 8; on the CPU 1; 0: built by the\n"
                                 "step itself, nothing ahead)"},
        {"threads", 0, OPTS_INT, .target = &c->threads, .lo = 1, .hi = 4096, .metavar = "N",
         .help = "compute threads (default: OMP_NUM_THREADS, else\n"
                 "all cores)"},
        {"timeout", 0, OPTS_INT, .target = &c->timeout_s, .lo = 1, .hi = 1e6, .metavar = "S",
         .help = "a collective taking longer fails the rank\n"
                 "(default 600)"},
        {"step-timeout", 0, OPTS_INT, .target = &c->step_timeout_s, .lo = 0, .hi = 1e6,
         .metavar = "S",
         .help = "under the launcher's worker watchdog\n"
                 "(TORCHELASTIC_ENABLE_FILE_TIMER=1), a rank with no\n"
                 "progress (steps, evaluation, checkpoints) for this\n"
                 "long (3/4 of it at least) is killed and the group\n"
                 "restarted (default 600; 0: off)"},
        {"overlap-report", 0, OPTS_FLAG, .target = &c->overlap_report,
         .help = "on a GPU, time the second step's all-reduces\n"
                 "against its backward pass on the device and say\n"
                 "how much of them overlapped (rank 0)"},
        {"bucket-mb", 0, OPTS_CALL, .apply = apply_bucket_mb, .metavar = "N",
         .help = "gradient bucket size after the first 1 MiB\n"
                 "(default 25)"},
        {"no-shm", 0, OPTS_FLAG, .target = &c->no_shm, .help = "TCP between ranks on one host too"},
        {"reference-kernels", 0, OPTS_FLAG, .target = &c->reference,
         .help = "plain-C convolution instead of oneDNN (slow; for\n"
                 "tests)"},
        {"local-rank", 0, OPTS_INT, .target = &c->legacy_local_rank, .lo = 0, .hi = 1e6,
         .metavar = "N", .help = "accepted from torch.distributed.launch (--local_rank)"},
        {"help", 'h', .type = OPTS_HELP, .help = "print this help"},
        {"version", 0, .type = OPTS_VERSION,
         .help = "print the version and the build's options"},
    };
    opts_spec spec = {.prog = "ddp-train", .opts = table, .nopts = sizeof table / sizeof table[0],
                      .no_operands = 1, .ctx = c};
    char err[512];
    int next, rc = opts_parse(&spec, argc, argv, &next, err, sizeof err);
    if (rc == OPTS_HELP_GIVEN) return print_usage(&spec);
    if (rc == OPTS_VERSION_GIVEN) {
        build_info_print(stdout, "ddp-train");
        return OPTS_HELP_GIVEN; /* printed: nothing to run */
    }
    if (rc) fprintf(stderr, "ddp-train: %s\n", err);
    return rc;
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
    if (argc >= 2 && strcmp(argv[1], "plot") == 0) return plot_main(argc - 1, argv + 1);
    int bench = argc >= 2 && strcmp(argv[1], "data-bench") == 0;
    if (bench) { /* the training's options, --steps for --max-steps */
        argv[1] = argv[0];
        argc--, argv++;
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], "--steps") == 0) argv[i] = "--max-steps";
            else if (strncmp(argv[i], "--steps=", 8) == 0 &&
                     asprintf(&argv[i], "--max-steps=%s", argv[i] + 8) < 0)
                return 1;
    }
    train_config c;
    int rc = parse(argc, argv, &c);
    if (rc == OPTS_HELP_GIVEN) return 0;
    if (rc) return 2; /* a bad command line, as for every program here */
    return bench ? data_bench_run(&c) : train_run(&c);
}

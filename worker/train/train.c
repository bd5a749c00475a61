/* One rank's training run (see train.h): set up the job (ranks, store,
 * communicator), resume from the newest valid checkpoint (rank 0 reads it
 * and broadcasts, so no shared file system is needed), then train: data,
 * forward, backward with bucketed all-reduce, SGD; evaluate at epoch ends;
 * log all-rank means; checkpoint; stop cleanly on SIGTERM.
 *
 * Determinism: data order and augmentation are functions of (seed, epoch,
 * sample), kernels reduce in a fixed order, and the collectives too, so a
 * run resumed from a checkpoint at the same world size continues bit for
 * bit as if it had never stopped. */
#include "worker/train/train.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "rendezvous/store_thread.h"
#include "worker/backend/backend.h"
#include "worker/backend/bf16.h"
#include "worker/comm/comm.h"
#include "worker/comm/devcomm.h"
#include "worker/data/dataset.h"
#include "worker/data/sampler.h"
#include "worker/model/arch.h"
#include "worker/model/ddp.h"
#include "worker/train/checkpoint.h"
#include "worker/train/dist_env.h"
#include "worker/train/error_file.h"

static volatile sig_atomic_t stop_requested;

static void on_sigterm(int sig) {
    (void)sig;
    stop_requested = 1;
}

typedef struct {
    const train_config *cfg;
    dist_env env;
    store_thread *store;
    backend *be;
    dataset *train, *test;
    model *m;
    comm *comm;       /* host data: checkpoint headers, the step's loss */
    devcomm *dcomm;   /* backend memory: gradients, weights, SyncBN */
    ddp *ddp;
    int batch;          /* per rank */
    int global_batch;
    int64_t n;          /* training samples */
    int64_t steps_per_epoch;
    /* progress, saved in checkpoints */
    int epoch;
    int64_t pos;        /* samples of this epoch already consumed, globally */
    int64_t global_step;
    int64_t optimizer_steps;
    /* buffers */
    int64_t *order, *idx;
    float *x_nchw, *x_host; /* the batch as the data set gives it; as NHWC (or bf16) */
    void *x;                /* the model's input, on the backend */
    float *lr;              /* the step's learning rate, on the backend */
    int eager_steps;        /* steps run without a recording, in this process */
    int recorded;           /* the backend holds a recording of the step */
    int recordings;         /* made so far (the first is logged) */
    int record_failed;
    int32_t *y;
    FILE *metrics;
    int tty, bar_shown; /* rank 0's stdout is a terminal; the bar is on it */
    char err[1024];
    double t_start, t_measure;
    int64_t measured_images;
    int64_t measure_from_step;
    int64_t images; /* every step's, in this process */
} trainer;

/* A fatal error: log it, write the error file for the agent, fail. */
static int fail(trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(trainer *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    log_error("rank %d: %s", t->env.rank, t->err);
    error_file_write(t->err);
    return 1;
}

/* On a terminal, a bar redrawn in place between the progress lines. */
static void bar_clear(trainer *t) {
    if (!t->bar_shown) return;
    fputs("\r\033[K", stdout);
    t->bar_shown = 0;
}

static void bar_draw(trainer *t, int64_t step_in_epoch, double loss, double ips, double eta) {
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    int full = (int)(WIDTH * step_in_epoch / (t->steps_per_epoch > 0 ? t->steps_per_epoch : 1));
    for (int i = 0; i < WIDTH; i++) bar[i] = i < full ? '#' : '.';
    bar[WIDTH] = 0;
    printf("\r\033[Kepoch %d/%d [%s] %lld/%lld loss %.4f %.0f img/s ETA %dm%02ds", t->epoch + 1,
           t->cfg->epochs, bar, (long long)step_in_epoch, (long long)t->steps_per_epoch, loss, ips,
           (int)eta / 60, (int)eta % 60);
    fflush(stdout);
    t->bar_shown = 1;
}

/* ---- setup ------------------------------------------------------------------- */

static int setup_job(trainer *t) {
    const train_config *c = t->cfg;
    char err[512];
    if (dist_env_read(NULL, c->legacy_local_rank, &t->env, err, sizeof err))
        return fail(t, "%s", err);
    /* Without an agent's store, rank 0 hosts one, as PyTorch's env:// does. */
    if (t->env.world > 1 && !t->env.agent_store && t->env.rank == 0) {
        int port = 0;
        store_server_opts so = {.port = t->env.master_port, .token = getenv("DDPRUN_STORE_TOKEN")};
        int rc = store_thread_start(&so, &t->store, &port);
        if (rc)
            return fail(t, "rank 0 cannot host the store on port %d (MASTER_PORT): %s",
                        t->env.master_port, strerror(-rc));
    }
    return 0;
}

static int setup_data(trainer *t) {
    const train_config *c = t->cfg;
    char err[1024];
    dataset_opts o = {.name = c->data, .dir = c->data_dir[0] ? c->data_dir : NULL, .train = 1,
                      .c = c->in_c, .h = c->in_h, .w = c->in_w, .classes = c->classes,
                      .size = c->synthetic_size, .seed = c->seed};
    if (dataset_open(&o, &t->train, err, sizeof err)) return fail(t, "%s", err);
    o.train = 0;
    o.size = c->synthetic_size ? c->synthetic_size / 6 + 1 : 0;
    if (c->eval && dataset_open(&o, &t->test, err, sizeof err)) return fail(t, "%s", err);
    t->n = dataset_size(t->train);
    return 0;
}

static int setup_model(trainer *t) {
    const train_config *c = t->cfg;
    char err[512];
    backend_opts bo = {.kind = c->reference ? BACKEND_CPU_REFERENCE : c->device,
                       .threads = c->threads, .precision = c->precision,
                       .benchmark = c->cudnn_benchmark};
    int gpus = cuda_device_count();
    bo.device = gpus > 0 ? t->env.local_rank % gpus : 0;
    /* NCCL takes one GPU per rank: with more ranks on this node than GPUs,
     * "auto" trains on the CPU and "cuda" is an error, not NCCL's. */
    if (gpus > 0 && t->env.local_world > gpus && bo.kind != BACKEND_CPU &&
        bo.kind != BACKEND_CPU_REFERENCE) {
        if (bo.kind == BACKEND_CUDA)
            return fail(t,
                        "%d ranks on this node but %d GPU%s visible: NCCL needs a GPU per "
                        "rank; use --nproc-per-node %d, or --device cpu",
                        t->env.local_world, gpus, gpus == 1 ? " is" : "s are", gpus);
        if (t->env.local_rank == 0)
            log_warn("%d ranks on this node but %d GPU%s visible: training on the CPU "
                     "(--device cuda makes this an error)",
                     t->env.local_world, gpus, gpus == 1 ? " is" : "s are");
        bo.kind = BACKEND_CPU;
    }
    if (backend_create(&bo, &t->be, err, sizeof err)) return fail(t, "%s", err);
    if (t->be->kind != BACKEND_CUDA && c->precision == PRECISION_BF16 && t->env.rank == 0)
        log_warn("--precision bf16 on the CPU is emulated (fp32 arithmetic rounded to bf16): "
                 "for checking numerics; it is slower than fp32");
    int ch, h, w;
    dataset_shape(t->train, &ch, &h, &w);
    model_spec ms = {.arch = c->model, .in_c = ch, .in_h = h, .in_w = w,
                     .classes = dataset_classes(t->train), .seed = c->seed};
    if (arch_build(t->be, &ms, &t->m, err, sizeof err))
        return fail(t, "%s", err);
    comm_opts co = {.store_host = t->env.master_addr, .store_port = t->env.master_port,
                    .rank = t->env.rank, .world = t->env.world, .local_rank = t->env.local_rank,
                    .local_world = t->env.local_world, .timeout_ms = c->timeout_s * 1000,
                    .no_shm = c->no_shm};
    char prefix[96];
    snprintf(prefix, sizeof prefix, "/worker/attempt_%d/ddp-train/", t->env.restart_count);
    co.prefix = prefix;
    if (comm_init(&co, &t->comm, err, sizeof err)) return fail(t, "%s", err);
    if (t->be->kind == BACKEND_CUDA) {
        devcomm_nccl_opts no = {.be = t->be, .store_host = co.store_host,
                                .store_port = co.store_port, .prefix = prefix,
                                .rank = co.rank, .world = co.world, .timeout_ms = co.timeout_ms};
        if (devcomm_nccl_create(&no, &t->dcomm, err, sizeof err)) return fail(t, "%s", err);
    } else if (devcomm_host_create(t->comm, &t->dcomm)) {
        return fail(t, "out of memory setting up the communicator");
    }
    if (ddp_create(t->m, t->dcomm, 0, (size_t)c->bucket_bytes, c->sync_bn, &t->ddp, err,
                   sizeof err))
        return fail(t, "setting up DDP: %s", err);
    if (ddp_grad_why(t->ddp)[0] && t->env.local_rank == 0)
        log_warn("gradients stay in each rank's own memory, so every all-reduce copies them "
                 "through shared memory (slower): %s", ddp_grad_why(t->ddp));
    return 0;
}

/* ---- checkpoints ------------------------------------------------------------------ */

static char *checkpoint_header(trainer *t) {
    const train_config *c = t->cfg;
    model *m = t->m;
    json_t *params = json_array(), *bufs = json_array();
    for (int i = 0; i < m->nparams; i++) {
        json_t *shape = json_array();
        for (int k = 0; k < m->params[i].ndim; k++) json_array_append_new(shape, json_integer(m->params[i].shape[k]));
        json_array_append_new(params, json_pack("{s:s, s:I, s:I, s:o}", "name", m->params[i].name,
                                                "offset", (json_int_t)m->params[i].offset, "count",
                                                (json_int_t)m->params[i].count, "shape", shape));
    }
    for (int i = 0; i < m->nbuffers; i++)
        json_array_append_new(bufs, json_pack("{s:s, s:I, s:I}", "name", m->buffers[i].name, "offset",
                                              (json_int_t)m->buffers[i].offset, "count",
                                              (json_int_t)m->buffers[i].count));
    json_t *h = json_pack(
        "{s:s, s:s, s:[i,i,i], s:i, s:s, s:i, s:I, s:I, s:I, s:i, s:i, s:I, s:I, s:o, s:o, "
        "s:{s:f, s:f, s:f, s:b, s:f, s:i}}",
        "format", "ddp-train/1", "model", m->arch, "input_shape", m->in_c, m->in_h, m->in_w,
        "classes", m->classes, "data", c->data, "epoch", t->epoch, "pos", (json_int_t)t->pos,
        "global_step", (json_int_t)t->global_step, "optimizer_steps",
        (json_int_t)t->optimizer_steps, "world_size", t->env.world, "global_batch",
        t->global_batch, "seed", (json_int_t)c->seed, "nparam", (json_int_t)m->nparam, "params",
        params, "buffers", bufs, "config", "lr", c->lr.lr, "momentum", c->momentum,
        "weight_decay", c->weight_decay, "nesterov", c->nesterov, "label_smoothing",
        c->label_smoothing, "epochs", c->epochs);
    char *s = h ? json_dumps(h, JSON_COMPACT) : NULL;
    json_decref(h);
    return s;
}

static int save_checkpoint(trainer *t) {
    const train_config *c = t->cfg;
    if (!c->ckpt_dir[0] || t->env.rank != 0) return 0;
    model *m = t->m;
    char *header = checkpoint_header(t);
    if (!header) return fail(t, "out of memory writing a checkpoint");
    /* The file holds host copies: a checkpoint written on a GPU resumes on
     * a CPU and the other way round. */
    size_t np = m->nparam * sizeof(float), nb = m->nbuf * sizeof(float);
    float *host = malloc(2 * np + nb + 1);
    if (!host) {
        free(header);
        return fail(t, "out of memory writing a checkpoint");
    }
    float *hp = host, *hm = hp + m->nparam, *hb = hm + m->nparam;
    m->be->ops->download(m->be, hp, m->param, np);
    m->be->ops->download(m->be, hm, m->mom, np);
    m->be->ops->download(m->be, hb, m->buf, nb);
    int rc = m->be->ops->sync(m->be); /* a failed download: write nothing */
    if (rc) {
        free(header);
        free(host);
        return fail(t, "reading the model for a checkpoint failed: %s", strerror(-rc));
    }
    ckpt_tensor ts[] = {
        {"params", CKPT_F32, hp, np},
        {"buffers", CKPT_F32, hb, nb},
        {"momentum", CKPT_F32, hm, np},
    };
    char path[1200], err[1024];
    rc = ckpt_write(c->ckpt_dir, (uint64_t)t->global_step, header, ts, 3, c->keep, path,
                    sizeof path, err, sizeof err);
    free(header);
    free(host);
    if (rc) return fail(t, "%s", err);
    bar_clear(t);
    log_info("checkpoint %s (epoch %d, step %lld)", path, t->epoch + 1, (long long)t->global_step);
    return 0;
}

static void warn_line(const char *line) { log_warn("%s", line); }

/* Checks a checkpoint belongs to this model; fills the progress fields. */
static int adopt_header(trainer *t, const char *text, const char *path) {
    json_error_t jerr;
    json_t *h = json_loads(text, 0, &jerr);
    const char *arch = "?";
    json_int_t nparam = 0, pos = 0, gstep = 0, osteps = 0, gbatch = 0;
    int epoch = 0, c = 0, hh = 0, w = 0, classes = 0;
    int bad = !h || json_unpack(h, "{s:s, s:[i,i,i], s:i, s:i, s:I, s:I, s:I, s:I, s:I}", "model",
                                &arch, "input_shape", &c, &hh, &w, "classes", &classes, "epoch",
                                &epoch, "pos", &pos, "global_step", &gstep, "optimizer_steps",
                                &osteps, "global_batch", &gbatch, "nparam", &nparam) != 0;
    model *m = t->m;
    int rc = 0;
    if (bad)
        rc = fail(t, "checkpoint %s has an unreadable header", path);
    else if (strcmp(arch, m->arch) || c != m->in_c || hh != m->in_h || w != m->in_w ||
             classes != m->classes || (size_t)nparam != m->nparam)
        rc = fail(t,
                  "checkpoint %s is for %s on %dx%dx%d inputs with %d classes, not %s on "
                  "%dx%dx%d with %d classes: use another --ckpt-dir or the matching --model",
                  path, arch, c, hh, w, classes, m->arch, m->in_c, m->in_h, m->in_w, m->classes);
    if (rc == 0) {
        t->epoch = epoch, t->pos = pos, t->global_step = gstep, t->optimizer_steps = osteps;
        t->global_batch = (int)gbatch;
    }
    json_decref(h);
    return rc;
}

/* Rank 0 reads the newest valid checkpoint; everyone gets it by broadcast. */
static int resume(trainer *t) {
    const train_config *c = t->cfg;
    if (!c->ckpt_dir[0]) return 0;
    model *m = t->m;
    ckpt_data d = {0};
    char path[1200] = "", err[1024] = "";
    uint64_t header_len = 0;
    if (t->env.rank == 0) {
        int rc = ckpt_latest(c->ckpt_dir, path, sizeof path, &d, warn_line, err, sizeof err);
        if (rc && rc != -ENOENT) return fail(t, "%s", err);
        if (rc == 0) header_len = strlen(d.header) + 1;
    }
    if (comm_broadcast(t->comm, &header_len, sizeof header_len, 0))
        return fail(t, "broadcasting the checkpoint failed");
    if (header_len == 0) return 0;
    char *header = t->env.rank == 0 ? d.header : calloc(1, header_len);
    int rc = header ? comm_broadcast(t->comm, header, header_len, 0) : -ENOMEM;
    if (rc == 0) rc = adopt_header(t, header, t->env.rank == 0 ? path : "from rank 0");
    if (rc == 0 && t->env.rank == 0) {
        uint64_t np = 0, nb = 0, nm = 0;
        const void *p = ckpt_find(&d, "params", &np), *b = ckpt_find(&d, "buffers", &nb),
                   *mo = ckpt_find(&d, "momentum", &nm);
        if (!p || !b || !mo || np != m->nparam * 4 || nb != m->nbuf * 4 || nm != m->nparam * 4)
            rc = fail(t, "checkpoint %s lacks this model's tensors", path);
        else {
            m->be->ops->upload(m->be, m->param, p, np);
            m->be->ops->upload(m->be, m->buf, b, nb);
            m->be->ops->upload(m->be, m->mom, mo, nm);
            if ((rc = m->be->ops->sync(m->be)))
                rc = fail(t, "loading checkpoint %s into the model failed: %s", path,
                          strerror(-rc));
            else
                log_info("resuming from %s: epoch %d, step %lld", path, t->epoch + 1,
                         (long long)t->global_step);
        }
    }
    if (t->env.rank != 0) free(header);
    ckpt_data_free(&d);
    if (rc) return rc;
    rc = devcomm_broadcast(t->dcomm, m->mom, m->nparam * sizeof(float), 0);
    return rc ? fail(t, "broadcasting the checkpoint failed") : 0;
}

/* ---- the loop ---------------------------------------------------------------------- */

static int all_reduce_small(trainer *t, float *v, size_t n) {
    if (t->env.world == 1) return 0;
    comm_req *r = NULL;
    int rc = comm_allreduce_sum_async(t->comm, v, n, &r);
    return rc ? rc : comm_wait(r);
}

/* The batch of n in t->x_nchw (what the data set gives) to the model's
 * NHWC input on the backend, in its activation type. With one channel and
 * fp32 the batch goes up as it is. */
static void upload_batch(trainer *t, int n, int c, int h, int w) {
    backend *be = t->be;
    size_t count = (size_t)n * c * h * w;
    const float *nhwc = t->x_nchw;
    if (c > 1) {
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++)
                for (int p = 0; p < h * w; p++)
                    t->x_host[((size_t)i * h * w + p) * c + ch] =
                        t->x_nchw[((size_t)i * c + ch) * h * w + p];
        nhwc = t->x_host;
    }
    if (be->act == DTYPE_BF16) { /* into whichever host buffer is free */
        float *to = nhwc == t->x_host ? t->x_nchw : t->x_host;
        bf16_from_floats((uint16_t *)to, nhwc, count);
        nhwc = to;
    }
    be->ops->upload(be, t->x, nhwc, count * backend_act_size(be));
}

static double current_lr(trainer *t) {
    double epoch = t->epoch + (double)t->pos / (double)t->n;
    lr_opts o = t->cfg->lr;
    o.epochs = t->cfg->epochs;
    if (t->cfg->lr_scale_batch > 0) o.lr = lr_scaled(o.lr, t->global_batch, t->cfg->lr_scale_batch);
    return lr_at(&o, epoch);
}

static void log_step(trainer *t, double loss, double acc, double lr, int64_t step_in_epoch) {
    double now = clock_now_s(), elapsed = now - t->t_measure;
    double ips = elapsed > 0 && t->measured_images > 0 ? t->measured_images / elapsed : 0;
    if (t->metrics)
        fprintf(t->metrics,
                "{\"epoch\":%d,\"step\":%lld,\"global_step\":%lld,\"loss\":%.6f,\"acc\":%.6f,"
                "\"lr\":%.6g,\"img_per_s\":%.1f,\"time\":%.3f}\n",
                t->epoch + 1, (long long)step_in_epoch, (long long)t->global_step, loss, acc, lr,
                ips, now - t->t_start);
    double left_steps = (double)(t->cfg->epochs - t->epoch - 1) * t->steps_per_epoch +
                        (t->steps_per_epoch - step_in_epoch);
    if (t->cfg->max_steps > 0 && left_steps > t->cfg->max_steps - t->global_step)
        left_steps = (double)(t->cfg->max_steps - t->global_step);
    double eta = ips > 0 ? left_steps * t->global_batch / ips : 0;
    int every = t->cfg->log_every > 0 ? t->cfg->log_every : 50;
    if (t->global_step % every != 0 && step_in_epoch != t->steps_per_epoch) {
        if (t->tty) bar_draw(t, step_in_epoch, loss, ips, eta);
        return;
    }
    bar_clear(t);
    printf("epoch %d/%d step %lld/%lld loss %.4f acc %.2f%% lr %.4g %.0f img/s ETA %dm%02ds\n",
           t->epoch + 1, t->cfg->epochs, (long long)step_in_epoch, (long long)t->steps_per_epoch,
           loss, 100 * acc, lr, ips, (int)eta / 60, (int)eta % 60);
    fflush(stdout);
}

/* A step is recorded (where the backend can) once it has run this many
 * times in this process: the first allocates what a step needs, the
 * optimizer's first step differs from the rest. */
#define RECORD_AFTER 2

/* The device work of one step: forward, backward with DDP's all-reduce,
 * SGD. It only queues work, so a GPU backend can record it and replay the
 * recording; the inputs (batch, labels, learning rate) are uploaded into
 * the same buffers before each step. */
static int step_work(trainer *t) {
    const train_config *c = t->cfg;
    model *m = t->m;
    void *logits;
    int rc = model_forward(m, t->x, t->batch, 1, &logits);
    if (rc) return rc;
    ddp_begin(t->ddp);
    if ((rc = model_backward(m, t->batch, (float)c->label_smoothing))) return rc;
    if ((rc = ddp_finish(t->ddp))) return rc;
    return m->be->ops->sgd(m->be, m->nparam, m->param, m->grad, m->mom,
                           c->decay_all ? NULL : m->decay_mask, t->lr, (float)c->momentum,
                           (float)c->weight_decay, c->nesterov, t->optimizer_steps == 0);
}

/* Runs the step's device work: the recording of it, else directly,
 * recording it first once steps have settled. Whether a step is recorded
 * must be the same on every rank (NCCL treats the capture of a collective
 * as collective), so the decision rests only on what every rank shares:
 * the step count since start or since the last evaluation, which runs
 * other batch sizes and may move memory (it drops the recording on every
 * rank). A recording gone stale otherwise (the backend saw memory freed)
 * is recorded again alone only where there is no other rank; with others
 * it is an error, as is a recording that fails. */
static int step_run(trainer *t) {
    backend *be = t->be;
    if (t->recorded) {
        int rc = be->ops->replay(be);
        if (rc != -ESTALE || t->env.world > 1) return rc;
        t->recorded = 0;
    }
    if (!be->ops->record_begin || t->cfg->no_cuda_graph || t->eager_steps < RECORD_AFTER) {
        t->eager_steps++;
        return step_work(t);
    }
    int rc = be->ops->record_begin(be);
    if (rc == 0) {
        rc = step_work(t);
        int end = be->ops->record_end(be);
        if (rc == 0) rc = end;
    }
    if (rc) {
        t->record_failed = 1;
        return rc;
    }
    if (t->env.rank == 0 && t->recordings++ == 0)
        log_info("from step %lld on, each step replays a CUDA graph of it",
                 (long long)t->global_step + 1);
    t->recorded = 1;
    return be->ops->replay(be);
}

/* One global step: this rank's share of the batch up, the device work,
 * the loss back. Returns 0, or 1 after a failure (already reported). */
static int train_step(trainer *t, float *stats) {
    const train_config *c = t->cfg;
    model *m = t->m;
    int ch, h, w;
    dataset_shape(t->train, &ch, &h, &w);
    sampler_rank_batch(t->order, t->n, t->pos, t->env.world, t->env.rank, t->batch, t->idx);
    dataset_batch(t->train, t->idx, t->batch, c->augment, c->seed, t->epoch, t->x_nchw, t->y);
    upload_batch(t, t->batch, ch, h, w);
    float lr = (float)current_lr(t);
    m->be->ops->upload(m->be, t->lr, &lr, sizeof lr);
    int rc = model_set_labels(m, t->y, t->batch);
    if (rc) return fail(t, "out of memory for a batch of %d", t->batch);
    /* Collectives report failures where they are waited for: here, on a
     * GPU, where the step's work is waited for. */
    if ((rc = step_run(t)) == 0) rc = devcomm_sync(t->dcomm);
    const char *why = devcomm_error(t->dcomm); /* names the peer or NCCL's error */
    if (rc && t->record_failed && !why[0])
        return fail(t, "recording step %lld as a CUDA graph failed (%s; the log above says "
                    "which call): --no-cuda-graph runs steps op by op",
                    (long long)t->global_step, strerror(-rc));
    if (rc == -ESTALE)
        return fail(t, "the CUDA graph of the step went stale at step %lld (memory it used was "
                    "freed) and the other ranks replay theirs: --no-cuda-graph runs steps op "
                    "by op", (long long)t->global_step);
    if (rc)
        return fail(t, "training step %lld failed: %s", (long long)t->global_step,
                    why[0] ? why : strerror(-rc));
    t->optimizer_steps++;
    double loss;
    int correct;
    if ((rc = model_read_loss(m, &loss, &correct)))
        return fail(t, "training step %lld failed: %s", (long long)t->global_step, strerror(-rc));
    stats[0] = (float)loss, stats[1] = (float)correct, stats[2] = (float)t->batch;
    stats[3] = stop_requested ? 1.0f : 0.0f;
    return 0;
}

/* Test accuracy over the whole test set, each rank a disjoint share. */
static int evaluate(trainer *t) {
    if (!t->test) return 0;
    model *m = t->m;
    int ch, h, w;
    dataset_shape(t->test, &ch, &h, &w);
    int64_t nt = dataset_size(t->test);
    float tot[3] = {0, 0, 0};
    for (int64_t start = t->env.rank; start < nt; start += (int64_t)t->batch * t->env.world) {
        int n = 0;
        for (int64_t i = start; i < nt && n < t->batch; i += t->env.world) t->idx[n++] = i;
        dataset_batch(t->test, t->idx, n, 0, 0, 0, t->x_nchw, t->y);
        upload_batch(t, n, ch, h, w);
        void *logits;
        double loss;
        int correct;
        int rc = model_set_labels(m, t->y, n);
        if (rc == 0) rc = model_forward(m, t->x, n, 0, &logits);
        if (rc == 0) rc = model_loss(m, n);
        if (rc == 0) rc = model_read_loss(m, &loss, &correct);
        if (rc) return fail(t, "evaluation failed: %s", strerror(-rc));
        tot[0] += (float)loss, tot[1] += (float)correct, tot[2] += (float)n;
    }
    /* Every rank takes part in the sum, even one with nothing left to test. */
    if (all_reduce_small(t, tot, 3)) return fail(t, "all-reduce of the test results failed");
    if (t->env.rank == 0) {
        bar_clear(t);
        printf("epoch %d test: loss %.4f accuracy %.2f%% (%lld images)\n", t->epoch + 1,
               tot[0] / tot[2], 100.0 * tot[1] / tot[2], (long long)tot[2]);
        fflush(stdout);
        if (t->metrics)
            fprintf(t->metrics, "{\"epoch\":%d,\"test_loss\":%.6f,\"test_acc\":%.6f}\n",
                    t->epoch + 1, tot[0] / tot[2], tot[1] / tot[2]);
    }
    return 0;
}

static int allocate_batch(trainer *t) {
    int ch, h, w;
    dataset_shape(t->train, &ch, &h, &w);
    size_t per = (size_t)ch * h * w;
    t->order = malloc((size_t)t->n * sizeof *t->order);
    t->idx = malloc((size_t)t->batch * sizeof *t->idx);
    t->x_nchw = malloc((size_t)t->batch * per * sizeof(float));
    t->x_host = malloc((size_t)t->batch * per * sizeof(float));
    t->x = t->be->ops->alloc(t->be, (size_t)t->batch * per * backend_act_size(t->be));
    t->y = malloc((size_t)t->batch * sizeof *t->y);
    t->lr = t->be->ops->alloc(t->be, sizeof *t->lr);
    return t->order && t->idx && t->x_nchw && t->x_host && t->x && t->y && t->lr
               ? 0
               : fail(t, "out of memory");
}

/* The per-rank batch: --batch-size, or, when resuming a run that had
 * another world size, whatever keeps its global batch. */
static int choose_batch(trainer *t) {
    int world = t->env.world;
    if (t->global_batch == 0) t->global_batch = t->cfg->batch * world;
    if (t->global_batch % world != 0)
        return fail(t,
                    "the checkpoint's global batch %d cannot be shared evenly by %d ranks; "
                    "resume with a world size that divides it",
                    t->global_batch, world);
    t->batch = t->global_batch / world;
    if (t->batch > model_max_batch(t->m))
        return fail(t,
                    "a batch of %d per rank is too large for %s on these inputs: at most %d "
                    "(an activation tensor would have over 2^31 elements, more than the "
                    "kernels' 32-bit indices reach)",
                    t->batch, t->cfg->model, model_max_batch(t->m));
    if (t->batch != t->cfg->batch && t->env.rank == 0)
        log_info("world size changed: %d per rank keeps the global batch of %d", t->batch,
                 t->global_batch);
    t->steps_per_epoch = (t->n + t->global_batch - 1) / t->global_batch;
    return 0;
}

static int run_epochs(trainer *t) {
    const train_config *c = t->cfg;
    t->t_start = t->t_measure = clock_now_s();
    t->measure_from_step = t->global_step + c->warmup_steps;
    for (; t->epoch < c->epochs; t->epoch++, t->pos = 0) {
        sampler_epoch_order(t->n, c->seed, t->epoch, 1, t->order);
        while (t->pos < t->n) {
            if (c->max_steps > 0 && t->global_step >= c->max_steps) {
                int saved = c->ckpt_every > 0 && t->global_step % c->ckpt_every == 0;
                return saved ? 0 : (save_checkpoint(t) ? 1 : 0);
            }
            float stats[4];
            if (train_step(t, stats)) return 1;
            if (all_reduce_small(t, stats, 4)) return fail(t, "all-reduce of the step's loss failed");
            t->pos += t->global_batch;
            t->global_step++;
            if (t->global_step == t->measure_from_step) t->t_measure = clock_now_s(), t->measured_images = 0;
            else t->measured_images += t->global_batch;
            t->images += t->global_batch;
            int64_t step_in_epoch = (t->pos + t->global_batch - 1) / t->global_batch;
            if (t->pos > t->n) step_in_epoch = t->steps_per_epoch;
            if (t->env.rank == 0)
                log_step(t, stats[0] / stats[2], stats[1] / stats[2], current_lr(t), step_in_epoch);
            if (stats[3] > 0) { /* SIGTERM somewhere: every rank stops here */
                if (t->pos >= t->n) t->epoch++, t->pos = 0;
                bar_clear(t);
                log_info("rank %d: stopping on SIGTERM after step %lld", t->env.rank,
                         (long long)t->global_step);
                return save_checkpoint(t) ? 1 : 0;
            }
            if (c->ckpt_every > 0 && t->global_step % c->ckpt_every == 0 && t->pos < t->n &&
                save_checkpoint(t))
                return 1;
        }
        if (evaluate(t)) return 1;
        t->recorded = 0, t->eager_steps = 0; /* every rank: see step_run */
        int ep = t->epoch;
        t->epoch++, t->pos = 0; /* the checkpoint records the next epoch's start */
        int rc = save_checkpoint(t);
        t->epoch = ep;
        if (rc) return 1;
    }
    return 0;
}

static void cleanup(trainer *t) {
    if (t->metrics) fclose(t->metrics);
    free(t->order), free(t->idx), free(t->x_nchw), free(t->x_host), free(t->y);
    if (t->be && t->x) t->be->ops->free(t->be, t->x);
    if (t->be && t->lr) t->be->ops->free(t->be, t->lr);
    ddp_destroy(t->ddp);
    devcomm_destroy(t->dcomm);
    comm_destroy(t->comm);
    model_destroy(t->m);
    dataset_close(t->train);
    dataset_close(t->test);
    if (t->be) t->be->ops->destroy(t->be);
    store_thread_stop(t->store);
}

int train_run(const train_config *c) {
    trainer t = {.cfg = c};
    signal(SIGTERM, on_sigterm);
    signal(SIGPIPE, SIG_IGN);
    error_file_install_crash_handlers();
    int rc = setup_job(&t) || setup_data(&t) || setup_model(&t) || resume(&t);
    /* Rank 0's weights (fresh or resumed) are everyone's. */
    if (rc == 0 && ddp_broadcast_model(t.ddp))
        rc = fail(&t, "broadcasting the weights from rank 0 failed");
    if (rc == 0) rc = choose_batch(&t) || allocate_batch(&t);
    if (rc == 0 && c->metrics[0] && t.env.rank == 0 && !(t.metrics = fopen(c->metrics, "a")))
        rc = fail(&t, "cannot open --metrics %s: %s", c->metrics, strerror(errno));
    if (rc == 0 && t.env.rank == 0) {
        size_t big;
        int nb = ddp_buckets(t.ddp, &big);
        log_info("%s: %zu parameters, %d ranks (%s), %d per rank, global batch %d, %d "
                 "gradient buckets%s%s, %s",
                 c->model, t.m->nparam, t.env.world, t.env.launcher, t.batch, t.global_batch,
                 nb, ddp_grad_memory(t.ddp)[0] ? ", " : "", ddp_grad_memory(t.ddp),
                 t.be->ops->name);
    }
    t.tty = isatty(STDOUT_FILENO);
    if (rc == 0) rc = run_epochs(&t);
    if (t.env.rank == 0) bar_clear(&t);
    if (rc == 0 && t.env.rank == 0) {
        /* After the warm-up steps; a run too short for that counts them all. */
        double now = clock_now_s(), ips = 0;
        if (t.measured_images > 0 && now > t.t_measure) ips = t.measured_images / (now - t.t_measure);
        else if (t.images > 0 && now > t.t_start) ips = t.images / (now - t.t_start);
        printf("done: %lld steps, img/s=%.1f\n", (long long)t.global_step, ips);
        fflush(stdout);
    }
    cleanup(&t);
    return rc ? 1 : 0;
}

void train_config_defaults(train_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->model, sizeof c->model, "resnet20");
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
    c->log_every = 50;
    c->eval = 1;
    c->timeout_s = 600;
    c->warmup_steps = 5;
    c->legacy_local_rank = -1;
}

/* The trainer's set-up and teardown (see trainer.h): ranks and the store
 * from the launcher's environment, the data sets, the backend, the model,
 * the communicators and DDP, the per-rank batch and its buffers; and the
 * one way a failure is reported. */
#include "worker/train/trainer.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/ddprun_env.h"
#include "common/log.h"
#include "worker/model/arch.h"
#include "worker/train/device_choice.h"
#include "worker/train/error_file.h"
#include "worker/train/stacks.h"

volatile sig_atomic_t trainer_stop_requested;
_Atomic int64_t trainer_abort_at_ns;

int trainer_fail(trainer *t, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    if (trainer_stop_requested) {
        /* Told to stop: a collective that fails now was aborted on purpose or
         * lost a peer that is stopping too; the cause of the stop is
         * elsewhere, so no error file that would name this rank for it. */
        t->stopped = 1;
        log_warn("rank %d: stopping on SIG%s: %s; no checkpoint of the unfinished step is "
                 "written (the newest one stays)",
                 t->env.rank, sigabbrev_np(trainer_stop_requested), t->err);
    } else {
        log_error("rank %d: %s", t->env.rank, t->err);
        error_file_write(t->err);
    }
    return rc < 0 ? rc : -EIO;
}

static int setup_job(trainer *t) {
    const train_config *c = t->cfg;
    char err[512];
    int rc = dist_env_read(NULL, c->legacy_local_rank, &t->env, err, sizeof err);
    if (rc) return trainer_fail(t, rc, "%s", err);
    if (t->env.rank == 0 && t->env.world > 1 && t->env.master_from[0])
        log_info("no MASTER_ADDR/MASTER_PORT: the ranks meet at %s:%d (%s)", t->env.master_addr,
                 t->env.master_port, t->env.master_from);
    /* Without an agent's store, rank 0 hosts one, as PyTorch's env:// does. */
    if (t->env.world > 1 && !t->env.agent_store && t->env.rank == 0) {
        int port = 0;
        store_server_opts so = {.port = t->env.master_port,
                                .token = getenv(DDPRUN_ENV_STORE_TOKEN)};
        if ((rc = store_thread_start(&so, &t->store, &port)))
            return trainer_fail(t, rc, "rank 0 cannot host the store on port %d (MASTER_PORT): %s",
                                t->env.master_port, strerror(-rc));
    }
    return 0;
}

static void skipped_first(const char *why) {
    log_warn("skipping a sample: %s (--skip-bad-images: the next good one takes its place; the "
             "count comes at each epoch's end)", why);
}

static int setup_data(trainer *t) {
    const train_config *c = t->cfg;
    char err[1024];
    dataset_opts o = train_config_data(c, 1);
    int rc = dataset_open(&o, &t->train, err, sizeof err);
    if (rc) return trainer_fail(t, rc, "%s", err);
    o = train_config_data(c, 0);
    if (c->eval && (rc = dataset_open(&o, &t->test, err, sizeof err)))
        return trainer_fail(t, rc, "%s", err);
    if (c->skip_bad && ((rc = dataset_skip_bad(t->train, skipped_first)) ||
                        (t->test && (rc = dataset_skip_bad(t->test, skipped_first)))))
        return trainer_fail(t, rc, "out of memory");
    t->n = dataset_size(t->train);
    return 0;
}

/* --cudnn-cache's directory, or NULL for none: by default where the
 * XDG base directories put caches. */
static const char *algo_cache_dir(const train_config *c, char *buf, size_t len) {
    if (strcmp(c->cudnn_cache, "none") == 0) return NULL;
    if (c->cudnn_cache[0]) return c->cudnn_cache;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/') snprintf(buf, len, "%s/ddprun", xdg);
    else if (home && home[0] == '/') snprintf(buf, len, "%s/.cache/ddprun", home);
    else return NULL;
    return buf;
}

/* The backend's options: --device against the GPUs this rank sees
 * (device_choice.c). A GPU that CUDA cannot use is an error whatever
 * --device asks, except the CPU. */
static int choose_backend(trainer *t, backend_opts *bo, char *cache, size_t cache_len) {
    const train_config *c = t->cfg;
    char err[768];
    device_request r = {.requested = c->reference ? BACKEND_CPU_REFERENCE : c->device,
                        .local_rank = t->env.local_rank, .local_world = t->env.local_world,
                        .visible_gpus_named = t->env.visible_gpus_named};
    *bo = (backend_opts){.threads = c->threads, .precision = c->precision,
                         .benchmark = c->cudnn_benchmark,
                         .algo_cache = algo_cache_dir(c, cache, cache_len),
                         .verbose = t->env.local_rank == 0};
    if (r.requested != BACKEND_CPU && r.requested != BACKEND_CPU_REFERENCE) {
        r.gpus = cuda_device_count(err, sizeof err);
        if (r.gpus < 0) return trainer_fail(t, r.gpus, "--device %s: %s",
                                            r.requested == BACKEND_CUDA ? "cuda" : "auto", err);
    }
    device_choice d;
    int rc = device_choose(&r, &d, err, sizeof err);
    if (rc) return trainer_fail(t, rc, "%s", err);
    if (d.note[0] && t->env.local_rank == 0) log_warn("%s", d.note);
    bo->kind = d.kind;
    bo->device = d.device;
    /* As PyTorch by default: TF32 in a GPU's convolutions, full fp32 on
     * the CPU (which has no TF32). */
    if (c->precision == PRECISION_UNSET)
        bo->precision = d.kind == BACKEND_CUDA ? PRECISION_TF32 : PRECISION_FP32;
    return 0;
}

static int setup_backend(trainer *t) {
    char err[512], cache[1100];
    backend_opts bo;
    int rc = choose_backend(t, &bo, cache, sizeof cache);
    if (rc) return rc;
    if ((rc = backend_create(&bo, &t->be, err, sizeof err))) return trainer_fail(t, rc, "%s", err);
    if (t->be->kind != BACKEND_CUDA && t->cfg->precision == PRECISION_BF16 && t->env.rank == 0)
        log_warn("--precision bf16 on the CPU is emulated (fp32 arithmetic rounded to bf16): "
                 "for checking numerics; it is slower than fp32");
    return 0;
}

static int setup_model(trainer *t) {
    const train_config *c = t->cfg;
    char err[512];
    /* The weights are drawn once resume_newest has found no state to load
     * (train.c's start): a restart does not draw them for nothing. */
    model_spec ms = {.arch = c->model, .classes = dataset_classes(t->train), .seed = c->seed,
                     .unfused = c->unfused, .undrawn = 1};
    dataset_shape(t->train, &ms.in_c, &ms.in_h, &ms.in_w);
    int rc = arch_build(t->be, &ms, &t->m, err, sizeof err);
    return rc ? trainer_fail(t, rc, "%s", err) : 0;
}

/* The communicators' options: the host's (every backend) and NCCL's (a
 * GPU's), under this attempt's keys in the job's store. */
static void comm_options(trainer *t, comm_opts *co, devcomm_nccl_opts *no) {
    const train_config *c = t->cfg;
    snprintf(t->comm_prefix, sizeof t->comm_prefix, "/worker/attempt_%d/ddp-train/",
             t->env.restart_count);
    *co = (comm_opts){.store_host = t->env.master_addr, .store_port = t->env.master_port,
                      .rank = t->env.rank, .world = t->env.world,
                      .local_rank = t->env.local_rank, .local_world = t->env.local_world,
                      .timeout_ms = c->timeout_s * 1000, .no_shm = c->no_shm,
                      .prefix = t->comm_prefix, .abort_at_ns = &trainer_abort_at_ns,
                      .record = t->coll};
    *no = (devcomm_nccl_opts){.be = t->be, .store_host = co->store_host,
                              .store_port = co->store_port, .prefix = t->comm_prefix,
                              .rank = co->rank, .world = co->world, .timeout_ms = co->timeout_ms,
                              .abort_at_ns = co->abort_at_ns, .record = co->record,
                              .overlap_step = c->overlap_report ? 2 : 0};
}

/* On a GPU, NCCL's set-up starts before the model is built and goes on
 * in NCCL's own thread while the model is built and the state read (a
 * third of a second of a restart on an H200); the first collective waits
 * for it (nccl_comm.c's nc_ready). */
static int start_device_comm(trainer *t) {
    t->coll = coll_record_from_env(t->env.rank);
    stacks_note_record(t->coll);
    if (t->be->kind != BACKEND_CUDA) return 0;
    comm_opts co;
    devcomm_nccl_opts no;
    char err[512];
    comm_options(t, &co, &no);
    int rc = devcomm_nccl_start(&no, &t->dcomm, err, sizeof err);
    return rc ? trainer_fail(t, rc, "%s", err) : 0;
}

static int setup_comm(trainer *t) {
    const train_config *c = t->cfg;
    char err[512];
    comm_opts co;
    devcomm_nccl_opts no;
    comm_options(t, &co, &no);
    int rc = comm_init(&co, &t->comm, err, sizeof err);
    if (rc) return trainer_fail(t, rc, "%s", err);
    t->startup.host_comm = clock_now_ns();
    /* (NCCL's set-up goes on until its first collective waits for it) */
    if (t->be->kind != BACKEND_CUDA && (rc = devcomm_host_create(t->comm, &t->dcomm))) {
        return trainer_fail(t, rc, "out of memory setting up the communicator");
    }
    if ((rc = ddp_create(t->m, t->dcomm, 0, (size_t)c->bucket_bytes, c->sync_bn, &t->ddp, err,
                         sizeof err)))
        return trainer_fail(t, rc, "setting up DDP: %s", err);
    if (ddp_grad_why(t->ddp)[0] && t->env.local_rank == 0)
        log_warn("gradients stay in each rank's own memory, so every all-reduce copies them "
                 "through shared memory (slower): %s", ddp_grad_why(t->ddp));
    return 0;
}

int trainer_setup(trainer *t) {
    int rc = setup_job(t);
    if (rc == 0) rc = setup_data(t);
    t->startup.data = clock_now_ns();
    if (rc == 0) rc = setup_backend(t);
    t->startup.backend = clock_now_ns();
    if (rc == 0) rc = start_device_comm(t);
    if (rc == 0) rc = setup_model(t);
    t->startup.model = clock_now_ns();
    if (rc == 0) rc = setup_comm(t);
    t->startup.comm = clock_now_ns();
    return rc;
}

static int choose_batch(trainer *t) {
    int world = t->env.world, global;
    if (t->at.global_batch == 0) t->at.global_batch = t->cfg->batch * world;
    global = t->at.global_batch;
    if (global < world)
        return trainer_fail(t, -EINVAL,
                            "the global batch of %d cannot give each of %d ranks a sample; "
                            "resume with at most %d ranks",
                            global, world, global);
    /* The global batch stays what it was, whatever the world size: rank r
     * takes the batch's positions r, r + world, ... (the sampler), so the
     * first global % world ranks take one sample more, and DDP weights each
     * rank's gradient by its share (ddp_set_share). */
    t->batch = (global - t->env.rank + world - 1) / world;
    t->batch_max = (global + world - 1) / world;
    /* A share above --batch-size (the job shrank): micro-batches of at most
     * that many, as many on every rank (trainer.h's train_micro). */
    int most = t->cfg->batch;
    t->micro.k = t->batch_max > most ? (t->batch_max + most - 1) / most : 1;
    t->micro.max = (t->batch_max + t->micro.k - 1) / t->micro.k;
    if (t->micro.max > model_max_batch(t->m))
        return trainer_fail(t, -EINVAL,
                            "a batch of %d per rank is too large for %s on these inputs: at "
                            "most %d (an activation tensor would have over 2^31 elements, "
                            "more than the kernels' 32-bit indices reach)",
                            t->micro.max, t->cfg->model, model_max_batch(t->m));
    ddp_set_share(t->ddp, t->batch, global);
    if (global % world != 0 && t->env.rank == 0)
        log_info("world size changed: %d ranks share the global batch of %d unevenly, ranks "
                 "0-%d take %d samples and the others %d, each rank's gradient weighted by "
                 "its share (the same update)",
                 world, global, global % world - 1, t->batch_max, t->batch_max - 1);
    else if (t->batch != t->cfg->batch && t->env.rank == 0)
        log_info("world size changed: %d per rank keeps the global batch of %d", t->batch,
                 global);
    if (t->micro.k > 1 && t->env.rank == 0)
        log_info("world size changed: a share of %d is more than --batch-size %d: each rank "
                 "trains it in %d micro-batches of at most %d and sums their gradients before "
                 "the all-reduce (the same update, in the memory the job started with; batch "
                 "norm over each micro-batch)",
                 t->batch_max, most, t->micro.k, t->micro.max);
    t->steps_per_epoch = (t->n + t->at.global_batch - 1) / t->at.global_batch;
    return 0;
}

/* --loader-threads, or: on a GPU, the cores this rank may use less the
 * one that drives the GPU, at most 8 (a ResNet-50 batch of 256 at 224 is
 * 38 million values to draw and convert per step); on the CPU one thread,
 * so that the pipeline takes little from the compute threads. */
static int loader_threads(const trainer *t) {
    if (t->cfg->loader_threads >= 0) return t->cfg->loader_threads;
    if (t->be->kind != BACKEND_CUDA) return 1;
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 2;
    int per_rank = cores / (t->env.local_world > 0 ? t->env.local_world : 1) - 1;
    return per_rank < 1 ? 1 : per_rank > 8 ? 8 : per_rank;
}

/* --decode gpu: the backend's JPEG decoder, with room for a batch's
 * samples it cannot decode (drawn on the host instead). */
static int create_decoder(trainer *t) {
    train_batch *b = &t->buf;
    const train_config *c = t->cfg;
    if (!dataset_has_jpegs(t->train))
        return trainer_fail(t, -EINVAL,
                            "--decode gpu decodes the JPEGs of --data imagefolder with "
                            "--image-recipe resnet; --data %s%s has none to decode: leave "
                            "--decode at cpu",
                            c->data, c->image_plain ? " --image-recipe plain" : "");
    int ch, h, w;
    dataset_shape(t->train, &ch, &h, &w);
    float scale[3], shift[3];
    dataset_byte_norm(t->train, scale, shift);
    char err[512];
    int rc = jpeg_decoder_create(t->be, h, scale, shift, &b->jpeg, err, sizeof err);
    if (rc) return trainer_fail(t, rc, "%s", err);
    b->jpeg_ok = malloc((size_t)t->batch);
    b->x_redo = t->be->ops->alloc_host(t->be, (size_t)t->batch * ch * h * w *
                                                  backend_act_size(t->be));
    if (!b->jpeg_ok || !b->x_redo)
        return trainer_fail(t, -ENOMEM, "out of memory for a batch of %d", t->batch);
    if (t->env.rank == 0)
        log_info("--decode gpu: training JPEGs are decoded by %s", jpeg_decoder_name(b->jpeg));
    return 0;
}

static int allocate_batch(trainer *t) {
    train_batch *b = &t->buf;
    int ch, h, w;
    dataset_shape(t->train, &ch, &h, &w);
    size_t per = (size_t)ch * h * w;
    size_t most = (size_t)t->batch_max; /* an evaluation batch may be larger than ours */
    b->idx = malloc(most * sizeof *b->idx);
    b->x_nchw = malloc(most * per * sizeof(float));
    b->x_host = malloc(most * per * sizeof(float));
    b->x = t->be->ops->alloc(t->be, most * per * backend_act_size(t->be));
    b->y = malloc(most * sizeof *b->y);
    b->lr = t->be->ops->alloc(t->be, sizeof *b->lr);
    b->lr_host = t->be->ops->alloc_host(t->be, sizeof *b->lr_host);
    if (!(b->idx && b->x_nchw && b->x_host && b->x && b->y && b->lr && b->lr_host))
        return trainer_fail(t, -ENOMEM, "out of memory for a batch of %d", t->batch);
    train_micro *u = &t->micro;
    if (u->k > 1) {
        backend *be = t->be;
        u->acc = be->ops->alloc(be, t->m->nparam * sizeof(float));
        u->labels = be->ops->alloc(be, most * sizeof *u->labels);
        u->y_host = be->ops->alloc_host(be, most * sizeof *u->y_host);
        u->loss = be->ops->alloc(be, (size_t)u->k * sizeof *u->loss);
        if (!u->acc || !u->labels || !u->y_host || !u->loss)
            return trainer_fail(t, -ENOMEM, "out of memory for %d micro-batches", u->k);
    }
    const train_config *c = t->cfg;
    if (c->decode_share > 0 && !c->decode_gpu)
        return trainer_fail(t, -EINVAL, "--decode-share is the share of --decode gpu: with "
                                        "--decode cpu the loader decodes every JPEG");
    int rc = c->decode_gpu ? create_decoder(t) : 0;
    if (rc) return rc;
    loader_opts lo = {.ds = t->train, .batch = t->batch, .global_batch = t->at.global_batch,
                      .world = t->env.world,
                      .rank = t->env.rank, .seed = c->seed, .augment = c->augment,
                      .epochs = c->epochs, .threads = loader_threads(t), .depth = 2,
                      .be = t->be, .jpegs = c->decode_gpu,
                      .jpegs_permille = (int)lround(c->decode_share * 1000)};
    char err[256];
    rc = loader_create(&lo, &b->loader, err, sizeof err);
    return rc ? trainer_fail(t, rc, "%s", err) : 0;
}

int trainer_setup_batch(trainer *t) {
    int rc = choose_batch(t);
    return rc ? rc : allocate_batch(t);
}

void trainer_cleanup(trainer *t) {
    train_batch *b = &t->buf;
    if (t->progress.metrics) fclose(t->progress.metrics);
    free(b->idx), free(b->x_nchw), free(b->x_host), free(b->y);
    loader_destroy(b->loader); /* before the backend: its memory is the backend's */
    jpeg_decoder_destroy(b->jpeg);
    free(b->jpeg_ok);
    if (t->be && b->x_redo) t->be->ops->free_host(t->be, b->x_redo);
    if (t->be && b->lr_host) t->be->ops->free_host(t->be, b->lr_host);
    if (t->be && b->x) t->be->ops->free(t->be, b->x);
    if (t->be && b->lr) t->be->ops->free(t->be, b->lr);
    if (t->be) {
        train_micro *u = &t->micro;
        t->be->ops->free(t->be, u->acc), t->be->ops->free(t->be, u->labels);
        t->be->ops->free(t->be, u->loss);
        if (u->y_host) t->be->ops->free_host(t->be, u->y_host);
    }
    snapshot_writer_stop(t->mem.w); /* the snapshot under way is written first */
    snapshot_writer_stop(t->disk.w);
    free(t->header_fixed);
    ddp_destroy(t->ddp);
    devcomm_destroy(t->dcomm);
    comm_destroy(t->comm);
    stacks_note_record(NULL);
    coll_record_close(t->coll);
    model_destroy(t->m);
    dataset_close(t->train);
    dataset_close(t->test);
    if (t->be) t->be->ops->destroy(t->be);
    store_thread_stop(t->store);
    dir_lock_release(&t->ckpt_lock);
}

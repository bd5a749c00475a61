/* See step.h. */
#include "worker/train/step.h"

#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "worker/backend/bf16.h"
#include "worker/data/sampler.h"
#include "worker/train/progress.h"

/* A step is recorded (where the backend can) once it has run this many
 * times in this process: the first allocates what a step needs, the
 * optimizer's first step differs from the rest. */
#define RECORD_AFTER 2

int step_allreduce_small(trainer *t, float *v, size_t n) {
    if (t->env.world == 1) return 0;
    comm_req *r = NULL;
    int rc = comm_allreduce_sum_async(t->comm, v, n, &r);
    return rc ? rc : comm_wait(r);
}

/* An evaluation batch of n in x_nchw (what the data set gives) to the
 * model's NHWC input on the backend, in its activation type, converted as
 * the training batches are (loader.c). */
static void upload_batch(trainer *t, int n, int c, int h, int w) {
    backend *be = t->be;
    train_batch *b = &t->buf;
    size_t per = (size_t)c * h * w;
#pragma omp parallel for schedule(static) if ((size_t)n * per >= (1u << 16))
    for (int i = 0; i < n; i++)
        loader_to_nhwc(b->x_nchw + (size_t)i * per, c, h * w, be->act,
                       (char *)b->x_host + (size_t)i * per * backend_act_size(be));
    be->ops->upload(be, b->x, b->x_host, (size_t)n * per * backend_act_size(be));
}

double step_lr(const trainer *t) {
    double epoch = t->at.epoch + (double)t->at.pos / (double)t->n;
    lr_opts o = t->cfg->lr;
    o.epochs = t->cfg->epochs;
    if (t->cfg->lr_scale_batch > 0)
        o.lr = lr_scaled(o.lr, t->at.global_batch, t->cfg->lr_scale_batch);
    return lr_at(&o, epoch);
}

/* Micro-batch j's samples of this rank's n: its share of the
 * micro-batches' strided split (samples j, j + k, ...). */
static int micro_size(int n, int k, int j) { return n / k + (j < n % k); }

/* Where the rank's sample i goes in micro-batch order: micro-batch i % k
 * (strided), or, where the inputs were decoded in place on the device
 * (--decode gpu: they stay in the loader's order), micro-batch by
 * micro-batch as they come. */
static int micro_place(const trainer *t, int i, int strided) {
    int n = t->batch, k = t->micro.k;
    if (!strided) return i;
    int j = i % k, before = j * (n / k) + (j < n % k ? j : n % k);
    return before + i / k;
}

/* Forward and backward of each micro-batch, the DDP hooks off, their
 * gradients summed into acc, each weighted by its share of the rank's
 * batch; then acc is the step's gradient, all-reduced as one. */
static int micro_grads(trainer *t) {
    const train_config *c = t->cfg;
    model *m = t->m;
    backend *be = m->be;
    train_micro *u = &t->micro;
    int ch, h, w;
    dataset_shape(t->train, &ch, &h, &w);
    size_t per = (size_t)ch * h * w * backend_act_size(be);
    int (*ready)(void *, size_t) = m->hooks.grads_ready;
    m->hooks.grads_ready = NULL;
    be->ops->zero(be, u->acc, m->nparam * sizeof(float));
    int rc = 0;
    for (int j = 0, off = 0; j < u->k && rc == 0; j++) {
        int n = micro_size(t->batch, u->k, j);
        void *logits;
        model_point(m, u->labels + off, &u->loss[j]);
        rc = model_forward(m, (char *)t->buf.x + (size_t)off * per, n, 1, &logits);
        if (rc == 0) rc = model_backward(m, n, (float)c->label_smoothing);
        if (rc == 0) rc = be->ops->axpy(be, m->nparam, (float)n / (float)t->batch, m->grad, u->acc);
        off += n;
    }
    m->hooks.grads_ready = ready;
    model_point(m, NULL, NULL);
    if (rc == 0) be->ops->copy(be, m->grad, u->acc, m->nparam * sizeof(float));
    return rc;
}

/* The device work of one step: forward, backward with DDP's all-reduce,
 * SGD. It only queues work, so a GPU backend can record it and replay the
 * recording; the inputs (batch, labels, learning rate) are uploaded into
 * the same buffers before each step. */
static int step_work(trainer *t) {
    const train_config *c = t->cfg;
    model *m = t->m;
    int rc;
    if (t->micro.k > 1) { /* (every bucket then launched by ddp_finish) */
        rc = micro_grads(t);
        ddp_begin(t->ddp);
    } else {
        void *logits;
        if ((rc = model_forward(m, t->buf.x, t->batch, 1, &logits))) return rc;
        ddp_begin(t->ddp);
        rc = model_backward(m, t->batch, (float)c->label_smoothing);
    }
    if (rc || (rc = ddp_finish(t->ddp))) return rc;
    return m->be->ops->sgd(m->be, m->nparam, m->param, m->grad, m->mom,
                           c->decay_all ? NULL : m->decay_mask, t->buf.lr, (float)c->momentum,
                           (float)c->weight_decay, c->nesterov, t->at.optimizer_steps == 0);
}

/* Launches the recorded step; its collectives are then in flight, which
 * the communicator notes in the collective record. */
static int replay(trainer *t) {
    int rc = t->be->ops->replay(t->be);
    if (rc == 0) devcomm_replayed(t->dcomm);
    return rc;
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
    train_recording *rec = &t->rec;
    if (rec->recorded) {
        int rc = replay(t);
        if (rc != -ESTALE || t->env.world > 1) return rc;
        /* Warm up again before the next recording: what went stale was
         * freed memory, and a step that must allocate anew cannot be
         * recorded (an allocation fails the capture). */
        rec->recorded = 0;
        rec->eager_steps = 0;
    }
    if (!be->ops->record_begin || t->cfg->no_cuda_graph || rec->eager_steps < RECORD_AFTER) {
        rec->eager_steps++;
        return step_work(t);
    }
    int64_t t0 = clock_now_ns();
    int rc = be->ops->record_begin(be);
    if (rc == 0) {
        rc = step_work(t);
        int end = be->ops->record_end(be);
        if (rc == 0) rc = end;
    }
    if (rc) {
        rec->failed = 1;
        return rc;
    }
    if (t->env.rank == 0 && rec->recordings++ == 0)
        log_info("from step %lld on, each step replays a CUDA graph of it (recorded in %.1f ms)",
                 (long long)t->at.global_step + 1, (double)(clock_now_ns() - t0) * 1e-6);
    rec->recorded = 1;
    return replay(t);
}

/* Names a failed step's cause: the peer or NCCL's error where the
 * communicator knows it. */
static int step_failed(trainer *t, int rc) {
    const char *why = devcomm_error(t->dcomm);
    long long step = (long long)t->at.global_step;
    if (t->rec.failed && !why[0])
        return trainer_fail(t, rc,
                            "recording step %lld as a CUDA graph failed (%s; the log above says "
                            "which call): --no-cuda-graph runs steps op by op",
                            step, strerror(-rc));
    if (rc == -ESTALE)
        return trainer_fail(t, rc,
                            "the CUDA graph of the step went stale at step %lld (memory it used "
                            "was freed) and the other ranks replay theirs: --no-cuda-graph runs "
                            "steps op by op",
                            step);
    return trainer_fail(t, rc, "training step %lld failed: %s", step, trainer_why(why, rc));
}

/* --decode gpu: the batch's JPEGs decoded on the device into the input,
 * the samples the loader drew on the host (PNGs and the like) uploaded
 * around them, a run of neighbours at a time; those the decoder could not
 * decode are drawn on the host now, as they would have been without it,
 * and uploaded. Its decoding was started by get_batch. */
static int decode_inputs(trainer *t, const jpeg_image *im, const void *x) {
    train_batch *b = &t->buf;
    backend *be = t->be;
    int ch, h, w;
    dataset_shape(t->train, &ch, &h, &w);
    size_t per = (size_t)ch * h * w * backend_act_size(be);
    for (int i = 0; i < t->batch;) {
        if (im[i].data) {
            i++;
            continue;
        }
        int j = i;
        while (j < t->batch && !im[j].data) j++;
        be->ops->upload_async(be, (char *)b->x + i * per, (const char *)x + i * per,
                              (size_t)(j - i) * per);
        i = j;
    }
    char err[512];
    long long step = (long long)t->at.global_step;
    int rc = jpeg_decoder_finish(b->jpeg, b->x, err, sizeof err);
    if (rc) return trainer_fail(t, rc, "training step %lld failed: %s", step, err);
    for (int i = 0; i < t->batch; i++) {
        if (!im[i].data || b->jpeg_ok[i]) continue;
        void *dst = (char *)b->x_redo + i * per;
        if ((rc = loader_draw_again(b->loader, i, dst, err, sizeof err)))
            return trainer_fail(t, rc, "training step %lld failed: %s", step, err);
        be->ops->upload_async(be, (char *)b->x + i * per, dst, per);
    }
    return 0;
}

/* The batch at (epoch, pos) from the loader, and with --decode gpu its
 * JPEGs' decoding started. 0, or -errno with err. */
static int get_batch(trainer *t, int epoch, int64_t pos, const void **x, const int32_t **y,
                     char *err, size_t errlen) {
    train_batch *b = &t->buf;
    int64_t t0 = clock_now_ns();
    int rc = loader_get(b->loader, epoch, pos, x, y, err, errlen);
    coll_record_data_wait(t->coll, clock_now_ns() - t0);
    const jpeg_image *im = loader_jpegs(b->loader);
    if (rc == 0 && im) rc = jpeg_decoder_start(b->jpeg, t->batch, im, b->jpeg_ok, err, errlen);
    return rc;
}

/* --decode gpu: the next step's batch got and its decoding started while
 * this step runs on the device (called once its work is queued), instead
 * of before the next step, where the device would wait for it. Within the
 * epoch only, and not past --max-steps. First a wait until the device has
 * taken this step's inputs (the loader's memory they came from is refilled
 * by the next get). A batch that cannot be got or started here is got
 * again when its step comes, which then says why it failed. */
static void decode_ahead(trainer *t) {
    train_batch *b = &t->buf;
    const train_config *c = t->cfg;
    int64_t next = t->at.pos + t->at.global_batch;
    b->ahead.ready = 0;
    if (!b->jpeg || c->fixed_batch || next >= t->n ||
        (c->max_steps > 0 && t->at.global_step + 1 >= c->max_steps) || jpeg_decoder_wait_mark(b->jpeg))
        return;
    char err[512];
    if (get_batch(t, t->at.epoch, next, &b->ahead.x, &b->ahead.y, err, sizeof err)) return;
    b->ahead.ready = 1, b->ahead.epoch = t->at.epoch, b->ahead.pos = next;
}

/* The step's inputs, queued on the backend without waiting: the batch
 * the loader built ahead (in memory the GPU copies from by itself), its
 * labels, the learning rate. The step's end (the loss read) waits for
 * them, before the next loader_get may refill that memory. */
static int queue_inputs(trainer *t) {
    const train_config *c = t->cfg;
    train_batch *b = &t->buf;
    backend *be = t->be;
    int ch, h, w;
    dataset_shape(t->train, &ch, &h, &w);
    if (!b->fixed_ready) {
        const void *x;
        char err[512];
        int rc = 0;
        if (b->ahead.ready && b->ahead.epoch == t->at.epoch && b->ahead.pos == t->at.pos)
            x = b->ahead.x, b->y_step = b->ahead.y;
        else
            rc = get_batch(t, t->at.epoch, t->at.pos, &x, &b->y_step, err, sizeof err);
        b->ahead.ready = 0;
        if (rc)
            return trainer_fail(t, rc, "training step %lld failed: %s",
                                (long long)t->at.global_step, err);
        /* (before the step's all-reduce: a step kept has every rank's line) */
        if ((rc = sample_log_step(&t->samples, t->at.epoch, t->at.pos, t->at.global_step + 1,
                                  t->env.world, t->env.rank, loader_indices(b->loader),
                                  t->batch)))
            return trainer_fail(t, rc, "--sample-log: cannot write step %lld: %s",
                                (long long)t->at.global_step + 1, strerror(-rc));
        const jpeg_image *im = loader_jpegs(b->loader);
        if (im && (rc = decode_inputs(t, im, x))) return rc;
        size_t per = (size_t)ch * h * w * backend_act_size(be);
        if (!im && t->micro.k > 1) /* sample i to its place in micro-batch order */
            for (int i = 0; i < t->batch; i++)
                be->ops->upload_async(be, (char *)b->x + (size_t)micro_place(t, i, 1) * per,
                                      (const char *)x + (size_t)i * per, per);
        else if (!im)
            be->ops->upload_async(be, b->x, x, (size_t)t->batch * per);
        b->fixed_ready = c->fixed_batch;
        t->micro.strided = !im;
    }
    *b->lr_host = (float)step_lr(t);
    be->ops->upload_async(be, b->lr, b->lr_host, sizeof *b->lr);
    int rc;
    train_micro *u = &t->micro;
    if (u->k > 1) { /* the activations a micro-batch's; the labels in its order */
        rc = model_set_batch(t->m, u->max);
        for (int i = 0; rc == 0 && i < t->batch; i++)
            u->y_host[micro_place(t, i, u->strided)] = b->y_step[i];
        if (rc == 0)
            be->ops->upload_async(be, u->labels, u->y_host, (size_t)t->batch * sizeof *u->y_host);
    } else {
        rc = model_set_labels(t->m, b->y_step, t->batch);
    }
    if (rc) return trainer_fail(t, rc, "out of memory for a batch of %d", u->k > 1 ? u->max : t->batch);
    if (b->jpeg) jpeg_decoder_mark(b->jpeg); /* (decode_ahead waits for it) */
    return 0;
}

/* The step's loss sum and correct count over its micro-batches (waits for
 * the device, as model_read_loss). */
static int micro_loss(trainer *t, double *loss_sum, int *correct) {
    backend *be = t->be;
    *loss_sum = 0, *correct = 0;
    for (int j = 0; j < t->micro.k; j++) {
        backend_loss l;
        be->ops->download(be, &l, &t->micro.loss[j], sizeof l);
        *loss_sum += l.sum, *correct += (int)l.correct;
    }
    return be->ops->sync(be);
}

int step_train(trainer *t, float stats[4]) {
    model *m = t->m;
    int rc = queue_inputs(t);
    if (rc) return rc;
    /* Collectives report failures where they are waited for: here, on a
     * GPU, where the step's work is waited for. */
    if ((rc = step_run(t)) == 0) {
        decode_ahead(t); /* while the device runs the step */
        rc = devcomm_sync(t->dcomm);
    }
    if (rc) return step_failed(t, rc);
    t->at.optimizer_steps++;
    double loss;
    int correct;
    if ((rc = t->micro.k > 1 ? micro_loss(t, &loss, &correct) : model_read_loss(m, &loss, &correct)))
        return trainer_fail(t, rc, "training step %lld failed: %s",
                            (long long)t->at.global_step, strerror(-rc));
    stats[0] = (float)loss, stats[1] = (float)correct, stats[2] = (float)t->batch;
    stats[3] = trainer_stop_requested ? 1.0f : 0.0f;
    return 0;
}

/* One test batch of n: its loss sum and correct count into tot. */
static int test_batch(trainer *t, int n, float tot[3]) {
    model *m = t->m;
    int ch, h, w;
    dataset_shape(t->test, &ch, &h, &w);
    char err[512];
    int rc = dataset_batch(t->test, t->buf.idx, n, 0, 0, 0, t->buf.x_nchw, t->buf.y, err,
                           sizeof err);
    if (rc) return trainer_fail(t, rc, "evaluation failed: %s", err);
    upload_batch(t, n, ch, h, w);
    void *logits;
    double loss;
    int correct;
    rc = model_set_labels(m, t->buf.y, n);
    if (rc == 0) rc = model_forward(m, t->buf.x, n, 0, &logits);
    if (rc == 0) rc = model_loss(m, n);
    if (rc == 0) rc = model_read_loss(m, &loss, &correct);
    if (rc) return trainer_fail(t, rc, "evaluation failed: %s", strerror(-rc));
    tot[0] += (float)loss, tot[1] += (float)correct, tot[2] += (float)n;
    return 0;
}

int step_evaluate(trainer *t) {
    if (!t->test) return 0;
    t->buf.fixed_ready = 0; /* the test batches take the input buffer */
    /* every rank the same batch size, the largest share (or, with
     * micro-batches, the largest of them: the memory the job started
     * with): the same samples whatever the shares */
    int chunk = t->micro.k > 1 ? t->micro.max : t->batch_max;
    int64_t nt = dataset_size(t->test), stride = (int64_t)chunk * t->env.world;
    float tot[4] = {0, 0, 0, 0}; /* loss, correct, samples, ranks told to stop */
    for (int64_t start = t->env.rank; start < nt && !trainer_stop_requested; start += stride) {
        int n = 0;
        for (int64_t i = start; i < nt && n < chunk; i += t->env.world) t->buf.idx[n++] = i;
        int rc = test_batch(t, n, tot);
        if (rc) return rc;
    }
    tot[3] = trainer_stop_requested ? 1.0f : 0.0f;
    /* Every rank takes part in the sum, even one with nothing left to test. */
    int rc = step_allreduce_small(t, tot, 4);
    if (rc) return trainer_fail(t, rc, "all-reduce of the test results failed: %s",
                                trainer_why(comm_error(t->comm), rc));
    if (tot[3] > 0) {
        if (t->env.rank == 0)
            log_info("epoch %d: its evaluation is abandoned to stop; it runs first when the "
                     "job resumes", t->at.epoch + 1);
        return 1;
    }
    if (t->env.rank == 0) progress_test(t, tot[0] / tot[2], tot[1] / tot[2], (int64_t)tot[2]);
    return 0;
}

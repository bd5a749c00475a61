/* See snapshot.h. A checkpoint's header records the model (name, input
 * shape, classes, every parameter and buffer with its offset), where the
 * run stands and the configuration that shaped it; its tensors are the
 * weights, the buffers and the momentum, as host copies, so a checkpoint
 * written on a GPU resumes on a CPU and the other way round. */
#include "worker/train/snapshot.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "worker/train/checkpoint.h"
#include "worker/train/progress.h"

/* The pause between two tries for a lock held by this run's own process. */
#define LOCK_RETRY_NS 100000000L

/* Whether the holder is a process of this run: the same run id, known
 * and not torchrun's default "none" (which unrelated jobs share). */
static int same_run(const char *run_id, const dir_lock_holder *h) {
    return run_id && run_id[0] && strcmp(run_id, "none") != 0 && strcmp(h->run_id, run_id) == 0;
}

int snapshot_lock(trainer *t) {
    const char *dir = t->cfg->ckpt_dir, *run_id = getenv("TORCHELASTIC_RUN_ID");
    if (!dir[0] || t->env.rank != 0) return 0;
    int64_t give_up = clock_now_ns() + SNAPSHOT_LOCK_WAIT_S * 1000000000LL;
    int waited = 0;
    for (;;) {
        dir_lock_holder h;
        char err[1200], who[1024];
        int rc = dir_lock_take(&t->ckpt_lock, dir, run_id, &h, err, sizeof err);
        if (rc == 0) {
            if (waited) log_info("took --ckpt-dir %s", dir);
            return 0;
        }
        if (rc != -EWOULDBLOCK) return trainer_fail(t, rc, "--ckpt-dir: %s", err);
        dir_lock_holder_text(&h, who, sizeof who);
        int same = same_run(run_id, &h);
        if (!same || clock_now_ns() >= give_up || trainer_stop_requested)
            return trainer_fail(t, -EBUSY,
                                "--ckpt-dir %s is in use by another %s (%s)%s: give each job its "
                                "own --ckpt-dir",
                                dir, same ? "process of this run" : "job", who,
                                waited ? ", after waiting for it" : "");
        if (!waited)
            log_warn("--ckpt-dir %s is held by %s, of this same run (its previous rank 0, still "
                     "stopping?): waiting up to %d s for it",
                     dir, who, SNAPSHOT_LOCK_WAIT_S);
        waited = 1;
        nanosleep(&(struct timespec){.tv_nsec = LOCK_RETRY_NS}, NULL);
    }
}

static json_t *tensors_json(const model *m) {
    json_t *params = json_array();
    for (int i = 0; i < m->nparams; i++) {
        const model_param *p = &m->params[i];
        json_t *shape = json_array();
        for (int k = 0; k < p->ndim; k++) json_array_append_new(shape, json_integer(p->shape[k]));
        json_array_append_new(params, json_pack("{s:s, s:I, s:I, s:o}", "name", p->name, "offset",
                                                (json_int_t)p->offset, "count",
                                                (json_int_t)p->count, "shape", shape));
    }
    return params;
}

static json_t *buffers_json(const model *m) {
    json_t *bufs = json_array();
    for (int i = 0; i < m->nbuffers; i++)
        json_array_append_new(bufs, json_pack("{s:s, s:I, s:I}", "name", m->buffers[i].name,
                                              "offset", (json_int_t)m->buffers[i].offset,
                                              "count", (json_int_t)m->buffers[i].count));
    return bufs;
}

static char *header_text(const trainer *t) {
    const train_config *c = t->cfg;
    const model *m = t->m;
    const train_position *at = &t->at;
    json_t *h = json_pack(
        "{s:s, s:s, s:[i,i,i], s:i, s:s, s:i, s:I, s:I, s:I, s:i, s:i, s:I, s:I, s:o, s:o, "
        "s:{s:f, s:f, s:f, s:b, s:f, s:i}}",
        "format", "ddp-train/1", "model", m->arch, "input_shape", m->in_c, m->in_h, m->in_w,
        "classes", m->classes, "data", c->data, "epoch", at->epoch, "pos", (json_int_t)at->pos,
        "global_step", (json_int_t)at->global_step, "optimizer_steps",
        (json_int_t)at->optimizer_steps, "world_size", t->env.world, "global_batch",
        at->global_batch, "seed", (json_int_t)c->seed, "nparam", (json_int_t)m->nparam, "params",
        tensors_json(m), "buffers", buffers_json(m), "config", "lr", c->lr.lr, "momentum",
        c->momentum, "weight_decay", c->weight_decay, "nesterov", c->nesterov,
        "label_smoothing", c->label_smoothing, "epochs", c->epochs);
    char *s = h ? json_dumps(h, JSON_COMPACT) : NULL;
    json_decref(h);
    return s;
}

/* Writes the host copies in host (params, momentum, buffers). */
static int write_file(trainer *t, const char *header, float *host) {
    const train_config *c = t->cfg;
    const model *m = t->m;
    size_t np = m->nparam * sizeof(float), nb = m->nbuf * sizeof(float);
    ckpt_tensor ts[] = {
        {"params", CKPT_F32, host, np},
        {"buffers", CKPT_F32, host + 2 * m->nparam, nb},
        {"momentum", CKPT_F32, host + m->nparam, np},
    };
    ckpt_save save = {.dir = c->ckpt_dir, .step = (uint64_t)t->at.global_step,
                      .header_json = header, .tensors = ts, .ntensors = 3, .keep = c->keep};
    char path[1200], err[1024];
    int rc = ckpt_write(&save, path, sizeof path, err, sizeof err);
    if (rc) return trainer_fail(t, rc, "%s", err);
    progress_bar_clear(&t->progress);
    log_info("checkpoint %s (epoch %d, step %lld)", path, t->at.epoch + 1,
             (long long)t->at.global_step);
    return 0;
}

int snapshot_save(trainer *t) {
    if (!t->cfg->ckpt_dir[0] || t->env.rank != 0) return 0;
    int64_t t0 = clock_now_ns();
    model *m = t->m;
    size_t np = m->nparam * sizeof(float), nb = m->nbuf * sizeof(float);
    char *header = header_text(t);
    float *host = malloc(2 * np + nb + 1);
    int rc = header && host ? 0 : trainer_fail(t, -ENOMEM, "out of memory writing a checkpoint");
    if (rc == 0) {
        m->be->ops->download(m->be, host, m->param, np);
        m->be->ops->download(m->be, host + m->nparam, m->mom, np);
        m->be->ops->download(m->be, host + 2 * m->nparam, m->buf, nb);
        if ((rc = m->be->ops->sync(m->be))) /* a failed download: write nothing */
            trainer_fail(t, rc, "reading the model for a checkpoint failed: %s", strerror(-rc));
    }
    if (rc == 0) rc = write_file(t, header, host);
    free(header);
    free(host);
    if (rc == 0) rank_metrics_checkpoint(&t->rm, clock_now_ns() - t0);
    return rc;
}

static void warn_line(const char *line) { log_warn("%s", line); }

/* Checks a checkpoint belongs to this model; takes its position. */
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
    const model *m = t->m;
    int rc = 0;
    if (bad)
        rc = trainer_fail(t, -EBADMSG, "checkpoint %s has an unreadable header", path);
    else if (strcmp(arch, m->arch) || c != m->in_c || hh != m->in_h || w != m->in_w ||
             classes != m->classes || (size_t)nparam != m->nparam)
        rc = trainer_fail(t, -EINVAL,
                          "checkpoint %s is for %s on %dx%dx%d inputs with %d classes, not %s "
                          "on %dx%dx%d with %d classes: use another --ckpt-dir or the matching "
                          "--model",
                          path, arch, c, hh, w, classes, m->arch, m->in_c, m->in_h, m->in_w,
                          m->classes);
    else
        t->at = (train_position){.epoch = epoch, .pos = pos, .global_step = gstep,
                                 .optimizer_steps = osteps, .global_batch = (int)gbatch};
    json_decref(h);
    return rc;
}

/* Rank 0: the checkpoint's tensors into the model. */
static int load_tensors(trainer *t, const ckpt_data *d, const char *path) {
    model *m = t->m;
    uint64_t np = 0, nb = 0, nm = 0;
    const void *p = ckpt_find(d, "params", &np), *b = ckpt_find(d, "buffers", &nb),
               *mo = ckpt_find(d, "momentum", &nm);
    if (!p || !b || !mo || np != m->nparam * 4 || nb != m->nbuf * 4 || nm != m->nparam * 4)
        return trainer_fail(t, -EBADMSG, "checkpoint %s lacks this model's tensors", path);
    m->be->ops->upload(m->be, m->param, p, np);
    m->be->ops->upload(m->be, m->buf, b, nb);
    m->be->ops->upload(m->be, m->mom, mo, nm);
    int rc = m->be->ops->sync(m->be);
    if (rc)
        return trainer_fail(t, rc, "loading checkpoint %s into the model failed: %s", path,
                            strerror(-rc));
    log_info("resuming from %s: epoch %d, step %lld", path, t->at.epoch + 1,
             (long long)t->at.global_step);
    return 0;
}

/* A failed broadcast, with the communicator's word on why. */
static int broadcast_failed(trainer *t, int rc, const char *what) {
    return trainer_fail(t, rc, "broadcasting the checkpoint's %s from rank 0 failed: %s", what,
                        trainer_why(comm_error(t->comm), rc));
}

/* The header: rank 0's text (or its length 0: no checkpoint) to everyone.
 * *text is rank 0's own or a fresh copy (to free) elsewhere. */
static int share_header(trainer *t, char *rank0_text, char **text) {
    uint64_t len = rank0_text ? strlen(rank0_text) + 1 : 0;
    *text = NULL;
    int rc = comm_broadcast(t->comm, &len, sizeof len, 0);
    if (rc) return broadcast_failed(t, rc, "header length");
    if (len == 0) return 0;
    char *s = t->env.rank == 0 ? rank0_text : calloc(1, len);
    if (!s) return trainer_fail(t, -ENOMEM, "out of memory for a checkpoint header of %llu bytes",
                                (unsigned long long)len);
    if ((rc = comm_broadcast(t->comm, s, len, 0))) {
        if (s != rank0_text) free(s);
        return broadcast_failed(t, rc, "header");
    }
    *text = s;
    return 0;
}

int snapshot_resume(trainer *t) {
    const train_config *c = t->cfg;
    if (!c->ckpt_dir[0]) return 0;
    ckpt_data d = {0};
    char path[1200] = "", err[1024] = "";
    int rc = 0;
    if (t->env.rank == 0) {
        rc = ckpt_latest(c->ckpt_dir, path, sizeof path, &d, warn_line, err, sizeof err);
        if (rc && rc != -ENOENT) return trainer_fail(t, rc, "%s", err);
    }
    char *header = NULL;
    rc = share_header(t, d.header, &header);
    if (rc == 0 && header) rc = adopt_header(t, header, t->env.rank == 0 ? path : "from rank 0");
    if (rc == 0 && header && t->env.rank == 0) rc = load_tensors(t, &d, path);
    int found = header != NULL;
    if (header != d.header) free(header);
    ckpt_data_free(&d);
    if (rc || !found) return rc;
    model *m = t->m;
    rc = devcomm_broadcast(t->dcomm, m->mom, m->nparam * sizeof(float), 0);
    return rc ? trainer_fail(t, rc, "broadcasting the checkpoint's momentum failed: %s",
                             trainer_why(devcomm_error(t->dcomm), rc))
              : 0;
}

/* See snapshot.h. A checkpoint's header records the model (name, input
 * shape, classes, every parameter and buffer with its offset), where the
 * run stands and the configuration that shaped it; its tensors are the
 * weights, the buffers and the momentum, as host copies, so a checkpoint
 * written on a GPU resumes on a CPU and the other way round. */
#include "worker/train/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "worker/train/checkpoint.h"
#include "worker/train/progress.h"
#include "worker/train/step.h"

/* The pause between two tries for a lock held by this run's own process. */
#define LOCK_RETRY_NS 100000000L

/* Whether the holder is a process of this run: the same run id, known
 * and not torchrun's default "none" (which unrelated jobs share). */
static int same_run(const char *run_id, const dir_lock_holder *h) {
    return run_id && run_id[0] && strcmp(run_id, "none") != 0 && strcmp(h->run_id, run_id) == 0;
}

void snapshot_dir_foreign(trainer *t, const char *why) {
    if (t->disk.foreign) return;
    t->disk.foreign = 1;
    snprintf(t->disk.why, sizeof t->disk.why, "%s", why);
    log_warn("rank %d: %s: this node neither resumes from it nor writes there", t->env.rank,
             why);
}

/* dir_lock_take refused --ckpt-dir with rc (another job's holder h, or
 * err): the directory is not this job's (snapshot_dir_foreign). */
static void refused(trainer *t, int rc, const dir_lock_holder *h, const char *err) {
    char who[1024], why[2400];
    if (rc == -EWOULDBLOCK) {
        dir_lock_holder_text(h, who, sizeof who);
        snprintf(why, sizeof why, "--ckpt-dir %s is in use by another job (%s)",
                 t->cfg->ckpt_dir, who);
    } else {
        snprintf(why, sizeof why, "--ckpt-dir cannot be used: %s", err);
    }
    snapshot_dir_foreign(t, why);
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
        if (rc != -EWOULDBLOCK || !same_run(run_id, &h)) {
            refused(t, rc, &h, err);
            return 0;
        }
        dir_lock_holder_text(&h, who, sizeof who);
        if (clock_now_ns() >= give_up || trainer_stop_requested)
            return trainer_fail(t, -EBUSY,
                                "--ckpt-dir %s is in use by another process of this run (%s), "
                                "after waiting for it: give each job its own --ckpt-dir",
                                dir, who);
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

/* What a checkpoint's header says that stays the same through a run: the
 * model, its tensors, the configuration. JSON text ending in '}'. */
static char *fixed_header_json(const trainer *t) {
    const train_config *c = t->cfg;
    const model *m = t->m;
    json_t *h = json_pack(
        "{s:s, s:s, s:[i,i,i], s:i, s:s, s:I, s:I, s:o, s:o, s:{s:f, s:f, s:f, s:b, s:f, s:i}}",
        "format", "ddp-train/1", "model", m->arch, "input_shape", m->in_c, m->in_h, m->in_w,
        "classes", m->classes, "data", c->data, "seed", (json_int_t)c->seed, "nparam",
        (json_int_t)m->nparam, "params", tensors_json(m), "buffers", buffers_json(m), "config",
        "lr", c->lr.lr, "momentum", c->momentum, "weight_decay", c->weight_decay, "nesterov",
        c->nesterov, "label_smoothing", c->label_smoothing, "epochs", c->epochs);
    char *s = h ? json_dumps(h, JSON_COMPACT) : NULL;
    json_decref(h);
    return s;
}

/* A checkpoint's header: where the run stands, added to the fixed part,
 * which is made once (made afresh, it took a fifth of a millisecond of
 * every step that keeps a snapshot). */
static char *header_text(trainer *t) {
    if (!t->header_fixed && !(t->header_fixed = fixed_header_json(t))) return NULL;
    const train_position *at = &t->at;
    int n = (int)strlen(t->header_fixed) - 1; /* without its '}' */
    char *s = NULL;
    if (asprintf(&s,
                 "%.*s,\"epoch\":%d,\"pos\":%lld,\"global_step\":%lld,\"optimizer_steps\":%lld,"
                 "\"world_size\":%d,\"global_batch\":%d}",
                 n, t->header_fixed, at->epoch, (long long)at->pos, (long long)at->global_step,
                 (long long)at->optimizer_steps, t->env.world, at->global_batch) < 0)
        return NULL;
    return s;
}

/* The run's state on the host, one block: the params, the momentum and the
 * buffers, in that order. Its size, and its tensors by offset in floats. */
static size_t state_bytes(const model *m) { return (2 * m->nparam + m->nbuf) * sizeof(float); }

#define STATE_TENSORS 3
static void state_tensors(const model *m, snapshot_tensor ts[STATE_TENSORS]) {
    ts[0] = (snapshot_tensor){"params", 0, m->nparam * sizeof(float)};
    ts[1] = (snapshot_tensor){"buffers", 2 * m->nparam, m->nbuf * sizeof(float)};
    ts[2] = (snapshot_tensor){"momentum", m->nparam, m->nparam * sizeof(float)};
}

/* Fills a state_bytes() block from the backend. */
static int download_state(trainer *t, float *host) {
    model *m = t->m;
    snapshot_tensor ts[STATE_TENSORS];
    state_tensors(m, ts);
    const void *from[STATE_TENSORS] = {m->param, m->buf, m->mom};
    for (int i = 0; i < STATE_TENSORS; i++)
        m->be->ops->download(m->be, host + ts[i].offset, from[i], ts[i].nbytes);
    int rc = m->be->ops->sync(m->be); /* a failed download: write nothing */
    if (rc) trainer_fail(t, rc, "reading the model for a snapshot failed: %s", strerror(-rc));
    return rc;
}

/* Hands the run as it stands to writer w, whose free buffer is host: the
 * header, the state downloaded into host, the step. The writer writes the
 * file meanwhile. *ns: the time this took the step, up to the hand-over
 * (which wakes the writer: on a machine with no idle core the writer may
 * take the CPU at once, but what it spends is not the step's copy). */
static int hand_over(trainer *t, snapshot_writer *w, float *host, int64_t *ns) {
    int64_t t0 = clock_now_ns();
    char *header = header_text(t);
    if (!header) return trainer_fail(t, -ENOMEM, "out of memory taking a snapshot");
    int rc = download_state(t, host);
    if (rc) {
        free(header);
        return rc;
    }
    snapshot_tensor ts[STATE_TENSORS];
    state_tensors(t->m, ts);
    *ns = clock_now_ns() - t0;
    snapshot_writer_put(w, (uint64_t)t->at.global_step, header, ts, STATE_TENSORS);
    return 0;
}

/* Snapshots kept in memory: the newest two (one may be under way). */
#define MEMORY_FULL ".memory-full"
#define MEM_KEEP 2

void snapshot_keep_start(trainer *t) {
    const train_config *c = t->cfg;
    if (!c->snapshot_dir[0] || c->snapshot_every == 0 || t->env.local_rank != 0) return;
    t->mem.last = t->at.global_step, t->mem.every = c->snapshot_every > 0 ? c->snapshot_every : 1;
    size_t bytes = state_bytes(t->m);
    char full[1100];
    snprintf(full, sizeof full, "%s/" MEMORY_FULL, c->snapshot_disk_dir);
    /* An earlier worker of this agent found the memory full: on disk at once. */
    t->mem.dir = c->snapshot_disk_dir[0] && access(full, F_OK) == 0 ? c->snapshot_disk_dir
                                                                     : c->snapshot_dir;
    int rc = snapshot_writer_start(t->mem.dir, MEM_KEEP, bytes, &t->mem.w);
    if (rc)
        log_warn("rank %d: no snapshots in memory: %s", t->env.rank, strerror(-rc));
}

/* A snapshot could not be written (the memory full, say): they go on on
 * disk (DDPRUN_SNAPSHOT_DISK_DIR), said once: a MEMORY_FULL file there
 * sends the workers of later attempts there at once. Failing there too,
 * they stop and training goes on with --ckpt-dir's checkpoints alone. */
static void keep_elsewhere(trainer *t, const char *why) {
    const char *disk = t->cfg->snapshot_disk_dir;
    size_t bytes = state_bytes(t->m);
    progress_bar_clear(&t->progress);
    snapshot_writer_stop(t->mem.w);
    t->mem.w = NULL;
    if (disk[0] && t->mem.dir != disk &&
        snapshot_writer_start(disk, MEM_KEEP, bytes, &t->mem.w) == 0) {
        log_warn("rank %d: cannot keep a snapshot in %s: %s; keeping them on disk in %s",
                 t->env.rank, t->mem.dir, why, disk);
        t->mem.dir = disk;
        char full[1100];
        snprintf(full, sizeof full, "%s/" MEMORY_FULL, disk);
        int fd = open(full, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) close(fd);
        return;
    }
    log_warn("rank %d: cannot keep a snapshot in %s: %s; no more snapshots (--ckpt-dir's "
             "checkpoints go on)", t->env.rank, t->mem.dir, why);
}

/* The automatic interval's bounds, in steps. */
#define AUTO_MAX_EVERY 1000

int snapshot_due(trainer *t, int64_t step_ns) {
    if (!t->mem.w) return 0;
    int64_t every = t->cfg->snapshot_every;
    if (every <= 0) { /* automatic: a snapshot's cost at most 1% of the step time */
        t->mem.step_ns = t->mem.step_ns ? (7 * t->mem.step_ns + step_ns) / 8 : step_ns;
        every = 1;
        if (t->mem.taken > 0 && t->mem.step_ns > 0) {
            int64_t each = t->mem.ns / t->mem.taken;
            every = (100 * each + t->mem.step_ns - 1) / t->mem.step_ns;
        }
        every = every < 1 ? 1 : every > AUTO_MAX_EVERY ? AUTO_MAX_EVERY : every;
    }
    t->mem.every = every;
    /* called before the step is counted (advance): it ends global_step + 1;
     * mem.last is a step counted when its snapshot was kept */
    return t->at.global_step + 1 - t->mem.last >= every;
}

/* After a step every rank holds the same parameters and momentum, but its
 * own batch-norm running statistics (PyTorch DDP's are each rank's too
 * between its buffer broadcasts). Before a snapshot every rank takes rank
 * 0's, so that each node's snapshot of a step is the same state: a run
 * resumed from whichever node's is newest goes on bit for bit as from rank
 * 0's, and rank 0's checkpoints, whose buffers these are, do not change. */
static int buffers_from_rank0(trainer *t) {
    /* once a step: a checkpoint's step often has a snapshot too */
    if (t->m->nbuf == 0 || t->buffers_step == t->at.global_step) return 0;
    t->buffers_step = t->at.global_step;
    int rc = devcomm_broadcast(t->dcomm, t->m->buf, t->m->nbuf * sizeof(float), 0);
    if (rc)
        return trainer_fail(t, rc, "broadcasting rank 0's batch-norm statistics failed: %s",
                            trainer_why(devcomm_error(t->dcomm), rc));
    return 0;
}

int snapshot_keep(trainer *t) {
    /* every rank calls this at the same step (rank 0 decided it) */
    int rc = t->cfg->snapshot_every != 0 ? buffers_from_rank0(t) : 0;
    if (rc || !t->mem.w) return rc;
    char err[1024];
    if (snapshot_writer_error(t->mem.w, err, sizeof err)) {
        keep_elsewhere(t, err);
        return 0;
    }
    /* Asked for (--snapshot-every N): the last one is written before this
     * one is handed over, which is what makes "step N reported" mean
     * "step N-1 kept". It has had a whole step to be written. */
    if (t->cfg->snapshot_every > 0 && snapshot_writer_flush(t->mem.w, err, sizeof err)) {
        keep_elsewhere(t, err);
        return 0;
    }
    float *host = snapshot_writer_buffer(t->mem.w);
    if (!host) { /* the last one is still being written: the next step's will do */
        t->mem.skipped++;
        return 0;
    }
    int64_t ns;
    if ((rc = hand_over(t, t->mem.w, host, &ns))) return rc;
    if (t->at.global_step > t->mem.last) t->mem.every = t->at.global_step - t->mem.last;
    t->mem.last = t->at.global_step;
    t->mem.taken++;
    t->mem.ns += ns;
    return 0;
}

void snapshot_keep_flush(trainer *t) {
    char err[1024];
    if (t->mem.w && snapshot_writer_flush(t->mem.w, err, sizeof err)) keep_elsewhere(t, err);
}

/* ---- checkpoints in --ckpt-dir, on every node ---------------------------------- */

void snapshot_claim(trainer *t) {
    const train_config *c = t->cfg;
    if (!c->ckpt_dir[0] || t->env.local_rank != 0 || t->env.rank == 0 || t->ckpt_lock.held)
        return;
    dir_lock_holder h;
    char err[1200];
    const char *run_id = getenv("TORCHELASTIC_RUN_ID");
    int rc = dir_lock_take(&t->ckpt_lock, c->ckpt_dir, run_id, &h, err, sizeof err);
    if (rc == 0 || (rc == -EWOULDBLOCK && same_run(run_id, &h))) return;
    refused(t, rc, &h, err);
}

/* Whether this rank writes its node's --ckpt-dir, starting its writer the
 * first time: local rank 0, holding the directory's lock (taken at the
 * start: snapshot_lock, snapshot_claim), the directory this job's. A
 * directory held by another process of this run, which is what a
 * directory shared with rank 0's node looks like, is left to it: said
 * once, tried again at each checkpoint. */
static int disk_writer(trainer *t) {
    const train_config *c = t->cfg;
    if (t->disk.w) return 1;
    if (t->env.local_rank != 0 || t->disk.foreign) return 0;
    char err[1200];
    if (!t->ckpt_lock.held) {
        dir_lock_holder h;
        int rc = dir_lock_take(&t->ckpt_lock, c->ckpt_dir, getenv("TORCHELASTIC_RUN_ID"), &h,
                               err, sizeof err);
        if (rc) {
            char who[1024];
            dir_lock_holder_text(&h, who, sizeof who);
            if (!t->disk.refused)
                log_info("rank %d: --ckpt-dir %s is held by %s; this node leaves its "
                         "checkpoints to that process (a directory shared between nodes?)",
                         t->env.rank, c->ckpt_dir, rc == -EWOULDBLOCK ? who : err);
            t->disk.refused = 1;
            return 0;
        }
    }
    int rc = snapshot_writer_start(c->ckpt_dir, c->keep, state_bytes(t->m), &t->disk.w);
    if (rc) trainer_fail(t, rc, "cannot start writing checkpoints: %s", strerror(-rc));
    return rc == 0;
}

/* This node's write failed (a full disk, a read-only one): it keeps no
 * more checkpoints there, and says so; the others' keep the run, and
 * snapshot_keepers stops the run when none is left. */
static void disk_failed(trainer *t, const char *err) {
    snapshot_writer_stop(t->disk.w);
    t->disk.w = NULL;
    t->disk.step = -1;
    t->disk.foreign = 1;
    snprintf(t->disk.why, sizeof t->disk.why, "--ckpt-dir %s cannot keep this job's checkpoints: "
             "%s", t->cfg->ckpt_dir, err);
    log_warn("rank %d: %s; this node writes none there any more (the other nodes' keep the run)",
             t->env.rank, t->disk.why);
}

int snapshot_keepers(trainer *t, int64_t step) {
    const train_config *c = t->cfg;
    if (!c->ckpt_dir[0]) return 0;
    float keeps = t->env.local_rank == 0 && !t->disk.foreign &&
                  (step < 0 || t->disk.written == step || t->disk.found == step ||
                   !t->ckpt_lock.held);
    int rc = step_allreduce_small(t, &keeps, 1);
    if (rc)
        return trainer_fail(t, rc, "agreeing on where the checkpoints are kept failed: %s",
                            trainer_why(comm_error(t->comm), rc));
    if (keeps > 0) return 0;
    return trainer_fail(t, -ENOSPC,
                        "no node can keep this job's checkpoints%s: %s", step < 0 ? "" :
                        " (the final one included)",
                        t->disk.foreign ? t->disk.why
                                        : "every node's --ckpt-dir failed (each node says why)");
}

int snapshot_save_report(trainer *t) {
    if (!t->disk.w || t->disk.step < 0) return 0;
    char path[1200], err[1024];
    int rc = snapshot_writer_error(t->disk.w, err, sizeof err);
    if (rc) {
        disk_failed(t, err);
        return 0;
    }
    if (snapshot_writer_written(t->disk.w, path, sizeof path) != t->disk.step) return 0;
    t->disk.written = t->disk.step;
    char who[32] = ""; /* other nodes' lines say whose */
    if (t->env.rank == 0) progress_bar_clear(&t->progress);
    else snprintf(who, sizeof who, "rank %d: ", t->env.rank);
    log_info("%scheckpoint %s (epoch %d, step %lld)", who, path, t->disk.epoch + 1,
             (long long)t->disk.step);
    t->disk.step = -1;
    return 0;
}

int snapshot_save_flush(trainer *t) {
    if (!t->disk.w) return 0;
    char err[1024];
    if (snapshot_writer_flush(t->disk.w, err, sizeof err)) {
        disk_failed(t, err);
        return 0;
    }
    return snapshot_save_report(t);
}

int snapshot_save(trainer *t) {
    const train_config *c = t->cfg;
    if (!c->ckpt_dir[0]) return 0;
    int rc = buffers_from_rank0(t); /* every rank: each node's file is the same state */
    if (rc) return rc;
    int64_t t0 = clock_now_ns();
    /* One write at a time: the last checkpoint's, which has had the steps
     * since to be written, is waited for (and reported) first; then every
     * node hears whether some node still keeps the checkpoints. */
    if ((rc = snapshot_save_flush(t)) || (rc = snapshot_keepers(t, -1)) || !disk_writer(t))
        return rc;
    /* (flushed: its buffer is free) */
    int64_t ns;
    if ((rc = hand_over(t, t->disk.w, snapshot_writer_buffer(t->disk.w), &ns))) return rc;
    t->disk.step = t->disk.handed = t->at.global_step, t->disk.epoch = t->at.epoch;
    rank_metrics_checkpoint(&t->rm, clock_now_ns() - t0);
    return 0;
}

void snapshot_keep_report(const trainer *t, double run_s) {
    if (t->mem.taken == 0) return;
    double each_ms = (double)t->mem.ns / (double)t->mem.taken / 1e6;
    char share[64] = "";
    if (run_s > 0)
        snprintf(share, sizeof share, ", %.2f%% of the training time",
                 100 * (double)t->mem.ns / 1e9 / run_s);
    log_info("rank %d: %lld snapshots in %s (%s), every %lld step%s%s, %.2f ms of the "
             "step's time each%s%s", t->env.rank, (long long)t->mem.taken,
             t->mem.dir == t->cfg->snapshot_dir ? "memory" : "memory, then on disk", t->mem.dir,
             (long long)t->mem.every, t->mem.every == 1 ? "" : "s",
             t->cfg->snapshot_every < 0 ? " (automatic: at most 1% of a step)" : "", each_ms,
             share, t->mem.skipped ? " (some skipped: the last was still being written)" : "");
}

/* See resume.h. */
#include "worker/train/resume.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "worker/train/checkpoint.h"
#include "worker/train/snapshot.h"

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

/* The holder: the checkpoint's tensors into the model (the others get
 * them by broadcast). */
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
    return 0;
}

/* A failed broadcast, with the communicator's word on why. */
static int broadcast_failed(trainer *t, int rc, const char *what, int root) {
    return trainer_fail(t, rc, "broadcasting the checkpoint's %s from rank %d failed: %s", what,
                        root, trainer_why(comm_error(t->comm), rc));
}

/* The header: the holder's text to everyone. *text is the holder's own or
 * a fresh copy (to free) elsewhere. */
static int share_header(trainer *t, char *mine, int root, char **text) {
    uint64_t len = mine ? strlen(mine) + 1 : 0;
    *text = NULL;
    int rc = comm_broadcast(t->comm, &len, sizeof len, root);
    if (rc) return broadcast_failed(t, rc, "header length", root);
    char *s = t->env.rank == root ? mine : calloc(1, len);
    if (!s) return trainer_fail(t, -ENOMEM, "out of memory for a checkpoint header of %llu bytes",
                                (unsigned long long)len);
    if ((rc = comm_broadcast(t->comm, s, len, root))) {
        if (s != mine) free(s);
        return broadcast_failed(t, rc, "header", root);
    }
    *text = s;
    return 0;
}


/* Whether a checkpoint's header is another job's: NULL when it is this
 * job's, else the difference into why. A job is its model (with its input
 * shape and classes), its data set and its seed: what a user changes to
 * start another run. The rest (the learning rate, --epochs, ...) may
 * change between a run and its continuation. A header that lacks a field
 * (an older format) is not judged by it. */
static const char *foreign_header(const trainer *t, const char *text, char *why, size_t len) {
    json_t *h = json_loads(text, 0, NULL);
    const char *arch = "?", *data = NULL;
    json_int_t seed = -1;
    int c = 0, hh = 0, w = 0, classes = 0;
    int bad = !h || json_unpack(h, "{s:s, s:[i,i,i], s:i}", "model", &arch, "input_shape", &c, &hh,
                                &w, "classes", &classes) != 0;
    if (!bad) json_unpack(h, "{s?s, s?I}", "data", &data, "seed", &seed);
    const model *m = t->m;
    const train_config *cfg = t->cfg;
    const char *out = NULL;
    if (bad)
        out = "an unreadable header";
    else if (strcmp(arch, m->arch) || c != m->in_c || hh != m->in_h || w != m->in_w ||
             classes != m->classes)
        out = why, snprintf(why, len, "%s on %dx%dx%d inputs with %d classes, not %s on %dx%dx%d "
                            "with %d classes", arch, c, hh, w, classes, m->arch, m->in_c,
                            m->in_h, m->in_w, m->classes);
    else if (data && strcmp(data, cfg->data) != 0)
        out = why, snprintf(why, len, "--data %s, not %s", data, cfg->data);
    else if (seed >= 0 && (uint64_t)seed != cfg->seed)
        out = why, snprintf(why, len, "--seed %lld, not %llu", (long long)seed,
                            (unsigned long long)cfg->seed);
    json_decref(h);
    return out;
}

/* The global step a checkpoint's header says; -1 when it says none. */
static int64_t header_step(const char *header) {
    json_t *h = json_loads(header, 0, NULL);
    json_int_t step = -1;
    if (!h || json_unpack(h, "{s:I}", "global_step", &step) != 0) step = -1;
    json_decref(h);
    return (int64_t)step;
}

/* The newest valid checkpoint in dir into d (replacing what d holds when it
 * is newer); -ENOENT is no error. *dir_step (when not NULL): the newest step
 * in dir, newer than d's or not (-1: none). */
static int newest_in(trainer *t, const char *dir, int in_memory, resume_offer *o, ckpt_data *d,
                     char *path, size_t pathlen, int64_t *dir_step) {
    char p[1200], err[1024];
    ckpt_data found = {0};
    int rc = ckpt_latest(dir, p, sizeof p, &found, warn_line, err, sizeof err);
    if (rc == -ENOENT) return 0;
    if (rc && in_memory) { /* nothing usable in memory: the disk may have it */
        log_warn("rank %d: %s", t->env.rank, err);
        return 0;
    }
    if (rc) return trainer_fail(t, rc, "%s", err);
    char why[512], what[3000];
    const char *foreign = foreign_header(t, found.header, why, sizeof why);
    if (foreign) {
        const char *name = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
        if (dir == t->cfg->ckpt_dir) {
            snprintf(what, sizeof what, "--ckpt-dir %s holds another job's checkpoints (%s: %s)",
                     dir, name, foreign);
            snapshot_dir_foreign(t, what);
        } else {
            log_warn("rank %d: the snapshot %s is another job's (%s): not resumed from",
                     t->env.rank, p, foreign);
        }
        ckpt_data_free(&found);
        return 0;
    }
    int64_t step = header_step(found.header);
    if (dir_step) *dir_step = step;
    if (step <= o->step) {
        ckpt_data_free(&found);
        return 0;
    }
    ckpt_data_free(d);
    *d = found;
    o->step = step, o->in_memory = in_memory;
    snprintf(path, pathlen, "%s", p);
    return 0;
}

/* The offer that wins: the newest step; memory before disk (no file to
 * read); then the lowest rank. */
static int better(const resume_offer *a, const resume_offer *b) {
    if (a->step != b->step) return a->step > b->step;
    if (a->in_memory != b->in_memory) return a->in_memory;
    return a->rank < b->rank;
}

static int choose_holder(trainer *t, resume_offer *mine, resume_offer *best) {
    resume_offer *all = calloc((size_t)t->env.world, sizeof *all);
    if (!all) return trainer_fail(t, -ENOMEM, "out of memory choosing what to resume from");
    int rc = comm_allgather(t->comm, mine, all, sizeof *mine);
    if (rc) {
        free(all);
        return trainer_fail(t, rc, "agreeing on what to resume from failed: %s",
                            trainer_why(comm_error(t->comm), rc));
    }
    *best = all[0];
    int keeps = 0;
    for (int r = 0; r < t->env.world; r++) {
        keeps += all[r].keeps;
        if (r > 0 && better(&all[r], best)) *best = all[r];
    }
    free(all);
    if (t->cfg->ckpt_dir[0] && keeps == 0)
        return trainer_fail(t, -EBUSY, "%s: give each job its own --ckpt-dir (no node can keep "
                                       "this job's checkpoints)",
                            t->disk.foreign ? t->disk.why
                                            : "every node's --ckpt-dir is another job's or "
                                              "cannot be used (each node says why)");
    /* Any holder will do: every node's snapshot of a step is the same state
     * (snapshot_keep gives every rank rank 0's batch-norm statistics first). */
    return 0;
}

int resume_newest(trainer *t, int *root) {
    const train_config *c = t->cfg;
    *root = -1;
    if (!c->ckpt_dir[0] && !c->snapshot_dir[0]) return 0;
    resume_offer mine = {.step = -1, .rank = t->env.rank}, best;
    /* every node takes its --ckpt-dir before reading it, once rank 0 has
     * (snapshot_lock): a directory shared with rank 0 is then rank 0's */
    if (c->ckpt_dir[0] && t->env.world > 1) {
        int rc = comm_barrier(t->comm);
        if (rc)
            return trainer_fail(t, rc, "waiting for rank 0 to take --ckpt-dir failed: %s",
                                trainer_why(comm_error(t->comm), rc));
    }
    snapshot_claim(t);
    gethostname(mine.host, sizeof mine.host - 1);
    ckpt_data d = {0};
    char path[1200] = "";
    int rc = 0;
    if (c->snapshot_dir[0] && t->env.local_rank == 0)
        rc = newest_in(t, c->snapshot_dir, 1, &mine, &d, path, sizeof path, NULL);
    if (rc == 0 && c->snapshot_disk_dir[0] && t->env.local_rank == 0)
        rc = newest_in(t, c->snapshot_disk_dir, 0, &mine, &d, path, sizeof path, NULL);
    /* every node's own --ckpt-dir: a job whose every agent is new (a
     * requeue, a new set of pods) resumes from the newest file any has;
     * a directory that is another job's is neither read nor written */
    if (rc == 0 && c->ckpt_dir[0] && t->env.local_rank == 0 && !t->disk.foreign)
        rc = newest_in(t, c->ckpt_dir, 0, &mine, &d, path, sizeof path, &t->disk.found);
    mine.keeps = c->ckpt_dir[0] && t->env.local_rank == 0 && !t->disk.foreign;
    if (rc == 0) rc = choose_holder(t, &mine, &best);
    if (rc || best.step < 0) {
        ckpt_data_free(&d);
        return rc;
    }
    int holder = best.rank, mine_held = holder == t->env.rank;
    char *header = NULL;
    rc = share_header(t, mine_held ? d.header : NULL, holder, &header);
    if (rc == 0) rc = adopt_header(t, header, mine_held ? path : "from the holder");
    if (rc == 0 && mine_held) rc = load_tensors(t, &d, path);
    if (header != d.header) free(header);
    ckpt_data_free(&d);
    if (rc) return rc;
    if (mine_held)
        log_info("resuming from %s: epoch %d, step %lld (%s of node %s)", path, t->at.epoch + 1,
                 (long long)t->at.global_step, best.in_memory ? "memory" : "disk", best.host);
    model *m = t->m;
    rc = devcomm_broadcast(t->dcomm, m->mom, m->nparam * sizeof(float), holder);
    if (rc)
        return trainer_fail(t, rc, "broadcasting the checkpoint's momentum failed: %s",
                            trainer_why(devcomm_error(t->dcomm), rc));
    *root = holder;
    return 0;
}

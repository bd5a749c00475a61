/* See coll_record.h. The file holds one coll_shm. The writer is one
 * thread at a time per field group: the issuing thread enters (in program
 * order), whichever thread runs the collective ticks and leaves. Each ring
 * slot carries its sequence number, written last on entry (release), so
 * that a reader copying the slot while it is rewritten sees the number
 * change and drops it. */
#include "common/coll_record.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/ddprun_env.h"

#define COLL_MAGIC 0x636f6c6c64647072ULL /* "rppddlloc": ddprun's collective record */
#define COLL_VERSION 3

typedef struct {
    _Atomic uint64_t seq; /* 0: being written, or never */
    char op[COLL_OP_LEN];
    _Atomic uint64_t bytes;
    _Atomic int64_t issued_ns, ended_ns;
    _Atomic int32_t rc;
} coll_slot;

typedef struct {
    _Atomic uint64_t magic; /* written last when made */
    uint32_t version, ring;
    int32_t rank, pid;
    _Atomic int64_t step;
    _Atomic uint64_t entered, done;
    _Atomic int64_t alive_ns;
    _Atomic int64_t steps, step_ns, blocked_ns, data_ns, ckpt_ns;
    _Atomic int64_t first_step, first_step_ns;
    coll_slot slot[COLL_RING];
} coll_shm;

struct coll_record {
    coll_shm *m;
    uint64_t next; /* the issuing thread's: the last number given */
    int64_t step_start_ns; /* the step under way began (0: none yet) */
};

int coll_record_open(const char *path, int rank, coll_record **out) {
    *out = NULL;
    /* a fresh file (unlinked first): a reader never sees a dead rank's
     * record half replaced */
    if (unlink(path) != 0 && errno != ENOENT) return -errno;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    coll_shm *m = MAP_FAILED;
    int rc = ftruncate(fd, sizeof *m) != 0 ? -errno : 0;
    if (!rc) {
        m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) rc = -errno;
    }
    close(fd);
    coll_record *r = rc ? NULL : calloc(1, sizeof *r);
    if (!r) {
        if (m != MAP_FAILED) munmap(m, sizeof *m);
        unlink(path);
        return rc ? rc : -ENOMEM;
    }
    m->version = COLL_VERSION, m->ring = COLL_RING;
    m->rank = rank, m->pid = (int32_t)getpid();
    atomic_store_explicit(&m->magic, COLL_MAGIC, memory_order_release);
    r->m = m;
    *out = r;
    return 0;
}

coll_record *coll_record_from_env(int rank) {
    const char *path = getenv(DDPRUN_ENV_COLL_RECORD);
    if (!path || !path[0]) return NULL;
    coll_record *r;
    int rc = coll_record_open(path, rank, &r);
    if (rc)
        fprintf(stderr,
                "warning: cannot make the collective record %s (" DDPRUN_ENV_COLL_RECORD
                "): %s; a hang will not be traced to a rank\n",
                path, strerror(-rc));
    return rc ? NULL : r;
}

void coll_record_close(coll_record *r) {
    if (!r) return;
    munmap(r->m, sizeof *r->m); /* the file stays: the agent reads it after the exit */
    free(r);
}

uint64_t coll_record_enter(coll_record *r, const char *op, uint64_t bytes) {
    if (!r) return 0;
    coll_shm *m = r->m;
    uint64_t seq = ++r->next;
    coll_slot *s = &m->slot[seq % COLL_RING];
    int64_t now = clock_now_ns();
    atomic_store_explicit(&s->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    snprintf(s->op, sizeof s->op, "%s", op);
    atomic_store_explicit(&s->bytes, bytes, memory_order_relaxed);
    atomic_store_explicit(&s->issued_ns, now, memory_order_relaxed);
    atomic_store_explicit(&s->ended_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&s->rc, 0, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq, memory_order_release);
    atomic_store_explicit(&m->alive_ns, now, memory_order_relaxed);
    atomic_store_explicit(&m->entered, seq, memory_order_release);
    return seq;
}

void coll_record_leave(coll_record *r, uint64_t seq, int rc) {
    if (!r || !seq) return;
    coll_shm *m = r->m;
    coll_slot *s = &m->slot[seq % COLL_RING];
    if (atomic_load_explicit(&s->seq, memory_order_acquire) == seq) {
        atomic_store_explicit(&s->rc, rc, memory_order_relaxed);
        atomic_store_explicit(&s->ended_ns, clock_now_ns(), memory_order_release);
    }
    if (rc == 0) atomic_store_explicit(&m->done, seq, memory_order_release);
}

void coll_record_tick(coll_record *r) {
    if (r) atomic_store_explicit(&r->m->alive_ns, clock_now_ns(), memory_order_relaxed);
}

void coll_record_step(coll_record *r, int64_t step) {
    if (!r) return;
    coll_record_step_end(r);
    int64_t now = clock_now_ns();
    if (!atomic_load_explicit(&r->m->first_step, memory_order_relaxed)) {
        atomic_store_explicit(&r->m->first_step_ns, now, memory_order_relaxed);
        atomic_store_explicit(&r->m->first_step, step, memory_order_release);
    }
    r->step_start_ns = now;
    atomic_store_explicit(&r->m->step, step, memory_order_relaxed);
}

void coll_record_step_end(coll_record *r) {
    if (!r || !r->step_start_ns) return;
    atomic_fetch_add_explicit(&r->m->step_ns, clock_now_ns() - r->step_start_ns,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&r->m->steps, 1, memory_order_release);
    r->step_start_ns = 0;
}

void coll_record_data_wait(coll_record *r, int64_t ns) {
    if (r) atomic_fetch_add_explicit(&r->m->data_ns, ns, memory_order_relaxed);
}

void coll_record_ckpt_wait(coll_record *r, int64_t ns) {
    if (r) atomic_fetch_add_explicit(&r->m->ckpt_ns, ns, memory_order_relaxed);
}

void coll_record_blocked(coll_record *r, int64_t ns) {
    if (r) atomic_fetch_add_explicit(&r->m->blocked_ns, ns, memory_order_relaxed);
}

void coll_record_position(const coll_record *r, uint64_t *entered, uint64_t *done) {
    *entered = r ? atomic_load_explicit(&r->m->entered, memory_order_acquire) : 0;
    *done = r ? atomic_load_explicit(&r->m->done, memory_order_acquire) : 0;
}

int coll_record_read(const char *path, coll_view *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    coll_shm m;
    ssize_t got = pread(fd, &m, sizeof m, 0);
    close(fd);
    if (got != (ssize_t)sizeof m || m.magic != COLL_MAGIC || m.version != COLL_VERSION ||
        m.ring != COLL_RING)
        return -EINVAL;
    out->rank = m.rank, out->pid = m.pid;
    out->step = atomic_load(&m.step);
    out->entered = atomic_load(&m.entered);
    out->done = atomic_load(&m.done);
    out->alive_ns = atomic_load(&m.alive_ns);
    out->steps = atomic_load(&m.steps);
    out->step_ns = atomic_load(&m.step_ns);
    out->blocked_ns = atomic_load(&m.blocked_ns);
    out->data_ns = atomic_load(&m.data_ns);
    out->ckpt_ns = atomic_load(&m.ckpt_ns);
    out->first_step = atomic_load(&m.first_step);
    out->first_step_ns = atomic_load(&m.first_step_ns);
    /* the ring's slots in order, those that hold what their number says */
    uint64_t first = out->entered >= COLL_RING ? out->entered - COLL_RING + 1 : 1;
    for (uint64_t seq = first; seq <= out->entered && seq; seq++) {
        const coll_slot *s = &m.slot[seq % COLL_RING];
        if (atomic_load(&s->seq) != seq) continue;
        coll_entry_view *e = &out->ring[out->n++];
        e->seq = seq;
        memcpy(e->op, s->op, sizeof e->op);
        e->op[sizeof e->op - 1] = 0;
        e->bytes = atomic_load(&s->bytes);
        e->issued_ns = atomic_load(&s->issued_ns);
        e->ended_ns = atomic_load(&s->ended_ns);
        e->rc = atomic_load(&s->rc);
    }
    return 0;
}

const coll_entry_view *coll_view_entry(const coll_view *v, uint64_t seq) {
    for (int i = 0; i < v->n; i++)
        if (v->ring[i].seq == seq) return &v->ring[i];
    return NULL;
}

/* Collectives among the ranks of one host through shared memory; see
 * comm_shm.h.
 *
 * The segment is a header (barrier counters, the abort word and each
 * rank's pipeline progress, each on its own cache line, and the local
 * ranks' pids) followed by slots, one per local rank per set: two sets for
 * the stepped collectives and pipe_sets for the pipelined all-reduce.
 *
 * Stepped (small all-reduces, broadcast, all-gather, barrier): every step
 * writes into one set, meets the others at a barrier, then reads; the next
 * step uses the other set. A rank can only start writing a set again after
 * passing the barrier of the step in between, which every rank reaches only
 * once it has finished reading that set, so one barrier per step is enough.
 * The barrier is a generation counter: the last rank to arrive resets the
 * arrival count and bumps the generation; the others spin briefly on it,
 * then sleep on it with a futex in short slices, checking between slices
 * that no peer has died, that nobody has aborted and that the deadline has
 * not passed. When the host has fewer CPUs than local ranks, spinning would
 * starve the very ranks being waited for, so waiters yield instead.
 *
 * Pipelined (all-reduces above SHM_ONESHOT_BYTES): no barriers; each rank
 * publishes how far it has got and works on whatever round is ready (see
 * allreduce_pipelined). Its waits are checked the same way. */
#include "worker/comm/comm_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/proc_stat.h"

#define SHM_MAGIC 0x53504444u /* "DDPS" */
#define SHM_VERSION 2
/* Bytes per rank per set: the unit of one step or round. Measured on a
 * 2-CPU VM with 2 and 4 ranks (25 MiB all-reduces): 128 KiB beat 256 KiB
 * by ~10%, and 512 KiB to 4 MiB were slower still (the rounds in flight
 * no longer fit the caches); below, barriers and wake-ups cost more. */
#define SHM_SLOT_BYTES ((size_t)128 << 10)
/* All-reduces up to this size take one step: every rank sums every slot
 * (one barrier, the least latency). Larger ones are pipelined so that
 * each rank sums only its share. */
#define SHM_ONESHOT_BYTES ((size_t)32 << 10)
/* How long a waiter sleeps before it looks at its peers again. */
#define SHM_SLICE_NS 10000000
/* Spins before sleeping: with a CPU per rank, the wait for a barrier is
 * usually a few microseconds, far below a futex round trip. */
#define SHM_SPINS 4000
#define SHM_YIELDS 16
/* Sets of slots in the pipelined all-reduce: how many rounds a rank may
 * run ahead of the slowest. With more ranks than CPUs, ranks take turns,
 * and each turn can then do that many rounds' work instead of one step:
 * such a host gets SHM_PIPE_BYTES of sets (8 to 64; with 4 ranks on 2
 * CPUs, 64 sets were ~15% faster than 8 on 25 MiB). Otherwise 8, which
 * keeps the rounds in flight in the caches. The first rank decides and
 * records it in the header. */
#define SHM_PIPE_BYTES ((size_t)32 << 20)
#define SHM_PIPE_MIN_SETS 8
#define SHM_PIPE_MAX_SETS 64
/* Spins before sleeping in the pipeline: a round is tens of microseconds
 * of copying, so a peer that is not ready at once is usually descheduled,
 * and spinning would only take CPU from it (or from other programs). */
#define SHM_PIPE_SPINS 100

/* One rank's progress through the pipelined all-reduce, in rounds counted
 * since the segment was made (so they only grow): rounds whose input it
 * has published, whose share it has summed, whose result it has read. Only
 * that rank writes the line; everyone reads it. */
typedef struct {
    _Alignas(64) _Atomic uint64_t copied;
    _Atomic uint64_t reduced;
    _Atomic uint64_t consumed;
    /* What this rank passed to its current pipelined all-reduce, stored
     * before its first publication in it: the op's first round, the
     * buffer's offset in a shared window (SHM_PRIVATE if none) and the
     * count. Every rank compares them before it reads anyone's data. */
    _Atomic uint64_t op_round, op_off, op_count;
    /* Making a window: the bytes this rank asked for, and 0 or the -errno
     * of its part of the set-up. */
    _Atomic uint64_t win_bytes;
    _Atomic int64_t win_err;
} shm_progress;

#define SHM_PRIVATE UINT64_MAX

typedef struct {
    uint32_t magic, version;
    int32_t nlocal, pad;
    uint64_t slot_bytes, map_bytes, pipe_sets;
    int32_t pids[COMM_SHM_MAX_LOCAL];
    _Alignas(64) _Atomic uint32_t arrived;
    _Alignas(64) _Atomic uint32_t gen;     /* the futex word */
    _Alignas(64) _Atomic uint32_t waiters; /* sleepers on gen, so wakes are skipped when none */
    _Alignas(64) _Atomic int32_t abort_err;
    _Atomic int32_t abort_by;
    /* The pipelined all-reduce: every publication of progress bumps epoch
     * (the futex word its waiters sleep on). */
    _Alignas(64) _Atomic uint32_t epoch;
    _Alignas(64) _Atomic uint32_t epoch_waiters;
    shm_progress prog[COMM_SHM_MAX_LOCAL];
} shm_hdr;

/* Data starts on the first page after the header. */
#define SHM_HDR_BYTES ((sizeof(shm_hdr) + 4095) & ~(size_t)4095)

/* A window (comm_shm_window): one mapping of nlocal parts, part i local
 * rank i's memory. */
typedef struct {
    uint8_t *base;
    size_t part, map_bytes;
} shm_window;

#define SHM_MAX_WINDOWS 16

struct comm_shm {
    shm_hdr *h;
    uint8_t *data;    /* the slots: set s, rank i at data + (s * nlocal + i) * slot_bytes */
    uint8_t *pipe;    /* the pipeline's pipe_sets sets of slots, after the two above */
    uint64_t pipe_sets;
    uint64_t round;   /* the pipeline's next round */
    size_t map_bytes, slot_bytes;
    int nlocal, index;
    unsigned seq;     /* steps taken: the set a step uses is seq & 1 */
    int oversub;      /* more local ranks than CPUs: yield rather than spin */
    int64_t next_peer_check_ns;
    int unlinked;     /* the name is gone (or was never ours to remove) */
    char name[128];   /* the segment's; windows are named after it */
    shm_window win[SHM_MAX_WINDOWS];
    int nwin;
    unsigned windows_made; /* numbers the windows' names */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, int64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static uint8_t *slot(const comm_shm *s, unsigned set, int i) {
    return s->data + ((size_t)(set & 1) * (size_t)s->nlocal + (size_t)i) * s->slot_bytes;
}

/* 1 if the process is gone or a zombie (its parent has not reaped it yet). */
static int pid_dead(pid_t pid) {
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    proc_stat st;
    int rc = proc_stat_read(pid, &st);
    if (rc) return rc == -ENOENT;
    return st.state == 'Z' || st.state == 'X';
}

void comm_shm_abort(comm_shm *s, int err) {
    if (!s) return;
    int32_t zero = 0;
    if (atomic_compare_exchange_strong(&s->h->abort_err, &zero, err ? err : -ECONNABORTED))
        atomic_store(&s->h->abort_by, s->index);
    /* Waking on a changed generation releases every waiter at once; they
     * look at abort_err before trusting a barrier. */
    atomic_fetch_add(&s->h->gen, 1);
    futex_wake_all(&s->h->gen);
    atomic_fetch_add(&s->h->epoch, 1);
    futex_wake_all(&s->h->epoch);
}

static uint8_t *pipe_slot(const comm_shm *s, uint64_t round, int i) {
    return s->pipe + ((size_t)(round % s->pipe_sets) * (size_t)s->nlocal + (size_t)i) * s->slot_bytes;
}

static int aborted(comm_shm *s, comm_call *k) {
    int err = atomic_load(&s->h->abort_err);
    return comm_call_fail(k, -ECONNABORTED,
                          "%s failed: local rank %d on this host gave up first (%s)", k->op,
                          atomic_load(&s->h->abort_by), strerror(-err));
}

/* Between sleeps: is there a reason to stop waiting? Returns it (0 if
 * none) without recording anything: a peer that has just left may have
 * done everything this rank was waiting for (the last to arrive at the
 * final barrier, say), so the caller looks at its condition once more
 * before it calls wait_fail. *who receives a dead peer's local rank. */
static int wait_problem(comm_shm *s, const comm_call *k, int *who) {
    if (atomic_load(&s->h->abort_err)) return -ECONNABORTED;
    int rc = comm_call_stopped(k);
    if (rc) return rc;
    int64_t now = clock_now_ns();
    if (now < s->next_peer_check_ns) return 0;
    s->next_peer_check_ns = now + SHM_SLICE_NS;
    for (int i = 0; i < s->nlocal; i++) {
        if (i != s->index && pid_dead(s->h->pids[i])) {
            *who = i;
            return -ECONNRESET;
        }
    }
    return 0;
}

/* Records a problem wait_problem found, tells the peers, returns it. */
static int wait_fail(comm_shm *s, comm_call *k, int rc, int who) {
    if (rc == -ECONNABORTED) return aborted(s, k);
    comm_shm_abort(s, rc);
    if (rc == -ECONNRESET)
        return comm_call_fail(k, rc,
                              "%s failed: local rank %d (pid %d) on this host exited during "
                              "the collective",
                              k->op, who, (int)s->h->pids[who]);
    int checked = comm_call_check(k); /* records the timeout or cancellation */
    return checked ? checked : rc;
}

static int wait_gen(comm_shm *s, uint32_t g, comm_call *k) {
    shm_hdr *h = s->h;
    int spins = s->oversub ? SHM_YIELDS : SHM_SPINS;
    for (int i = 0; i < spins; i++) {
        if (atomic_load_explicit(&h->gen, memory_order_acquire) != g) goto passed;
        if (s->oversub)
            sched_yield();
        else
            cpu_relax();
    }
    for (;;) {
        int who = -1, rc = wait_problem(s, k, &who);
        if (rc) {
            if (atomic_load(&h->gen) != g) goto passed;
            return wait_fail(s, k, rc, who);
        }
        atomic_fetch_add(&h->waiters, 1);
        if (atomic_load(&h->gen) == g) {
            int64_t left = comm_call_left_ns(k);
            futex_wait(&h->gen, g, left < SHM_SLICE_NS ? (left > 0 ? left : 1) : SHM_SLICE_NS);
        }
        atomic_fetch_sub(&h->waiters, 1);
        if (atomic_load(&h->gen) != g) goto passed;
    }
passed:
    if (atomic_load(&h->abort_err)) return aborted(s, k);
    return 0;
}

/* Waits until every local rank has arrived. */
static int barrier(comm_shm *s, comm_call *k) {
    shm_hdr *h = s->h;
    if (atomic_load(&h->abort_err)) return aborted(s, k);
    int rc = comm_call_check(k);
    if (rc) {
        comm_shm_abort(s, rc);
        return rc;
    }
    /* The generation cannot move before this rank arrives, so this is the
     * one the barrier is in. */
    uint32_t g = atomic_load(&h->gen);
    if (atomic_fetch_add(&h->arrived, 1) + 1 == (uint32_t)s->nlocal) {
        atomic_store(&h->arrived, 0);
        atomic_store(&h->gen, g + 1);
        if (atomic_load(&h->waiters)) futex_wake_all(&h->gen);
        return 0;
    }
    return wait_gen(s, g, k);
}

/* --- kernels ------------------------------------------------------------- */

typedef float v4f __attribute__((vector_size(16))); /* SSE: every x86-64 has it */

static inline v4f ld4(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st4(float *p, v4f v) { memcpy(p, &v, sizeof v); }

/* dst[i] = ((src[0][i] + src[1][i]) + src[2][i]) + ... : the same order on
 * every rank and every run, written to dst and, if not NULL, dst2. The
 * destinations may be among the sources: each block is summed into a
 * local buffer first. n >= 2. */
static void sum_ordered(float *dst, float *dst2, const float *const *src, int n, size_t count) {
    enum { BLK = 1024 };
    float acc[BLK] __attribute__((aligned(32)));
    for (size_t off = 0; off < count; off += BLK) {
        size_t m = count - off < BLK ? count - off : BLK, i = 0;
        const float *a = src[0] + off, *b = src[1] + off;
        for (; i + 4 <= m; i += 4) st4(acc + i, ld4(a + i) + ld4(b + i));
        for (; i < m; i++) acc[i] = a[i] + b[i];
        for (int r = 2; r < n; r++) {
            const float *c = src[r] + off;
            for (i = 0; i + 4 <= m; i += 4) st4(acc + i, ld4(acc + i) + ld4(c + i));
            for (; i < m; i++) acc[i] += c[i];
        }
        memcpy(dst + off, acc, m * sizeof(float));
        if (dst2) memcpy(dst2 + off, acc, m * sizeof(float));
    }
}

/* --- collectives --------------------------------------------------------- */

/* Small: one step. Every rank publishes its whole buffer and sums all of
 * them itself, so it needs a single barrier. */
static int allreduce_oneshot(comm_shm *s, float *buf, size_t count, comm_call *k) {
    size_t per_round = s->slot_bytes / sizeof(float);
    for (size_t off = 0; off < count; off += per_round) {
        size_t n = count - off < per_round ? count - off : per_round;
        unsigned set = s->seq++;
        memcpy(slot(s, set, s->index), buf + off, n * sizeof(float));
        int rc = barrier(s, k);
        if (rc) return rc;
        const float *src[COMM_SHM_MAX_LOCAL];
        for (int i = 0; i < s->nlocal; i++) src[i] = (const float *)slot(s, set, i);
        sum_ordered(buf + off, NULL, src, s->nlocal, n);
    }
    return 0;
}

/* Large: pipelined rounds of one slot's worth each, in one of two modes.
 *
 * Copy mode (any buffer): in round g, rank i publishes its data but for its
 * own share (copy-in), sums the i-th share of every rank's data into its
 * own buffer and publishes the sum (reduce), then copies every other rank's
 * summed share out (copy-out). A rank's own share never goes through
 * shared memory.
 *
 * Shared mode (every rank's buffer in a window at the same offset): the
 * ranks read each other's buffers in place. There is no copy-in: a rank
 * publishes every round at once on entry. Rank i sums the i-th share of
 * each round from every rank's buffer into its own, and copies the other
 * shares from their owners' buffers once summed, so each rank reads its
 * data about twice and writes it once, instead of copying it through the
 * slots as well. Nobody writes what another still reads: rank j's i-th
 * share is read by rank i's reduce alone, and rank j overwrites it (its
 * copy-out) only after that reduce. A rank returns only once every rank
 * has finished copying out, since until then they read its buffer.
 *
 * Instead of meeting at barriers, ranks publish how far each stage has got
 * and do whatever work is ready: a reduce once every rank has published
 * that round, a copy-out once every rank has summed it, a copy-in once the
 * round's set of slots is free (every rank has finished the round that
 * used it before), up to pipe_sets rounds ahead. So a rank that is
 * descheduled holds the others up only once they have run out of rounds. */

static uint64_t min_progress(const comm_shm *s, int stage) {
    uint64_t m = UINT64_MAX;
    for (int i = 0; i < s->nlocal; i++) {
        const shm_progress *p = &s->h->prog[i];
        uint64_t v = atomic_load(stage == 0 ? &p->copied : stage == 1 ? &p->reduced : &p->consumed);
        if (v < m) m = v;
    }
    return m;
}

/* Every condition a rank waits on is "the slowest rank has got past a
 * round", so only a publication that moves the slowest can release anyone:
 * only then does this bump the epoch and wake sleepers. (Of ranks
 * publishing the same round at once, at least the last to store sees all
 * the stores, since all these operations are sequentially consistent.) */
static void publish(comm_shm *s, int stage, uint64_t v) {
    shm_progress *p = &s->h->prog[s->index];
    atomic_store(stage == 0 ? &p->copied : stage == 1 ? &p->reduced : &p->consumed, v);
    if (min_progress(s, stage) < v) return;
    atomic_fetch_add(&s->h->epoch, 1);
    if (atomic_load(&s->h->epoch_waiters)) futex_wake_all(&s->h->epoch);
}

/* Waits until the epoch moves past e (someone published), or returns a
 * reason to stop (unrecorded: see wait_problem). */
static int wait_epoch(comm_shm *s, uint32_t e, int *spun, int *who, comm_call *k) {
    shm_hdr *h = s->h;
    if (*spun < (s->oversub ? SHM_YIELDS : SHM_PIPE_SPINS)) {
        (*spun)++;
        if (s->oversub)
            sched_yield();
        else
            cpu_relax();
        return 0;
    }
    int rc = wait_problem(s, k, who);
    if (rc) return rc;
    atomic_fetch_add(&h->epoch_waiters, 1);
    if (atomic_load(&h->epoch) == e) {
        int64_t left = comm_call_left_ns(k);
        futex_wait(&h->epoch, e, left < SHM_SLICE_NS ? (left > 0 ? left : 1) : SHM_SLICE_NS);
    }
    atomic_fetch_sub(&h->epoch_waiters, 1);
    return 0;
}

typedef struct {
    float *buf;
    size_t count, per_round;
    uint64_t g0;  /* the op's first round */
    uint64_t off; /* shared mode: the buffer's byte offset in its window; else SHM_PRIVATE */
    const float *peer[COMM_SHM_MAX_LOCAL]; /* shared mode: every local rank's buffer */
} pipe_op;

static int shared_mode(const pipe_op *op) { return op->off != SHM_PRIVATE; }

/* Round g's length: the last round may be short. */
static size_t round_len(const pipe_op *op, uint64_t g) {
    size_t off = (size_t)(g - op->g0) * op->per_round;
    return op->count - off < op->per_round ? op->count - off : op->per_round;
}

static void share_of(int L, int i, size_t n, size_t *a, size_t *b) {
    /* Shares start on cache lines so that no two ranks write one line. */
    size_t share = ((n + (size_t)L - 1) / (size_t)L + 15) & ~(size_t)15;
    *a = (size_t)i * share < n ? (size_t)i * share : n;
    *b = *a + share < n ? *a + share : n;
}

/* Where rank i's round g starts: its published copy (copy mode: its slot,
 * which holds its input until it has reduced, then its share's sum) or its
 * own buffer (shared mode). */
static const float *round_src(const comm_shm *s, const pipe_op *op, uint64_t g, int i) {
    if (shared_mode(op)) return op->peer[i] + (g - op->g0) * op->per_round;
    return (const float *)pipe_slot(s, g, i);
}

static void copy_in(comm_shm *s, const pipe_op *op, uint64_t g) {
    size_t n = round_len(op, g), a, b;
    share_of(s->nlocal, s->index, n, &a, &b);
    float *mine = (float *)pipe_slot(s, g, s->index), *data = op->buf + (g - op->g0) * op->per_round;
    memcpy(mine, data, a * sizeof(float));
    memcpy(mine + b, data + b, (n - b) * sizeof(float));
}

static void reduce(comm_shm *s, const pipe_op *op, uint64_t g) {
    size_t n = round_len(op, g), a, b;
    share_of(s->nlocal, s->index, n, &a, &b);
    if (b == a) return;
    float *data = op->buf + (g - op->g0) * op->per_round;
    const float *src[COMM_SHM_MAX_LOCAL];
    for (int i = 0; i < s->nlocal; i++) src[i] = (i == s->index ? data : round_src(s, op, g, i)) + a;
    /* In copy mode the sum also goes to this rank's slot for the others. */
    float *publish_to = shared_mode(op) ? NULL : (float *)pipe_slot(s, g, s->index) + a;
    sum_ordered(data + a, publish_to, src, s->nlocal, b - a);
}

static void copy_out(comm_shm *s, const pipe_op *op, uint64_t g) {
    size_t n = round_len(op, g);
    float *data = op->buf + (g - op->g0) * op->per_round;
    for (int i = 0; i < s->nlocal; i++) {
        size_t a, b;
        share_of(s->nlocal, i, n, &a, &b);
        if (i != s->index) memcpy(data + a, round_src(s, op, g, i) + a, (b - a) * sizeof(float));
    }
}

/* Before this rank reads anyone's data: did every rank pass the same
 * count, and the same kind of buffer? (A shared-mode rank would otherwise
 * read slots that a copy-mode rank never filled, or the other way round.)
 * Called once every rank has published the op's first round, so each has
 * stored what it passed. */
static int check_same_op(comm_shm *s, const pipe_op *op, comm_call *k) {
    for (int i = 0; i < s->nlocal; i++) {
        const shm_progress *p = &s->h->prog[i];
        uint64_t round = atomic_load(&p->op_round), off = atomic_load(&p->op_off),
                 count = atomic_load(&p->op_count);
        if (round == op->g0 && off == op->off && count == op->count) continue;
        int rc = -EINVAL;
        if (count != op->count || round != op->g0)
            rc = comm_call_fail(k, rc,
                                "%s: local rank %d passed %llu floats and this rank (local rank "
                                "%d) %zu: every rank must pass the same count",
                                k->op, i, (unsigned long long)count, s->index, op->count);
        else
            rc = comm_call_fail(k, rc,
                                "%s: local rank %d passed %s and this rank (local rank %d) %s: "
                                "either every rank passes memory from comm_alloc, at the same "
                                "offset, or none does",
                                k->op, i, off == SHM_PRIVATE ? "its own memory" : "shared memory",
                                s->index, shared_mode(op) ? "shared memory" : "its own memory");
        comm_shm_abort(s, rc);
        return rc;
    }
    return 0;
}

typedef struct {
    uint64_t in, red, out, end; /* the next round of each stage; the op's end */
    uint64_t ahead;             /* shared mode: how far reduces may run ahead of copy-outs */
} pipe_pos;

enum { STAGE_NONE, STAGE_COPY_IN, STAGE_REDUCE, STAGE_COPY_OUT };

/* Which stage can run now. In copy mode, others wait on a reduce (to copy
 * out) more than on a copy-in (to reduce), so reduces go first. In shared
 * mode a copy-out goes first while what it reads is still in the caches;
 * reduces run ahead at most `ahead` rounds. */
static int ready_stage(const comm_shm *s, const pipe_op *op, const pipe_pos *p) {
    int copy_out_ready = p->out < p->red && min_progress(s, 1) > p->out;
    if (shared_mode(op)) {
        if (copy_out_ready) return STAGE_COPY_OUT;
        if (p->red < p->end && p->red - p->out < p->ahead && min_progress(s, 0) > p->red)
            return STAGE_REDUCE;
        return STAGE_NONE;
    }
    if (p->red < p->in && min_progress(s, 0) > p->red) return STAGE_REDUCE;
    if (p->in < p->end && min_progress(s, 2) + s->pipe_sets > p->in) return STAGE_COPY_IN;
    return copy_out_ready ? STAGE_COPY_OUT : STAGE_NONE;
}

/* Done once this rank has copied out every round and, in shared mode,
 * every other rank has too (they read this rank's buffer until then). */
static int op_done(const comm_shm *s, const pipe_op *op, const pipe_pos *p) {
    return p->out == p->end && (!shared_mode(op) || min_progress(s, 2) >= p->end);
}

static int allreduce_pipelined(comm_shm *s, pipe_op *op, comm_call *k) {
    op->per_round = s->slot_bytes / sizeof(float);
    op->g0 = s->round;
    uint64_t end = op->g0 + (op->count + op->per_round - 1) / op->per_round;
    pipe_pos p = {op->g0, op->g0, op->g0, end, s->pipe_sets};
    int spun = 0, rc = 0;
    s->round = end;
    shm_progress *me = &s->h->prog[s->index];
    atomic_store(&me->op_round, op->g0);
    atomic_store(&me->op_off, op->off);
    atomic_store(&me->op_count, op->count);
    if (shared_mode(op)) publish(s, 0, p.in = end);
    while (!op_done(s, op, &p)) {
        uint32_t e = atomic_load(&s->h->epoch);
        if (atomic_load(&s->h->abort_err)) return aborted(s, k);
        /* Bounded even while progressing (a clock read per round is free). */
        if ((rc = comm_call_check(k))) {
            comm_shm_abort(s, rc);
            return rc;
        }
        switch (ready_stage(s, op, &p)) {
        case STAGE_COPY_IN: copy_in(s, op, p.in); publish(s, 0, ++p.in); break;
        case STAGE_REDUCE:
            if (p.red == op->g0 && (rc = check_same_op(s, op, k))) return rc;
            reduce(s, op, p.red);
            publish(s, 1, ++p.red);
            break;
        case STAGE_COPY_OUT: copy_out(s, op, p.out); publish(s, 2, ++p.out); break;
        default: {
            int who = -1;
            rc = wait_epoch(s, e, &spun, &who, k);
            if (rc && !ready_stage(s, op, &p) && !op_done(s, op, &p)) return wait_fail(s, k, rc, who);
            continue;
        }
        }
        spun = 0;
    }
    return 0;
}

/* The window holding [p, p + bytes) in this rank's part, and p's offset
 * in that part; NULL if none does. */
static const shm_window *window_of(const comm_shm *s, const void *p, size_t bytes, size_t *off) {
    uintptr_t a = (uintptr_t)p;
    for (int w = 0; w < s->nwin; w++) {
        uintptr_t mine = (uintptr_t)s->win[w].base + (uintptr_t)s->index * s->win[w].part;
        if (a >= mine && a - mine <= s->win[w].part && bytes <= s->win[w].part - (a - mine)) {
            *off = a - mine;
            return &s->win[w];
        }
    }
    return NULL;
}

int comm_shm_allreduce(comm_shm *s, float *buf, size_t count, comm_call *k) {
    if (count * sizeof(float) <= SHM_ONESHOT_BYTES) return allreduce_oneshot(s, buf, count, k);
    pipe_op op = {.buf = buf, .count = count, .off = SHM_PRIVATE};
    size_t off = 0;
    const shm_window *w = window_of(s, buf, count * sizeof(float), &off);
    if (w) {
        op.off = off;
        for (int i = 0; i < s->nlocal; i++)
            op.peer[i] = (const float *)(w->base + (size_t)i * w->part + off);
    }
    return allreduce_pipelined(s, &op, k);
}

int comm_shm_broadcast(comm_shm *s, void *buf, size_t bytes, int root, comm_call *k) {
    /* Only the root writes, so a whole set of slots is one step. */
    size_t step = s->slot_bytes * (size_t)s->nlocal;
    for (size_t off = 0; off < bytes; off += step) {
        size_t n = bytes - off < step ? bytes - off : step;
        unsigned set = s->seq++;
        if (s->index == root) memcpy(slot(s, set, 0), (uint8_t *)buf + off, n);
        int rc = barrier(s, k);
        if (rc) return rc;
        if (s->index != root) memcpy((uint8_t *)buf + off, slot(s, set, 0), n);
    }
    return 0;
}

int comm_shm_allgather(comm_shm *s, const void *send, void *recv, size_t bytes, comm_call *k) {
    for (size_t off = 0; off < bytes; off += s->slot_bytes) {
        size_t n = bytes - off < s->slot_bytes ? bytes - off : s->slot_bytes;
        unsigned set = s->seq++;
        memcpy(slot(s, set, s->index), (const uint8_t *)send + off, n);
        int rc = barrier(s, k);
        if (rc) return rc;
        for (int i = 0; i < s->nlocal; i++)
            memcpy((uint8_t *)recv + (size_t)i * bytes + off, slot(s, set, i), n);
    }
    return 0;
}

int comm_shm_barrier(comm_shm *s, comm_call *k) { return barrier(s, k); }

/* --- windows ------------------------------------------------------------- */

/* The set-up of a window is collective: the first rank makes a segment of
 * nlocal equal parts, the others map it once it exists, and the first
 * removes its name once all have (so, as the main segment, it dies with
 * its last user). Every rank ends with the same outcome: a rank that could
 * not map it makes the others give it up too. */

/* Opens (or, with create, makes) the segment name of bytes and maps it
 * whole. Making one allocates its memory at once, which turns a full
 * /dev/shm into an error here rather than a SIGBUS in the middle of a
 * collective; a failed make removes the name. 0 or -errno. */
static int segment_map(const char *name, size_t bytes, int create, int populate, uint8_t **out) {
    int fd = shm_open(name, create ? O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC : O_RDWR | O_CLOEXEC,
                      0600);
    if (fd < 0) return -errno;
    int rc = create ? -posix_fallocate(fd, 0, (off_t)bytes) : 0;
    void *map = MAP_FAILED;
    if (rc == 0) {
        map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0),
                   fd, 0);
        if (map == MAP_FAILED) rc = -errno;
    }
    close(fd);
    if (rc && create) shm_unlink(name);
    *out = rc ? NULL : map;
    return rc;
}

int comm_shm_window(comm_shm *s, size_t bytes, void **mine, comm_call *k) {
    *mine = NULL;
    if (s->nwin == SHM_MAX_WINDOWS)
        return comm_call_fail(k, -ENOMEM, "%s: this communicator already has %d windows", k->op,
                              SHM_MAX_WINDOWS);
    size_t part = ((bytes ? bytes : 1) + 4095) & ~(size_t)4095;
    if (part > SIZE_MAX / (size_t)s->nlocal)
        return comm_call_fail(k, -ENOMEM, "%s: %zu bytes per rank is too much", k->op, bytes);
    size_t total = part * (size_t)s->nlocal;
    char name[sizeof s->name + 16];
    snprintf(name, sizeof name, "%s-w%u", s->name, s->windows_made++);
    shm_progress *me = &s->h->prog[s->index];
    uint8_t *base = NULL;
    atomic_store(&me->win_bytes, bytes);
    atomic_store(&me->win_err, s->index == 0 ? segment_map(name, total, 1, 0, &base) : 0);
    int rc = barrier(s, k);
    for (int i = 0; rc == 0 && i < s->nlocal; i++) {
        uint64_t b = atomic_load(&s->h->prog[i].win_bytes);
        if (b != bytes) {
            rc = comm_call_fail(k, -EINVAL,
                                "%s: local rank %d asked for %llu bytes and this rank (local "
                                "rank %d) for %zu: every rank must ask for the same",
                                k->op, i, (unsigned long long)b, s->index, bytes);
            comm_shm_abort(s, rc);
        }
    }
    if (rc == 0 && s->index != 0 && atomic_load(&s->h->prog[0].win_err) == 0)
        atomic_store(&me->win_err, segment_map(name, total, 0, 0, &base));
    if (rc == 0) rc = barrier(s, k);
    if (s->index == 0 && base) shm_unlink(name);
    for (int i = 0; rc == 0 && i < s->nlocal; i++) {
        int err = (int)atomic_load(&s->h->prog[i].win_err);
        if (err)
            rc = comm_call_fail(k, -ENOMEM,
                                "cannot %s %zu bytes of shared memory (%zu per rank for %d ranks): "
                                "%s at local rank %d (is /dev/shm full or too small?)",
                                i == 0 ? "allocate" : "map", total, part, s->nlocal,
                                strerror(-err), i);
    }
    if (rc) {
        if (base) munmap(base, total);
        return rc;
    }
    s->win[s->nwin++] = (shm_window){base, part, total};
    *mine = base + (size_t)s->index * part;
    return 0;
}

int comm_shm_window_free(comm_shm *s, void *mine) {
    for (int w = 0; w < s->nwin; w++) {
        if ((uint8_t *)mine != s->win[w].base + (size_t)s->index * s->win[w].part) continue;
        munmap(s->win[w].base, s->win[w].map_bytes);
        s->win[w] = s->win[--s->nwin];
        return 0;
    }
    return -EINVAL;
}

/* --- setup --------------------------------------------------------------- */

static int cpus_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static size_t pipe_sets(int nlocal) {
    if (nlocal <= cpus_available()) return SHM_PIPE_MIN_SETS;
    size_t n = SHM_PIPE_BYTES / ((size_t)nlocal * SHM_SLOT_BYTES);
    return n < SHM_PIPE_MIN_SETS ? SHM_PIPE_MIN_SETS : n > SHM_PIPE_MAX_SETS ? SHM_PIPE_MAX_SETS : n;
}

static size_t map_size(int nlocal, size_t sets) {
    return SHM_HDR_BYTES + (2 + sets) * (size_t)nlocal * SHM_SLOT_BYTES;
}

static comm_shm *shm_new(int nlocal, int index, void *map, size_t map_bytes, size_t sets) {
    comm_shm *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->h = map;
    s->data = (uint8_t *)map + SHM_HDR_BYTES;
    s->pipe = s->data + 2 * (size_t)nlocal * SHM_SLOT_BYTES;
    s->pipe_sets = sets;
    s->map_bytes = map_bytes;
    s->slot_bytes = SHM_SLOT_BYTES;
    s->nlocal = nlocal;
    s->index = index;
    s->oversub = nlocal > cpus_available();
    return s;
}

/* "/ddp-<hint>-<pid>-<random>": readable in /dev/shm while it briefly
 * exists, and unique even when two jobs share a key prefix. */
static void make_name(char *name, size_t len, const char *hint) {
    char clean[64];
    size_t j = 0;
    for (const char *p = hint; *p && j < sizeof clean - 1; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '-' || ch == '.';
        if (!ok) ch = '_';
        if (ch == '_' && (j == 0 || clean[j - 1] == '_')) continue;
        clean[j++] = ch;
    }
    while (j > 0 && clean[j - 1] == '_') j--;
    clean[j] = 0;
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = (uint64_t)clock_now_ns();
    snprintf(name, len, "/ddp-%s-%d-%016llx", clean, (int)getpid(), (unsigned long long)r);
}

int comm_shm_create(const char *name_hint, int nlocal, const pid_t *pids, comm_shm **out,
                    char *name, size_t namelen, comm_call *k) {
    *out = NULL;
    if (nlocal < 2 || nlocal > COMM_SHM_MAX_LOCAL)
        return comm_call_fail(k, -EINVAL, "%d ranks on one host: shared memory takes 2 to %d",
                              nlocal, COMM_SHM_MAX_LOCAL);
    char nm[128];
    make_name(nm, sizeof nm, name_hint);
    size_t sets = pipe_sets(nlocal), bytes = map_size(nlocal, sets);
    uint8_t *map = NULL;
    int rc = segment_map(nm, bytes, 1, 1, &map);
    if (rc)
        return comm_call_fail(k, rc,
                              "cannot make %zu bytes of shared memory (%s) for %d ranks: %s "
                              "(is /dev/shm full or too small?)",
                              bytes, nm, nlocal, strerror(-rc));
    shm_hdr *h = (shm_hdr *)map;
    h->magic = SHM_MAGIC;
    h->version = SHM_VERSION;
    h->nlocal = nlocal;
    h->slot_bytes = SHM_SLOT_BYTES;
    h->map_bytes = bytes;
    h->pipe_sets = sets;
    for (int i = 0; i < nlocal; i++) h->pids[i] = (int32_t)pids[i];
    comm_shm *s = shm_new(nlocal, 0, map, bytes, sets);
    if (!s) {
        munmap(map, bytes);
        shm_unlink(nm);
        return comm_call_fail(k, -ENOMEM, "out of memory");
    }
    snprintf(s->name, sizeof s->name, "%s", nm);
    snprintf(name, namelen, "%s", nm);
    *out = s;
    return 0;
}

int comm_shm_attach(const char *name, int nlocal, int index, comm_shm **out, comm_call *k) {
    *out = NULL;
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return comm_call_fail(k, -errno,
                              "cannot open shared memory %s made by the first rank on this host: "
                              "%s (do the ranks share /dev/shm?)",
                              name, strerror(errno));
    struct stat st = {0};
    size_t bytes = 0;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= map_size(nlocal, SHM_PIPE_MIN_SETS)) {
        bytes = (size_t)st.st_size;
        map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    }
    int saved = errno;
    close(fd);
    if (map == MAP_FAILED)
        return comm_call_fail(k, -EPROTO, "cannot map shared memory %s (%lld bytes): %s", name,
                              (long long)st.st_size, strerror(saved));
    shm_hdr *h = (shm_hdr *)map;
    size_t sets = h->pipe_sets;
    if (h->magic != SHM_MAGIC || h->version != SHM_VERSION || h->nlocal != nlocal ||
        sets < SHM_PIPE_MIN_SETS || sets > SHM_PIPE_MAX_SETS || h->map_bytes != bytes ||
        map_size(nlocal, sets) != bytes) {
        munmap(map, bytes);
        return comm_call_fail(k, -EPROTO,
                              "shared memory %s is not this job's (magic %08x, %d ranks, %zu "
                              "bytes; expected %d ranks)",
                              name, h->magic, h->nlocal, bytes, nlocal);
    }
    comm_shm *s = shm_new(nlocal, index, map, bytes, sets);
    if (!s) {
        munmap(map, bytes);
        return comm_call_fail(k, -ENOMEM, "out of memory");
    }
    s->unlinked = 1;
    snprintf(s->name, sizeof s->name, "%s", name);
    *out = s;
    return 0;
}

int comm_shm_ready(comm_shm *s, comm_call *k) {
    int rc = barrier(s, k);
    if (s->index == 0 && !s->unlinked) {
        shm_unlink(s->name);
        s->unlinked = 1;
    }
    return rc;
}

void comm_shm_destroy(comm_shm *s) {
    if (!s) return;
    if (!s->unlinked) shm_unlink(s->name);
    for (int w = 0; w < s->nwin; w++) munmap(s->win[w].base, s->win[w].map_bytes);
    munmap(s->h, s->map_bytes);
    free(s);
}

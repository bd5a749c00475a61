/* Tests of the CPU communicator (worker/comm*.c). Each test forks a store
 * process (the fixture's server thread runs there), then one child per
 * rank. The test process itself never starts a thread: a child forked
 * while another thread holds an allocator lock (AddressSanitizer's, for
 * one) would deadlock on its first malloc. The ranks report through their
 * exit status, through test_fail (whose message reaches the runner) and
 * through a shared anonymous mapping that the parent reads afterwards
 * (digests of results, error codes, times).
 *
 * Modes: shared memory (one host), TCP only (no_shm: a ring of every
 * rank) and hierarchical ("hosts" simulated on this machine with
 * DDPRUN_COMM_HOST_ID: shared memory inside each, a ring between them). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/unit/store_fixture.h"
#include "tests/unit/test.h"
#include "worker/comm/comm.h"

#define MAX_RANKS 8

typedef void (*rank_fn)(comm *c, int rank, int world, void *arg);

typedef struct {
    int world;
    int no_shm;
    const char *hosts;  /* NULL: every rank on this host; else one letter per rank */
    int timeout_ms;     /* 0: 10 s */
    rank_fn fn;
    void *arg;          /* in shared memory when the ranks write to it */
    int kill_rank;      /* >= 0: SIGKILL this rank kill_after_ms after start */
    int kill_after_ms;
} group;

/* What the ranks report back. */
typedef struct {
    uint64_t digest[MAX_RANKS][8];
    int rc[MAX_RANKS];
    double ms[MAX_RANKS];
    atomic_int counter;
    int use_window; /* until_failure: all-reduce window memory (comm_alloc) */
} shared_out;

static void *shared_alloc(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    memset(p, 0, n);
    return p;
}

static uint64_t digest(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

typedef struct {
    pid_t pid;
    int port;
} store_proc;

static store_proc store_start(void) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    store_proc s = {fork(), 0};
    CHECK(s.pid >= 0);
    if (s.pid == 0) {
        close(fds[0]);
        store_fixture f;
        fixture_start(&f, NULL);
        if (write(fds[1], &f.port, sizeof f.port) != (ssize_t)sizeof f.port) _exit(1);
        for (;;) pause(); /* until store_stop */
    }
    close(fds[1]);
    ssize_t n = read(fds[0], &s.port, sizeof s.port);
    close(fds[0]);
    if (n != (ssize_t)sizeof s.port) test_fail(__FILE__, __LINE__, "the store did not start");
    return s;
}

static void store_stop(store_proc *s) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
}

static void rank_main(const store_proc *f, const group *g, int rank, int run) {
    if (g->hosts) {
        char id[32];
        snprintf(id, sizeof id, "test-host-%c", g->hosts[rank]);
        setenv("DDPRUN_COMM_HOST_ID", id, 1);
    } else {
        unsetenv("DDPRUN_COMM_HOST_ID");
    }
    char prefix[64], err[512];
    snprintf(prefix, sizeof prefix, "/test_comm/%d/run_%d/", (int)getppid(), run);
    comm_opts o = {.store_host = "127.0.0.1", .store_port = f->port, .prefix = prefix,
                   .rank = rank, .world = g->world, .local_rank = rank, .local_world = g->world,
                   .timeout_ms = g->timeout_ms ? g->timeout_ms : 10000, .no_shm = g->no_shm};
    comm *c = NULL;
    int rc = comm_init(&o, &c, err, sizeof err);
    if (rc) test_fail(__FILE__, __LINE__, "rank %d: comm_init: %s (%s)", rank, err, strerror(-rc));
    CHECK_EQ(comm_rank(c), rank);
    CHECK_EQ(comm_world(c), g->world);
    g->fn(c, rank, g->world, g->arg);
    comm_destroy(c);
    /* _exit: LeakSanitizer in a child forked from a threaded process
     * reports the parent's threads, not leaks. */
    _exit(0);
}

/* Runs one group of ranks to completion; fails the test if a rank fails
 * or if the group is not done within 20 s. */
static void run_group(const store_proc *f, const group *g) {
    static int runs;
    int run = runs++;
    pid_t pids[MAX_RANKS];
    CHECK(g->world <= MAX_RANKS);
    for (int r = 0; r < g->world; r++) {
        pids[r] = fork();
        CHECK(pids[r] >= 0);
        if (pids[r] == 0) rank_main(f, g, r, run);
    }
    double t0 = (clock_now_ns() / 1e6);
    int left = g->world, killed = 0;
    while (left > 0) {
        if (g->kill_rank >= 0 && !killed && (clock_now_ns() / 1e6) - t0 >= g->kill_after_ms &&
            pids[g->kill_rank] > 0) {
            kill(pids[g->kill_rank], SIGKILL);
            killed = 1;
        }
        int status = 0, r = 0;
        pid_t p = 0;
        for (; r < g->world && p == 0; r++)
            if (pids[r] > 0) p = waitpid(pids[r], &status, WNOHANG);
        if (p <= 0) {
            if ((clock_now_ns() / 1e6) - t0 > 20000) {
                for (r = 0; r < g->world; r++)
                    if (pids[r] > 0) kill(pids[r], SIGKILL);
                test_fail(__FILE__, __LINE__, "ranks still running after 20 s (a hang)");
            }
            usleep(1000);
            continue;
        }
        r--;
        pids[r] = -1;
        left--;
        if (r == g->kill_rank) continue;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            for (int q = 0; q < g->world; q++)
                if (pids[q] > 0) kill(pids[q], SIGKILL);
            test_fail(__FILE__, __LINE__, "rank %d %s %d", r,
                      WIFEXITED(status) ? "exited with status" : "was killed by signal",
                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        }
    }
}

/* --- the collectives, checked exactly ------------------------------------ */

/* Small integers: every partial sum is exact, so the expected total is
 * known whatever the order of the additions. */
static float val(int rank, size_t i) { return (float)((int)((i * 7 + (size_t)rank * 3) % 11) - 5); }

/* All-reduces b (count floats, any memory) and checks every element. */
static void check_sum_in(comm *c, int rank, int world, float *b, size_t count) {
    for (size_t i = 0; i < count; i++) b[i] = val(rank, i);
    int rc = comm_allreduce_sum(c, b, count);
    if (rc) test_fail(__FILE__, __LINE__, "rank %d: all-reduce of %zu: %s", rank, count,
                      comm_error(c));
    for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < world; r++) want += val(r, i);
        if (b[i] != want)
            test_fail(__FILE__, __LINE__, "rank %d: all-reduce of %zu floats: [%zu] = %g, want %g",
                      rank, count, i, (double)b[i], (double)want);
    }
}

static void check_allreduce(comm *c, int rank, int world, size_t count) {
    float *b = malloc(count * sizeof *b);
    CHECK(b != NULL);
    check_sum_in(c, rank, world, b, count);
    free(b);
}

static void check_broadcast(comm *c, int rank, int world, size_t bytes) {
    uint8_t *b = malloc(bytes);
    CHECK(b != NULL);
    for (int root = 0; root < world; root++) {
        for (size_t i = 0; i < bytes; i++)
            b[i] = rank == root ? (uint8_t)(root * 31 + i * 7) : 0xEE;
        int rc = comm_broadcast(c, b, bytes, root);
        if (rc) test_fail(__FILE__, __LINE__, "rank %d: broadcast: %s", rank, comm_error(c));
        for (size_t i = 0; i < bytes; i++)
            if (b[i] != (uint8_t)(root * 31 + i * 7))
                test_fail(__FILE__, __LINE__, "rank %d: broadcast of %zu from %d: byte %zu wrong",
                          rank, bytes, root, i);
    }
    free(b);
}

static void check_allgather(comm *c, int rank, int world, size_t bytes) {
    uint8_t *s = malloc(bytes), *r = malloc(bytes * (size_t)world);
    CHECK(s && r);
    for (size_t i = 0; i < bytes; i++) s[i] = (uint8_t)(rank * 13 + i);
    memset(r, 0xEE, bytes * (size_t)world);
    int rc = comm_allgather(c, s, r, bytes);
    if (rc) test_fail(__FILE__, __LINE__, "rank %d: all-gather: %s", rank, comm_error(c));
    for (int q = 0; q < world; q++)
        for (size_t i = 0; i < bytes; i++)
            if (r[(size_t)q * bytes + i] != (uint8_t)(q * 13 + i))
                test_fail(__FILE__, __LINE__, "rank %d: all-gather of %zu: rank %d's byte %zu wrong",
                          rank, bytes, q, i);
    free(s);
    free(r);
}

static void check_barrier(comm *c, int rank, int world, shared_out *out) {
    /* Nobody leaves a barrier before everyone has arrived. */
    for (int round = 1; round <= 5; round++) {
        if (rank == round % world) usleep(20000); /* a late arrival */
        atomic_fetch_add(&out->counter, 1);
        int rc = comm_barrier(c);
        if (rc) test_fail(__FILE__, __LINE__, "rank %d: barrier: %s", rank, comm_error(c));
        int seen = atomic_load(&out->counter);
        if (seen < round * world)
            test_fail(__FILE__, __LINE__, "rank %d left barrier %d with %d of %d arrivals", rank,
                      round, seen, round * world);
        CHECK_EQ(comm_barrier(c), 0); /* so no rank starts the next round early */
    }
}

static void check_async(comm *c, int rank, int world) {
    enum { N = 4 };
    const size_t sizes[N] = {1000, 1 << 18, 5, (1 << 16) + 1};
    float *b[N];
    comm_req *req[N];
    for (int j = 0; j < N; j++) {
        b[j] = malloc(sizes[j] * sizeof(float));
        CHECK(b[j] != NULL);
        for (size_t i = 0; i < sizes[j]; i++) b[j][i] = val(rank + j, i);
        CHECK_EQ(comm_allreduce_sum_async(c, b[j], sizes[j], &req[j]), 0);
    }
    /* A synchronous call issued meanwhile runs after the queued ones. */
    check_allreduce(c, rank, world, 77);
    for (int j = 0; j < N; j++) {
        int rc = comm_wait(req[j]);
        if (rc) test_fail(__FILE__, __LINE__, "rank %d: async %d: %s", rank, j, comm_error(c));
        for (size_t i = 0; i < sizes[j]; i++) {
            float want = 0;
            for (int r = 0; r < world; r++) want += val(r + j, i);
            if (b[j][i] != want)
                test_fail(__FILE__, __LINE__, "rank %d: async all-reduce %d: [%zu] = %g, want %g",
                          rank, j, i, (double)b[j][i], (double)want);
        }
        free(b[j]);
    }
}

static void all_collectives(comm *c, int rank, int world, void *arg) {
    const size_t counts[] = {1, 7, 1000, (1 << 20) + 3};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
        check_allreduce(c, rank, world, counts[i]);
    check_broadcast(c, rank, world, 1);
    check_broadcast(c, rank, world, 1000);
    check_broadcast(c, rank, world, (3 << 20) + 5);
    check_allgather(c, rank, world, 1);
    check_allgather(c, rank, world, 100);
    check_allgather(c, rank, world, (600 << 10) + 3);
    check_barrier(c, rank, world, arg);
    check_async(c, rank, world);
}

static void collectives_test(int world, int no_shm, const char *hosts) {
    store_proc f = store_start();
    shared_out *out = shared_alloc(sizeof *out);
    group g = {.world = world, .no_shm = no_shm, .hosts = hosts, .fn = all_collectives,
               .arg = out, .kill_rank = -1};
    run_group(&f, &g);
    store_stop(&f);
}

TEST(comm_world1) { collectives_test(1, 0, NULL); }
TEST(comm_shm_2) { collectives_test(2, 0, NULL); }
TEST(comm_shm_3) { collectives_test(3, 0, NULL); }
TEST(comm_shm_4) { collectives_test(4, 0, NULL); }
TEST(comm_tcp_2) { collectives_test(2, 1, NULL); }
TEST(comm_tcp_3) { collectives_test(3, 1, NULL); }
TEST(comm_tcp_4) { collectives_test(4, 1, NULL); }
/* Two "hosts" of two ranks: shared memory inside, a ring between. */
TEST(comm_hosts_2x2) { collectives_test(4, 0, "aabb"); }
/* Hosts whose ranks interleave and differ in number: the all-gather must
 * put host-major blocks back in rank order. */
TEST(comm_hosts_uneven) { collectives_test(5, 0, "abcab"); }

/* --- determinism --------------------------------------------------------- */

#define DET_COUNT ((1u << 20) + 3)

static float rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 1000.0f;
}

static void fill_random(float *b, size_t n, int rank) {
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1);
    for (size_t i = 0; i < n; i++) b[i] = rnd(&s);
}

static void random_sums(comm *c, int rank, int world, void *arg) {
    (void)world;
    shared_out *out = arg;
    const size_t counts[] = {DET_COUNT, 1000, 3};
    float *b = malloc(DET_COUNT * sizeof *b);
    CHECK(b != NULL);
    for (int j = 0; j < 3; j++) {
        fill_random(b, counts[j], rank);
        int rc = comm_allreduce_sum(c, b, counts[j]);
        if (rc) test_fail(__FILE__, __LINE__, "rank %d: all-reduce: %s", rank, comm_error(c));
        out->digest[rank][j] = digest(b, counts[j] * sizeof *b);
    }
    free(b);
}

/* Two runs of the same random sums: every rank of both runs has the same
 * bits; on one host the sum is the documented one, in rank order. */
static void determinism_test(int world, int no_shm, const char *hosts, int rank_order) {
    store_proc f = store_start();
    shared_out *a = shared_alloc(sizeof *a), *b = shared_alloc(sizeof *b);
    group g = {.world = world, .no_shm = no_shm, .hosts = hosts, .fn = random_sums, .arg = a,
               .kill_rank = -1};
    run_group(&f, &g);
    g.arg = b;
    run_group(&f, &g);
    store_stop(&f);
    for (int r = 0; r < world; r++)
        for (int j = 0; j < 3; j++) {
            if (a->digest[r][j] != a->digest[0][j])
                test_fail(__FILE__, __LINE__, "rank %d's sum %d differs from rank 0's", r, j);
            if (b->digest[r][j] != a->digest[r][j])
                test_fail(__FILE__, __LINE__, "rank %d's sum %d differs between runs", r, j);
        }
    if (!rank_order) return;
    float *sum = malloc(DET_COUNT * sizeof *sum), *x = malloc(DET_COUNT * sizeof *x);
    CHECK(sum && x);
    fill_random(sum, DET_COUNT, 0);
    for (int r = 1; r < world; r++) {
        fill_random(x, DET_COUNT, r);
        for (size_t i = 0; i < DET_COUNT; i++) sum[i] += x[i];
    }
    if (digest(sum, DET_COUNT * sizeof *sum) != a->digest[0][0])
        test_fail(__FILE__, __LINE__, "the sum is not ((x0 + x1) + x2) + ... in rank order");
    free(sum);
    free(x);
}

TEST(comm_deterministic_shm) { determinism_test(4, 0, NULL, 1); }
TEST(comm_deterministic_tcp) { determinism_test(3, 1, NULL, 0); }
TEST(comm_deterministic_hosts) { determinism_test(4, 0, "abab", 0); }

/* --- shared windows (comm_alloc) ---------------------------------------- */

#define WIN_FLOATS ((1u << 20) + 40)

/* Names this test process's ranks left in /dev/shm (segments and windows
 * are named after the key prefix, "/test_comm/<pid>/run_<n>/"); each is
 * meant to be unlinked once every local rank has mapped it. */
static int shm_leftovers(void) {
    char want[64];
    snprintf(want, sizeof want, "ddp-test_comm_%d_", (int)getpid());
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, want, strlen(want))) {
            fprintf(stderr, "left in /dev/shm: %s\n", e->d_name);
            n++;
        }
    closedir(d);
    return n;
}

/* Window memory where this rank shares its host, else its own (what a
 * caller of comm_alloc does); *shared says which. */
static float *window_or_own(comm *c, int rank, size_t bytes, int *shared) {
    void *p = NULL;
    char err[512];
    int rc = comm_alloc(c, bytes, &p, err, sizeof err);
    *shared = rc == 0;
    if (rc == -ENOTSUP) return calloc(1, bytes);
    if (rc) test_fail(__FILE__, __LINE__, "rank %d: comm_alloc: %s (%s)", rank, err, strerror(-rc));
    for (size_t i = 0; i < bytes; i++)
        if (((uint8_t *)p)[i]) test_fail(__FILE__, __LINE__, "rank %d: byte %zu not zeroed", rank, i);
    CHECK((uintptr_t)p % 4096 == 0);
    return p;
}

static void release(comm *c, float *p, int shared) {
    if (shared) comm_free(c, p);
    else free(p);
}

/* Exact sums of window memory: whole (a round's multiple and not), a
 * range inside it (as DDP's buckets are), small (one step), async ones
 * queued back to back, and a second window beside the first. */
static void window_sums(comm *c, int rank, int world, void *arg) {
    (void)arg;
    int shared = 0, shared2 = 0;
    float *w = window_or_own(c, rank, WIN_FLOATS * sizeof(float), &shared);
    check_sum_in(c, rank, world, w, WIN_FLOATS);
    check_sum_in(c, rank, world, w, 1 << 17);
    check_sum_in(c, rank, world, w + 1000, 70001);
    check_sum_in(c, rank, world, w + 5, 300);
    float *w2 = window_or_own(c, rank, 3 << 20, &shared2);
    check_sum_in(c, rank, world, w2, (3 << 20) / sizeof(float));
    comm_req *req[3];
    const size_t lo[3] = {600000, 200000, 0}, hi[3] = {WIN_FLOATS, 600000, 200000};
    for (int j = 0; j < 3; j++) {
        for (size_t i = lo[j]; i < hi[j]; i++) w[i] = val(rank + j, i);
        CHECK_EQ(comm_allreduce_sum_async(c, w + lo[j], hi[j] - lo[j], &req[j]), 0);
    }
    for (int j = 0; j < 3; j++) {
        if (comm_wait(req[j])) test_fail(__FILE__, __LINE__, "rank %d: %s", rank, comm_error(c));
        for (size_t i = lo[j]; i < hi[j]; i++) {
            float want = 0;
            for (int r = 0; r < world; r++) want += val(r + j, i);
            if (w[i] != want)
                test_fail(__FILE__, __LINE__, "rank %d: async %d: [%zu] = %g, want %g", rank, j,
                          i, (double)w[i], (double)want);
        }
    }
    release(c, w, shared);
    release(c, w2, shared2);
}

static void window_test(int world, int no_shm, const char *hosts) {
    store_proc f = store_start();
    group g = {.world = world, .no_shm = no_shm, .hosts = hosts, .fn = window_sums,
               .kill_rank = -1};
    run_group(&f, &g);
    store_stop(&f);
    CHECK_EQ(shm_leftovers(), 0);
}

TEST(comm_window_2) { window_test(2, 0, NULL); }
TEST(comm_window_3) { window_test(3, 0, NULL); }
/* Hosts of two and of one rank: the lone one keeps its own memory. */
TEST(comm_window_hosts) { window_test(5, 0, "abcab"); }

TEST(comm_window_tcp_only) {
    store_proc f = store_start();
    group g = {.world = 2, .no_shm = 1, .fn = window_sums, .kill_rank = -1};
    run_group(&f, &g);
    store_stop(&f);
}

/* The same random sums in window memory and in private memory: the same
 * bits (shared mode reads in place what copy mode copies). */
static void window_bits(comm *c, int rank, int world, void *arg) {
    (void)world;
    shared_out *out = arg;
    int shared = 0;
    float *w = window_or_own(c, rank, DET_COUNT * sizeof(float), &shared);
    float *own = malloc(DET_COUNT * sizeof(float));
    CHECK(shared && own);
    fill_random(w, DET_COUNT, rank);
    fill_random(own, DET_COUNT, rank);
    if (comm_allreduce_sum(c, w, DET_COUNT) || comm_allreduce_sum(c, own, DET_COUNT))
        test_fail(__FILE__, __LINE__, "rank %d: %s", rank, comm_error(c));
    out->digest[rank][0] = digest(w, DET_COUNT * sizeof(float));
    out->digest[rank][1] = digest(own, DET_COUNT * sizeof(float));
    release(c, w, shared);
    free(own);
}

TEST(comm_window_same_bits) {
    store_proc f = store_start();
    shared_out *out = shared_alloc(sizeof *out);
    group g = {.world = 3, .fn = window_bits, .arg = out, .kill_rank = -1};
    run_group(&f, &g);
    store_stop(&f);
    for (int r = 0; r < 3; r++) {
        if (out->digest[r][0] != out->digest[r][1])
            test_fail(__FILE__, __LINE__, "rank %d: window and private sums differ", r);
        CHECK(out->digest[r][0] == out->digest[0][0]);
    }
}

/* Misuse, each failing every rank with a message that says what: ranks
 * asking for windows of different sizes; one rank all-reducing window
 * memory while another passes its own; counts that differ. */
typedef struct {
    shared_out out;
    int mode;
    char msg[MAX_RANKS][512];
} misuse_arg;

static void misuse(comm *c, int rank, int world, void *arg) {
    (void)world;
    misuse_arg *m = arg;
    size_t n = 1 << 18;
    void *p = NULL;
    char err[512];
    int rc = comm_alloc(c, (m->mode == 0 && rank == 1 ? 2 : 1) * n * sizeof(float), &p, err,
                        sizeof err);
    if (m->mode != 0) {
        if (rc) test_fail(__FILE__, __LINE__, "rank %d: comm_alloc: %s", rank, err);
        float *own = calloc(n, sizeof(float));
        CHECK(own != NULL);
        float *buf = m->mode == 1 && rank == 1 ? own : p;
        size_t count = m->mode == 2 && rank == 0 ? n - 4096 : n;
        rc = comm_allreduce_sum(c, buf, count);
        snprintf(err, sizeof err, "%s", comm_error(c));
        free(own);
        comm_free(c, p);
    }
    m->out.rc[rank] = rc;
    snprintf(m->msg[rank], sizeof m->msg[rank], "%s", err);
}

static void misuse_test(int mode, const char *want) {
    store_proc f = store_start();
    misuse_arg *m = shared_alloc(sizeof *m);
    m->mode = mode;
    group g = {.world = 2, .fn = misuse, .arg = m, .timeout_ms = 5000, .kill_rank = -1};
    double t0 = (clock_now_ns() / 1e6);
    run_group(&f, &g);
    store_stop(&f);
    CHECK((clock_now_ns() / 1e6) - t0 < 4000); /* found out, not timed out */
    for (int r = 0; r < 2; r++) {
        if (m->out.rc[r] != -EINVAL && m->out.rc[r] != -ECONNABORTED)
            test_fail(__FILE__, __LINE__, "rank %d: rc %d (%s)", r, m->out.rc[r], m->msg[r]);
    }
    /* At least one rank names the problem (the other may only hear that
     * its peer gave up). */
    if (!strstr(m->msg[0], want) && !strstr(m->msg[1], want))
        test_fail(__FILE__, __LINE__, "no message names it: '%s' / '%s'", m->msg[0], m->msg[1]);
}

TEST(comm_window_size_mismatch) { misuse_test(0, "every rank must ask for the same"); }
TEST(comm_window_mixed_memory) { misuse_test(1, "memory from comm_alloc"); }
TEST(comm_window_count_mismatch) { misuse_test(2, "every rank must pass the same count"); }

/* --- failures ------------------------------------------------------------ */

/* All-reduces until one fails; records the error and how long after the
 * victim's death (which the parent schedules) the failure came. */
static void until_failure(comm *c, int rank, int world, void *arg) {
    (void)world;
    shared_out *out = arg;
    size_t n = 1 << 18;
    int shared = 0;
    float *b = out->use_window ? window_or_own(c, rank, n * sizeof *b, &shared)
                               : calloc(n, sizeof *b);
    CHECK(b != NULL);
    int rc = 0;
    double t0 = (clock_now_ns() / 1e6);
    while (rc == 0 && (clock_now_ns() / 1e6) - t0 < 15000) rc = comm_allreduce_sum(c, b, n);
    out->rc[rank] = rc;
    out->ms[rank] = (clock_now_ns() / 1e6) - t0;
    /* The communicator stays broken: the next call fails at once. */
    if (rc) CHECK_EQ(comm_barrier(c), rc);
    release(c, b, shared);
}

static void kill_test(int world, int no_shm, const char *hosts, int use_window) {
    store_proc f = store_start();
    shared_out *out = shared_alloc(sizeof *out);
    out->use_window = use_window;
    int victim = world - 2, kill_after = 300;
    group g = {.world = world, .no_shm = no_shm, .hosts = hosts, .fn = until_failure,
               .arg = out, .timeout_ms = 10000, .kill_rank = victim, .kill_after_ms = kill_after};
    run_group(&f, &g);
    store_stop(&f);
    for (int r = 0; r < world; r++) {
        if (r == victim) continue;
        if (out->rc[r] == 0)
            test_fail(__FILE__, __LINE__, "rank %d kept going after rank %d was killed", r, victim);
        /* Well before the 10 s timeout: the death itself was noticed. */
        if (out->ms[r] > kill_after + 3000)
            test_fail(__FILE__, __LINE__, "rank %d took %.0f ms to notice (rc %d)", r, out->ms[r],
                      out->rc[r]);
        CHECK(out->rc[r] == -ECONNRESET || out->rc[r] == -ECONNABORTED);
    }
    /* Even with a rank killed, nothing stays behind in /dev/shm. */
    CHECK_EQ(shm_leftovers(), 0);
}

TEST(comm_peer_killed_shm) { kill_test(3, 0, NULL, 0); }
TEST(comm_peer_killed_tcp) { kill_test(3, 1, NULL, 0); }
TEST(comm_peer_killed_hosts) { kill_test(4, 0, "aabb", 0); }
/* Killed while the others read its buffer in place. */
TEST(comm_peer_killed_window) { kill_test(3, 0, NULL, 1); }

/* Rank 1 arrives late: rank 0's call gives up after its timeout. */
static void late_peer(comm *c, int rank, int world, void *arg) {
    (void)world;
    shared_out *out = arg;
    float x[16] = {0};
    if (rank == 1) usleep(1200 * 1000);
    double t0 = (clock_now_ns() / 1e6);
    out->rc[rank] = comm_allreduce_sum(c, x, 16);
    out->ms[rank] = (clock_now_ns() / 1e6) - t0;
}

static void timeout_test(int no_shm) {
    store_proc f = store_start();
    shared_out *out = shared_alloc(sizeof *out);
    group g = {.world = 2, .no_shm = no_shm, .fn = late_peer, .arg = out, .timeout_ms = 300,
               .kill_rank = -1};
    run_group(&f, &g);
    store_stop(&f);
    CHECK_EQ(out->rc[0], -ETIMEDOUT);
    if (out->ms[0] < 280 || out->ms[0] > 1100)
        test_fail(__FILE__, __LINE__, "rank 0 timed out after %.0f ms, timeout 300", out->ms[0]);
    /* The late rank finds the communicator broken by its peer. */
    CHECK(out->rc[1] != 0);
}

TEST(comm_timeout_shm) { timeout_test(0); }
TEST(comm_timeout_tcp) { timeout_test(1); }

/* --- set-up -------------------------------------------------------------- */

TEST(comm_init_bad_options) {
    comm *c = (comm *)1;
    char err[256];
    comm_opts o = {.prefix = "/x/", .rank = 3, .world = 2};
    CHECK_EQ(comm_init(&o, &c, err, sizeof err), -EINVAL);
    CHECK(c == NULL);
    CHECK(strstr(err, "rank") != NULL);
}

/* A rank that never comes: comm_init names it after the timeout. */
TEST(comm_init_missing_rank) {
    store_fixture f;
    fixture_start(&f, NULL);
    comm_opts o = {.store_host = "127.0.0.1", .store_port = f.port, .prefix = "/lonely/",
                   .rank = 0, .world = 3, .timeout_ms = 300};
    comm *c = NULL;
    char err[512];
    double t0 = (clock_now_ns() / 1e6);
    CHECK_EQ(comm_init(&o, &c, err, sizeof err), -ETIMEDOUT);
    CHECK((clock_now_ns() / 1e6) - t0 < 2000);
    CHECK(c == NULL);
    if (!strstr(err, "missing: 1, 2")) test_fail(__FILE__, __LINE__, "message: %s", err);
    fixture_stop(&f);
}

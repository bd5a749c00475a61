/* ddp-allreduce-bench: the CPU communicator's all-reduce, measured the way
 * nccl-tests' all_reduce_perf measures NCCL's. Run one per rank under a
 * launcher that sets torchrun's environment:
 *
 *   ddprun --standalone --nproc-per-node=4 --no-python build/bin/ddp-allreduce-bench
 *
 * For each size from --min-bytes to --max-bytes (doubling), every rank
 * first fills its buffer with known small integers and checks the sum
 * exactly (a wrong sum on any rank makes every rank exit 1), then runs
 * --warmup untimed and --iters timed all-reduces. Rank 0 prints one row per
 * size: the time of one all-reduce (the mean over ranks of each rank's
 * mean), the algorithm bandwidth (bytes / time) and the bus bandwidth
 * (algbw * 2(n-1)/n, the traffic a ring moves per link, as nccl-tests
 * reports it, so that figures compare across world sizes). */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/build_info.h"
#include "common/clock.h"
#include "common/opts.h"
#include "worker/comm/comm.h"

typedef struct {
    size_t min_bytes, max_bytes;
    int iters, warmup, no_shm, timeout_ms, no_bind;
    int own_memory; /* 1: a malloc'd buffer instead of comm_alloc's */
} bench_opts;

static const char usage_head[] =
    "usage: ddp-allreduce-bench [--min-bytes N] [--max-bytes N] [--iters N] [--warmup N]\n"
    "                           [--no-shm] [--no-bind] [--own-memory] [--timeout-ms N]\n"
    "Measures all-reduce (sum of floats) across the ranks a launcher started\n"
    "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment), e.g.\n"
    "  ddprun --standalone --nproc-per-node=4 --no-python ddp-allreduce-bench\n";

static void print_usage(const opts_spec *spec) {
    opts_print_help(spec, usage_head, NULL, stdout);
}

/* Fills *o from the command line: 0; 1 after --help; or -EINVAL with the
 * message printed. */
static int parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){4096, (size_t)128 << 20, 0, 5, 0, 120000, 0, 0};
    const opts_opt table[] = {
        {"min-bytes", 0, OPTS_SIZE, .target = &o->min_bytes, .metavar = "N",
         .help = "smallest size, with K, M or G (default 4K)"},
        {"max-bytes", 0, OPTS_SIZE, .target = &o->max_bytes, .metavar = "N",
         .help = "largest size (default 128M); sizes double in between"},
        {"iters", 0, OPTS_INT, .target = &o->iters, .lo = 0, .hi = INT_MAX, .metavar = "N",
         .help = "timed all-reduces per size (default 0: as many as fit\n"
                 "in about 0.25 s, 5 to 2000)"},
        {"warmup", 0, OPTS_INT, .target = &o->warmup, .lo = 0, .hi = INT_MAX, .metavar = "N",
         .help = "untimed all-reduces per size first (default 5)"},
        {"no-shm", 0, OPTS_FLAG, .target = &o->no_shm,
         .help = "TCP between every pair of ranks, even on one host"},
        {"no-bind", 0, OPTS_FLAG, .target = &o->no_bind,
         .help = "with more ranks on this host than CPUs, do not bind\n"
                 "each rank to one CPU (local rank mod CPUs)"},
        {"own-memory", 0, OPTS_FLAG, .target = &o->own_memory,
         .help = "all-reduce a malloc'd buffer, which goes through shared\n"
                 "memory by copies, rather than one from comm_alloc, which\n"
                 "the ranks of a host read in place (as ddp-train's gradients)"},
        {"timeout-ms", 0, OPTS_INT, .target = &o->timeout_ms, .lo = 1, .hi = INT_MAX,
         .metavar = "N", .help = "a collective taking longer fails (default 120000)"},
        {"help", 'h', .type = OPTS_HELP, .help = "print this help"},
        {"version", 0, .type = OPTS_VERSION,
         .help = "print the version and the build's options"},
    };
    opts_spec spec = {.prog = "ddp-allreduce-bench", .opts = table,
                      .nopts = sizeof table / sizeof table[0], .no_operands = 1};
    char err[512];
    int next, rc = opts_parse(&spec, argc, argv, &next, err, sizeof err);
    if (rc == OPTS_HELP_GIVEN) print_usage(&spec);
    if (rc == OPTS_VERSION_GIVEN) {
        build_info_print(stdout, "ddp-allreduce-bench");
        rc = OPTS_HELP_GIVEN; /* printed: nothing to run */
    }
    if (rc == 0 && (o->min_bytes < 4 || o->min_bytes > o->max_bytes)) {
        snprintf(err, sizeof err, "need 4 <= --min-bytes <= --max-bytes");
        rc = -EINVAL;
    }
    if (rc < 0) fprintf(stderr, "ddp-allreduce-bench: %s\n", err);
    return rc;
}

/* An integer variable the launcher sets, or def when it is unset; -EINVAL
 * (reported) when it holds something else. */
static int env_int(const char *name, int def, int *out) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v || opts_parse_int(v, 0, INT_MAX, out) == 0) return 0;
    fprintf(stderr, "ddp-allreduce-bench: %s='%s' is not a non-negative integer\n", name, v);
    return -EINVAL;
}

/* torchrun's environment: where the store is and who this rank is. */
static int read_env(comm_opts *co, int *restart) {
    const char *master = getenv("MASTER_ADDR");
    co->store_host = master ? master : "127.0.0.1";
    if (env_int("TORCHELASTIC_RESTART_COUNT", 0, restart) ||
        env_int("MASTER_PORT", 0, &co->store_port) || env_int("RANK", 0, &co->rank) ||
        env_int("WORLD_SIZE", 1, &co->world) || env_int("LOCAL_RANK", 0, &co->local_rank) ||
        env_int("LOCAL_WORLD_SIZE", 1, &co->local_world))
        return -EINVAL;
    return 0;
}

/* Fills known values, all-reduces once and checks the exact sum; returns
 * the number of wrong elements over all ranks (or -errno). */
static long verify(comm *c, float *buf, size_t count) {
    int rank = comm_rank(c), n = comm_world(c);
    for (size_t i = 0; i < count; i++) buf[i] = (float)((rank + 1) * (int)(i % 13 + 1));
    int rc = comm_allreduce_sum(c, buf, count);
    if (rc) return rc;
    long bad = 0;
    float tri = (float)(n * (n + 1) / 2);
    for (size_t i = 0; i < count; i++) {
        float want = tri * (float)(i % 13 + 1);
        if (buf[i] != want && bad++ == 0)
            fprintf(stderr,
                    "ddp-allreduce-bench: rank %d: wrong sum at element %zu of %zu: got %g, "
                    "expected %g\n",
                    rank, i, count, (double)buf[i], (double)want);
    }
    float total = (float)bad;
    rc = comm_allreduce_sum(c, &total, 1);
    return rc ? rc : (long)total;
}

/* Times iters all-reduces; returns this rank's mean seconds per call. */
static int timed(comm *c, float *buf, size_t count, int iters, double *secs) {
    int rc = comm_barrier(c);
    double t0 = clock_now_s();
    for (int i = 0; i < iters && !rc; i++) rc = comm_allreduce_sum(c, buf, count);
    *secs = (clock_now_s() - t0) / iters;
    return rc;
}

static int bench_size(comm *c, const bench_opts *o, float *buf, size_t bytes) {
    size_t count = bytes / sizeof(float);
    int n = comm_world(c), rc;
    long bad = verify(c, buf, count);
    if (bad < 0) return (int)bad;
    if (bad > 0) {
        if (comm_rank(c) == 0)
            fprintf(stderr, "ddp-allreduce-bench: %ld wrong elements at %zu bytes\n", bad, bytes);
        return -EILSEQ;
    }
    /* Zeros while timing: repeated in-place sums of anything else grow
     * without bound. */
    memset(buf, 0, count * sizeof(float));
    double warm = 0;
    if (o->warmup && (rc = timed(c, buf, count, o->warmup, &warm))) return rc;
    int iters = o->iters;
    if (!iters) {
        /* Rank 0 decides so that every rank runs the same number. */
        double t = warm > 0 ? warm : 1e-3;
        iters = t * 2000 < 0.25 ? 2000 : (int)(0.25 / t);
        if (iters < 5) iters = 5;
        if ((rc = comm_broadcast(c, &iters, sizeof iters, 0))) return rc;
    }
    double secs;
    if ((rc = timed(c, buf, count, iters, &secs))) return rc;
    float mean = (float)(secs * 1e6);
    if ((rc = comm_allreduce_sum(c, &mean, 1))) return rc;
    mean /= (float)n;
    if (comm_rank(c) == 0) {
        double algbw = (double)bytes / ((double)mean * 1e-6) / 1e9;
        printf("%12zu %12.2f %12.3f %12.3f\n", bytes, (double)mean, algbw,
               algbw * 2.0 * (n - 1) / n);
        fflush(stdout);
    }
    return 0;
}

/* With more ranks on this host than CPUs to run them, binds this rank to
 * one CPU (local rank mod CPUs), as `mpirun --bind-to core` would: ranks
 * then share CPUs two by two instead of piling up on one while the
 * scheduler catches up (measured: ~30% faster with 4 ranks on 2 CPUs).
 * bench/gloo_allreduce.py applies the same policy to gloo. Returns the
 * CPU, or -1 if not bound. */
static int bind_if_oversubscribed(int local_rank, int local_world) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || local_world <= CPU_COUNT(&set)) return -1;
    int want = local_rank % CPU_COUNT(&set), cpu = -1;
    for (int i = 0, seen = 0; i < CPU_SETSIZE && cpu < 0; i++)
        if (CPU_ISSET(i, &set) && seen++ == want) cpu = i;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? cpu : -1;
}

int main(int argc, char **argv) {
    bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : 2;
    comm_opts co = {.timeout_ms = o.timeout_ms, .no_shm = o.no_shm};
    int restart;
    if (read_env(&co, &restart)) return 2;
    char prefix[128];
    snprintf(prefix, sizeof prefix, "/ddp-allreduce-bench/attempt_%d/", restart);
    co.prefix = prefix;
    int bound = o.no_bind ? -1 : bind_if_oversubscribed(co.local_rank, co.local_world);
    char err[512];
    comm *c = NULL;
    rc = comm_init(&co, &c, err, sizeof err);
    if (rc) {
        fprintf(stderr, "ddp-allreduce-bench: rank %d: %s\n", co.rank, err);
        return 1;
    }
    size_t buf_bytes = o.max_bytes / sizeof(float) * sizeof(float) + sizeof(float);
    void *buf = NULL;
    const char *memory = "own memory (--own-memory)";
    if (!o.own_memory) {
        rc = comm_alloc(c, buf_bytes, &buf, err, sizeof err);
        memory = rc == 0 ? "shared windows (comm_alloc)" : "own memory (no shared window)";
        if (rc && rc != -ENOTSUP && rc != -ENOMEM) {
            fprintf(stderr, "ddp-allreduce-bench: rank %d: %s\n", co.rank, err);
            comm_destroy(c);
            return 1;
        }
        if (rc == -ENOMEM && co.rank == 0)
            fprintf(stderr, "ddp-allreduce-bench: warning: %s; using own memory\n", err);
    }
    int shared = buf != NULL;
    if (!buf && !(buf = malloc(buf_bytes))) {
        fprintf(stderr, "ddp-allreduce-bench: cannot allocate %zu bytes\n", o.max_bytes);
        comm_destroy(c);
        return 1;
    }
    rc = 0;
    if (co.rank == 0) {
        fprintf(stderr, "# ddp-allreduce-bench: %d ranks, %s, %s, sizes %zu to %zu bytes%s\n",
                co.world,
                o.no_shm ? "TCP only (--no-shm)" : "shared memory within a host, TCP between",
                memory, o.min_bytes, o.max_bytes,
                bound >= 0 ? ", ranks bound to CPUs (more ranks than CPUs)" : "");
        printf("%12s %12s %12s %12s\n", "size_bytes", "time_us", "algbw_GBps", "busbw_GBps");
        fflush(stdout);
    }
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes && !rc; bytes *= 2) {
        rc = bench_size(c, &o, buf, bytes);
        if (rc == -EILSEQ) break;
        if (rc)
            fprintf(stderr, "ddp-allreduce-bench: rank %d: %s\n", co.rank,
                    comm_error(c)[0] ? comm_error(c) : strerror(-rc));
    }
    if (shared)
        comm_free(c, buf);
    else
        free(buf);
    comm_destroy(c);
    return rc ? 1 : 0;
}

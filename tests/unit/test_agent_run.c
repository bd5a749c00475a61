/* The agent's state machine, run inside the test's process (agent_run as
 * ddprun calls it, with the job's store in this process on a free port)
 * over stand-in workers: short shell scripts that exit as a scenario needs.
 * Each scenario takes milliseconds; the shell scenarios
 * (tests/integration/agent_*.sh) run ddprun itself. Each test runs in a
 * process of its own (the harness), so the agent's signal handlers, its
 * subreaper and its loop are the test's alone. */
#include <dirent.h>
#include <stdint.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "agent/agent.h"
#include "launcher/config.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/rdzv_backend.h"
#include "tests/unit/store_fixture.h"
#include "tests/unit/test.h"

extern char **environ;

/* ddprun's binary, which starts each worker (__exec-worker). */
static const char *ddprun_exe(void) {
    static char path[1024];
    if (!path[0]) {
        char cwd[900];
        if (!getcwd(cwd, sizeof cwd)) test_fail(__FILE__, __LINE__, "getcwd");
        snprintf(path, sizeof path, "%s/build/bin/ddprun", cwd);
    }
    if (access(path, X_OK) != 0) test_skip("build/bin/ddprun is not built (run make)");
    return path;
}

/* How many entries a /proc/self directory holds: its threads (task), its
 * open descriptors (fd). */
static int entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) test_fail(__FILE__, __LINE__, "cannot open %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* libuv keeps one pipe for its signal handling per process, made at the
 * first uv_signal_init and never closed: made before the count. */
static void libuv_signal_pipe(void) {
    uv_loop_t loop;
    uv_signal_t s;
    uv_loop_init(&loop);
    uv_signal_init(&loop, &s);
    uv_close((uv_handle_t *)&s, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

/* A thread of the test's own that takes part in the job beside the agent
 * (a node joining), or NULL: run_as joins it before counting descriptors,
 * since its connections close as it ends, which may come just after the
 * agent's exit barrier (seen under ASan on a loaded machine). */
static pthread_t *helper;

/* agent_run on `flags...` and the worker script: its exit code. It ends
 * cleanly: every thread it started joined, every descriptor closed (and,
 * under the sanitizers, everything freed). */
static int run_as(int standalone, const char *script, int nflags, const char *const *flags) {
    char *argv[40];
    int n = 0;
    argv[n++] = "ddprun";
    if (standalone) argv[n++] = "--standalone";
    argv[n++] = "--log-dir"; /* (in the test's scratch directory, not /tmp) */
    argv[n++] = (char *)test_path("logs");
    for (int i = 0; i < nflags; i++) argv[n++] = (char *)flags[i];
    argv[n++] = "--no-python";
    argv[n++] = "/bin/sh";
    argv[n++] = "-c";
    argv[n++] = (char *)script;
    argv[n] = NULL;
    agent_config c;
    char err[512];
    if (config_parse(n, argv, environ, &c, err, sizeof err))
        test_fail(__FILE__, __LINE__, "config: %s", err);
    libuv_signal_pipe();
    int threads = entries("/proc/self/task"), fds = entries("/proc/self/fd");
    int rc = agent_run(&c, ddprun_exe());
    config_free(&c);
    if (helper) pthread_join(*helper, NULL);
    helper = NULL;
    /* (no more: a test's own thread may have ended, its store stopped).
     * A joined thread can still be listed a moment: the kernel wakes its
     * joiner before it takes the thread off /proc/self/task (seen once in
     * make check); one that is not joined stays. */
    for (int i = 0; i < 100 && entries("/proc/self/task") > threads; i++) sleep_ms(10);
    CHECK(entries("/proc/self/task") <= threads);
    CHECK(entries("/proc/self/fd") <= fds);
    return rc;
}

#define FLAGS(...)                                                                        \
    sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *), (const char *[]) { __VA_ARGS__ }
/* A job of its own (--standalone). */
#define RUN(script, ...) run_as(1, script, FLAGS(__VA_ARGS__))
/* A node of a job whose store the flags name. */
#define RUN_NODE(script, ...) run_as(0, script, FLAGS(__VA_ARGS__))

/* How many lines a file holds (the workers append one each start). */
static int lines(const char *path) {
    FILE *f = fopen(path, "r");
    int n = 0, ch;
    while (f && (ch = fgetc(f)) != EOF) n += ch == '\n';
    if (f) fclose(f);
    return n;
}

static const char *script(const char *fmt, const char *file) {
    static char s[1024];
    snprintf(s, sizeof s, fmt, file, file, file);
    return s;
}

TEST(agent_run_workers_that_succeed_end_the_job_with_0) {
    const char *log = test_path("starts");
    CHECK_EQ(RUN(script("echo $RANK >> %s", log), "--nproc-per-node", "2"), 0);
    CHECK_EQ(lines(log), 2);
}

TEST(agent_run_gives_each_worker_torchruns_environment) {
    const char *log = test_path("env");
    CHECK_EQ(RUN(script("echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK "
                        "$TORCHELASTIC_RESTART_COUNT $MASTER_PORT >> %s",
                        log),
                 "--nproc-per-node", "3"),
             0);
    FILE *f = fopen(log, "r");
    CHECK(f != NULL);
    int seen[3] = {0}, rank, local, world, lworld, group, restart, port;
    while (fscanf(f, "%d %d %d %d %d %d %d", &rank, &local, &world, &lworld, &group, &restart,
                  &port) == 7) {
        CHECK(rank >= 0 && rank < 3 && rank == local);
        CHECK_EQ(world, 3);
        CHECK_EQ(lworld, 3);
        CHECK_EQ(group, 0);
        CHECK_EQ(restart, 0);
        CHECK(port > 0);
        seen[rank]++;
    }
    fclose(f);
    CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
}

TEST(agent_run_a_failure_restarts_the_whole_group) {
    const char *log = test_path("starts");
    /* rank 1 fails in the first attempt only, once rank 0 has started (which
     * waits for the group's stop) */
    CHECK_EQ(RUN(script("echo $RANK >> %s; [ $TORCHELASTIC_RESTART_COUNT = 0 ] || exit 0; "
                        "[ $RANK = 1 ] || exec sleep 5; "
                        "while [ $(wc -l < %s) -lt 2 ]; do sleep 0.01; done; exit 3",
                        log),
                 "--nproc-per-node", "2", "--max-restarts", "1"),
             0);
    CHECK_EQ(lines(log), 4); /* both ranks, twice */
}

TEST(agent_run_spent_restarts_end_the_job_with_1) {
    const char *log = test_path("starts");
    CHECK_EQ(RUN(script("echo $RANK >> %s; exit 3", log), "--nproc-per-node", "1",
                 "--max-restarts", "2"),
             1);
    CHECK_EQ(lines(log), 3); /* the first attempt and two restarts */
}

TEST(agent_run_without_restarts_a_failure_ends_the_job) {
    const char *log = test_path("starts");
    /* rank 1 fails once rank 0 has started (which then waits for the stop) */
    CHECK_EQ(RUN(script("echo $RANK >> %s; [ $RANK = 1 ] || exec sleep 5; "
                        "while [ $(wc -l < %s) -lt 2 ]; do sleep 0.01; done; exit 7",
                        log),
                 "--nproc-per-node", "2"),
             1);
    CHECK_EQ(lines(log), 2);
}

TEST(agent_run_a_worker_killed_by_a_signal_is_a_failure) {
    const char *log = test_path("starts");
    CHECK_EQ(RUN(script("echo $RANK >> %s; [ $TORCHELASTIC_RESTART_COUNT = 0 ] || exit 0; "
                        "kill -9 $$",
                        log),
                 "--nproc-per-node", "1", "--max-restarts", "1"),
             0);
    CHECK_EQ(lines(log), 2);
}

TEST(agent_run_a_worker_that_said_it_finished_counts_as_finished) {
    const char *log = test_path("starts");
    /* the result is kept (DDPRUN_FINISHED_FILE), then the worker dies on its way out */
    CHECK_EQ(RUN(script("echo $RANK >> %s; : > \"$DDPRUN_FINISHED_FILE\"; exit 9", log),
                 "--nproc-per-node", "1"),
             0);
    CHECK_EQ(lines(log), 1); /* no restart */
}

/* SIGTERM to this process (the agent) once both workers have started. */
static void *term_soon(void *arg) {
    for (int i = 0; i < 5000 && lines(arg) < 2; i++) usleep(1000);
    kill(getpid(), SIGTERM);
    return NULL;
}

TEST(agent_run_sigterm_stops_the_workers_and_ends_with_143) {
    const char *log = test_path("starts");
    pthread_t t;
    pthread_create(&t, NULL, term_soon, (void *)log);
    CHECK_EQ(RUN(script("echo $RANK >> %s; exec sleep 30", log), "--nproc-per-node", "2",
                 "--max-restarts", "3"),
             128 + SIGTERM);
    pthread_join(t, NULL);
    CHECK_EQ(lines(log), 2); /* stopped, not restarted */
}

TEST(agent_run_a_bad_worker_program_fails_without_a_hang) {
    CHECK_EQ(RUN("exec /nonexistent/program", "--nproc-per-node", "1", "--max-restarts", "1"),
             1);
}

TEST(agent_run_restarts_keep_every_rank_and_count_the_attempt) {
    const char *log = test_path("attempts");
    /* each attempt's ranks say which attempt they are; in the first two,
     * rank 1 fails once both have said so */
    CHECK_EQ(RUN(script("a=$TORCHELASTIC_RESTART_COUNT; echo $a:$RANK >> %s; "
                        "[ $a -ge 2 ] && exit 0; [ $RANK = 1 ] || exec sleep 5; "
                        "while [ $(grep -c ^$a: %s) -lt 2 ]; do sleep 0.01; done; exit 5",
                        log),
                 "--nproc-per-node", "2", "--max-restarts", "2"),
             0);
    FILE *f = fopen(log, "r");
    CHECK(f != NULL);
    int count[3][2] = {{0}}, attempt, rank;
    while (fscanf(f, "%d:%d", &attempt, &rank) == 2)
        if (attempt >= 0 && attempt < 3 && rank >= 0 && rank < 2) count[attempt][rank]++;
    fclose(f);
    for (int a = 0; a < 3; a++) CHECK(count[a][0] == 1 && count[a][1] == 1);
}

/* ---- nodes of a job whose store is the test's ---- */

/* The job's store, in this process, and the flags that name it. */
typedef struct {
    store_fixture f;
    char endpoint[64];
} job_store;

static void job_store_start(job_store *j) {
    fixture_start(&j->f, NULL);
    snprintf(j->endpoint, sizeof j->endpoint, "127.0.0.1:%d", j->f.port);
}

#define JOB(j) "--rdzv-backend", "c10d", "--rdzv-endpoint", (j)->endpoint, "--rdzv-id", "t"

/* SIGTERM to this process after ms. */
static void *term_after(void *arg) {
    usleep((useconds_t)(intptr_t)arg * 1000);
    kill(getpid(), SIGTERM);
    return NULL;
}

TEST(agent_run_sigterm_during_a_rendezvous_ends_with_143_at_once) {
    const char *log = test_path("starts");
    job_store j;
    job_store_start(&j);
    pthread_t t;
    pthread_create(&t, NULL, term_after, (void *)(intptr_t)50);
    /* two nodes are awaited, and only this one comes: SIGTERM finds it joining */
    CHECK_EQ(RUN_NODE(script("echo $RANK >> %s", log), JOB(&j), "--nnodes", "2",
                      "--nproc-per-node", "1"),
             128 + SIGTERM);
    pthread_join(t, NULL);
    CHECK_EQ(lines(log), 0); /* no worker started */
    fixture_stop(&j.f);
}

/* Stops the job's store once both workers have started. */
typedef struct {
    job_store *j;
    const char *log;
} store_loss;

static void *lose_store(void *arg) {
    store_loss *l = arg;
    for (int i = 0; i < 5000 && lines(l->log) < 2; i++) usleep(1000);
    fixture_stop(&l->j->f);
    return NULL;
}

TEST(agent_run_a_lost_store_stops_the_workers_and_ends_with_1) {
    const char *log = test_path("starts");
    job_store j;
    job_store_start(&j);
    store_loss l = {&j, log};
    pthread_t t;
    pthread_create(&t, NULL, lose_store, &l);
    CHECK_EQ(RUN_NODE(script("echo $RANK >> %s; exec sleep 30", log), JOB(&j), "--nnodes", "1",
                      "--nproc-per-node", "2", "--max-restarts", "3"),
             1);
    pthread_join(t, NULL);
    CHECK_EQ(lines(log), 2); /* stopped, not restarted */
}

/* A second node, a stand-in on the rendezvous itself (no agent, no
 * workers: a child process of this one would be the agent's to end), joins
 * once the first node's worker has started alone, then says at the exit
 * barrier that its part is done. */
typedef struct {
    job_store *j;
    const char *log;
    int group_world_size, barrier;
} joiner;

static void *join_later(void *arg) {
    joiner *s = arg;
    for (int i = 0; i < 5000 && lines(s->log) < 1; i++) usleep(1000);
    rdzv_opts o = {.backend = rdzv_backend_find("c10d", NULL),
                   .where = {.host = "127.0.0.1", .port = s->j->f.port,
                             .connect_timeout_ms = 10000},
                   .run_id = "t", .min_nodes = 1, .max_nodes = 2, .node_rank = -1, .nproc = 1,
                   .hostname = "node1", .join_timeout = 10, .last_call_timeout = 0.05,
                   .heartbeat = 1, .max_restarts = 3};
    rdzv *r;
    rdzv_result res;
    char err[512];
    s->barrier = -1;
    if (rdzv_open(&o, &r, err, sizeof err) != 0) return NULL;
    if (rdzv_next(r, &res, err, sizeof err) == 0) {
        s->group_world_size = res.group_world_size;
        s->barrier = rdzv_exit_barrier(r, 10, 0);
    }
    rdzv_close(r);
    return NULL;
}

TEST(agent_run_a_node_joining_restarts_the_group_with_it) {
    const char *log = test_path("worlds");
    job_store j;
    job_store_start(&j);
    joiner s = {.j = &j, .log = log};
    pthread_t t;
    pthread_create(&t, NULL, join_later, &s);
    helper = &t; /* (joined by run_as) */
    /* alone, the worker waits; in a group of two, it finishes */
    CHECK_EQ(RUN_NODE(script("echo $WORLD_SIZE >> %s; [ $WORLD_SIZE = 2 ] && exit 0; "
                             "exec sleep 30",
                             log),
                      JOB(&j), "--nnodes", "1:2", "--nproc-per-node", "1", "--max-restarts",
                      "3", "--rdzv-conf", "last_call_timeout=0.05"),
             0);
    CHECK_EQ(s.group_world_size, 2);
    CHECK_EQ(s.barrier, 0);
    FILE *f = fopen(log, "r");
    CHECK(f != NULL);
    int world[8], n = 0;
    while (n < 8 && fscanf(f, "%d", &world[n]) == 1) n++;
    fclose(f);
    CHECK_EQ(n, 2); /* alone, then in the group of two */
    CHECK(world[0] == 1 && world[1] == 2);
    fixture_stop(&j.f);
}

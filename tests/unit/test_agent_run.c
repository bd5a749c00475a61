/* The agent's state machine, run inside the test's process (agent_run as
 * ddprun calls it, with the job's store in this process on a free port)
 * over stand-in workers: short shell scripts that exit as a scenario needs.
 * Each scenario takes milliseconds; the shell scenarios
 * (tests/integration/agent_*.sh) run ddprun itself. Each test runs in a
 * process of its own (the harness), so the agent's signal handlers, its
 * subreaper and its loop are the test's alone. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "launcher/config.h"
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

/* agent_run on `flags...` and the worker script: its exit code. */
static int run(const char *script, int nflags, const char *const *flags) {
    char *argv[32];
    int n = 0;
    argv[n++] = "ddprun";
    argv[n++] = "--standalone";
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
    int rc = agent_run(&c, ddprun_exe());
    config_free(&c);
    return rc;
}

#define RUN(script, ...)                                                                   \
    run(script, sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *),             \
        (const char *[]){__VA_ARGS__})

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

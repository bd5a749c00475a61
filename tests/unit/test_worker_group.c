/* Unit tests of the worker group (agent/worker_group.c): a large group is
 * started a few workers per turn of the loop, and what fails is said. The
 * exec helper here is a shell script that runs the rest of its arguments
 * (ddprun's own `__exec-worker` entry does the same, and more). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/worker_group.h"
#include "tests/unit/test.h"

static int nstarted_calls, nexits, idle;

static void on_started(worker_group *g) { (void)g, nstarted_calls++; }
static void on_exit_(worker_group *g, worker *w) { (void)g, (void)w, nexits++; }
static void on_idle(worker_group *g) { (void)g, idle = 1; }

/* A script that drops the "__exec-worker" argument and runs the rest. */
static void write_helper(char *path, size_t len) {
    snprintf(path, len, "/tmp/ddprun-test-helper.%d", (int)getpid());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("#!/bin/sh\nshift\nexec \"$@\"\n", f);
    fclose(f);
    chmod(path, 0755);
}

static worker_spec *specs_for(int n, char **argv) {
    worker_spec *s = calloc((size_t)n, sizeof *s);
    for (int i = 0; i < n; i++) {
        s[i].argv = argv;
        s[i].global_rank = i;
        s[i].out.console_fd = s[i].err.console_fd = -1;
    }
    return s;
}

/* 20 workers: the first eight start in worker_group_start, the rest on
 * the next turns of the loop; on_started once, after the last. */
TEST(worker_group_starts_a_few_per_turn) {
    char helper[64], err[256] = "";
    write_helper(helper, sizeof helper);
    char *argv[] = {"true", NULL};
    uv_loop_t loop;
    uv_loop_init(&loop);
    worker_group *g = worker_group_new(&loop, helper);
    g->on_started = on_started, g->on_exit = on_exit_, g->on_idle = on_idle;
    worker_spec *specs = specs_for(20, argv);
    CHECK_EQ(worker_group_start(g, 20, specs, err, sizeof err), 0);
    CHECK(g->nstarted > 0 && g->nstarted < 20);
    CHECK_EQ(nstarted_calls, 0);
    while (!idle) uv_run(&loop, UV_RUN_ONCE);
    CHECK_EQ(g->nstarted, 20);
    CHECK_EQ(nstarted_calls, 1);
    CHECK_EQ(nexits, 20);
    worker_group_free(g);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&loop), 0);
    free(specs);
    unlink(helper);
}

/* Out of memory for the group: an error that says so, not whatever the
 * message buffer held. */
TEST(worker_group_out_of_memory_says_so) {
#if defined(__SANITIZE_ADDRESS__)
    test_skip("AddressSanitizer reserves more address space than the limit this test sets");
#endif
    char err[256] = "stale";
    char *argv[] = {"true", NULL};
    uv_loop_t loop;
    uv_loop_init(&loop);
    worker_group *g = worker_group_new(&loop, "/nonexistent");
    int n = 4000; /* the workers' table: about 40 MB */
    worker_spec *specs = specs_for(n, argv);
    struct rlimit as;
    CHECK_EQ(getrlimit(RLIMIT_AS, &as), 0);
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    CHECK_EQ(fscanf(f, "%lu", &pages), 1);
    fclose(f);
    as.rlim_cur = pages * (rlim_t)sysconf(_SC_PAGESIZE) + (16 << 20);
    CHECK_EQ(setrlimit(RLIMIT_AS, &as), 0);
    CHECK_EQ(worker_group_start(g, n, specs, err, sizeof err), -ENOMEM);
    CHECK_STR(err, "out of memory for 4000 workers");
}

static int order_exit_127_before_idle; /* 1 once the failed worker's exit is told; 2 if idle came first */
static void on_exit_order(worker_group *g, worker *w) {
    (void)g;
    nexits++;
    if (w->exit_status == 127 && order_exit_127_before_idle == 0) order_exit_127_before_idle = 1;
}
static void on_idle_order(worker_group *g) {
    (void)g;
    if (order_exit_127_before_idle == 0) order_exit_127_before_idle = 2;
    idle = 1;
}

/* A spawn that fails after the first turn (the program is gone): that
 * worker's exit (127) is told before the group goes idle, the rest are
 * not started, and on_started never comes. */
TEST(worker_group_later_spawn_failure_is_an_exit) {
    char helper[64], err[256] = "";
    write_helper(helper, sizeof helper);
    char *argv[] = {"sleep", "0.2", NULL};
    uv_loop_t loop;
    uv_loop_init(&loop);
    worker_group *g = worker_group_new(&loop, helper);
    g->on_started = on_started, g->on_exit = on_exit_order, g->on_idle = on_idle_order;
    nstarted_calls = nexits = idle = 0;
    worker_spec *specs = specs_for(20, argv);
    CHECK_EQ(worker_group_start(g, 20, specs, err, sizeof err), 0);
    int first = g->nstarted;
    CHECK(first > 0 && first < 20);
    unlink(helper); /* the next spawn fails */
    while (!idle) uv_run(&loop, UV_RUN_ONCE);
    CHECK_EQ(order_exit_127_before_idle, 1);
    CHECK_EQ(nstarted_calls, 0);
    CHECK_EQ(g->nstarted, first + 1); /* the failed one, and no more */
    CHECK_EQ(nexits, first + 1);
    worker_group_free(g);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&loop), 0); /* every handle closed, the failed spawn's too */
    free(specs);
}

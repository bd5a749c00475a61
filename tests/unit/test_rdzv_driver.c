/* agent/rdzv_driver.c on a real rendezvous (an in-process store): the
 * round it forms comes back to the loop; the round's end (another node's
 * failure) comes back as a restart and the next round follows; on the
 * agent's word it runs the exit barrier, or joins no more; its thread is
 * joined and everything freed at the stop (LeakSanitizer in the asan
 * runner). */
#include <errno.h>
#include <string.h>
#include <uv.h>

#include "agent/rdzv_driver.h"
#include "rendezvous/rdzv_backend.h"
#include "tests/unit/store_fixture.h"
#include "tests/unit/test.h"

typedef struct {
    rdzv_driver_kind kind[16];
    int rc[16], restart_count[16];
    rdzv_event why[16];
    int n;
} seen;

static void on_event(void *ctx, rdzv_driver_event *e) {
    seen *s = ctx;
    if (s->n >= 16) return;
    s->kind[s->n] = e->kind, s->rc[s->n] = e->rc, s->why[s->n] = e->why;
    s->restart_count[s->n] = e->res.restart_count;
    s->n++;
}

/* Runs the loop until n events came (or 10 s). */
static void until(uv_loop_t *loop, seen *s, int n) {
    for (int i = 0; i < 10000 && s->n < n; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        sleep_ms(1);
    }
    if (s->n < n) test_fail(__FILE__, __LINE__, "%d events of %d", s->n, n);
}

/* A node of a job of min_nodes (up to max_nodes) whose joins wait
 * join_timeout s, on the store f. */
static rdzv *open_node(store_fixture *f, int min_nodes, int max_nodes, double join_timeout) {
    rdzv_opts o = {.backend = rdzv_backend_find("c10d", NULL),
                   .where = {.host = "127.0.0.1", .port = f->port, .connect_timeout_ms = 10000},
                   .run_id = "job", .min_nodes = min_nodes, .max_nodes = max_nodes,
                   .node_rank = -1, .nproc = 1, .hostname = "node0",
                   .join_timeout = join_timeout, .last_call_timeout = 0.3, .heartbeat = 1,
                   .max_restarts = 3};
    rdzv *r;
    char err[512];
    if (rdzv_open(&o, &r, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    return r;
}

/* A one-node job on an in-process store, its driver started on a loop of
 * the test's, its first round come back. */
typedef struct {
    store_fixture f;
    rdzv *r;
    uv_loop_t loop;
    seen s;
    rdzv_driver *d;
} bed;

static void bed_start(bed *b) {
    memset(b, 0, sizeof *b);
    fixture_start(&b->f, NULL);
    b->r = open_node(&b->f, 1, 1, 10);
    uv_loop_init(&b->loop);
    rdzv_driver_opts o = {.barrier_timeout_s = 10, .ctx = &b->s, .event = on_event};
    CHECK_EQ(rdzv_driver_start(&b->loop, b->r, &o, &b->d), 0);
    until(&b->loop, &b->s, 1);
    CHECK_EQ(b->s.kind[0], RDZV_DRIVER_ROUND);
    CHECK_EQ(b->s.rc[0], 0);
    CHECK_EQ(b->s.restart_count[0], 0);
}

/* The stop: the thread joined and the driver freed as the loop closes. */
static void bed_stop(bed *b) {
    rdzv_driver_stop(b->d);
    uv_run(&b->loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&b->loop), 0);
    rdzv_close(b->r);
    fixture_stop(&b->f);
}

TEST(rdzv_driver_forms_rounds_restarts_and_runs_the_barrier) {
    bed b;
    bed_start(&b);
    /* another node's failure ends the round: a restart, then the next round */
    CHECK_EQ(rdzv_end_round(b.r, 0, RDZV_EV_FAILURE), 0);
    until(&b.loop, &b.s, 3);
    CHECK_EQ(b.s.kind[1], RDZV_DRIVER_RESTART);
    CHECK_EQ(b.s.why[1], RDZV_EV_FAILURE);
    CHECK_EQ(b.s.kind[2], RDZV_DRIVER_ROUND);
    CHECK_EQ(b.s.rc[2], 0);
    CHECK_EQ(b.s.restart_count[2], 1);
    /* the workers finished: the exit barrier, and the thread ends */
    rdzv_driver_barrier(b.d, 0);
    until(&b.loop, &b.s, 4);
    CHECK_EQ(b.s.kind[3], RDZV_DRIVER_BARRIER);
    CHECK_EQ(b.s.rc[3], 0);
    bed_stop(&b);
}

TEST(rdzv_driver_leaving_joins_no_next_round) {
    bed b;
    bed_start(&b);
    rdzv_driver_leave(b.d);
    CHECK_EQ(rdzv_end_round(b.r, 0, RDZV_EV_MEMBERSHIP), 0);
    for (int i = 0; i < 10000 && rdzv_driver_running(b.d); i++) { /* it sees the end */
        uv_run(&b.loop, UV_RUN_NOWAIT);
        sleep_ms(1);
    }
    CHECK(!rdzv_driver_running(b.d));
    uv_run(&b.loop, UV_RUN_NOWAIT);
    CHECK_EQ(b.s.n, 1); /* no restart, no round */
    bed_stop(&b);
}

TEST(rdzv_driver_a_thread_blocked_in_a_join_is_let_go_by_rdzv_cancel) {
    store_fixture f;
    fixture_start(&f, NULL);
    rdzv *r = open_node(&f, 2, 2, 60); /* two nodes are awaited for a minute; one comes */
    uv_loop_t loop;
    uv_loop_init(&loop);
    seen s = {0};
    rdzv_driver *d;
    rdzv_driver_opts dopt = {.barrier_timeout_s = 10, .ctx = &s, .event = on_event};
    CHECK_EQ(rdzv_driver_start(&loop, r, &dopt, &d), 0);
    sleep_ms(50);
    CHECK(rdzv_driver_running(d));
    rdzv_cancel(r);
    for (int i = 0; i < 5000 && rdzv_driver_running(d); i++) sleep_ms(1);
    CHECK(!rdzv_driver_running(d)); /* not the join's minute */
    rdzv_driver_stop(d);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&loop), 0);
    rdzv_close(r);
    fixture_stop(&f);
}

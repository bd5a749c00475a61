/* agent/side_calls.c: calls run on a thread of their own, one after
 * another, their afters back on the loop in order; a stop runs no call not
 * begun (its after still frees), waits for the call under way at most as
 * long as asked, and can be asked again once a held call returns. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <uv.h>

#include "agent/side_calls.h"
#include "tests/unit/test.h"

typedef struct {
    pthread_t loop_thread;
    int order[8], n;          /* afters, in the order they ran */
    int worked[8];            /* works that ran */
    int on_loop;              /* every after ran on the loop's thread */
    atomic_int hold;          /* the work of call 0 waits while set */
    atomic_int holding;       /* it is waiting */
} calls;

static void work(void *ctx, void *arg) {
    calls *c = ctx;
    int i = (int)(intptr_t)arg;
    if (i == 0 && atomic_load(&c->hold)) {
        atomic_store(&c->holding, 1);
        while (atomic_load(&c->hold)) usleep(1000);
    }
    c->worked[i] = 1;
}

static void after(void *ctx, void *arg) {
    calls *c = ctx;
    c->order[c->n++] = (int)(intptr_t)arg;
    c->on_loop &= pthread_equal(pthread_self(), c->loop_thread);
}

/* Runs the loop until n afters came back (or 2 s). */
static void until(uv_loop_t *loop, calls *c, int n) {
    for (int i = 0; i < 2000 && c->n < n; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
}

TEST(side_calls_run_in_order_and_come_back_to_the_loop) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    calls c = {.loop_thread = pthread_self(), .on_loop = 1};
    side_calls *s;
    CHECK_EQ(side_calls_start(&loop, &c, &s), 0);
    for (intptr_t i = 0; i < 4; i++) CHECK_EQ(side_calls_run(s, work, after, (void *)i), 0);
    until(&loop, &c, 4);
    CHECK_EQ(c.n, 4);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(c.order[i], i);
        CHECK(c.worked[i]);
    }
    CHECK(c.on_loop);
    CHECK_EQ(side_calls_stop(s, 1000), 0);
    CHECK_EQ(side_calls_run(s, work, after, (void *)5), -ESHUTDOWN); /* (s not yet freed) */
    uv_run(&loop, UV_RUN_NOWAIT); /* the close: s freed */
    CHECK_EQ(uv_loop_close(&loop), 0);
}

TEST(side_calls_stop_waits_for_a_held_call_only_as_long_as_asked) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    calls c = {.loop_thread = pthread_self(), .on_loop = 1};
    atomic_store(&c.hold, 1);
    side_calls *s;
    CHECK_EQ(side_calls_start(&loop, &c, &s), 0);
    CHECK_EQ(side_calls_run(s, work, after, (void *)0), 0);
    CHECK_EQ(side_calls_run(s, work, after, (void *)1), 0);
    for (int i = 0; i < 2000 && !atomic_load(&c.holding); i++) usleep(1000);
    CHECK(atomic_load(&c.holding));
    CHECK_EQ(side_calls_stop(s, 50), -ETIMEDOUT); /* call 0 is held */
    CHECK_EQ(c.n, 0);
    atomic_store(&c.hold, 0); /* the store answers */
    CHECK_EQ(side_calls_stop(s, 2000), 0);
    /* call 0 ran, call 1 was never begun; both afters ran, in order, here */
    CHECK_EQ(c.n, 2);
    CHECK_EQ(c.order[0], 0);
    CHECK_EQ(c.order[1], 1);
    CHECK(c.worked[0] && !c.worked[1]);
    CHECK(c.on_loop);
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK_EQ(uv_loop_close(&loop), 0);
}

TEST(side_calls_stop_without_a_call_closes_at_once) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    calls c = {0};
    side_calls *s;
    CHECK_EQ(side_calls_start(&loop, &c, &s), 0);
    CHECK_EQ(side_calls_stop(s, 0), 0); /* no thread was started */
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK_EQ(uv_loop_close(&loop), 0);
    CHECK_EQ(side_calls_stop(NULL, 0), 0);
}

/* The asynchronous queue on its own (worker/comm/comm_async.c), running a
 * function of the test's in place of the communicator's all-reduce: the
 * queue needs nothing of the communicator. Requests run one at a time in
 * the order they were pushed, each waiter gets its own request's result,
 * and stopping runs what is still queued. */
#include <time.h>

#include "tests/unit/test.h"
#include "worker/comm/comm_async.h"

#define NREQ 6

typedef struct {
    int order[NREQ]; /* buf[0] of each request, in the order they ran */
    uint64_t tag[NREQ]; /* and the tag it was pushed with */
    int n;
} ran;

/* Notes which request ran and returns a result of its own (-count). */
static int note(void *ctx, float *buf, size_t count, uint64_t tag) {
    ran *r = ctx;
    nanosleep(&(struct timespec){0, 2000000}, NULL); /* so requests pile up behind it */
    r->tag[r->n] = tag;
    r->order[r->n++] = (int)buf[0];
    return -(int)count;
}

TEST(comm_async_runs_in_order) {
    ran log = {{0}, {0}, 0};
    comm_async q = {0};
    comm_async_init(&q, note, &log);
    float v[NREQ];
    comm_req *req[NREQ];
    for (int i = 0; i < NREQ; i++) {
        v[i] = (float)i;
        CHECK_EQ(comm_async_push(&q, &v[i], (size_t)i + 1, 100 + (uint64_t)i, &req[i]), 0);
    }
    for (int i = NREQ - 1; i >= 0; i--) CHECK_EQ(comm_async_wait(req[i]), -(i + 1));
    comm_async_drain(&q);
    CHECK_EQ(log.n, NREQ);
    for (int i = 0; i < NREQ; i++) CHECK_EQ(log.order[i], i);
    for (int i = 0; i < NREQ; i++) CHECK_EQ(log.tag[i], 100 + (uint64_t)i);
    comm_async_stop(&q);
}

TEST(comm_async_stop_runs_what_is_queued) {
    ran log = {{0}, {0}, 0};
    comm_async q = {0};
    comm_async_init(&q, note, &log);
    float v[3] = {0, 1, 2};
    comm_req *req[3];
    for (int i = 0; i < 3; i++) CHECK_EQ(comm_async_push(&q, &v[i], 1, 0, &req[i]), 0);
    comm_async_stop(&q);
    CHECK_EQ(log.n, 3);
    for (int i = 0; i < 3; i++) CHECK_EQ(comm_async_wait(req[i]), -1);
    /* A queue that never ran anything stops as well. */
    comm_async idle = {0};
    comm_async_init(&idle, note, &log);
    comm_async_stop(&idle);
}

/* Rendezvous tests: several agents (threads, each with its own rdzv
 * handle) meet through a store running in the test process. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/clock.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/rdzv_inspect.h"
#include "store/store_client.h"
#include "tests/unit/store_fixture.h"
#include "tests/unit/test.h"

typedef struct {
    store_fixture *f;
    rdzv_opts o;
    char host[32];
    rdzv *r;
    rdzv_result res;
    int rc;
    char err[512];
} agent_t;

static void agent_init(agent_t *a, store_fixture *f, const char *host, int min, int max) {
    memset(a, 0, sizeof *a);
    a->f = f;
    snprintf(a->host, sizeof a->host, "%s", host);
    a->o = (rdzv_opts){.backend = rdzv_backend_find("c10d", NULL),
                       .where = {.host = "127.0.0.1", .port = f->port,
                                 .connect_timeout_ms = 10000},
                       .run_id = "job", .min_nodes = min,
                       .max_nodes = max, .node_rank = -1, .nproc = 2, .hostname = a->host,
                       .join_timeout = 10, .last_call_timeout = 0.3, .heartbeat = 1,
                       .max_restarts = 3};
}

/* n agents of one job (min to max nodes) named n0, n1, ... */
static void agents_init(agent_t *a, int n, store_fixture *f, int min, int max) {
    for (int i = 0; i < n; i++) {
        char h[8];
        snprintf(h, sizeof h, "n%d", i);
        agent_init(&a[i], f, h, min, max);
    }
}

static void *agent_join(void *p) {
    agent_t *a = p;
    if (!a->r) {
        a->rc = rdzv_open(&a->o, &a->r, a->err, sizeof a->err);
        if (a->rc) return NULL;
    }
    a->rc = rdzv_next(a->r, &a->res, a->err, sizeof a->err);
    return NULL;
}

static void join_all(agent_t *a, int n) {
    pthread_t t[16];
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, agent_join, &a[i]);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < n; i++)
        if (a[i].rc) test_fail(__FILE__, __LINE__, "agent %d: %s", i, a[i].err);
}

static void close_all(agent_t *a, int n) {
    for (int i = 0; i < n; i++) rdzv_close(a[i].r);
}

TEST(rdzv_three_nodes_get_ranks_in_host_order) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[3];
    agent_init(&a[0], &f, "node10", 3, 3);
    agent_init(&a[1], &f, "node2", 3, 3);
    agent_init(&a[2], &f, "node1", 3, 3);
    a[1].o.nproc = 4;
    join_all(a, 3);
    /* node1 < node2 < node10 in natural order; ranks are prefix sums. */
    CHECK_EQ(a[2].res.group_rank, 0);
    CHECK_EQ(a[1].res.group_rank, 1);
    CHECK_EQ(a[0].res.group_rank, 2);
    CHECK_EQ(a[2].res.rank_offset, 0);
    CHECK_EQ(a[1].res.rank_offset, 2);
    CHECK_EQ(a[0].res.rank_offset, 6);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(a[i].res.world_size, 8);
        CHECK_EQ(a[i].res.group_world_size, 3);
        CHECK_EQ(a[i].res.restart_count, 0);
    }
    close_all(a, 3);
    fixture_stop(&f);
}

TEST(rdzv_static_ranks_follow_node_rank) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[2];
    agent_init(&a[0], &f, "aaa", 2, 2);
    agent_init(&a[1], &f, "bbb", 2, 2);
    a[0].o.node_rank = 1;
    a[1].o.node_rank = 0;
    a[0].o.strict_ranks = a[1].o.strict_ranks = 1;
    join_all(a, 2);
    CHECK_EQ(a[0].res.group_rank, 1);
    CHECK_EQ(a[1].res.group_rank, 0);
    close_all(a, 2);
    fixture_stop(&f);
}

TEST(rdzv_static_refuses_a_duplicate_node_rank) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[2];
    agent_init(&a[0], &f, "aaa", 2, 2);
    agent_init(&a[1], &f, "bbb", 2, 2);
    for (int i = 0; i < 2; i++) a[i].o.node_rank = 1, a[i].o.strict_ranks = 1;
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, agent_join, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(a[i].rc, -EINVAL);
        CHECK(strstr(a[i].err, "node ranks must be 0..1") != NULL);
    }
    close_all(a, 2);
    fixture_stop(&f);
}

TEST(rdzv_requested_ranks_come_first_then_host_order) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[3];
    agent_init(&a[0], &f, "a", 3, 3);
    agent_init(&a[1], &f, "b", 3, 3);
    agent_init(&a[2], &f, "z", 3, 3);
    a[2].o.node_rank = 0; /* z asks for rank 0 under c10d */
    join_all(a, 3);
    CHECK_EQ(a[2].res.group_rank, 0);
    CHECK_EQ(a[0].res.group_rank, 1);
    CHECK_EQ(a[1].res.group_rank, 2);
    close_all(a, 3);
    fixture_stop(&f);
}

TEST(rdzv_times_out_naming_who_came) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a;
    agent_init(&a, &f, "lonely", 2, 2);
    a.o.join_timeout = 0.5;
    agent_join(&a);
    CHECK_EQ(a.rc, -ETIMEDOUT);
    CHECK(strstr(a.err, "1 of min 2 nodes joined (lonely)") != NULL);
    rdzv_close(a.r);
    fixture_stop(&f);
}

TEST(rdzv_elastic_closes_after_last_call_then_admits_a_late_node) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[3];
    agent_init(&a[0], &f, "n0", 2, 4);
    agent_init(&a[1], &f, "n1", 2, 4);
    agent_init(&a[2], &f, "n2", 2, 4);
    join_all(a, 2);
    CHECK_EQ(a[0].res.group_world_size, 2);
    /* n2 arrives while round 0 runs: it waits, and the members see it. */
    pthread_t late;
    pthread_create(&late, NULL, agent_join, &a[2]);
    for (int i = 0; i < 2; i++) {
        rdzv_event ev = RDZV_EV_NONE;
        for (int tries = 0; tries < 50 && ev == RDZV_EV_NONE; tries++)
            CHECK_EQ(rdzv_watch(a[i].r, 200, &ev), 0);
        CHECK_EQ(ev, RDZV_EV_MEMBERSHIP);
    }
    join_all(a, 2);
    pthread_join(late, NULL);
    CHECK_EQ(a[2].rc, 0);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(a[i].res.round, 1);
        CHECK_EQ(a[i].res.group_world_size, 3);
        CHECK_EQ(a[i].res.restart_count, 0); /* membership changes are free */
    }
    close_all(a, 3);
    fixture_stop(&f);
}

/* The node count round 1 expects (r1/expect, written as round 0 ended). */
static long next_expect(store_fixture *f) {
    rdzv_kv *kv = NULL;
    long expect = -1;
    CHECK_EQ(rdzv_kv_store_open("127.0.0.1", f->port, 2000, &kv), 0);
    CHECK_EQ(kv_get_long(kv, "/ddprun/job/r1/expect", -1, &expect), 0);
    kv_close(kv);
    return expect;
}

/* The node that ends a round counts the members still alive, so that the
 * next round closes once they are back: a member whose agent died (its
 * connection closed) is not counted, though its heartbeat's lease has
 * seconds left; the others are. */
TEST(rdzv_next_round_expects_the_members_alive) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[4];
    agents_init(a, 4, &f, 1, 4);
    for (int i = 0; i < 4; i++) a[i].o.heartbeat = 30; /* the dead one's lease outlives the test */
    join_all(a, 4);
    CHECK_EQ(a[0].res.group_world_size, 4);
    rdzv_close(a[3].r); /* its connection closes; hb/ stays */
    a[3].r = NULL;
    CHECK_EQ(rdzv_end_round(a[0].r, 0, RDZV_EV_MEMBERSHIP), 0);
    CHECK_EQ(next_expect(&f), 3);
    close_all(a, 3);
    fixture_stop(&f);
}

/* A member alive when the next round opened (so expected there) and lost
 * before it joined: the round closes with the others about a heartbeat
 * later, not after the whole last call. Its loss is its heartbeat key gone
 * (a lapse), its connection still open (a node frozen, or cut off). */
TEST(rdzv_a_member_lost_after_the_round_opened_does_not_hold_it) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[3];
    agents_init(a, 3, &f, 1, 3);
    for (int i = 0; i < 3; i++) a[i].o.last_call_timeout = 30;
    join_all(a, 3);
    CHECK_EQ(rdzv_end_round(a[0].r, 0, RDZV_EV_MEMBERSHIP), 0);
    CHECK_EQ(next_expect(&f), 3);
    rdzv_kv *kv = NULL;
    CHECK_EQ(rdzv_kv_store_open("127.0.0.1", f.port, 2000, &kv), 0);
    char hb[256];
    snprintf(hb, sizeof hb, "/ddprun/job/hb/%s", rdzv_agent_id(a[2].r));
    CHECK_EQ(kv_del(kv, hb), 0); /* n2's heartbeat lapses; n2 never joins */
    int64_t t0 = clock_now_ms();
    join_all(a, 2);
    CHECK(clock_now_ms() - t0 < 10000); /* (the last call: 30 s) */
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(a[i].res.round, 1);
        CHECK_EQ(a[i].res.group_world_size, 2);
    }
    kv_close(kv);
    close_all(a, 3);
    fixture_stop(&f);
}

TEST(rdzv_failure_restarts_count_until_exhausted) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[2];
    agent_init(&a[0], &f, "n0", 2, 2);
    agent_init(&a[1], &f, "n1", 2, 2);
    a[0].o.max_restarts = a[1].o.max_restarts = 1;
    join_all(a, 2);
    CHECK_EQ(rdzv_end_round(a[0].r, 0, RDZV_EV_FAILURE), 0);
    rdzv_event ev;
    CHECK_EQ(rdzv_watch(a[1].r, 2000, &ev), 0);
    CHECK_EQ(ev, RDZV_EV_FAILURE);
    join_all(a, 2);
    CHECK_EQ(a[0].res.restart_count, 1);
    CHECK_EQ(a[0].res.round, 1);
    /* A second failure exceeds max_restarts = 1. */
    CHECK_EQ(rdzv_end_round(a[1].r, 0, RDZV_EV_FAILURE), 0);
    for (int i = 0; i < 2; i++) {
        agent_join(&a[i]);
        CHECK_EQ(a[i].rc, RDZV_RESTARTS_SPENT);
        CHECK_EQ(a[i].res.restart_count, 2);
    }
    close_all(a, 2);
    fixture_stop(&f);
}

TEST(rdzv_survivors_notice_a_dead_agent_and_regroup_smaller) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[3];
    agents_init(a, 3, &f, 2, 3);
    join_all(a, 3);
    rdzv_close(a[2].r); /* its connection closes, as when it is killed */
    a[2].r = NULL;
    for (int i = 0; i < 2; i++) {
        rdzv_event ev = RDZV_EV_NONE;
        CHECK_EQ(rdzv_watch(a[i].r, 2000, &ev), 0);
        CHECK_EQ(ev, RDZV_EV_MEMBERSHIP);
    }
    join_all(a, 2);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(a[i].res.group_world_size, 2);
        CHECK_EQ(a[i].res.restart_count, 0);
    }
    close_all(a, 2);
    fixture_stop(&f);
}

/* The heartbeat is renewed on its own thread and connection: an agent
 * whose rendezvous thread is busy elsewhere (a long read of the round, a
 * starved process) for several heartbeats is not taken for lost. */
TEST(rdzv_heartbeat_lives_while_the_rendezvous_thread_is_busy) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[1];
    agents_init(a, 1, &f, 1, 1);
    a[0].o.heartbeat = 0.3;
    join_all(a, 1);
    store_client *c = fixture_client(&f);
    char hb[256];
    snprintf(hb, sizeof hb, "/ddprun/job/hb/%s", rdzv_agent_id(a[0].r));
    const char *keys[] = {hb};
    for (int i = 0; i < 6; i++) {
        sleep_ms(200); /* four heartbeats in all, and no rendezvous call */
        int all = 0;
        CHECK_EQ(store_check(c, 1, keys, &all), 0);
        CHECK_EQ(all, 1);
    }
    rdzv_event ev = RDZV_EV_NONE;
    CHECK_EQ(rdzv_watch(a[0].r, 100, &ev), 0);
    CHECK_EQ(ev, RDZV_EV_NONE); /* nobody saw it lost: the round goes on */
    store_client_close(c);
    close_all(a, 1);
    fixture_stop(&f);
}

/* Ends the round for its survivors a[0..n) once a[dead] is gone, and
 * has them see it. */
static void lose_node(agent_t *a, int n, int dead) {
    rdzv_close(a[dead].r); /* its connection closes, as when it is killed */
    a[dead].r = NULL;
    for (int i = 0; i < n; i++) {
        if (i == dead) continue;
        rdzv_event ev = RDZV_EV_NONE;
        CHECK_EQ(rdzv_watch(a[i].r, 2000, &ev), 0);
        CHECK_EQ(ev, RDZV_EV_MEMBERSHIP);
    }
}

TEST(rdzv_survivors_keep_their_ranks_and_a_newcomer_takes_the_free_one) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[4];
    agent_init(&a[0], &f, "node1", 3, 3);
    agent_init(&a[1], &f, "node2", 3, 3);
    agent_init(&a[2], &f, "node3", 3, 3);
    agent_init(&a[3], &f, "node10", 3, 3); /* a spare for node2 */
    join_all(a, 3);
    for (int i = 0; i < 3; i++) CHECK_EQ(a[i].res.group_rank, i); /* natural order */
    lose_node(a, 3, 1);
    /* node2's place goes to node10, which sorts after node3: still node3
     * keeps rank 2 (its workers their ranks 4 and 5), node10 takes rank 1 */
    agent_t now[3] = {a[0], a[2], a[3]};
    join_all(now, 3);
    CHECK_EQ(now[0].res.group_rank, 0);
    CHECK_EQ(now[1].res.group_rank, 2);
    CHECK_EQ(now[1].res.rank_offset, 4);
    CHECK_EQ(now[2].res.group_rank, 1);
    CHECK_EQ(now[2].res.round, 1);
    close_all(now, 3);
    fixture_stop(&f);
}

static void *watch_once(void *p) {
    agent_t *a = p;
    rdzv_event ev = RDZV_EV_NONE;
    a->rc = rdzv_watch(a->r, 5000, &ev);
    if (a->rc == 0) a->res.round = (int)ev; /* (the event, for the test) */
    return NULL;
}

TEST(rdzv_each_member_watches_two_and_every_loss_is_still_seen) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[6];
    agents_init(a, 6, &f, 3, 6);
    join_all(a, 6);
    for (int i = 0; i < 6; i++) CHECK_EQ(a[i].res.group_rank, i);
    /* node ranks 0, 1 and 2 go: 2's watchers (0 and 1) are gone with it,
     * but 1's second watcher, 5, sees it, and every survivor hears */
    for (int i = 0; i < 3; i++) {
        rdzv_close(a[i].r);
        a[i].r = NULL;
    }
    pthread_t t[3];
    for (int i = 3; i < 6; i++) pthread_create(&t[i - 3], NULL, watch_once, &a[i]);
    for (int i = 3; i < 6; i++) {
        pthread_join(t[i - 3], NULL);
        CHECK_EQ(a[i].rc, 0);
        CHECK_EQ(a[i].res.round, RDZV_EV_MEMBERSHIP);
    }
    close_all(a + 3, 3);
    fixture_stop(&f);
}

TEST(rdzv_exit_barrier_waits_for_every_node) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[2];
    agent_init(&a[0], &f, "n0", 2, 2);
    agent_init(&a[1], &f, "n1", 2, 2);
    join_all(a, 2);
    CHECK_EQ(rdzv_exit_barrier(a[0].r, 0.2, 0), -ETIMEDOUT);
    CHECK_EQ(rdzv_exit_barrier(a[1].r, 2, 0), 0);
    CHECK_EQ(rdzv_exit_barrier(a[0].r, 2, 0), 0);
    /* The job is over: a newcomer is told so. */
    agent_t late;
    agent_init(&late, &f, "n9", 2, 2);
    agent_join(&late);
    CHECK_EQ(late.rc, -EPIPE);
    rdzv_close(late.r);
    close_all(a, 2);
    fixture_stop(&f);
}

static void *agent_barrier(void *p) {
    agent_t *a = p;
    a->rc = rdzv_exit_barrier(a->r, 5, 0);
    return NULL;
}

/* A node lost at the exit barrier, before it said its workers finished,
 * is counted as done: the two that finished leave at once, neither
 * waiting for the other until the barrier's timeout (each had said it
 * was done; the count of those done could never reach three). */
TEST(rdzv_exit_barrier_counts_a_lost_node_done) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[3];
    agents_init(a, 3, &f, 2, 3);
    join_all(a, 3);
    rdzv_close(a[2].r); /* lost without a word at the barrier */
    a[2].r = NULL;
    int64_t t0 = clock_now_ms();
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, agent_barrier, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) CHECK_EQ(a[i].rc, 0);
    CHECK(clock_now_ms() - t0 < 4000);
    close_all(a, 2);
    fixture_stop(&f);
}

/* A round closed with a member that died before it was ready (node rank
 * 0, who makes it ready: a job requeued under the same id finds its dead
 * predecessor in the round): the others see it gone, end the round, and
 * meet in the next, rather than wait for "ready" until the join timeout. */
TEST(rdzv_a_round_whose_rank_0_died_before_ready_is_ended) {
    store_fixture f;
    fixture_start(&f, NULL);
    rdzv_kv *kv = NULL;
    CHECK_EQ(rdzv_kv_store_open("127.0.0.1", f.port, 2000, &kv), 0);
    int64_t n;
    const char *ghost = "ghost:1:00000000\ta0\t2\t-1\t-\t-"; /* sorts first: rank 0 */
    CHECK_EQ(kv_add(kv, "/ddprun/job/r0/njoined", 1, &n), 0);
    CHECK_EQ(kv_set(kv, "/ddprun/job/r0/node/1", ghost, strlen(ghost)), 0);
    agent_t a[2];
    agent_init(&a[0], &f, "b1", 2, 2);
    agent_init(&a[1], &f, "b2", 2, 2);
    a[0].o.join_timeout = a[1].o.join_timeout = 4;
    join_all(a, 2); /* the first closes round 0 with the ghost, the other stands by */
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(a[i].res.round, 1);
        CHECK_EQ(a[i].res.group_world_size, 2);
    }
    kv_close(kv);
    close_all(a, 2);
    fixture_stop(&f);
}

/* The node that ended a round (its outcome's writer) died before it
 * opened the next one, in a fault campaign on etcd: the others, waiting
 * for the next round to open, waited for ever. A waiter that sees the
 * outcome's writer gone opens the round itself. */
/* Two nodes in round 0, which a dead node ("ghost", no heartbeat) ended
 * for a failure, having written keys[0..nkeys) of the next round's
 * opening; then both go on to the next round. */
static void after_a_dead_ender(store_fixture *f, agent_t a[2], const char *const (*keys)[2],
                               int nkeys) {
    agent_init(&a[0], f, "n0", 2, 2);
    agent_init(&a[1], f, "n1", 2, 2);
    join_all(a, 2);
    rdzv_kv *kv = NULL;
    CHECK_EQ(rdzv_kv_store_open("127.0.0.1", f->port, 2000, &kv), 0);
    const char *dead = "failure ghost:1:00000000";
    CHECK_EQ(kv_set(kv, "/ddprun/job/r0/outcome", dead, strlen(dead)), 0);
    for (int i = 0; i < nkeys; i++) CHECK_EQ(kv_set(kv, keys[i][0], keys[i][1], strlen(keys[i][1])), 0);
    kv_close(kv);
    a[0].o.join_timeout = a[1].o.join_timeout = 4;
    join_all(a, 2);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(a[i].res.round, 1);
        CHECK_EQ(a[i].res.restart_count, 1);
    }
}

TEST(rdzv_a_round_ended_by_a_node_that_died_is_opened_by_another) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[2];
    after_a_dead_ender(&f, a, NULL, 0);
    close_all(a, 2);
    fixture_stop(&f);
}

/* The same node died after it opened the next round but before it
 * counted it ("round"): the round is open, so it is the current one. */
TEST(rdzv_an_open_round_counts_though_its_counter_lags) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[2];
    const char *const opened[][2] = {{"/ddprun/job/r1/restarts", "1"},
                                     {"/ddprun/job/r1/expect", "2"},
                                     {"/ddprun/job/r1/open", "1"}};
    after_a_dead_ender(&f, a, opened, 3);
    agent_t late; /* a node that comes now reads the lagging counter too */
    agent_init(&late, &f, "n2", 2, 2);
    late.o.join_timeout = 0.5;
    agent_join(&late);
    CHECK_EQ(late.rc, -ETIMEDOUT); /* (round 1 is full and running: it stands by) */
    CHECK(strstr(late.err, "round 1") != NULL);
    rdzv_close(late.r);
    close_all(a, 2);
    fixture_stop(&f);
}

/* Settings every node of a job must share (--nnodes, --max-restarts): the
 * first node to come sets them for the job; a node that disagrees is
 * refused with both values named, where it used to run as if it agreed. */
TEST(rdzv_refuses_a_node_whose_nnodes_differ) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[3];
    agent_init(&a[0], &f, "n0", 3, 3);
    agent_init(&a[1], &f, "n1", 2, 2);
    agent_init(&a[2], &f, "n2", 3, 3);
    a[2].o.max_restarts = 7;
    CHECK_EQ(rdzv_open(&a[0].o, &a[0].r, a[0].err, sizeof a[0].err), 0);
    CHECK_EQ(rdzv_open(&a[1].o, &a[1].r, a[1].err, sizeof a[1].err), -EINVAL);
    CHECK(strstr(a[1].err, "--nnodes=2 ") != NULL);
    CHECK(strstr(a[1].err, "--nnodes=3 --max-restarts=3 (node n0's") != NULL);
    CHECK_EQ(rdzv_open(&a[2].o, &a[2].r, a[2].err, sizeof a[2].err), -EINVAL);
    CHECK(strstr(a[2].err, "--max-restarts=7") != NULL);
    agent_t same;
    agent_init(&same, &f, "n3", 3, 3);
    CHECK_EQ(rdzv_open(&same.o, &same.r, same.err, sizeof same.err), 0);
    rdzv_close(same.r);
    rdzv_close(a[0].r);
    fixture_stop(&f);
}

/* The backends' table: every row complete, found by its name or by
 * torchrun's other spellings, and the flags that set them apart. */
TEST(rdzv_backends_by_name) {
    int alias = -1;
    const rdzv_backend *c10d = rdzv_backend_find("c10d", &alias);
    CHECK(c10d && alias == 0 && (c10d->flags & RDZV_IN_JOB_STORE));
    CHECK(!(c10d->flags & (RDZV_FIXED_RANKS | RDZV_MANY_ENDPOINTS)));
    const rdzv_backend *st = rdzv_backend_find("static", NULL);
    CHECK(st && (st->flags & RDZV_FIXED_RANKS) && (st->flags & RDZV_IN_JOB_STORE));
    const rdzv_backend *etcd = rdzv_backend_find("etcd-v2", &alias);
    CHECK(etcd && alias == 1);
    CHECK_STR(etcd->name, "etcd-v3");
    CHECK(!(etcd->flags & RDZV_IN_JOB_STORE) && (etcd->flags & RDZV_MANY_ENDPOINTS));
    CHECK(etcd->alias_says && etcd->alias_why);
    CHECK(rdzv_backend_find("zookeeper", &alias) == NULL);
    char names[128];
    rdzv_backend_names(names, sizeof names);
    CHECK_STR(names, "static, c10d or etcd-v3");
    const rdzv_backend *all[] = {st, c10d, etcd};
    for (int i = 0; i < 3; i++) CHECK(all[i]->open && all[i]->endpoint && all[i]->aliases);
}

/* Lost: the message names where the keys were, not the workers' store. */
TEST(rdzv_lost_names_the_store) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a;
    agent_init(&a, &f, "node1", 1, 1);
    char err[512];
    rdzv *r = NULL;
    CHECK_EQ(rdzv_open(&a.o, &r, err, sizeof err), 0);
    rdzv_lost_message(r, -ETIMEDOUT, err, sizeof err);
    char want[128];
    snprintf(want, sizeof want, "lost the rendezvous: the store at 127.0.0.1:%d does not answer "
             "(it stopped answering)", f.port);
    CHECK(strncmp(err, want, strlen(want)) == 0);
    /* (what the etcd client says when no member answered in time) */
    rdzv_lost_message(r, -EHOSTUNREACH, err, sizeof err);
    CHECK(strstr(err, "does not answer (no answer in time: out of reach, or too slow)") != NULL);
    rdzv_close(r);
    fixture_stop(&f);
}

/* A rendezvous whose store went away while it joined says it lost the
 * rendezvous, naming the store, not a bare errno. */
TEST(rdzv_a_store_gone_while_joining_is_named) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a;
    agent_init(&a, &f, "node1", 2, 2); /* waits for a second node */
    a.o.join_timeout = 5;
    char err[512];
    CHECK_EQ(rdzv_open(&a.o, &a.r, err, sizeof err), 0);
    int port = f.port;
    fixture_stop(&f);
    rdzv_result res;
    CHECK(rdzv_next(a.r, &res, a.err, sizeof a.err) != 0);
    char want[128];
    snprintf(want, sizeof want, "lost the rendezvous: the store at 127.0.0.1:%d does not answer",
             port);
    if (strncmp(a.err, want, strlen(want)) != 0) test_fail(__FILE__, __LINE__, "said: %s", a.err);
    rdzv_close(a.r);
}

/* Before a round's workers start, node rank 0 empties the workers'
 * keyspace: torch 2.x's keys (no per-attempt prefix) and 1.13's
 * (/worker/attempt_N/) alike go; the agents' own keys (/ddprun/ and the
 * job's key prefix) stay. */
TEST(rdzv_clear_worker_keys_empties_all_but_the_agents_keys) {
    store_fixture f;
    fixture_start(&f, NULL);
    rdzv_kv *kv = NULL;
    CHECK_EQ(rdzv_kv_store_open("127.0.0.1", f.port, 2000, &kv), 0);
    const char *gone[] = {"rank_0", "/worker/attempt_0/rank_1", "store_based_barrier_key:1",
                          "/myjobs-elsewhere/x", "ddprun/no-leading-slash"};
    const char *kept[] = {"/ddprun/job/r0/open", "/ddprun/probe", "/myjobs/job/alive/a"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        CHECK_EQ(kv_set(kv, gone[i], "v", 1), 0);
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        CHECK_EQ(kv_set(kv, kept[i], "v", 1), 0);
    size_t cleared = 99;
    CHECK_EQ(rdzv_clear_worker_keys(kv, "/myjobs/", &cleared), 0);
    CHECK_EQ(cleared, sizeof gone / sizeof *gone);
    int all = -1;
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) {
        CHECK_EQ(kv_check(kv, 1, &gone[i], &all), 0);
        CHECK_EQ(all, 0);
    }
    CHECK_EQ(kv_check(kv, sizeof kept / sizeof *kept, kept, &all), 0);
    CHECK_EQ(all, 1);
    CHECK_EQ(rdzv_clear_worker_keys(kv, NULL, &cleared), 0); /* without a job prefix */
    CHECK_EQ(cleared, 1); /* /myjobs/... is a worker's key now */
    kv_close(kv);
    fixture_stop(&f);
}

/* A joiner that took its place in a round (ADD njoined) and died before it
 * said who it is (its node/<i>) held the round's members for 30 s, then
 * failed them all ("cannot read the members of round 1: Connection timed
 * out"; found by the fault campaign, a node killed while it joined). The
 * members now give the place up after a heartbeat, with a tombstone every
 * member reads alike, and the round goes on without it. */
TEST(rdzv_a_joiner_that_died_before_saying_who_it_is_does_not_hold_the_round) {
    store_fixture f;
    fixture_start(&f, NULL);
    store_client *c = fixture_client(&f);
    int64_t n = 0;
    CHECK_EQ(store_add(c, "/ddprun/job/r0/njoined", 1, &n), 0); /* the phantom: place 1 */
    agent_t a[2];
    agent_init(&a[0], &f, "aaa", 2, 3);
    agent_init(&a[1], &f, "bbb", 2, 3);
    int64_t t0 = clock_now_ms();
    join_all(a, 2);
    CHECK(clock_now_ms() - t0 < 5000);
    for (int i = 0; i < 2; i++) CHECK_EQ(a[i].res.group_world_size, 2);
    CHECK(a[0].res.group_rank != a[1].res.group_rank);
    store_client_close(c);
    close_all(a, 2);
    fixture_stop(&f);
}

/* A job requeued under the same id (Slurm's requeue keeps the job id) on a
 * store that outlived it (etcd) found its dead predecessor's round still
 * "running", full, and stood by as its spares until the join timeout:
 * nobody was left to end that round. A node that waits for a round now
 * watches its members, and ends it when one is gone. */
TEST(rdzv_late_nodes_end_a_round_whose_members_are_gone) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[2], b[2];
    agent_init(&a[0], &f, "aaa", 2, 2);
    agent_init(&a[1], &f, "bbb", 2, 2);
    join_all(a, 2);
    close_all(a, 2); /* the job is gone (its agents' keys with it), its round never ended */
    agent_init(&b[0], &f, "aaa", 2, 2);
    agent_init(&b[1], &f, "bbb", 2, 2);
    int64_t t0 = clock_now_ms();
    join_all(b, 2);
    CHECK(clock_now_ms() - t0 < 5000);
    for (int i = 0; i < 2; i++) CHECK_EQ(b[i].res.group_world_size, 2);
    CHECK(b[0].res.round > 0);
    close_all(b, 2);
    fixture_stop(&f);
}

/* rdzv_parse_node on a copy of s (it cuts the fields off in place) */
static int parse(char *buf, size_t cap, const char *s, rdzv_node *n) {
    snprintf(buf, cap, "%s", s);
    return rdzv_parse_node(buf, n);
}

TEST(rdzv_parse_node_reads_every_generation_of_description) {
    rdzv_node n;
    char b[128];
    /* an older ddprun's four fields */
    CHECK_EQ(parse(b, sizeof b, "a1\thost1\t8\t-1", &n), 0);
    CHECK_STR(n.agent_id, "a1");
    CHECK_STR(n.host, "host1");
    CHECK_EQ(n.nproc, 8);
    CHECK_EQ(n.node_rank_hint, -1);
    CHECK_STR(n.store, "-");
    CHECK_STR(n.worker_ports, "-");
    CHECK_EQ(n.prev_round, -1);
    /* six: its own store and its workers' ports */
    CHECK_EQ(parse(b, sizeof b, "a2\th2\t2\t3\th2:29500\t4000,4001", &n), 0);
    CHECK_EQ(n.node_rank_hint, 3);
    CHECK_STR(n.store, "h2:29500");
    CHECK_STR(n.worker_ports, "4000,4001");
    CHECK_EQ(n.prev_rank, -1);
    /* seven: and the round it was last a member of, with its rank there */
    CHECK_EQ(parse(b, sizeof b, "a3\th3\t1\t-1\t-\t-\t4:17", &n), 0);
    CHECK_EQ(n.prev_round, 4);
    CHECK_EQ(n.prev_rank, 17);
    /* not a description */
    CHECK(parse(b, sizeof b, "a4\th4\tmany\t0", &n) != 0);
    CHECK(parse(b, sizeof b, "a5\th5", &n) != 0);
    CHECK(parse(b, sizeof b, "", &n) != 0);
    CHECK(parse(b, sizeof b, "\th6\t1\t0", &n) != 0);
}

/* A c10d backend with knobs: its handles' set_owned says a lease has
 * lapsed (-ENOENT, as etcd does) for the next patched_lapses calls with a
 * lease, ranges can be called costly (as etcd's are), multi_get is
 * counted, and with patched_ages it tells when a lease was last renewed
 * (as etcd does; any lease's last renewal here). */
static rdzv_kv_ops patched_ops;
static const rdzv_kv_ops *patched_inner;
static int patched_costly, patched_ages;
static atomic_int patched_lapses, patched_multi_gets;
static _Atomic int64_t patched_renewed_ms;

static int patched_lease_renew(rdzv_kv *kv, uint64_t lease) {
    int rc = patched_inner->lease_renew(kv, lease);
    if (rc == 0) atomic_store(&patched_renewed_ms, clock_now_ms());
    return rc;
}

static int patched_renewed_age(rdzv_kv *kv, const char *k, double *age_s) {
    uint8_t *v = NULL;
    size_t n;
    int rc = patched_inner->try_get(kv, k, &v, &n);
    free(v);
    if (rc == 0) *age_s = (double)(clock_now_ms() - atomic_load(&patched_renewed_ms)) / 1000;
    return rc;
}

static int patched_set_owned(rdzv_kv *kv, const char *k, const void *v, size_t n, uint64_t lease) {
    if (lease && atomic_load(&patched_lapses) > 0) {
        atomic_fetch_sub(&patched_lapses, 1);
        return -ENOENT;
    }
    return patched_inner->set_owned(kv, k, v, n, lease);
}

static int patched_multi_get(rdzv_kv *kv, size_t n, const char *const *keys, uint8_t **vals,
                             size_t *lens) {
    atomic_fetch_add(&patched_multi_gets, 1);
    return patched_inner->multi_get(kv, n, keys, vals, lens);
}

static int patched_open(const rdzv_endpoint *e, int quiet, rdzv_kv **kv, char *err, size_t errlen) {
    int rc = rdzv_backend_find("c10d", NULL)->open(e, quiet, kv, err, errlen);
    if (rc) return rc;
    if (!patched_inner) { /* (the same table for every handle; tests run one at a time) */
        patched_inner = (*kv)->ops;
        patched_ops = *patched_inner;
        patched_ops.set_owned = patched_set_owned;
        patched_ops.multi_get = patched_multi_get;
        patched_ops.lease_renew = patched_lease_renew;
    }
    patched_ops.ranges_costly = patched_costly;
    patched_ops.renewed_age = patched_ages ? patched_renewed_age : NULL;
    (*kv)->ops = &patched_ops;
    return 0;
}

static rdzv_backend patched_backend(int ranges_costly, int lapses) {
    patched_costly = ranges_costly;
    atomic_store(&patched_lapses, lapses);
    atomic_store(&patched_multi_gets, 0);
    rdzv_backend b = *rdzv_backend_find("c10d", NULL);
    b.open = patched_open;
    return b;
}

/* A heartbeat lease that lapses before its key is written (a store slower
 * than the heartbeat) is granted again; one that lapses every time is
 * named as such, not as a missing file. */
TEST(rdzv_a_lease_lapsed_before_its_key_is_granted_again) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a;
    agent_init(&a, &f, "node1", 1, 1);
    rdzv_backend b = patched_backend(0, 2);
    a.o.backend = &b;
    CHECK_EQ(rdzv_open(&a.o, &a.r, a.err, sizeof a.err), 0);
    CHECK_EQ(atomic_load(&patched_lapses), 0);
    CHECK_EQ(rdzv_next(a.r, &a.res, a.err, sizeof a.err), 0);
    rdzv_close(a.r);
    a.r = NULL;
    b = patched_backend(0, 100);
    CHECK(rdzv_open(&a.o, &a.r, a.err, sizeof a.err) != 0);
    CHECK(strstr(a.err, "answers slower than the heartbeat") != NULL);
    fixture_stop(&f);
}

/* A node's heartbeat age in `ddprun status`, and how many beat/ keys
 * there are, after a second of heartbeats every 0.3 s. */
static void beats_seen(int ages, size_t *beat_keys, double *age_s) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a;
    agent_init(&a, &f, "node1", 1, 1);
    a.o.heartbeat = 0.3;
    patched_ages = ages;
    rdzv_backend b = patched_backend(0, 0);
    a.o.backend = &b;
    CHECK_EQ(rdzv_open(&a.o, &a.r, a.err, sizeof a.err), 0);
    CHECK_EQ(rdzv_next(a.r, &a.res, a.err, sizeof a.err), 0);
    sleep_ms(1000);
    rdzv_kv *kv = NULL;
    CHECK_EQ(rdzv_kv_store_open("127.0.0.1", f.port, 2000, &kv), 0);
    char **keys = NULL;
    CHECK_EQ(kv_list(kv, "/ddprun/job/beat/", &keys, beat_keys), 0);
    rdzv_kv_free_keys(keys, *beat_keys);
    kv_close(kv);
    rdzv_inspect_opts io = {.backend = &b, .where = a.o.where, .run_id = "job"};
    json_t *st = NULL;
    char err[256];
    CHECK_EQ(rdzv_inspect(&io, &st, err, sizeof err), 0);
    json_t *node = json_array_get(json_object_get(st, "nodes"), 0);
    CHECK(json_is_true(json_object_get(node, "alive")));
    json_t *age = json_object_get(node, "heartbeat_age_s");
    CHECK(json_is_number(age));
    *age_s = json_number_value(age);
    json_decref(st);
    rdzv_close(a.r);
    patched_ages = 0;
    fixture_stop(&f);
}

/* Where the store tells when a lease was last renewed (etcd), no beat/ key
 * is written (on etcd a consensus write and a disk sync per node and
 * heartbeat interval): `ddprun status` asks the store each node's lease.
 * Elsewhere the node writes it. */
TEST(rdzv_no_beat_key_where_the_store_tells_a_leases_age) {
    size_t keys;
    double age;
    beats_seen(1, &keys, &age);
    CHECK_EQ(keys, 0);
    CHECK(age >= 0 && age < 0.3);
    beats_seen(0, &keys, &age);
    CHECK_EQ(keys, 1);
    CHECK(age >= 0 && age < 1);
}

/* Where ranges are costly, the node that closes a round writes its members
 * as one value and the others read that: the members are read by range
 * once, not by every node, and every node gets the same ranks. */
TEST(rdzv_members_read_as_one_value_where_ranges_are_costly) {
    store_fixture f;
    fixture_start(&f, NULL);
    agent_t a[3];
    agents_init(a, 3, &f, 3, 3);
    rdzv_backend b = patched_backend(1, 0);
    for (int i = 0; i < 3; i++) a[i].o.backend = &b;
    join_all(a, 3);
    CHECK_EQ(atomic_load(&patched_multi_gets), 1);
    rdzv_kv *kv = NULL;
    CHECK_EQ(rdzv_kv_store_open("127.0.0.1", f.port, 2000, &kv), 0);
    uint8_t *v = NULL;
    size_t vn = 0, lines = 1;
    CHECK_EQ(kv_try_get(kv, "/ddprun/job/r0/members", &v, &vn), 0);
    for (size_t i = 0; i < vn; i++) lines += v[i] == '\n';
    CHECK_EQ(lines, 3);
    free(v);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(a[i].res.group_rank, i); /* n0, n1, n2: host order */
        CHECK_EQ(a[i].res.group_world_size, 3);
        CHECK_EQ(a[i].res.rank_offset, 2 * i);
    }
    kv_close(kv);
    close_all(a, 3);
    /* the same ranks where ranges are cheap: every node reads them */
    agents_init(a, 3, &f, 3, 3);
    for (int i = 0; i < 3; i++) a[i].o.run_id = "job2";
    b = patched_backend(0, 0);
    for (int i = 0; i < 3; i++) a[i].o.backend = &b;
    join_all(a, 3);
    CHECK_EQ(atomic_load(&patched_multi_gets), 3);
    for (int i = 0; i < 3; i++) CHECK_EQ(a[i].res.group_rank, i);
    close_all(a, 3);
    fixture_stop(&f);
}

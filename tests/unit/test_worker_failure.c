/* agent/worker_failure.c: a failed worker's record names its rank and how
 * it ended, and says when the worker watchdog killed it, and for what. */
#include <stdio.h>
#include <string.h>

#include "agent/worker_failure.h"
#include "tests/unit/test.h"

TEST(worker_failure_names_the_rank_and_the_watchdogs_kill) {
    worker w;
    memset(&w, 0, sizeof w);
    w.global_rank = 5, w.local_rank = 1, w.pid = 4242, w.exit_status = 3;
    failure f;
    memset(&f, 0, sizeof f);
    worker_failure(&f, &w, "node3", 2, NULL);
    CHECK_EQ(f.rank, 5);
    CHECK_EQ(f.local_rank, 1);
    CHECK_EQ(f.pid, 4242);
    CHECK(!f.watchdog);
    CHECK(f.message && !strstr(f.message, "watchdog"));
    w.exit_status = 0, w.term_signal = 9;
    worker_failure(&f, &w, "node3", 2, "forward pass");
    CHECK(f.watchdog);
    CHECK(strstr(f.message, "stopped by the worker watchdog, 'forward pass' ran past its "
                            "deadline") != NULL);
    failure_free(&f);
}

/* A hang's verdict blames ranks 1 and 3; rank 1 failed here already, rank
 * 3 is another node's: it becomes a failure of its own, said hung, and the
 * root cause's message names the verdict. */
TEST(worker_failures_hung_adds_the_blamed_ranks_not_yet_known) {
    failure known[1], out[4];
    memset(known, 0, sizeof known);
    memset(out, 0, sizeof out);
    worker w;
    memset(&w, 0, sizeof w);
    w.global_rank = 1, w.local_rank = 1, w.pid = 11, w.exit_status = 1;
    worker_failure(&known[0], &w, "node0", 0, NULL);
    coll_verdict v;
    memset(&v, 0, sizeof v);
    v.nblamed = 2;
    v.blamed[0] = (coll_pos){.rank = 1, .local_rank = 1, .pid = 11};
    v.blamed[1] = (coll_pos){.rank = 3, .local_rank = 1, .pid = 33};
    snprintf(v.blamed[1].host, sizeof v.blamed[1].host, "node1");
    snprintf(v.text, sizeof v.text, "rank 3 fell silent in collective #7");
    CHECK_EQ(worker_failures_hung(out, 4, known, 1, &v, NULL, 0, "node0", 0), 1);
    CHECK_EQ(out[0].rank, 3);
    CHECK_EQ(out[0].pid, 33);
    CHECK(strstr(out[0].message, "hung (stopped with the group)") != NULL);
    CHECK_EQ(worker_failures_hung(out, 0, known, 1, &v, NULL, 0, "node0", 0), 0); /* no room */
    out[0].hung = 1;
    worker_failure_note_hang(&out[0], &v);
    CHECK(strstr(out[0].message, "the rank the others waited for: rank 3 fell silent") != NULL);
    failure_free(&known[0]);
    failure_free(&out[0]);
}

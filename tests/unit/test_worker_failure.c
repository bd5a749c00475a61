/* agent/worker_failure.c: a failed worker's record names its rank and how
 * it ended, and says when the worker watchdog killed it, and for what. */
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

/* agent/failure.c: which failure of a round is its root cause, and the
 * summary that names it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/failure.h"
#include "tests/unit/test.h"

static failure at(double time, int exitcode, int rank) {
    failure f = {.time = time, .exitcode = exitcode, .rank = rank};
    snprintf(f.host, sizeof f.host, "h%d", rank);
    return f;
}

TEST(failure_root_cause_is_the_earliest) {
    failure fs[] = {at(10.5, 1, 0), at(10.2, 7, 1), at(11.0, 1, 2)};
    CHECK_EQ(failure_root_cause(fs, 3), 1);
    CHECK_EQ(failure_root_cause(fs, 1), 0);
    CHECK_EQ(failure_root_cause(fs, 0), -1);
}

/* kill -9 of rank 1; rank 0 sees its connection close, writes its error
 * file (an earlier timestamp than the agent's reaping of rank 1) and exits
 * 1: rank 1's death is the cause, whichever comes first. */
TEST(failure_root_cause_prefers_a_killed_worker) {
    failure fs[] = {at(100.010, 1, 0), at(100.020, -9, 1), at(100.030, 1, 2)};
    CHECK_EQ(failure_root_cause(fs, 3), 1);
    failure two[] = {at(100.020, -9, 1), at(100.010, 1, 0)};
    CHECK_EQ(failure_root_cause(two, 2), 0);
    failure sigs[] = {at(5.0, -11, 3), at(4.0, -9, 4), at(3.0, 1, 5)};
    CHECK_EQ(failure_root_cause(sigs, 3), 1);
}

/* The watchdog killed two ranks at once, the hung one first: it is the
 * cause, whatever the reaping order. */
TEST(failure_root_cause_prefers_the_watchdog_kill) {
    failure fs[] = {at(7.0, -9, 1), at(7.1, -9, 0), at(6.9, 1, 2)};
    fs[1].watchdog = 1;
    CHECK_EQ(failure_root_cause(fs, 3), 1);
}

TEST(failure_summary_names_the_root_cause) {
    failure fs[] = {at(100.010, 1, 0), at(100.020, -9, 1)};
    fs[0].message = strdup("all-reduce failed: rank 1 closed its connection");
    fs[1].message = strdup("Signal 9 (SIGKILL) received by PID 42");
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    failure_print_summary(out, "ddp-train", fs, 2);
    fclose(out);
    const char *root = strstr(text, "Root Cause");
    CHECK(root != NULL);
    CHECK(strstr(root, "SIGKILL") != NULL);
    CHECK(strstr(root, "closed its connection") == NULL);
    const char *failures = strstr(text, "Failures:");
    CHECK(failures != NULL && failures < root);
    CHECK(strstr(failures, "closed its connection") < root);
    free(text);
    failure_free(&fs[0]);
    failure_free(&fs[1]);
}

/* Unit tests of common/log.c's rate-limited lines. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "tests/unit/test.h"

/* Runs fn with stderr going to a memory file; returns what it got. */
static char *capture_stderr(void (*fn)(log_rate *), log_rate *r) {
    test_stderr_begin();
    fn(r);
    return test_stderr_end();
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void hundred_bad_clients(log_rate *r) {
    for (int i = 0; i < 100; i++) log_rated(r, LOG_WARN, "client %d: bad", i);
}

static void one_more(log_rate *r) { log_rated(r, LOG_WARN, "client 100: bad"); }

/* 100 bad connections at once: LOG_RATE_BURST lines, the rest counted and
 * told with the first line of the next interval. */
TEST(log_rated_holds_back_a_flood) {
    log_rate r = {0};
    char *out = capture_stderr(hundred_bad_clients, &r);
    CHECK_EQ(count_lines(out), LOG_RATE_BURST);
    CHECK(strstr(out, "warning: client 0: bad\n") != NULL);
    CHECK(strstr(out, "client 10: bad") == NULL);
    free(out);
    r.window_start -= LOG_RATE_INTERVAL_S + 1; /* the interval has passed */
    out = capture_stderr(one_more, &r);
    CHECK_EQ(count_lines(out), 1);
    CHECK(strstr(out, "client 100: bad (and 90 more like it in the last 10 s, not shown)\n"));
    free(out);
}

/* err_set: the message where there is a buffer, the code back either way. */
TEST(err_set_writes_and_returns) {
    char err[32] = "old";
    CHECK_EQ(err_set(err, sizeof err, -EINVAL, "--port: '%s' is not a port", "x"), -EINVAL);
    CHECK_STR(err, "--port: 'x' is not a port");
    CHECK_EQ(err_set(NULL, 0, -ENOENT, "nowhere to say it"), -ENOENT);
    CHECK_EQ(err_set(err, 8, -E2BIG, "%s", "a long message cut"), -E2BIG);
    CHECK_STR(err, "a long ");
}

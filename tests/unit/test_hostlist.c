/* Unit tests of Slurm's compressed host lists (common/hostlist.c): plain
 * names, ranges with and without zero padding, several bracket groups in
 * one name, the n-th host without expanding the rest, and malformed lists
 * refused as a whole. */
#include <errno.h>

#include "common/hostlist.h"
#include "tests/unit/test.h"

/* Collects a list's hosts as "a b c". */
typedef struct {
    char buf[1024];
    int n, stop_after;
} joined;

static int join_host(const char *host, void *ctx) {
    joined *j = ctx;
    size_t len = strlen(j->buf);
    snprintf(j->buf + len, sizeof j->buf - len, "%s%s", len ? " " : "", host);
    j->n++;
    return j->stop_after && j->n == j->stop_after ? 7 : 0;
}

static const char *expand(const char *list, int *rc) {
    static joined j;
    memset(&j, 0, sizeof j);
    *rc = hostlist_each(list, join_host, &j);
    return j.buf;
}

#define CHECK_EXPANDS(list, want)                                         \
    do {                                                                  \
        int rc_;                                                          \
        const char *got_ = expand(list, &rc_);                            \
        CHECK_EQ(rc_, 0);                                                 \
        CHECK_STR(got_, want);                                            \
    } while (0)

TEST(hostlist_plain_names) {
    CHECK_EXPANDS("login2", "login2");
    CHECK_EXPANDS("a,b.example.org,c-1", "a b.example.org c-1");
}

TEST(hostlist_ranges_keep_the_padding_of_their_first_number) {
    CHECK_EXPANDS("node[01-04,07]", "node01 node02 node03 node04 node07");
    CHECK_EXPANDS("n[8-11]", "n8 n9 n10 n11");
    CHECK_EXPANDS("n[098-101]", "n098 n099 n100 n101");
    CHECK_EXPANDS("node[01-04,07],gpu-a[1-2]",
                  "node01 node02 node03 node04 node07 gpu-a1 gpu-a2");
    CHECK_EXPANDS("x[5]", "x5");
    CHECK_EXPANDS("[1-2]", "1 2");
}

TEST(hostlist_text_after_and_between_brackets) {
    CHECK_EXPANDS("n[1-2]-ib", "n1-ib n2-ib");
    /* The leftmost group varies slowest, as Slurm expands it. */
    CHECK_EXPANDS("rack[1-2]-n[01-02]", "rack1-n01 rack1-n02 rack2-n01 rack2-n02");
}

TEST(hostlist_count_and_nth) {
    long n = 0;
    CHECK_EQ(hostlist_count("node[01-04,07],gpu-a[1-2]", &n), 0);
    CHECK_EQ(n, 7);
    char out[32];
    CHECK_EQ(hostlist_nth("node[01-04,07],gpu-a[1-2]", 0, out, sizeof out), 0);
    CHECK_STR(out, "node01");
    CHECK_EQ(hostlist_nth("node[01-04,07],gpu-a[1-2]", 4, out, sizeof out), 0);
    CHECK_STR(out, "node07");
    CHECK_EQ(hostlist_nth("node[01-04,07],gpu-a[1-2]", 6, out, sizeof out), 0);
    CHECK_STR(out, "gpu-a2");
    CHECK_EQ(hostlist_nth("node[01-04,07],gpu-a[1-2]", 7, out, sizeof out), -ERANGE);
    CHECK_EQ(hostlist_nth("averylonghostname", 0, out, 8), -ENAMETOOLONG);
    /* A huge range is counted, not expanded, and its first host is quick. */
    CHECK_EQ(hostlist_count("n[0-99999999]", &n), 0);
    CHECK_EQ(n, 100000000);
    CHECK_EQ(hostlist_nth("n[0-99999999]", 0, out, sizeof out), 0);
    CHECK_STR(out, "n0");
}

TEST(hostlist_callback_stops_the_walk) {
    joined j = {.stop_after = 2};
    CHECK_EQ(hostlist_each("a,b,c", join_host, &j), 7);
    CHECK_STR(j.buf, "a b");
}

TEST(hostlist_refuses_malformed_lists) {
    static const char *bad[] = {
        "",          "a,,b",     "a,",        ",a",        "n[1-2",     "n1-2]",
        "n[[1]]",    "n[]",      "n[2-1]",    "n[a-b]",    "n[1-]",     "n[-1]",
        "n[1,]",     "n[1--2]",  "n[1-2-3]",  "a b",       "n[1-2]]",   "n[1234567890]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc;
        expand(bad[i], &rc);
        if (rc != -EINVAL) test_fail(__FILE__, __LINE__, "'%s' gave %d, not -EINVAL", bad[i], rc);
        long n;
        CHECK_EQ(hostlist_count(bad[i], &n), -EINVAL);
    }
    /* A malformed tail makes even the first host an error: the list as a
     * whole is not what Slurm wrote. */
    char out[16];
    CHECK_EQ(hostlist_nth("good,bad[", 0, out, sizeof out), -EINVAL);
}

TEST(hostlist_refuses_lists_too_long_to_walk) {
    long n;
    /* 10^8 * 10^8 hosts is over the limit, and counting it must not overflow. */
    CHECK_EQ(hostlist_count("n[0-99999999]x[0-99999999]y[0-99999999]", &n), -E2BIG);
}

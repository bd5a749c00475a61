/* Unit tests of the worker's console prefix (agent/worker_output.c):
 * torchrun's log line prefix template and its macros. */
#include "agent/worker_output.h"
#include "tests/unit/test.h"

static const worker_prefix_vars vars = {.role_name = "trainer", .local_rank = 1, .rank = 5,
                                        .hostname = "node7"};

/* Expands t and checks the result and the count of names left alone. */
static void check_prefix(const char *t, const char *want, int want_unknown) {
    char out[256], unknown[64] = "";
    int n = worker_output_prefix(t, &vars, out, sizeof out, unknown, sizeof unknown);
    CHECK_STR(out, want);
    CHECK_EQ(n, want_unknown);
}

TEST(prefix_template_macros) {
    check_prefix("[${role_name}${local_rank}]:", "[trainer1]:", 0);
    check_prefix("${hostname}:${rank}: ", "node7:5: ", 0);
    check_prefix("$hostname/$rank|", "node7/5|", 0);
    check_prefix("no macros", "no macros", 0);
    check_prefix("cost $$5 ${rank}", "cost $5 5", 0);
    check_prefix("", "", 0);
}

/* As Python's Template.safe_substitute: what is no macro stays as written. */
TEST(prefix_template_leaves_unknown_names) {
    char out[64], unknown[64];
    CHECK_EQ(worker_output_prefix("${rnk}-${rank}", &vars, out, sizeof out, unknown,
                                  sizeof unknown), 1);
    CHECK_STR(out, "${rnk}-5");
    CHECK_STR(unknown, "${rnk}");
    check_prefix("${rank", "${rank", 1);
    check_prefix("$ $5 $", "$ $5 $", 3);
    check_prefix("$ranks", "$ranks", 1); /* the name is "ranks", not "rank" + "s" */
}

TEST(prefix_template_cut_to_the_buffer) {
    char out[6];
    worker_output_prefix("[${hostname}]", &vars, out, sizeof out, NULL, 0);
    CHECK_STR(out, "[node");
}

/* Unit tests of Slurm's step variables (common/slurm.c): job and step ids,
 * the port a step meets at, and the tasks-per-node lists. */
#include <errno.h>

#include "common/slurm.h"
#include "tests/unit/test.h"

TEST(slurm_ids) {
    unsigned long id = 0;
    CHECK_EQ(slurm_parse_id("1234", &id), 0);
    CHECK_EQ(id, 1234);
    CHECK_EQ(slurm_parse_id("4294967294", &id), 0); /* the batch step's id */
    CHECK_EQ(id, 4294967294UL);
    CHECK_EQ(slurm_parse_id("", &id), -EINVAL);
    CHECK_EQ(slurm_parse_id("12_3", &id), -EINVAL); /* an array task's name, not its id */
    CHECK_EQ(slurm_parse_id("-1", &id), -EINVAL);
    CHECK_EQ(slurm_parse_id("12345678901", &id), -EINVAL);
}

TEST(slurm_step_port_differs_between_jobs_and_steps) {
    CHECK_EQ(slurm_step_port(77, 0), 20000 + 77 * 31);
    CHECK(slurm_step_port(77, 0) != slurm_step_port(78, 0));
    CHECK(slurm_step_port(77, 0) != slurm_step_port(77, 1));
    for (unsigned long job = 0; job < 100000; job += 997) {
        int p = slurm_step_port(job, job % 7);
        CHECK(p >= 20000 && p < 32768);
    }
}

TEST(slurm_tasks_per_node_lists) {
    int n = -1;
    CHECK_EQ(slurm_tasks_on_node("2", 0, &n), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(slurm_tasks_on_node("2(x3),1", 0, &n), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(slurm_tasks_on_node("2(x3),1", 2, &n), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(slurm_tasks_on_node("2(x3),1", 3, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(slurm_tasks_on_node("4,3(x2),8", 2, &n), 0);
    CHECK_EQ(n, 3);
    CHECK_EQ(slurm_tasks_on_node("4,3(x2),8", 3, &n), 0);
    CHECK_EQ(n, 8);
    CHECK_EQ(slurm_tasks_on_node("2(x3),1", 4, &n), -ERANGE);
    static const char *bad[] = {"", "x", "2(x)", "2(3)", "2(x3", "2,,1", "2,", "(x2)", "2(x0)",
                                "-1", "2(x3)1", " 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (slurm_tasks_on_node(bad[i], 0, &n) != -EINVAL)
            test_fail(__FILE__, __LINE__, "'%s' was not refused", bad[i]);
}

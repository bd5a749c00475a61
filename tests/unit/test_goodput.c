/* agent/goodput.c: a job with two attempts (a failure, then a resume from
 * before the last steps done), its rendezvous and restarts: every second
 * of the wall time accounted for once, the redone steps counted at their
 * attempt's pace, and the running attempt's figures live. */
#include <string.h>

#include "agent/goodput.h"
#include "tests/unit/test.h"

static int near(double a, double b) { return a > b - 1e-9 && a < b + 1e-9; }

TEST(goodput_accounts_for_every_second_once) {
    goodput g;
    memset(&g, 0, sizeof g);
    /* rendezvous 0 to 2; attempt 1 starts at 2, steps 1..100 from 3 (50 s of
     * steps, 1 s waiting for data, 0.5 s for checkpoints), fails at 56, gone
     * at 57; rendezvous 57 to 58; attempt 2 resumes from step 91 (steps
     * 91..200: 110 steps, 55 s) at 59 */
    g.start = 0, g.rendezvous_s = 2;
    goodput_attempt one = {.started = 2, .first_step = 3, .ended = 56, .first = 1, .steps = 100,
                           .step_s = 50, .data_s = 1, .ckpt_s = 0.5};
    goodput_attempt_end(&g, &one, 57);
    g.rendezvous_s += 1;
    goodput_attempt two = {.started = 58, .first_step = 59, .first = 91, .steps = 110,
                           .step_s = 55};
    goodput_view v;
    goodput_now(&g, &two, 0, 116, &v); /* still running at 116 */
    CHECK(near(v.wall, 116));
    CHECK_EQ(v.redone_steps, 10);
    CHECK(near(v.redone, 5));       /* 10 steps at 0.5 s */
    CHECK(near(v.startup, 1));      /* the first start, to its first step */
    CHECK(near(v.restarts, 1 + 1)); /* the first attempt's stop, the second's start-up */
    CHECK(near(v.rendezvous, 3));
    CHECK(near(v.kept, 105 - 5 - 1 - 0.5));
    CHECK(near(v.other, 116 - 98.5 - 5 - 3 - 1 - 2 - 1 - 0.5));
    CHECK(near(v.ratio, 98.5 / 116));
    /* the attempt ends: at the job's end its stopping is the end's (other) */
    two.ended = 115;
    goodput_attempt_end(&g, &two, 115.5);
    goodput_now(&g, NULL, 0, 116, &v);
    CHECK(near(v.restarts, 2));
    CHECK(near(v.other, 116 - 98.5 - 5 - 3 - 1 - 2 - 1 - 0.5));
    CHECK_EQ(g.done_max, 200);
    CHECK_EQ(g.attempts, 2);
    /* a rendezvous under way after it: the stop was a restart's, and the
     * rendezvous counts until now */
    goodput_now(&g, NULL, 115.75, 116, &v);
    CHECK(near(v.rendezvous, 3.25));
    CHECK(near(v.restarts, 2.5));
}

TEST(goodput_attempt_without_a_step_is_all_start_up) {
    goodput g;
    memset(&g, 0, sizeof g);
    goodput_attempt a = {.started = 10, .ended = 14, .recorded = 1};
    goodput_attempt_end(&g, &a, 15);
    goodput_view v;
    goodput_now(&g, NULL, 0, 20, &v);
    CHECK(near(v.startup, 4));
    CHECK(near(v.restarts, 0));
    CHECK(near(v.kept, 0));
    CHECK(near(v.ratio, 0));
    char line[512];
    goodput_line(&v, line, sizeof line);
    CHECK(strstr(line, "goodput 0.0% of 20.00 s: steps kept 0.00 s") != NULL);
}

/* A run that never restarted said "restarts 0.53 s": its first start was
 * counted as a restart. The first start is start-up; restarts are what
 * came after a failure or a change. */
TEST(goodput_run_without_a_restart_has_no_restart_time) {
    goodput g;
    memset(&g, 0, sizeof g);
    g.start = 0, g.rendezvous_s = 0.1;
    goodput_attempt a = {.started = 0.1, .first_step = 0.63, .ended = 10, .first = 1,
                         .steps = 10, .step_s = 9.3, .recorded = 1};
    goodput_attempt_end(&g, &a, 10.05);
    goodput_view v;
    goodput_now(&g, NULL, 0, 10.05, &v);
    CHECK(near(v.startup, 0.53));
    CHECK(near(v.restarts, 0));
    CHECK(near(v.other, 10.05 - 9.3 - 0.1 - 0.53));
    char line[512];
    goodput_line(&v, line, sizeof line);
    CHECK(strstr(line, "start-up 0.53 s, restarts 0.00 s") != NULL);
}

/* A script's workers keep no step record (ddp-train's collective record):
 * the line said "goodput 0.0% ... restarts 2.86 s" for a clean run without
 * a restart. It now says what is known, and that the rest is not. */
TEST(goodput_without_a_step_record_says_only_what_is_known) {
    goodput g;
    memset(&g, 0, sizeof g);
    g.start = 10;
    g.rendezvous_s = 0.06;
    goodput_attempt a = {.started = 10.06, .ended = 12.86};
    goodput_attempt_end(&g, &a, 12.86);
    goodput_view v;
    goodput_now(&g, NULL, 0, 12.86, &v);
    char line[512];
    goodput_line(&v, line, sizeof line);
    CHECK(strstr(line, "goodput unknown (the workers keep no step record; ddp-train does): of "
                       "2.86 s, workers ran 2.80 s in 1 attempt (no restart), rendezvous 0.06 s") !=
          NULL);
    a = (goodput_attempt){.started = 13, .ended = 14};
    goodput_attempt_end(&g, &a, 14);
    goodput_now(&g, NULL, 0, 14, &v);
    goodput_line(&v, line, sizeof line);
    CHECK(strstr(line, "in 2 attempts (1 restart)") != NULL);
}

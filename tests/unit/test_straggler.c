/* agent/straggler.c: a rank persistently slower than the median is a
 * straggler after STRAGGLER_WINDOWS windows, and stops being one after as
 * many back within the threshold; noise within it, a single slow window,
 * ranks with no step, are not. Two ranks are compared with each other. */
#include <string.h>

#include "agent/straggler.h"
#include "tests/unit/test.h"

static rank_speed sp(int rank, double compute) {
    rank_speed s = {.rank = rank, .local_rank = rank, .compute = compute, .steps = 10};
    return s;
}

TEST(straggler_found_after_windows_running_and_cleared_after_as_many) {
    straggler_state st[4];
    memset(st, 0, sizeof st);
    straggler_watch w = {.threshold = 0.15, .n = 4, .st = st};
    rank_speed slow[4] = {sp(0, 0.100), sp(1, 0.104), sp(2, 0.130), sp(3, 0.098)};
    int changed[4];
    for (int k = 1; k < STRAGGLER_WINDOWS; k++) CHECK_EQ(straggler_update(&w, slow, 4, changed, 4), 0);
    CHECK_EQ(straggler_update(&w, slow, 4, changed, 4), 1);
    CHECK_EQ(changed[0], 2);
    CHECK(st[2].straggler && !st[0].straggler && !st[1].straggler && !st[3].straggler);
    CHECK(st[2].median > 0.0999 && st[2].median < 0.1021); /* (0.100 + 0.104) / 2 */
    CHECK_EQ(straggler_update(&w, slow, 4, changed, 4), 0); /* still one: said once */
    rank_speed fine[4] = {sp(0, 0.100), sp(1, 0.104), sp(2, 0.105), sp(3, 0.098)};
    for (int k = 1; k < STRAGGLER_WINDOWS; k++) CHECK_EQ(straggler_update(&w, fine, 4, changed, 4), 0);
    CHECK_EQ(straggler_update(&w, fine, 4, changed, 4), 1);
    CHECK_EQ(changed[0], 2);
    CHECK(!st[2].straggler);
}

TEST(straggler_not_for_noise_or_one_slow_window) {
    straggler_state st[3];
    memset(st, 0, sizeof st);
    straggler_watch w = {.threshold = 0.15, .n = 3, .st = st};
    rank_speed noisy[3] = {sp(0, 0.100), sp(1, 0.112), sp(2, 0.095)}; /* 12% over: within */
    rank_speed once[3] = {sp(0, 0.100), sp(1, 0.200), sp(2, 0.095)};
    int changed[3];
    for (int k = 0; k < 10; k++) {
        CHECK_EQ(straggler_update(&w, k % 2 ? once : noisy, 3, changed, 3), 0);
        CHECK(!st[1].straggler);
    }
    /* a rank that finished no step in the window is not compared */
    rank_speed none[3] = {sp(0, 0.100), sp(1, -1), sp(2, 0.095)};
    none[1].steps = 0;
    for (int k = 0; k < 5; k++) CHECK_EQ(straggler_update(&w, none, 3, changed, 3), 0);
}

TEST(straggler_of_two_ranks_is_the_slower_by_the_threshold) {
    straggler_state st[2];
    memset(st, 0, sizeof st);
    straggler_watch w = {.threshold = 0.15, .n = 2, .st = st};
    rank_speed two[2] = {sp(0, 0.100), sp(1, 0.125)}; /* 25% slower than the other */
    int changed[2];
    for (int k = 1; k < STRAGGLER_WINDOWS; k++) straggler_update(&w, two, 2, changed, 2);
    CHECK_EQ(straggler_update(&w, two, 2, changed, 2), 1);
    CHECK_EQ(changed[0], 1);
    CHECK(st[1].median > 0.0999 && st[1].median < 0.1001);
    CHECK(!st[0].straggler);
}

TEST(straggler_median_of_odd_and_even) {
    double odd[3] = {3, 1, 2}, even[4] = {4, 1, 3, 2};
    CHECK(straggler_median(odd, 3) == 2);
    CHECK(straggler_median(even, 4) == 2.5);
}

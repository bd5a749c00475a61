/* Unit tests of worker/backend/algo_cache.c: what one process keeps,
 * another finds; a line cut short or mangled is ignored, not fatal, and
 * the entries around it survive; the first line of a key wins; keys that
 * would break the format are refused; an unwritable place is an error that
 * says where. */
#include "tests/unit/test.h"
#include "worker/backend/algo_cache.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const algo_choice two[2] = {{.algo = 1, .status = 0, .determinism = 1, .math = 2,
                                    .memory = 123456789012ULL},
                                   {.algo = 7, .status = 0, .determinism = 0, .math = 1,
                                    .memory = 0}};

TEST(algo_cache_keeps_choices_across_processes) {
    const char *dir = test_path("cache/sub"); /* made by open */
    char why[512];
    algo_cache *c;
    CHECK_EQ(algo_cache_open(dir, "gpu-x.algos", &c, why, sizeof why), 0);
    CHECK_EQ(algo_cache_loaded(c), 0);
    algo_choice got[ALGO_CACHE_MAX];
    CHECK_EQ(algo_cache_get(c, "fwd bf16 n8", got, ALGO_CACHE_MAX), -1);
    CHECK_EQ(algo_cache_put(c, "fwd bf16 n8", two, 2, why, sizeof why), 0);
    CHECK_EQ(algo_cache_put(c, "bwd-data bf16 n8", two + 1, 1, why, sizeof why), 0);
    CHECK_EQ(algo_cache_get(c, "fwd bf16 n8", got, ALGO_CACHE_MAX), 2); /* in memory at once */
    algo_cache_close(c);

    /* another process: the same file */
    CHECK_EQ(algo_cache_open(dir, "gpu-x.algos", &c, why, sizeof why), 0);
    CHECK_EQ(algo_cache_loaded(c), 2);
    CHECK_EQ(algo_cache_get(c, "fwd bf16 n8", got, ALGO_CACHE_MAX), 2);
    CHECK_MEM(got, sizeof two, two, sizeof two);
    CHECK_EQ(algo_cache_get(c, "bwd-data bf16 n8", got, 1), 1);
    CHECK_EQ(got[0].algo, 7);
    CHECK_EQ(algo_cache_get(c, "fwd fp32 n8", got, ALGO_CACHE_MAX), -1);
    algo_cache_close(c);
    /* another machine kind: another file, nothing in it */
    CHECK_EQ(algo_cache_open(dir, "gpu-y.algos", &c, why, sizeof why), 0);
    CHECK_EQ(algo_cache_get(c, "fwd bf16 n8", got, ALGO_CACHE_MAX), -1);
    algo_cache_close(c);
}

TEST(algo_cache_skips_torn_and_mangled_lines) {
    const char *dir = test_path("torn");
    char why[512], path[1024];
    algo_cache *c;
    CHECK_EQ(algo_cache_open(dir, "a.algos", &c, why, sizeof why), 0);
    CHECK_EQ(algo_cache_put(c, "good one", two, 2, why, sizeof why), 0);
    snprintf(path, sizeof path, "%s", algo_cache_path(c));
    algo_cache_close(c);
    FILE *f = fopen(path, "a");
    CHECK(f != NULL);
    fputs("no bar here 1 2 3\n", f);
    fputs("bad count|9 1 0 0 0 0\n", f);
    fputs("short|2 1 0 0 0 5\n", f);       /* says 2, holds 1 */
    fputs("trailing|1 1 0 0 0 5 junk\n", f);
    fputs("good one|1 3 0 0 0 0\n", f);    /* a second line for a key: the first wins */
    fputs("good two|1 4 0 1 1 64\n", f);
    fputs("cut short|1 4 0 1", f);          /* a writer died here: no newline */
    fclose(f);
    CHECK_EQ(algo_cache_open(dir, "a.algos", &c, why, sizeof why), 0);
    CHECK_EQ(algo_cache_loaded(c), 2);
    algo_choice got[ALGO_CACHE_MAX];
    CHECK_EQ(algo_cache_get(c, "good one", got, ALGO_CACHE_MAX), 2);
    CHECK_EQ(got[0].algo, 1);
    CHECK_EQ(algo_cache_get(c, "good two", got, ALGO_CACHE_MAX), 1);
    CHECK_EQ(got[0].memory, 64);
    CHECK_EQ(algo_cache_get(c, "short", got, ALGO_CACHE_MAX), -1);
    CHECK_EQ(algo_cache_get(c, "cut short", got, ALGO_CACHE_MAX), -1);
    CHECK_EQ(algo_cache_get(c, "no bar here 1 2 3", got, ALGO_CACHE_MAX), -1);
    algo_cache_close(c);
}

TEST(algo_cache_refuses_bad_keys_and_says_where_it_cannot_write) {
    char why[512];
    algo_cache *c;
    CHECK_EQ(algo_cache_open(test_path("k"), "a.algos", &c, why, sizeof why), 0);
    CHECK_EQ(algo_cache_put(c, "a|b", two, 1, why, sizeof why), -EINVAL);
    CHECK_EQ(algo_cache_put(c, "a\nb", two, 1, why, sizeof why), -EINVAL);
    CHECK_EQ(algo_cache_put(c, "", two, 1, why, sizeof why), -EINVAL);
    CHECK_EQ(algo_cache_put(c, "ok", two, ALGO_CACHE_MAX + 1, why, sizeof why), -EINVAL);
    algo_choice got[1];
    CHECK_EQ(algo_cache_get(c, "a|b", got, 1), -1);
    algo_cache_close(c);
    /* a directory where the file should be: open reads nothing, put says why */
    const char *dir = test_path("clash");
    char file[1024];
    snprintf(file, sizeof file, "%s/a.algos", dir);
    CHECK_EQ(mkdir(dir, 0755), 0);
    CHECK_EQ(mkdir(file, 0755), 0);
    int rc = algo_cache_open(dir, "a.algos", &c, why, sizeof why);
    CHECK(rc < 0);
    CHECK(strstr(why, file) != NULL);
    /* a file where the directory should be */
    snprintf(file, sizeof file, "%s/plain", test_path("clash2"));
    CHECK_EQ(mkdir(test_path("clash2"), 0755), 0);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    fclose(f);
    CHECK(algo_cache_open(file, "a.algos", &c, why, sizeof why) < 0);
    CHECK(strstr(why, "cannot make") != NULL);
}

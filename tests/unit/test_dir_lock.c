/* Unit tests of common/dir_lock.c: one holder at a time (a second
 * descriptor is refused even in the same process), the refused one learns
 * who holds the directory, a holder's death frees it, and a lock file that
 * is not a regular file is an error rather than a wait. */
#include "tests/unit/test.h"
#include "common/dir_lock.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TEST(dir_lock_second_taker_is_refused_and_told_who_holds_it) {
    const char *dir = test_path("a/b"); /* made with its parents */
    dir_lock one = {0}, two = {0};
    dir_lock_holder h;
    char err[512], text[1024], host[256] = "";
    CHECK_EQ(dir_lock_take(&one, dir, "job-1", NULL, err, sizeof err), 0);
    CHECK(one.held);
    CHECK_EQ(dir_lock_take(&two, dir, "job-2", &h, err, sizeof err), -EWOULDBLOCK);
    CHECK(!two.held);
    CHECK_EQ(h.pid, getpid());
    gethostname(host, sizeof host - 1);
    CHECK_STR(h.host, host);
    CHECK_STR(h.run_id, "job-1");
    CHECK_EQ(strlen(h.since), 20); /* 2026-05-01T12:00:00Z */
    CHECK(h.since[4] == '-' && h.since[10] == 'T' && h.since[19] == 'Z');
    dir_lock_holder_text(&h, text, sizeof text);
    char want[1024];
    snprintf(want, sizeof want, "pid %ld on host %s, run id job-1, since %s", (long)getpid(), host,
             h.since);
    CHECK_STR(text, want);
    dir_lock_release(&one);
    CHECK(!one.held);
    dir_lock_release(&one); /* twice: nothing */
    CHECK_EQ(dir_lock_take(&two, dir, NULL, NULL, err, sizeof err), 0);
    CHECK_EQ(dir_lock_take(&one, dir, NULL, &h, err, sizeof err), -EWOULDBLOCK);
    CHECK_STR(h.run_id, ""); /* none given: none said */
    dir_lock_holder_text(&h, text, sizeof text);
    CHECK(strstr(text, ", run id") == NULL && strstr(text, ", since ") != NULL);
    dir_lock_release(&two);
}

TEST(dir_lock_of_a_killed_holder_is_free) {
    const char *dir = test_path("d");
    int ready[2];
    CHECK_EQ(pipe(ready), 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        dir_lock l = {0};
        char err[512];
        int rc = dir_lock_take(&l, dir, "old\nline", NULL, err, sizeof err);
        if (write(ready[1], &rc, sizeof rc) != sizeof rc) _exit(1);
        pause();
        _exit(0);
    }
    int rc = 1;
    CHECK_EQ(read(ready[0], &rc, sizeof rc), sizeof rc);
    CHECK_EQ(rc, 0);
    dir_lock l = {0};
    dir_lock_holder h;
    char err[512];
    CHECK_EQ(dir_lock_take(&l, dir, "new", &h, err, sizeof err), -EWOULDBLOCK);
    CHECK_EQ(h.pid, child);
    CHECK_STR(h.run_id, "old?line"); /* one line in the file */
    kill(child, SIGKILL);
    CHECK_EQ(waitpid(child, NULL, 0), child);
    /* Its lock file stays, naming it; the lock itself went with it. */
    CHECK_EQ(dir_lock_take(&l, dir, "new", &h, err, sizeof err), 0);
    dir_lock_release(&l);
}

TEST(dir_lock_file_that_is_not_a_file_is_an_error) {
    const char *dir = test_path("f");
    CHECK_EQ(mkdir(dir, 0755), 0);
    CHECK_EQ(mkfifo(test_path("f/" DIR_LOCK_FILE), 0644), 0);
    dir_lock l = {0};
    char err[512];
    CHECK_EQ(dir_lock_take(&l, dir, NULL, NULL, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "is a FIFO, not a lock file") != NULL);
    CHECK(!l.held);
    /* A symbolic link is not followed. */
    const char *dir2 = test_path("g");
    CHECK_EQ(mkdir(dir2, 0755), 0);
    CHECK_EQ(symlink(test_path("elsewhere"), test_path("g/" DIR_LOCK_FILE)), 0);
    CHECK(dir_lock_take(&l, dir2, NULL, NULL, err, sizeof err) < 0);
    CHECK(access(test_path("elsewhere"), F_OK) != 0);
    /* dir itself a file: named. */
    FILE *f = fopen(test_path("plain"), "w");
    CHECK(f != NULL);
    fclose(f);
    CHECK_EQ(dir_lock_take(&l, test_path("plain"), NULL, NULL, err, sizeof err), -ENOTDIR);
    CHECK(strstr(err, "plain") != NULL);
}

TEST(dir_lock_holder_text_of_an_empty_file) {
    dir_lock_holder h = {0};
    char text[256];
    dir_lock_holder_text(&h, text, sizeof text);
    CHECK_STR(text, "a process whose lock file does not say who it is");
}

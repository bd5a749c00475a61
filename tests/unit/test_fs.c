/* Unit tests of common/fs.c's fs_open_regular: a regular file opens as an
 * ordinary descriptor; a FIFO (whose open() would wait for a writer), a
 * directory or a missing file are refused at once, with their kind. */
#include "tests/unit/test.h"
#include "common/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

TEST(fs_open_regular_opens_a_file_blocking_and_close_on_exec) {
    const char *f = test_path("f");
    FILE *w = fopen(f, "w");
    CHECK(w != NULL);
    fputs("data", w);
    CHECK_EQ(fclose(w), 0);
    const char *kind = "unset";
    int fd = fs_open_regular(f, O_RDONLY, &kind);
    CHECK(fd >= 0);
    CHECK(kind == NULL);
    CHECK_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    char b[8];
    CHECK_EQ(read(fd, b, sizeof b), 4);
    close(fd);
}

TEST(fs_open_regular_refuses_a_fifo_without_waiting) {
    const char *f = test_path("fifo");
    CHECK_EQ(mkfifo(f, 0644), 0);
    const char *kind = NULL;
    CHECK_EQ(fs_open_regular(f, O_RDONLY, &kind), -EINVAL);
    CHECK_STR(kind, "a FIFO");
    /* Opened for writing too (a lock file), it is refused, not created over. */
    CHECK_EQ(fs_open_regular(f, O_RDWR | O_CREAT, &kind), -EINVAL);
    CHECK_STR(kind, "a FIFO");
}

TEST(fs_open_regular_refuses_a_directory_and_reports_errors) {
    const char *kind = NULL;
    CHECK_EQ(fs_open_regular(test_tmpdir(), O_RDONLY, &kind), -EISDIR);
    CHECK_STR(kind, "a directory");
    CHECK_EQ(fs_open_regular(test_tmpdir(), O_RDWR, &kind), -EISDIR);
    CHECK_STR(kind, "a directory");
    CHECK_EQ(fs_open_regular(test_path("missing"), O_RDONLY, &kind), -ENOENT);
    CHECK(kind == NULL);
    CHECK_EQ(fs_open_regular(test_path("missing"), O_RDONLY, NULL), -ENOENT);
}

TEST(fs_open_regular_creates_a_file) {
    const char *f = test_path("new");
    int fd = fs_open_regular(f, O_RDWR | O_CREAT, NULL);
    CHECK(fd >= 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && S_ISREG(st.st_mode));
    close(fd);
}

TEST(fs_kind_names_each_type) {
    CHECK_STR(fs_kind(S_IFIFO | 0644), "a FIFO");
    CHECK_STR(fs_kind(S_IFDIR | 0755), "a directory");
    CHECK_STR(fs_kind(S_IFCHR), "a character device");
    CHECK_STR(fs_kind(S_IFSOCK), "a socket");
    CHECK_STR(fs_kind(S_IFREG), "a regular file");
}

/* rm -rf, without following a link out of the tree. */
TEST(fs_remove_tree_keeps_what_links_point_to) {
    char root[] = "/tmp/ddprun-fs-test.XXXXXX", outside[] = "/tmp/ddprun-fs-out.XXXXXX";
    CHECK(mkdtemp(root) && mkdtemp(outside));
    char p[256];
    snprintf(p, sizeof p, "%s/a/b", root);
    CHECK_EQ(fs_mkdir_p(p), 0);
    snprintf(p, sizeof p, "%s/a/b/file", root);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    fclose(f);
    char keep[256];
    snprintf(keep, sizeof keep, "%s/keep", outside);
    CHECK((f = fopen(keep, "w")) != NULL);
    fclose(f);
    snprintf(p, sizeof p, "%s/a/link", root);
    CHECK_EQ(symlink(outside, p), 0);
    fs_remove_tree(root);
    CHECK(access(root, F_OK) != 0);
    CHECK_EQ(access(keep, F_OK), 0);
    fs_remove_tree(outside);
    CHECK(access(outside, F_OK) != 0);
}

/* agent/node_dirs.c: the log root under --log-dir (a new run directory
 * each time) or in /tmp (removed at the end, kept with a note when a
 * worker failed), the snapshot directory in memory, and everything gone
 * at the close. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/node_dirs.h"
#include "tests/unit/test.h"

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

TEST(node_dirs_under_log_dir_make_a_run_directory_each_time) {
    const char *logs = test_path("logs"), *shm = test_path("shm");
    mkdir(shm, 0700);
    node_dirs *a, *b;
    CHECK_EQ(node_dirs_make(logs, "job7", shm, &a), 0);
    CHECK_EQ(node_dirs_make(logs, "job7", shm, &b), 0);
    char root_a[2048], snap_a[512];
    snprintf(root_a, sizeof root_a, "%s", node_dirs_log_root(a));
    snprintf(snap_a, sizeof snap_a, "%s", node_dirs_snapshots(a)->path);
    CHECK(strncmp(root_a, logs, strlen(logs)) == 0 && strstr(root_a, "/job7_") != NULL);
    CHECK(strcmp(root_a, node_dirs_log_root(b)) != 0); /* a new one each run */
    CHECK(exists(root_a));
    CHECK(node_dirs_snapshots(a)->in_memory);
    CHECK(strncmp(snap_a, shm, strlen(shm)) == 0 && exists(snap_a));
    node_dirs_keep_logs(a); /* (under --log-dir the logs stay anyway) */
    node_dirs_close(a);
    CHECK(exists(root_a));   /* the user's --log-dir: kept */
    CHECK(!exists(snap_a));  /* the memory: freed */
    node_dirs_close(b);
    node_dirs_close(NULL);
}

TEST(node_dirs_in_tmp_go_unless_a_worker_failed) {
    const char *shm = test_path("shm");
    mkdir(shm, 0700);
    node_dirs *ok, *failed;
    CHECK_EQ(node_dirs_make(NULL, "j", shm, &ok), 0);
    CHECK_EQ(node_dirs_make(NULL, "j", shm, &failed), 0);
    char root_ok[2048], root_failed[2048], note[2100];
    snprintf(root_ok, sizeof root_ok, "%s", node_dirs_log_root(ok));
    snprintf(root_failed, sizeof root_failed, "%s", node_dirs_log_root(failed));
    CHECK(strncmp(root_ok, "/tmp/ddprun_", 12) == 0 && exists(root_ok));
    node_dirs_close(ok);
    CHECK(!exists(root_ok));
    *strrchr(root_ok, '/') = '\0';
    CHECK(!exists(root_ok)); /* the /tmp directory itself */
    node_dirs_keep_logs(failed);
    node_dirs_close(failed);
    CHECK(exists(root_failed));
    *strrchr(root_failed, '/') = '\0';
    snprintf(note, sizeof note, "%s/" KEPT_LOGS_NOTE, root_failed);
    CHECK(exists(note)); /* kept on purpose, and says so */
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root_failed);
    CHECK_EQ(system(cmd), 0);
}

/* See snapshot_dir.h. */
#include "agent/snapshot_dir.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"

#define PREFIX "ddprun-snap."

/* Removes the directories under root of agents no longer running (the pid
 * in the name is gone): what an agent killed with SIGKILL could not. */
static void sweep(const char *root) {
    DIR *d = opendir(root);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, PREFIX, strlen(PREFIX)) != 0) continue;
        char *end;
        long pid = strtol(e->d_name + strlen(PREFIX), &end, 10);
        if (*end != '.' || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        fs_remove_tree(path);
    }
    closedir(d);
}

static int make_under(snapshot_dir *d, const char *root) {
    int n = snprintf(d->path, sizeof d->path, "%s/" PREFIX "%d.XXXXXX", root, (int)getpid());
    if (n >= (int)sizeof d->path) return -ENAMETOOLONG;
    if (!mkdtemp(d->path)) {
        int rc = -errno;
        d->path[0] = '\0';
        return rc;
    }
    return 0;
}

int snapshot_dir_make(snapshot_dir *d, const char *mem_root, const char *disk_root, char *why,
                      size_t whylen) {
    memset(d, 0, sizeof *d);
    why[0] = '\0';
    sweep(mem_root);
    int rc = make_under(d, mem_root);
    if (rc == 0) {
        d->in_memory = 1;
        snapshot_dir disk = {0};
        if (fs_mkdir_p(disk_root) == 0 && make_under(&disk, disk_root) == 0)
            snprintf(d->disk, sizeof d->disk, "%s", disk.path);
        return 0;
    }
    snprintf(why, whylen, "cannot make a directory in %s: %s", mem_root, strerror(-rc));
    if ((rc = fs_mkdir_p(disk_root)) == 0) rc = make_under(d, disk_root);
    return rc;
}

void snapshot_dir_remove(snapshot_dir *d) {
    if (d->path[0]) fs_remove_tree(d->path);
    if (d->disk[0]) fs_remove_tree(d->disk);
    d->path[0] = d->disk[0] = '\0';
}

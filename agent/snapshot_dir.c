/* See snapshot_dir.h. */
#include "agent/snapshot_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"

#define PREFIX "ddprun-snap."
/* A directory being made: not yet PREFIX's, so no sweep judges it before
 * its owner file is locked. */
#define MAKING ".ddprun-snap-making."
/* In each directory, locked (flock) by the agent that made it for as long
 * as it runs: the kernel drops the lock when the agent ends, however it
 * ends, and a lock is seen from every PID namespace that shares the file.
 * A pid is not: an agent in another namespace (a container sharing the
 * host's /dev/shm, a Kubernetes pod) sees it as missing, and once deleted
 * live directories that way. */
#define OWNER ".owner"

/* Whether the directory at path belongs to a running agent: its owner
 * file is locked; without one (a directory of an older ddprun, or made by
 * hand), whether the pid in its name runs here. */
static int owner_alive(const char *path, long pid) {
    char owner[1100];
    snprintf(owner, sizeof owner, "%s/" OWNER, path);
    int fd = open(owner, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return errno != ENOENT || kill((pid_t)pid, 0) == 0 || errno != ESRCH;
    int alive = flock(fd, LOCK_EX | LOCK_NB) != 0;
    close(fd);
    return alive;
}

/* Removes the directories under root of agents no longer running: what an
 * agent killed with SIGKILL could not (and its janitor did not). */
static void sweep(const char *root) {
    DIR *d = opendir(root);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) != NULL) {
        const char *rest = NULL;
        if (strncmp(e->d_name, PREFIX, strlen(PREFIX)) == 0) rest = e->d_name + strlen(PREFIX);
        else if (strncmp(e->d_name, MAKING, strlen(MAKING)) == 0) rest = e->d_name + strlen(MAKING);
        if (!rest) continue;
        char *end;
        long pid = strtol(rest, &end, 10);
        if (*end != '.' || pid <= 0) continue;
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        if (!owner_alive(path, pid)) fs_remove_tree(path);
    }
    closedir(d);
}

/* A fresh directory under root, its owner file locked by this process
 * (fd kept in *owner_fd) before it takes its final name. */
static int make_under(char *out, size_t outlen, const char *root, int *owner_fd) {
    char tmp[600], owner[700];
    int n = snprintf(tmp, sizeof tmp, "%s/" MAKING "%d.XXXXXX", root, (int)getpid());
    if (n >= (int)sizeof tmp) return -ENAMETOOLONG;
    if (!mkdtemp(tmp)) return -errno;
    snprintf(owner, sizeof owner, "%s/" OWNER, tmp);
    int rc = 0, fd = open(owner, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) rc = -errno;
    const char *suffix = strrchr(tmp, '.'); /* ".XXXXXX", filled in */
    if (rc == 0 && snprintf(out, outlen, "%s/" PREFIX "%d%s", root, (int)getpid(), suffix) >= (int)outlen)
        rc = -ENAMETOOLONG;
    if (rc == 0 && rename(tmp, out) != 0) rc = -errno;
    if (rc) {
        if (fd >= 0) close(fd);
        fs_remove_tree(tmp);
        out[0] = '\0';
        return rc;
    }
    *owner_fd = fd;
    return 0;
}

int snapshot_dir_make(snapshot_dir *d, const char *mem_root, const char *disk_root, char *why,
                      size_t whylen) {
    memset(d, 0, sizeof *d);
    d->owner_fd = d->disk_owner_fd = -1;
    why[0] = '\0';
    sweep(mem_root);
    int rc = make_under(d->path, sizeof d->path, mem_root, &d->owner_fd);
    if (rc == 0) {
        d->in_memory = 1;
        if (fs_mkdir_p(disk_root) == 0)
            make_under(d->disk, sizeof d->disk, disk_root, &d->disk_owner_fd);
        return 0;
    }
    snprintf(why, whylen, "cannot make a directory in %s: %s", mem_root, strerror(-rc));
    if ((rc = fs_mkdir_p(disk_root)) == 0)
        rc = make_under(d->path, sizeof d->path, disk_root, &d->owner_fd);
    return rc;
}

/* (A snapshot_dir never made is all zero: its paths empty, its fds not its own.) */
void snapshot_dir_remove(snapshot_dir *d) {
    if (d->path[0]) {
        fs_remove_tree(d->path);
        if (d->owner_fd >= 0) close(d->owner_fd);
    }
    if (d->disk[0]) {
        fs_remove_tree(d->disk);
        if (d->disk_owner_fd >= 0) close(d->disk_owner_fd);
    }
    d->owner_fd = d->disk_owner_fd = -1;
    d->path[0] = d->disk[0] = '\0';
}

/* See snapshot_dir.h. */
#include "agent/snapshot_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* The janitor: a shell, with no environment of the agent's (no test tag,
 * nothing to find it by), blocks reading a pipe whose write end stays in
 * the agent alone (close-on-exec: no worker holds it). When the agent
 * ends, however it ends, the read sees the end of the pipe and the shell
 * removes the directories, then exits. It is no descendant of the agent:
 * the shell spawned puts it in the background and exits, while the agent
 * is briefly no subreaper, so init adopts it; a kill of the agent's
 * process group or of its children (pgrep -P) never reaches it, nor does
 * the agent's clean-up of what workers leave behind. Without /bin/sh the
 * next agent's sweep removes the directories. */
static void start_janitor(snapshot_dir *d) {
    int p[2];
    d->janitor_fd = -1;
    if (pipe2(p, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[0], 3);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclosefrom_np(&fa, 4); /* nothing else of the agent's */
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&at, &none);
    char *argv[] = {"sh", "-c", "{ read _ <&3; exec rm -rf -- \"$0\" \"$1\"; } & exit 0", d->path,
                    d->disk[0] ? d->disk : d->path, NULL};
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    int subreaper = 0;
    prctl(PR_GET_CHILD_SUBREAPER, &subreaper);
    if (subreaper) prctl(PR_SET_CHILD_SUBREAPER, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, envp);
    if (rc == 0) waitpid(pid, NULL, 0); /* its background child is init's now */
    if (subreaper) prctl(PR_SET_CHILD_SUBREAPER, 1);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(p[0]);
    if (rc != 0) {
        close(p[1]);
        return;
    }
    d->janitor_fd = p[1];
}

int snapshot_dir_make(snapshot_dir *d, const char *mem_root, const char *disk_root, char *why,
                      size_t whylen) {
    memset(d, 0, sizeof *d);
    d->janitor_fd = -1;
    why[0] = '\0';
    sweep(mem_root);
    int rc = make_under(d, mem_root);
    if (rc == 0) {
        d->in_memory = 1;
        snapshot_dir disk = {0};
        if (fs_mkdir_p(disk_root) == 0 && make_under(&disk, disk_root) == 0)
            snprintf(d->disk, sizeof d->disk, "%s", disk.path);
        start_janitor(d);
        return 0;
    }
    snprintf(why, whylen, "cannot make a directory in %s: %s", mem_root, strerror(-rc));
    if ((rc = fs_mkdir_p(disk_root)) == 0) rc = make_under(d, disk_root);
    if (rc == 0) start_janitor(d);
    return rc;
}

void snapshot_dir_remove(snapshot_dir *d) {
    if (d->path[0]) fs_remove_tree(d->path);
    if (d->disk[0]) fs_remove_tree(d->disk);
    d->path[0] = d->disk[0] = '\0';
    if (d->janitor_fd > 0) close(d->janitor_fd); /* the janitor finds nothing, and ends */
    d->janitor_fd = -1;
}

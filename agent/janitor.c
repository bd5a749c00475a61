/* See janitor.h. */
#include "agent/janitor.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PATHS 4

int janitor_start(const char *const paths[]) {
    /* Lines "+G" and "-G" track the workers' process groups (janitor_track);
     * at the end of the pipe, those still tracked are killed, the paths
     * removed (with those added by lines "=PATH"), unless a line "!" said
     * to keep them (janitor_keep). */
    char *argv[4 + MAX_PATHS + 1] = {
        "sh", "-c",
        "{ g=' ' k=''; while read -r l <&3; do case $l in +*) g=\"$g${l#+} \";; "
        "-*) x=${l#-}; case $g in *\" $x \"*) g=\"${g% $x *} ${g#* $x }\";; esac;; "
        "!) k=1;; =*) set -- \"$@\" \"${l#=}\";; esac; done; "
        "for x in $g; do kill -9 \"-$x\" 2>/dev/null; done; [ -n \"$k\" ] || "
        "exec rm -rf -- \"$@\"; } & "
        "exit 0",
        "ddprun-janitor"};
    int n = 4;
    for (int i = 0; paths[i] && i < MAX_PATHS; i++)
        if (paths[i][0]) argv[n++] = (char *)paths[i];
    if (n == 4) return -1;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
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
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    /* The shell puts the waiting part in the background and exits; while
     * the agent is no subreaper, init adopts that part. */
    int subreaper = 0;
    prctl(PR_GET_CHILD_SUBREAPER, &subreaper);
    if (subreaper) prctl(PR_SET_CHILD_SUBREAPER, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, envp);
    if (rc == 0) waitpid(pid, NULL, 0);
    if (subreaper) prctl(PR_SET_CHILD_SUBREAPER, 1);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(p[0]);
    if (rc != 0) {
        close(p[1]);
        return -1;
    }
    return p[1];
}

void janitor_track(int fd, int pgid, int on) {
    if (fd < 0 || pgid <= 0) return;
    char line[32];
    int n = snprintf(line, sizeof line, "%c%d\n", on ? '+' : '-', pgid);
    if (write(fd, line, (size_t)n) != n) { /* (a janitor gone: nothing to tell) */
    }
}

void janitor_add_path(int fd, const char *path) {
    if (fd < 0 || !path[0] || strchr(path, '\n')) return;
    char line[1100];
    int n = snprintf(line, sizeof line, "=%s\n", path);
    if (n > 0 && (size_t)n < sizeof line && write(fd, line, (size_t)n) != n) {
    }
}

void janitor_keep(int fd) {
    if (fd >= 0 && write(fd, "!\n", 2) != 2) { /* (a janitor gone: nothing to tell) */
    }
}

void janitor_dismiss(int fd) {
    if (fd >= 0) close(fd);
}

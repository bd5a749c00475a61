/* See sock_owner.h. */
#include "common/sock_owner.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The inode of the socket local_port -> remote_port in one of /proc/net's
 * tables ("sl local_address rem_address st ... uid timeout inode"), or 0. */
static unsigned long find_inode(const char *table, int local_port, int remote_port) {
    FILE *f = fopen(table, "re");
    if (!f) return 0;
    char line[512];
    unsigned long inode = 0;
    if (!fgets(line, sizeof line, f)) line[0] = 0; /* the header */
    while (!inode && fgets(line, sizeof line, f)) {
        char local[64], remote[64];
        unsigned long ino;
        if (sscanf(line, "%*d: %63s %63s %*x %*s %*s %*s %*d %*d %lu", local, remote, &ino) != 3)
            continue;
        const char *lp = strrchr(local, ':'), *rp = strrchr(remote, ':');
        if (lp && rp && strtol(lp + 1, NULL, 16) == local_port &&
            strtol(rp + 1, NULL, 16) == remote_port)
            inode = ino;
    }
    fclose(f);
    return inode;
}

/* The pid with a descriptor on socket:[inode], or 0. */
static pid_t inode_owner(unsigned long inode) {
    char want[64];
    snprintf(want, sizeof want, "socket:[%lu]", inode);
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    pid_t found = 0;
    struct dirent *p;
    while (!found && (p = readdir(proc))) {
        if (p->d_name[0] < '1' || p->d_name[0] > '9') continue;
        char dir[300];
        snprintf(dir, sizeof dir, "/proc/%.255s/fd", p->d_name);
        DIR *fds = opendir(dir);
        if (!fds) continue;
        struct dirent *d;
        while (!found && (d = readdir(fds))) {
            char path[600], link[64];
            snprintf(path, sizeof path, "%s/%.255s", dir, d->d_name);
            ssize_t n = readlink(path, link, sizeof link - 1);
            if (n <= 0) continue;
            link[n] = 0;
            if (strcmp(link, want) == 0) found = (pid_t)atoi(p->d_name);
        }
        closedir(fds);
    }
    closedir(proc);
    return found;
}

pid_t sock_owner_pid(int local_port, int remote_port) {
    unsigned long inode = find_inode("/proc/net/tcp", local_port, remote_port);
    if (!inode) inode = find_inode("/proc/net/tcp6", local_port, remote_port);
    return inode ? inode_owner(inode) : 0;
}

void sock_owner_name(int local_port, int peer_port, const char *addr, char *out, size_t len) {
    pid_t pid = peer_port ? sock_owner_pid(peer_port, local_port) : 0;
    int rank = pid ? sock_owner_env_int(pid, "RANK") : -1;
    const char *sep = addr ? ", " : "", *at = addr ? addr : "";
    if (rank >= 0) snprintf(out, len, "rank %d (pid %d%s%s)", rank, (int)pid, sep, at);
    else if (pid) snprintf(out, len, "pid %d%s%s%s", (int)pid, addr ? " (" : "", at,
                           addr ? ")" : "");
    else snprintf(out, len, "%s", at);
}

int sock_owner_env_int(pid_t pid, const char *name) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    static const size_t cap = 1 << 20;
    char *buf = malloc(cap);
    ssize_t n = buf ? read(fd, buf, cap - 1) : -1;
    close(fd);
    int value = -1;
    size_t len = strlen(name);
    for (ssize_t at = 0; n > 0 && at < n; at += (ssize_t)strlen(buf + at) + 1) {
        buf[n] = 0;
        if (strncmp(buf + at, name, len) == 0 && buf[at + len] == '=') {
            value = atoi(buf + at + len + 1);
            break;
        }
    }
    free(buf);
    return value;
}

/* See orphans.h. The tree below this process comes from the kernel's
 * children lists (/proc/PID/task/TID/children, CONFIG_PROC_CHILDREN): a
 * few files, however many processes the host runs. Where the kernel has
 * none, from every /proc entry's parent (/proc/PID/stat): at 1,000 agents
 * on one machine each agent's stop read 2,000 entries. */
#include "agent/orphans.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/proc_stat.h"

#define ROUNDS 100 /* of ROUND_NS each: about a second */
#define ROUND_NS 10000000L

void orphans_adopt(void) { prctl(PR_SET_CHILD_SUBREAPER, 1); }

static int use_children_lists = 1;
void orphans_use_children_lists(int on) { use_children_lists = on; }

/* One process as /proc/PID/stat has it. */
typedef struct {
    pid_t pid, ppid, pgid;
    char state; /* 'Z': exited, waiting to be reaped */
} proc_entry;

typedef struct {
    proc_entry *p;
    int n, cap;
} proc_table;

/* pid's entry from /proc/PID/stat; -1 if it is gone. */
static int read_stat(pid_t pid, proc_entry *e) {
    proc_stat st;
    if (proc_stat_read(pid, &st) != 0) return -1;
    e->pid = pid, e->state = st.state, e->ppid = st.ppid, e->pgid = st.pgid;
    return 0;
}

static int table_add(proc_table *t, const proc_entry *e) {
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 256;
        proc_entry *p = realloc(t->p, (size_t)cap * sizeof *p);
        if (!p) return -ENOMEM;
        t->p = p, t->cap = cap;
    }
    t->p[t->n++] = *e;
    return 0;
}

/* Every process's parent, as /proc has them now. */
static int read_table(proc_table *t) {
    t->n = 0;
    DIR *d = opendir("/proc");
    if (!d) return -errno;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        proc_entry pe;
        if (read_stat((pid_t)pid, &pe) == 0) rc = table_add(t, &pe);
    }
    closedir(d);
    return rc;
}

/* The processes below root from the children lists: 0, or -ENOENT where
 * the kernel keeps none. A child may be listed under any of its parent's
 * threads. */
static int read_below(pid_t root, proc_table *t) {
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)root, (int)root);
    if (!use_children_lists || access(path, R_OK) != 0) return -ENOENT;
    t->n = 0;
    int rc = 0;
    pid_t parent = root;
    for (int next = 0; rc == 0; parent = t->p[next++].pid) { /* breadth first */
        snprintf(path, sizeof path, "/proc/%d/task", (int)parent);
        DIR *d = opendir(path);
        for (struct dirent *e; d && rc == 0 && (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char cpath[400];
            snprintf(cpath, sizeof cpath, "%s/%s/children", path, e->d_name);
            FILE *f = fopen(cpath, "r");
            long pid;
            proc_entry pe;
            while (f && rc == 0 && fscanf(f, "%ld", &pid) == 1)
                if (read_stat((pid_t)pid, &pe) == 0 && pe.ppid == parent) rc = table_add(t, &pe);
            if (f) fclose(f);
        }
        if (d) closedir(d);
        if (next >= t->n) break;
    }
    return rc;
}

/* Keeps in t only the processes below `root` (in place). */
static void keep_descendants(proc_table *t, pid_t root) {
    int nbelow = 0, grew = 1;
    /* Move each process whose parent is root or already moved to the
     * front, until a pass moves none (one pass per generation). */
    while (grew) {
        grew = 0;
        for (int i = nbelow; i < t->n; i++) {
            int below = t->p[i].ppid == root;
            for (int j = 0; !below && j < nbelow; j++) below = t->p[i].ppid == t->p[j].pid;
            if (!below) continue;
            proc_entry e = t->p[i];
            t->p[i] = t->p[nbelow];
            t->p[nbelow++] = e;
            grew = 1;
        }
    }
    t->n = nbelow;
}

/* Whether e counts as left behind: alive, and not in a group already killed. */
static int left_behind(const proc_entry *e, const pid_t *groups, int ngroups) {
    if (e->state == 'Z') return 0;
    for (int i = 0; i < ngroups; i++)
        if (e->pgid == groups[i]) return 0;
    return 1;
}

int orphans_end(const pid_t *groups, int ngroups, pid_t *pids, int max) {
    proc_table t = {0};
    pid_t self = getpid();
    int ended = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int rc = read_below(self, &t);
        if (rc == -ENOENT && (rc = read_table(&t)) == 0) keep_descendants(&t, self);
        if (rc) break;
        if (t.n == 0) break;
        for (int i = 0; i < t.n; i++) {
            const proc_entry *e = &t.p[i];
            if (kill(e->pid, SIGKILL) != 0 || !left_behind(e, groups, ngroups)) continue;
            int seen = 0; /* the same one, not yet gone, counts once */
            for (int j = 0; j < ended && j < max; j++) seen |= pids[j] == e->pid;
            if (seen) continue;
            if (ended < max) pids[ended] = e->pid;
            ended++;
        }
        for (int i = 0; i < t.n; i++)
            if (t.p[i].ppid == self) waitpid(t.p[i].pid, NULL, WNOHANG);
        nanosleep(&(struct timespec){0, ROUND_NS}, NULL);
    }
    free(t.p);
    return ended;
}

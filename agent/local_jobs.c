/* See local_jobs.h. */
#include "agent/local_jobs.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ddprun_env.h"

static void jobs_dir(char *out, size_t n) {
    const char *d = getenv(DDPRUN_ENV_JOBS_DIR), *run = getenv("XDG_RUNTIME_DIR");
    if (d && d[0]) snprintf(out, n, "%s", d);
    else if (run && run[0]) snprintf(out, n, "%s/ddprun-jobs", run);
    else snprintf(out, n, "/tmp/ddprun-jobs-%u", (unsigned)getuid());
}

int local_job_note(const local_job *j, char *path, size_t pathlen) {
    char dir[512], tmp[600];
    jobs_dir(dir, sizeof dir);
    path[0] = '\0';
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -errno;
    json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:s}", "pid", (int)j->pid, "backend", j->backend,
                          "endpoint", j->endpoint, "run_id", j->run_id, "key_prefix",
                          j->key_prefix);
    if (!o) return -ENOMEM;
    snprintf(tmp, sizeof tmp, "%s/.%d.tmp", dir, (int)j->pid);
    int rc = json_dump_file(o, tmp, JSON_COMPACT) == 0 ? 0 : -EIO;
    json_decref(o);
    snprintf(path, pathlen, "%s/%d.json", dir, (int)j->pid);
    if (rc == 0 && rename(tmp, path) != 0) rc = -errno;
    if (rc) unlink(tmp), path[0] = '\0';
    return rc;
}

void local_job_remove(const char *path) {
    if (path && path[0]) unlink(path);
}

/* Whether pid is a live ddprun (not a process that took a dead one's pid). */
static int agent_alive(pid_t pid) {
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) return 0;
    char p[64], comm[64] = "";
    snprintf(p, sizeof p, "/proc/%d/comm", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f) return 1; /* (no /proc to ask: believed) */
    int ok = fgets(comm, sizeof comm, f) && strncmp(comm, "ddprun", 6) == 0;
    fclose(f);
    return ok;
}

static int by_pid(const void *a, const void *b) {
    const local_job *x = a, *y = b;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

int local_jobs_list(local_job **out, size_t *n) {
    char dir[512];
    jobs_dir(dir, sizeof dir);
    *out = NULL, *n = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -errno;
    size_t cap = 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        json_error_t jerr;
        json_t *o = json_load_file(path, 0, &jerr);
        int pid = 0;
        const char *backend = NULL, *endpoint = NULL, *run_id = NULL, *prefix = "";
        if (!o || json_unpack(o, "{s:i, s:s, s:s, s:s, s?s}", "pid", &pid, "backend", &backend,
                              "endpoint", &endpoint, "run_id", &run_id, "key_prefix",
                              &prefix) != 0) {
            json_decref(o);
            continue;
        }
        if (!agent_alive(pid)) {
            unlink(path); /* its agent is gone (killed with its janitor) */
        } else {
            if (*n == cap) {
                local_job *m = realloc(*out, (cap = cap ? 2 * cap : 4) * sizeof *m);
                if (!m) rc = -ENOMEM;
                else *out = m;
            }
            if (rc == 0) {
                local_job *j = &(*out)[(*n)++];
                j->pid = pid;
                snprintf(j->backend, sizeof j->backend, "%s", backend);
                snprintf(j->endpoint, sizeof j->endpoint, "%s", endpoint);
                snprintf(j->run_id, sizeof j->run_id, "%s", run_id);
                snprintf(j->key_prefix, sizeof j->key_prefix, "%s", prefix);
            }
        }
        json_decref(o);
    }
    closedir(d);
    if (*n > 1) qsort(*out, *n, sizeof **out, by_pid);
    return rc;
}

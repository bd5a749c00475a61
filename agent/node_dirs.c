/* See node_dirs.h. */
#include "agent/node_dirs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/janitor.h"
#include "common/ddprun_env.h"
#include "common/fs.h"
#include "common/log.h"

struct node_dirs {
    char run_id[256];
    char log_root[2048];
    char tmp_root[256]; /* without --log-dir: our own directory, removed at the end unless a
                         * worker failed (then kept, and said where) */
    int keep_logs;      /* 1: a worker failed, tmp_root stays; 2: and where was said */
    char job_note[600]; /* this agent's note for `ddprun status` (agent/local_jobs.h) */
    snapshot_dir snapshots;
    int janitor_fd;     /* removes the snapshot directories and tmp_root if we are killed */
};

/* torchrun's layout: <log dir>/<run id>_<random>/, a new folder for each
 * run, so that a job run again with the same --rdzv-id and --log-dir does
 * not write into the last one's attempt_0. */
static int make_log_root(node_dirs *d, const char *log_dir) {
    if (log_dir) {
        int rc = fs_mkdir_p(log_dir);
        if (rc) {
            log_error("cannot create the log directory %s: %s", log_dir, strerror(-rc));
            return rc;
        }
        if (snprintf(d->log_root, sizeof d->log_root, "%s/%s_XXXXXX", log_dir, d->run_id) >=
            (int)sizeof d->log_root)
            rc = -ENAMETOOLONG;
        else if (!mkdtemp(d->log_root))
            rc = -errno;
        if (rc) {
            log_error("cannot create a run directory in %s: %s", log_dir, strerror(-rc));
            return rc;
        }
        log_info("log directory set to: %s", d->log_root);
        return 0;
    }
    char tmpl[256];
    snprintf(tmpl, sizeof tmpl, "/tmp/ddprun_%d_XXXXXX", (int)getpid());
    if (!mkdtemp(tmpl)) return -errno;
    snprintf(d->tmp_root, sizeof d->tmp_root, "%s", tmpl);
    snprintf(d->log_root, sizeof d->log_root, "%s/%s", tmpl, d->run_id);
    int rc = fs_mkdir_p(d->log_root);
    if (rc) log_error("cannot create the log directory %s: %s", d->log_root, strerror(-rc));
    return rc;
}

static void start_janitor(node_dirs *d) {
    const char *paths[] = {d->snapshots.path, d->snapshots.disk, d->tmp_root, NULL};
    d->janitor_fd = janitor_start(paths);
    if (d->janitor_fd < 0)
        log_warn("cannot start a shell (/bin/sh) to remove %s%s%s if this agent is killed; "
                 "the next agent on this machine will",
                 d->snapshots.path, d->tmp_root[0] ? " and " : "", d->tmp_root);
}

/* DDPRUN_SNAPSHOT_DIR: in memory, or (with a warning) on disk. */
static int make_snapshot_dir(node_dirs *d, const char *shm_dir) {
    char disk[2200], why[600];
    snprintf(disk, sizeof disk, "%s/snapshots", d->log_root);
    int rc = snapshot_dir_make(&d->snapshots, shm_dir, disk, why, sizeof why);
    if (rc) {
        log_error("cannot make the workers' snapshot directory under %s or %s: %s", shm_dir,
                  disk, strerror(-rc));
        return rc;
    }
    if (!d->snapshots.in_memory)
        log_warn("%s; the workers' snapshot directory (" DDPRUN_ENV_SNAPSHOT_DIR ") is on disk: %s",
                 why, d->snapshots.path);
    start_janitor(d);
    return 0;
}

int node_dirs_make(const char *log_dir, const char *run_id, const char *shm_dir,
                   node_dirs **out) {
    *out = NULL;
    node_dirs *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    d->janitor_fd = -1;
    snprintf(d->run_id, sizeof d->run_id, "%s", run_id);
    int rc = make_log_root(d, log_dir);
    if (rc == 0) rc = make_snapshot_dir(d, shm_dir);
    *out = d; /* (closed by the caller either way: what was made is removed) */
    return rc;
}

const char *node_dirs_log_root(const node_dirs *d) { return d->log_root; }

const snapshot_dir *node_dirs_snapshots(const node_dirs *d) { return &d->snapshots; }

void node_dirs_note_job(node_dirs *d, const local_job *j) {
    int rc = local_job_note(j, d->job_note, sizeof d->job_note);
    if (rc)
        log_debug("cannot leave this job's note for `ddprun status`: %s", strerror(-rc));
    else
        janitor_add_path(d->janitor_fd, d->job_note);
}

void node_dirs_track(node_dirs *d, pid_t pgid, int on) { janitor_track(d->janitor_fd, pgid, on); }

void node_dirs_keep_logs(node_dirs *d) {
    if (!d->keep_logs) d->keep_logs = 1;
}

void node_dirs_tell_kept_logs(node_dirs *d) {
    if (!d->tmp_root[0] || d->keep_logs != 1) return;
    d->keep_logs = 2; /* told */
    log_info("a worker failed: the workers' logs are kept in %s (remove it when done; "
             "--log-dir chooses where they go)",
             d->log_root);
}

/* Without --log-dir nobody asked for the files: after a run in which no
 * worker failed, nothing is left behind in /tmp. Where one failed, its
 * logs (-r/-t's files, error files: the traceback) are what the user
 * needs next, as torchrun keeps its /tmp/torchelastic_* directories. */
static void remove_tmp_root(node_dirs *d) {
    local_job_remove(d->job_note);
    if (!d->tmp_root[0]) return;
    if (d->keep_logs) {
        node_dirs_tell_kept_logs(d);
        janitor_keep(d->janitor_fd);
        char why[400];
        snprintf(why, sizeof why, "%s/" KEPT_LOGS_NOTE, d->tmp_root);
        FILE *f = fopen(why, "w");
        if (f) {
            fprintf(f, "A worker of job '%s' failed: ddprun (pid %d) kept its workers' logs "
                       "here, in %s.\nRemove this directory when done; ddprun's --log-dir "
                       "chooses where logs go.\n",
                    d->run_id, (int)getpid(), d->log_root);
            fclose(f);
        }
        return;
    }
    fs_remove_tree(d->tmp_root);
}

void node_dirs_close(node_dirs *d) {
    if (!d) return;
    snapshot_dir_remove(&d->snapshots);
    remove_tmp_root(d);
    janitor_dismiss(d->janitor_fd);
    free(d);
}

/* See events.h. */
#include "agent/events.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"

struct event_log {
    int fd;      /* the file, or -1 */
    int console; /* also stderr */
};

event_log *event_log_open(const char *path, int console, char *err, size_t errlen) {
    event_log *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of memory for the event log");
        return NULL;
    }
    l->fd = -1;
    l->console = console;
    if (path && (l->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
        snprintf(err, errlen, "cannot open the event log %s: %s", path, strerror(errno));
        free(l);
        return NULL;
    }
    return l;
}

void event_log_close(event_log *l) {
    if (!l) return;
    if (l->fd >= 0) close(l->fd);
    free(l);
}

/* One write, so that the lines of agents appending to one file never mix. */
static void put_line(int fd, const char *line, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, line, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* the log is a record, not the job: a full disk does not stop it */
        line += w, n -= (size_t)w;
    }
}

void event_log_write(event_log *l, const char *name, const char *source, json_t *metadata) {
    if (!l || (l->fd < 0 && !l->console)) {
        json_decref(metadata);
        return;
    }
    json_t *ev = json_pack("{s:s, s:s, s:I, s:o}", "name", name, "source", source, "timestamp",
                           (json_int_t)(clock_wall_s() * 1000), "metadata",
                           metadata ? metadata : json_object());
    char *text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    json_decref(ev);
    if (!text) return;
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps' terminator becomes the newline */
    if (l->fd >= 0) put_line(l->fd, text, n + 1);
    if (l->console) put_line(STDERR_FILENO, text, n + 1);
    free(text);
}

void event_worker_status(event_log *l, const worker_event *e) {
    char name[96];
    snprintf(name, sizeof name, "torchelastic.worker.status.%s", e->state);
    json_t *extra = json_pack("{s:i}", "exit_code", e->exit_code);
    char *extra_s = extra ? json_dumps(extra, JSON_COMPACT) : NULL;
    json_decref(extra);
    json_t *md = json_pack(
        "{s:s, s:i, s:i, s:i, s:s, s:s, s:s, s:i, s:s, s:s?, s:s?, s:i}", "run_id", e->run_id,
        "global_rank", e->global_rank, "group_rank", e->group_rank, "worker_id", e->pid, "role",
        e->role, "hostname", e->hostname, "state", e->state, "total_run_time",
        (int)(e->run_time_s + 0.5), "rdzv_backend", e->rdzv_backend, "raw_error", e->raw_error,
        "metadata", extra_s, "agent_restarts", e->agent_restarts);
    free(extra_s);
    if (md) event_log_write(l, name, "WORKER", md);
}

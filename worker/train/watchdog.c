/* See watchdog.h. */
#include "worker/train/watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

void watchdog_init(watchdog *w, const char *path, int timeout_s) {
    w->path[0] = '\0';
    w->timeout_s = timeout_s;
    w->armed_ns = 0;
    if (path && *path && timeout_s > 0) snprintf(w->path, sizeof w->path, "%s", path);
}

/* One request, written whole (a line under PIPE_BUF is never interleaved
 * with another rank's). */
static void send_request(watchdog *w, const char *scope, double expires, int sig) {
    if (!w->path[0]) return;
    char line[512];
    int n = snprintf(line, sizeof line,
                     "{\"version\": 1, \"pid\": %d, \"scope_id\": \"%s\", \"expiration_time\": "
                     "%.3f, \"signal\": %d}\n",
                     (int)getpid(), scope, expires, sig);
    int fd = open(w->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    ssize_t wrote = fd >= 0 ? write(fd, line, (size_t)n) : -1;
    int e = errno;
    if (fd >= 0) close(fd);
    if (wrote == n) return;
    log_warn("the launcher's worker watchdog at %s does not answer (%s): steps are not "
             "watched from now on", w->path, strerror(e));
    w->path[0] = '\0';
}

void watchdog_arm(watchdog *w, const char *scope) {
    int64_t now = clock_now_ns();
    if (!w->path[0] || (w->armed_ns && now - w->armed_ns < (int64_t)w->timeout_s * 250000000))
        return;
    w->armed_ns = now;
    send_request(w, scope, clock_wall_s() + w->timeout_s, SIGKILL);
}

void watchdog_release(watchdog *w, const char *scope) { send_request(w, scope, -1, 0); }

/* See log.h. The program name and level are process-wide settings made
 * once by main before anything else runs; they are the only globals the
 * libraries read. */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/ddprun_env.h"

static const char *log_program = "ddprun";
static log_level log_threshold = LOG_INFO;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

void log_init(const char *program) {
    log_program = program;
    const char *env = getenv(DDPRUN_ENV_LOG_LEVEL);
    if (!env) return;
    for (int i = 0; i < 4; i++)
        if (strncasecmp(env, level_names[i], 4) == 0) log_threshold = (log_level)i;
}

void log_set_level(log_level level) { log_threshold = level; }
log_level log_get_level(void) { return log_threshold; }

/* One line, "[time] program: level: " and the message, in one write. */
static void vlog(log_level level, const char *suffix, const char *fmt, va_list ap) {
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "[%02d:%02d:%02d.%03ld] %s: %s%s", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, log_program,
                     level <= LOG_WARN ? level_names[level] : "", level <= LOG_WARN ? ": " : "");
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    if (suffix) n += snprintf(line + n, sizeof line - (size_t)n - 1, "%s", suffix);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

void log_msg(log_level level, const char *fmt, ...) {
    if (level > log_threshold) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, NULL, fmt, ap);
    va_end(ap);
}

void log_rated(log_rate *r, log_level level, const char *fmt, ...) {
    if (level > log_threshold) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    if (r->in_window == 0 || now - r->window_start >= LOG_RATE_INTERVAL_S)
        r->window_start = now, r->in_window = 0;
    if (r->in_window >= LOG_RATE_BURST) {
        r->held_back++;
        return;
    }
    r->in_window++;
    char suffix[96] = "";
    if (r->held_back)
        snprintf(suffix, sizeof suffix, " (and %ld more like it in the last %g s, not shown)",
                 r->held_back, LOG_RATE_INTERVAL_S);
    r->held_back = 0;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, suffix[0] ? suffix : NULL, fmt, ap);
    va_end(ap);
}

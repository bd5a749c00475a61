/* Logging for the daemons: one line per event on stderr, prefixed with the
 * program's name, written with a single write(2) so that lines from
 * different processes sharing a terminal never interleave mid-line. */
#ifndef DDPRUN_COMMON_LOG_H
#define DDPRUN_COMMON_LOG_H

typedef enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 } log_level;

/* Set the prefix ("ddprun-store") and the most verbose level printed. The
 * level defaults to LOG_INFO, or DDPRUN_LOG_LEVEL (error|warn|info|debug). */
void log_init(const char *program);
void log_set_level(log_level level);
log_level log_get_level(void);

void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Lines about what strangers do (a bad connection) can come thousands a
 * second: a log_rate lets LOG_RATE_BURST of them through every
 * LOG_RATE_INTERVAL_S seconds, counts the rest, and says how many were held
 * back on the next line it lets through. One per kind of line, owned by
 * one thread. */
#define LOG_RATE_BURST 10
#define LOG_RATE_INTERVAL_S 10.0
typedef struct {
    double window_start; /* CLOCK_MONOTONIC seconds */
    int in_window;       /* lines let through since window_start */
    long held_back;      /* lines not printed since the last one that was */
} log_rate;

void log_rated(log_rate *r, log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif

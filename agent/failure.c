/* See failure.h. */
#include "agent/failure.h"

#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Reads torchrun's error-file format; returns 0 if it had a message. */
static int read_error_file(const char *path, failure *f) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) return -1;
    json_t *msg = json_object_get(root, "message");
    const char *text = NULL, *stack = NULL, *stamp = NULL;
    if (json_is_object(msg)) {
        text = json_string_value(json_object_get(msg, "message"));
        json_t *extra = json_object_get(msg, "extraInfo");
        stack = json_string_value(json_object_get(extra, "py_callstack"));
        json_t *ts = json_object_get(extra, "timestamp");
        stamp = json_string_value(ts);
        if (json_is_integer(ts)) f->time = (double)json_integer_value(ts);
    } else if (json_is_string(msg)) {
        text = json_string_value(msg);
    }
    if (stamp) f->time = atof(stamp);
    if (text) f->message = strdup(text);
    if (stack) f->traceback = strdup(stack);
    json_decref(root);
    return text ? 0 : -1;
}

void failure_from_exit(failure *f, const char *host, int rank, int local_rank, int pid,
                       int64_t exit_status, int term_signal, double exit_time,
                       const char *error_file, int round) {
    memset(f, 0, sizeof *f);
    snprintf(f->host, sizeof f->host, "%s", host);
    f->rank = rank;
    f->local_rank = local_rank;
    f->pid = pid;
    f->round = round;
    f->time = exit_time;
    f->exitcode = term_signal ? -term_signal : (int)exit_status;
    struct stat st;
    if (error_file && stat(error_file, &st) == 0 && read_error_file(error_file, f) == 0)
        snprintf(f->error_file, sizeof f->error_file, "%s", error_file);
    if (f->message) return;
    char buf[256];
    if (term_signal)
        snprintf(buf, sizeof buf, "Signal %d (SIG%s) received by PID %d", term_signal,
                 sigabbrev_np(term_signal) ? sigabbrev_np(term_signal) : "?", pid);
    else
        snprintf(buf, sizeof buf, "exited with code %lld", (long long)exit_status);
    f->message = strdup(buf);
}

char *failure_to_json(const failure *f) {
    json_t *o = json_pack("{s:f, s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:s*, s:b}", "time",
                          f->time, "host", f->host, "rank", f->rank, "local_rank",
                          f->local_rank, "exitcode", f->exitcode, "pid", f->pid, "round",
                          f->round, "error_file", f->error_file, "message",
                          f->message ? f->message : "", "traceback", f->traceback, "hung",
                          f->hung);
    if (!o) return NULL;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

int failure_from_json(const char *line, failure *f) {
    memset(f, 0, sizeof *f);
    json_error_t jerr;
    json_t *o = json_loads(line, 0, &jerr);
    if (!o) return -1;
    const char *host = "", *ef = "", *msg = "", *tb = NULL;
    int rc = json_unpack(o, "{s:F, s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s?s, s?b}", "time",
                         &f->time, "host", &host, "rank", &f->rank, "local_rank",
                         &f->local_rank, "exitcode", &f->exitcode, "pid", &f->pid, "round",
                         &f->round, "error_file", &ef, "message", &msg, "traceback", &tb,
                         "hung", &f->hung);
    if (rc == 0) {
        snprintf(f->host, sizeof f->host, "%s", host);
        snprintf(f->error_file, sizeof f->error_file, "%s", ef);
        f->message = strdup(msg);
        f->traceback = tb ? strdup(tb) : NULL;
    }
    json_decref(o);
    return rc;
}

void failure_free(failure *f) {
    free(f->message);
    free(f->traceback);
    f->message = f->traceback = NULL;
}

static void print_one(FILE *out, int index, const failure *f) {
    char when[64];
    time_t t = (time_t)f->time;
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%d_%H:%M:%S", &tm);
    fprintf(out, "[%d]:\n", index);
    fprintf(out, "  time      : %s\n", when);
    fprintf(out, "  host      : %s\n", f->host);
    fprintf(out, "  rank      : %d (local_rank: %d)\n", f->rank, f->local_rank);
    fprintf(out, "  exitcode  : %d (pid: %d)\n", f->exitcode, f->pid);
    fprintf(out, "  error_file: %s\n", f->error_file[0] ? f->error_file : "<N/A>");
    const char *tb = f->traceback ? f->traceback : f->message;
    fprintf(out, "  traceback : ");
    /* Indent continuation lines under the first. */
    for (const char *p = tb ? tb : ""; *p; p++) {
        fputc(*p, out);
        if (*p == '\n' && p[1]) fputs("    ", out);
    }
    if (!tb || !*tb || tb[strlen(tb) - 1] != '\n') fputc('\n', out);
    if (f->traceback && f->message && f->message[0] && !strstr(f->traceback, f->message))
        fprintf(out, "  message   : %s\n", f->message);
}

/* Lower first: the rank the others waited for, a worker the watchdog
 * killed, one killed by another signal, one that exited with a code. */
static int tier(const failure *f) {
    return f->hung ? -1 : f->watchdog ? 0 : f->exitcode < 0 ? 1 : 2;
}

int failure_root_cause(const failure *fs, int n) {
    int root = -1;
    for (int i = 0; i < n; i++) {
        if (root < 0) {
            root = i;
            continue;
        }
        int a = tier(&fs[i]), b = tier(&fs[root]);
        if (a != b ? a < b : fs[i].time < fs[root].time) root = i;
    }
    return root;
}

void failure_print_summary(FILE *out, const char *program, failure *fs, int n) {
    int root = failure_root_cause(fs, n);
    const char *bar = "============================================================";
    const char *rule = "------------------------------------------------------------";
    fprintf(out, "%s\n%s FAILED\n%s\nFailures:\n", bar, program, rule);
    int others = 0;
    for (int i = 0; i < n; i++) {
        if (i == root) continue;
        print_one(out, fs[i].rank, &fs[i]);
        others++;
    }
    if (!others) fprintf(out, "  <NO_OTHER_FAILURES>\n");
    fprintf(out, "%s\nRoot Cause (first observed failure):\n", rule);
    if (n > 0) print_one(out, fs[root].rank, &fs[root]);
    fprintf(out, "%s\n", bar);
    fflush(out);
}

/* See error_file.h. */
#include "worker/train/error_file.h"

#include <execinfo.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The native stack as text, innermost frame first. */
static char *stack_text(void) {
    void *frames[64];
    int n = backtrace(frames, 64);
    char **names = backtrace_symbols(frames, n);
    size_t len = 32;
    for (int i = 0; names && i < n; i++) len += strlen(names[i]) + 8;
    char *out = malloc(len);
    if (!out) {
        free(names);
        return NULL;
    }
    size_t k = (size_t)snprintf(out, len, "Native stack (most recent call first):\n");
    for (int i = 1; names && i < n; i++) k += (size_t)snprintf(out + k, len - k, "  %s\n", names[i]);
    free(names);
    return out;
}

void error_file_write(const char *message) {
    const char *path = getenv("TORCHELASTIC_ERROR_FILE");
    if (!path || !*path) return;
    char stamp[32], tmp[4200];
    snprintf(stamp, sizeof stamp, "%lld", (long long)time(NULL));
    char *stack = stack_text();
    json_t *doc = json_pack("{s:{s:s, s:{s:s, s:s}}}", "message", "message", message, "extraInfo",
                            "py_callstack", stack ? stack : "", "timestamp", stamp);
    free(stack);
    if (!doc) return;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    if (json_dump_file(doc, tmp, JSON_INDENT(2)) == 0) rename(tmp, path);
    json_decref(doc);
}

static void on_crash(int sig) {
    char msg[128];
    snprintf(msg, sizeof msg, "ddp-train crashed: signal %d (SIG%s)", sig,
             sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    error_file_write(msg); /* best effort: not async-signal-safe, but we are dying anyway */
    signal(sig, SIG_DFL);
    raise(sig);
}

void error_file_install_crash_handlers(void) {
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_crash);
}

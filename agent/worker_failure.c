/* See worker_failure.h. */
#include "agent/worker_failure.h"

#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/worker_env.h"
#include "agent/worker_output.h"
#include "common/clock.h"
#include "common/ddprun_env.h"
#include "common/log.h"

/* f's message := itself followed by the formatted text. */
__attribute__((format(printf, 2, 3))) static void append(failure *f, const char *fmt, ...) {
    char more[1200], *why = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(more, sizeof more, fmt, ap);
    va_end(ap);
    if (asprintf(&why, "%s%s", f->message, more) > 0) {
        free(f->message);
        f->message = why;
    }
}

void worker_failure(failure *f, worker *w, const char *host, int round,
                    const char *watchdog_scope) {
    failure_free(f);
    failure_from_exit(f, host, w->global_rank, w->local_rank, w->pid, w->exit_status,
                      w->term_signal, w->exit_time, w->error_file, round);
    f->watchdog = watchdog_scope != NULL;
    char *stacks = worker_output_captured(&w->err);
    if (stacks && !f->traceback) { /* what it wrote when asked for its stacks */
        if (asprintf(&f->traceback, "its stacks, written when the watchdog asked before its "
                                    "kill:\n%s", stacks) < 0)
            f->traceback = NULL;
    }
    free(stacks);
    char *tail = f->traceback || f->error_file[0] ? NULL : worker_output_tail(&w->err, 12);
    if (tail && w->term_signal == SIGABRT &&
        strstr(tail, "terminate called without an active exception"))
        /* torch's, seen under torchrun alike: a gloo/NCCL thread of a process
         * group still alive as the interpreter ends (docs/cli.md) */
        append(f, ": a C++ thread still ran as the process ended; in a torch.distributed "
                  "script, the process group was not destroyed before exit (call "
                  "dist.destroy_process_group() at its end)");
    if (tail) { /* no error file (no @record): what it last wrote says what happened */
        if (asprintf(&f->traceback, "%s; the last lines it wrote to stderr:\n%s", f->message,
                     tail) < 0)
            f->traceback = NULL;
        free(tail);
    }
    if (watchdog_scope)
        append(f, ": stopped by the worker watchdog, '%s' ran past its deadline",
               watchdog_scope);
}

int worker_failures_hung(failure *out, int room, const failure *known, int nknown,
                         const coll_verdict *v, const worker_group *wg, int rank_offset,
                         const char *host, int round) {
    int added = 0;
    for (int b = 0; b < v->nblamed && added < room; b++) {
        const coll_pos *p = &v->blamed[b];
        int seen = 0;
        for (int i = 0; i < nknown; i++) seen |= known[i].rank == p->rank;
        for (int i = 0; i < added; i++) seen |= out[i].rank == p->rank;
        if (seen) continue;
        int local = p->rank - rank_offset;
        const worker *w = wg && local >= 0 && local < wg->n && wg->w[local].pid == p->pid
                              ? &wg->w[local] : NULL;
        failure *f = &out[added++];
        failure_free(f);
        if (w && !w->running)
            failure_from_exit(f, host, p->rank, local, p->pid, w->exit_status, w->term_signal,
                              w->exit_time, w->error_file, round);
        else /* still running, or another node's: it goes with the group, killed */
            failure_from_exit(f, p->host, p->rank, p->local_rank, p->pid, 0, SIGKILL,
                              clock_wall_s(), w ? w->error_file : "", round);
        append(f, ": hung (stopped with the group)");
    }
    return added;
}

void worker_failure_note_hang(failure *f, const coll_verdict *v) {
    append(f, f->hung ? "; the rank the others waited for: %s" : "; it waited for a hung rank: %s",
           v->text);
}

/* Whether w said that its work is done and kept (DDPRUN_FINISHED_FILE). */
int worker_said_finished(const worker *w) {
    char path[PATH_MAX];
    return worker_finished_file(w->error_file, path, sizeof path) == 0 && access(path, F_OK) == 0;
}

/* Whether w said it had finished its work before it failed: then its
 * failure is on its way out, and said. */
int worker_finished_first(const worker *w) {
    if (!worker_said_finished(w)) return 0;
    if (w->term_signal)
        log_warn("local rank %d (rank %d, pid %d) had finished its work (it said so in "
                 DDPRUN_ENV_FINISHED_FILE "), then was killed on its way out (signal %d): counted "
                 "as finished", w->local_rank, w->global_rank, w->pid, w->term_signal);
    else
        log_warn("local rank %d (rank %d, pid %d) had finished its work (it said so in "
                 DDPRUN_ENV_FINISHED_FILE "), then exited %lld on its way out: counted as finished",
                 w->local_rank, w->global_rank, w->pid, (long long)w->exit_status);
    return 1;
}

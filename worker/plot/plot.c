/* See plot.h. Options may come before or after the metrics file. With
 * --refresh the picture is redrawn whenever the file has changed, until a
 * "done" line ends it (the job's training is over) or SIGINT, SIGTERM or
 * SIGHUP arrives; each redraw replaces the PNG whole, so a viewer never
 * sees half of one.
 *
 * Stop signals are caught, not held back: a handler notes the signal
 * (stop_signal) and every wait looks at it, the pause between redraws at
 * once (ppoll) and a wait on gnuplot within a tenth of a second (gnuplot
 * is then killed and nothing written). The metrics file, a regular file (a FIFO is
 * refused), is read to its end first. A signal the caller left ignored
 * (nohup's SIGHUP, SIGINT in a script's background job) stays ignored. */
#include "worker/plot/plot.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/log.h"
#include "common/opts.h"
#include "worker/plot/gnuplot.h"
#include "worker/plot/metrics_series.h"

/* The stop signal received (SIGINT, SIGTERM, SIGHUP), 0 before. */
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

typedef struct {
    const char *metrics;
    const char *output;
    const char *title;
    int width, height;
    double refresh; /* seconds; 0: draw once */
    char default_output[PATH_MAX];
} plot_args;

static const char usage_head[] =
    "usage: ddp-train plot METRICS [options]\n"
    "\n"
    "Draws the training curve of a ddp-train --metrics file as a PNG: loss (above)\n"
    "and accuracy (below) against the global step, training (each step as a dot,\n"
    "and their moving mean) and test, with each restart of the group marked by a\n"
    "dashed line at the step it resumed from. Needs gnuplot with its pngcairo\n"
    "terminal (Debian: gnuplot-nox).\n"
    "\n";

static const char usage_tail[] =
    "\n"
    "Exit status: 0 when the picture is written (with --refresh: after the last\n"
    "redraw), 1 when it cannot be (bad metrics, gnuplot failed, output not\n"
    "writable; nothing is left half-written), 2 for a bad command line.\n";

/* --size WxH, the whole value. */
static int apply_size(const opts_arg *a) {
    plot_args *p = a->ctx;
    int w, h, n = 0;
    if (sscanf(a->val, "%dx%d%n", &w, &h, &n) != 2 || a->val[n] || w < 100 || h < 100 ||
        w > 8000 || h > 8000)
        return opts_bad(a, "WIDTHxHEIGHT in pixels, each from 100 to 8000, like 1200x800");
    p->width = w, p->height = h;
    return 0;
}

/* The default -o: the metrics file's name with .png for its extension. */
static int default_output(plot_args *p, char *err, size_t errlen) {
    const char *m = p->metrics, *slash = strrchr(m, '/'), *base = slash ? slash + 1 : m;
    const char *dot = strrchr(base, '.');
    int keep = dot && dot > base ? (int)(dot - m) : (int)strlen(m);
    if (snprintf(p->default_output, sizeof p->default_output, "%.*s.png", keep, m) >=
        (int)sizeof p->default_output) {
        snprintf(err, errlen, "the metrics file's name is too long for a default -o; give -o");
        return -ENAMETOOLONG;
    }
    if (strcmp(p->default_output, m) == 0) {
        snprintf(err, errlen, "the default output %s would overwrite the metrics file; give -o",
                 m);
        return -EINVAL;
    }
    p->output = p->default_output;
    return 0;
}

static int print_usage(const opts_spec *spec) {
    return opts_print_help(spec, usage_head, usage_tail, stdout) ? 1 : 0;
}

/* Reads the command line; 0, 1 after --help, or 2 with the message printed. */
static int parse(int argc, char **argv, plot_args *p) {
    *p = (plot_args){.width = 1200, .height = 800};
    const opts_opt table[] = {
        {"output", 'o', OPTS_STR, .target = &p->output, .metavar = "FILE",
         .help = "the PNG to write (default: METRICS with .png\n"
                 "for its extension: run.jsonl -> run.png)"},
        {"size", 0, OPTS_CALL, .apply = apply_size, .metavar = "WxH",
         .help = "pixels, each 100 to 8000 (default 1200x800)"},
        {"title", 0, OPTS_STR, .target = &p->title, .metavar = "TEXT",
         .help = "the picture's title (default: METRICS)"},
        {"refresh", 0, OPTS_DOUBLE, .target = &p->refresh, .lo = 0.1, .hi = 86400,
         .want = "a number of seconds from 0.1 to 86400", .metavar = "S",
         .help = "redraw every S seconds while the file grows,\n"
                 "until its job's \"done\" line, or SIGINT/SIGTERM\n"
                 "(waits for the file to appear)"},
        {"help", 'h', .type = OPTS_HELP, .help = "print this help"},
    };
    opts_spec spec = {.prog = "ddp-train plot", .opts = table,
                      .nopts = sizeof table / sizeof table[0], .ctx = p};
    char err[512];
    /* The engine stops at an operand: go on after it, so that options may
     * follow the metrics file (ddp-train plot run.jsonl -o run.png). */
    for (int base = 0;;) {
        int next, rc = opts_parse(&spec, argc - base, argv + base, &next, err, sizeof err);
        if (rc == OPTS_HELP_GIVEN) return print_usage(&spec) ? 2 : 1;
        if (rc) {
            fprintf(stderr, "ddp-train plot: %s\n", err);
            return 2;
        }
        next += base;
        if (next >= argc) break;
        if (p->metrics) {
            fprintf(stderr, "ddp-train plot: unexpected argument '%s': one metrics file only "
                            "(see ddp-train plot --help)\n", argv[next]);
            return 2;
        }
        p->metrics = argv[next];
        base = next;
    }
    if (!p->metrics) {
        fprintf(stderr, "ddp-train plot: which metrics file? usage: ddp-train plot METRICS "
                        "[-o FILE] (see --help)\n");
        return 2;
    }
    if (p->output && !p->output[0]) {
        fprintf(stderr, "ddp-train plot: -o: an empty file name\n");
        return 2;
    }
    if (!p->output && default_output(p, err, sizeof err)) {
        fprintf(stderr, "ddp-train plot: %s\n", err);
        return 2;
    }
    struct stat a, b;
    if (strcmp(p->output, p->metrics) == 0 ||
        (stat(p->output, &a) == 0 && stat(p->metrics, &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino)) {
        fprintf(stderr, "ddp-train plot: -o %s is the metrics file itself; name the PNG\n",
                p->output);
        return 2;
    }
    if (!p->title) p->title = p->metrics;
    return 0;
}

static const char *stop_name(void) {
    const char *n = stop_signal ? sigabbrev_np(stop_signal) : NULL;
    return n ? n : "?";
}

/* One read and draw. 0 drawn; -ENOENT/-ENODATA when there is nothing to
 * draw yet; another negative errno on failure (-EINTR: a stop signal). */
static int draw(const plot_args *p, metrics_series *s, char *err, size_t errlen) {
    int rc = metrics_series_read(p->metrics, s, err, errlen);
    if (rc == 0) rc = metrics_series_check(s, p->metrics, err, errlen);
    if (stop_signal) {
        snprintf(err, errlen, "interrupted by SIG%s: nothing written", stop_name());
        return -EINTR;
    }
    if (rc) return rc;
    plot_opts o = {.width = p->width, .height = p->height, .title = p->title,
                   .program = "gnuplot", .stop = &stop_signal};
    return plot_render(s, &o, p->output, err, errlen);
}

static void summary(const plot_args *p, const metrics_series *s) {
    printf("%s: %zu steps, %zu evaluation%s, %zu restart%s%s\n", p->output, s->ntrain, s->ntest,
           s->ntest == 1 ? "" : "s", s->nrestarts, s->nrestarts == 1 ? "" : "s",
           s->done ? "; the job is done" : "");
    fflush(stdout);
}

static int once(const plot_args *p) {
    metrics_series s = {0};
    char err[2048];
    int rc = draw(p, &s, err, sizeof err);
    if (rc) fprintf(stderr, "ddp-train plot: %s\n", err);
    else {
        if (s.tail_partial)
            log_warn("%s ends in an incomplete line (still being written?): left out",
                     p->metrics);
        summary(p, &s);
    }
    metrics_series_free(&s);
    return rc ? 1 : 0;
}

/* Whether the file differs from when it was last drawn. */
static int changed(const char *path, struct stat *last) {
    struct stat st;
    if (stat(path, &st) != 0) return 1;
    int same = st.st_ino == last->st_ino && st.st_size == last->st_size &&
               st.st_mtim.tv_sec == last->st_mtim.tv_sec &&
               st.st_mtim.tv_nsec == last->st_mtim.tv_nsec;
    *last = st;
    return !same;
}

/* Sleeps for --refresh's seconds, or until a stop signal. The signals are
 * blocked while the flag is read and ppoll unblocks them as it starts to
 * wait, so one that comes in between still ends the wait at once. */
static void pause_until_next(const plot_args *p, const sigset_t *stops) {
    struct timespec ts = {.tv_sec = (time_t)p->refresh,
                          .tv_nsec = (long)((p->refresh - (double)(time_t)p->refresh) * 1e9)};
    sigset_t old;
    sigprocmask(SIG_BLOCK, stops, &old);
    if (!stop_signal) ppoll(NULL, 0, &ts, &old);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

static int refresh(const plot_args *p, const sigset_t *stops) {
    metrics_series s = {0};
    struct stat last = {0};
    char err[2048];
    int said_waiting = 0, rc = 0;
    log_info("drawing %s from %s every %g s, until its job is done (or SIGINT/SIGTERM)",
             p->output, p->metrics, p->refresh);
    while (!stop_signal) {
        if (changed(p->metrics, &last)) {
            rc = draw(p, &s, err, sizeof err);
            if (rc == -ENOENT || rc == -ENODATA) {
                if (!said_waiting) log_info("waiting: %s", err);
                said_waiting = 1, rc = 0;
            } else if (rc == -EINTR) {
                rc = 0;
                break;
            } else if (rc) {
                fprintf(stderr, "ddp-train plot: %s\n", err);
                break;
            } else if (s.done) {
                summary(p, &s);
                break;
            }
        }
        pause_until_next(p, stops);
    }
    if (stop_signal)
        log_info("stopping on SIG%s; %s holds the last picture", stop_name(), p->output);
    metrics_series_free(&s);
    return rc ? 1 : 0;
}

/* on_stop for each of stops that the caller has not set to be ignored. */
static void catch_stops(const sigset_t *stops) {
    struct sigaction sa = {.sa_handler = on_stop}, old;
    sigemptyset(&sa.sa_mask);
    for (int sig = 1; sig < NSIG; sig++)
        if (sigismember(stops, sig) == 1 && sigaction(sig, NULL, &old) == 0 &&
            old.sa_handler != SIG_IGN)
            sigaction(sig, &sa, NULL);
}

int plot_main(int argc, char **argv) {
    plot_args p;
    int rc = parse(argc, argv, &p);
    if (rc) return rc == 1 ? 0 : rc;
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT), sigaddset(&stops, SIGTERM), sigaddset(&stops, SIGHUP);
    catch_stops(&stops);
    signal(SIGPIPE, SIG_IGN); /* gnuplot stopping early must not kill us on a write */
    return p.refresh > 0 ? refresh(&p, &stops) : once(&p);
}

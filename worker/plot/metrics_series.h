/* The --metrics file read back as series to plot: ddp-train's JSON lines
 * (docs/cli.md, "Output") become the training steps, the evaluations and
 * the restarts, in file order. A restarted group resumes from a checkpoint,
 * so global steps may repeat; the series keep every line in the order it
 * was written and mark where each (re)start began. Knows nothing of
 * gnuplot (gnuplot.h draws the series). */
#ifndef DDPRUN_WORKER_PLOT_METRICS_SERIES_H
#define DDPRUN_WORKER_PLOT_METRICS_SERIES_H

#include <stddef.h>
#include <stdint.h>

/* One training step's line. loss or acc is NAN where the line has null
 * (a step whose loss was not finite). segment counts the restarts before
 * it, so the smoothed curve can break at each. */
typedef struct {
    int64_t step;
    double loss, acc;
    int epoch;
    int segment;
} series_train;

/* One evaluation, at the global step it followed. */
typedef struct {
    int64_t step;
    double loss, acc;
    int epoch;
} series_test;

/* Where the group (re)started: the step it resumed from. inferred: no
 * "start" line said so (a file from before they were written), but the
 * global step went back. */
typedef struct {
    int64_t step;
    int restart;    /* TORCHELASTIC_RESTART_COUNT, -1 when inferred */
    int world;      /* world size, 0 when not known */
    size_t line;    /* its line in the file, from 1 */
    int inferred;
} series_restart;

typedef struct {
    series_train *train;
    size_t ntrain, cap_train;
    series_test *test;
    size_t ntest, cap_test;
    series_restart *restarts;
    size_t nrestarts, cap_restarts;
    size_t lines;     /* whole lines read */
    int starts;       /* "start" lines */
    int done;         /* the last event is "done": the job's training is over */
    int stopped;      /* the last event is "stop" (a signal; it may be resumed) */
    int world;        /* the last "start" line's world size, 0 when not known */
    int tail_partial; /* the file ends in a line without its newline (still
                       * being written, or cut by a crash): left out */
} metrics_series;

/* Reads the text of a metrics file (name is for messages). 0, or -EINVAL
 * with "NAME:LINE: what is wrong" in err for the first line that is not
 * a metrics line; -ENOMEM. A series with no training steps is not an
 * error here (see metrics_series_check). Frees and refills s. */
int metrics_series_parse(const char *text, size_t len, const char *name, metrics_series *s,
                         char *err, size_t errlen);

/* The same for a file: -errno (-ENOENT ...) with a message naming it when
 * it cannot be read; -EINVAL or -EISDIR, at once, for a path that is not a
 * regular file ("it is a FIFO, not a regular file": never waited on). */
int metrics_series_read(const char *path, metrics_series *s, char *err, size_t errlen);

/* 0 when s has a training step to draw; -ENODATA with a message naming the
 * file (empty, or nothing but start lines yet) otherwise. */
int metrics_series_check(const metrics_series *s, const char *name, char *err, size_t errlen);

void metrics_series_free(metrics_series *s);

/* out[i] = the mean of the finite values of v within window/2 of i on
 * either side, and inside [i's segment]: seg (may be NULL: one segment)
 * gives each point's segment, and the window never crosses a change of
 * it. NAN where there is none. window is made odd (at least 1). */
void metrics_series_smooth(const double *v, const int *seg, size_t n, size_t window, double *out);

/* The moving mean's window for n training steps: about a twentieth of
 * them, odd, 1 to 201. */
size_t metrics_series_window(size_t n);

#endif

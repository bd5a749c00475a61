/* The training curve drawn by gnuplot (Debian's gnuplot-nox, its pngcairo
 * terminal): a script with the series inline as data blocks, fed to a
 * gnuplot child on a pipe, whose standard output is a temporary file
 * beside the target, renamed into place once gnuplot has exited 0. No
 * file name and no shell ever reaches gnuplot: the only text of the user's
 * in the script is the title, quoted. */
#ifndef DDPRUN_WORKER_PLOT_GNUPLOT_H
#define DDPRUN_WORKER_PLOT_GNUPLOT_H

#include <signal.h>
#include <stdio.h>

#include "worker/plot/metrics_series.h"

typedef struct {
    int width, height; /* pixels */
    const char *title; /* the page's title; control characters become spaces */
    const char *program; /* the gnuplot to run, looked up on PATH ("gnuplot") */
    /* NULL, or the caller's stop flag: the signal's number once one asked
     * to stop (its handler sets it, installed without SA_RESTART so that a
     * wait returns at once); looked at while gnuplot runs. */
    volatile sig_atomic_t *stop;
} plot_opts;

/* Writes the whole script for s (which has a training step) to out:
 * terminal, data blocks, two panels (loss above, accuracy below, against
 * the global step), restart markers. 0, or -EIO when out fails. */
int plot_write_script(const metrics_series *s, const plot_opts *o, FILE *out);

/* Draws s into path: all of it or nothing, never half a PNG. 0; or a
 * negative errno with a message in err naming what failed (the directory,
 * gnuplot missing, gnuplot's own error text, not a PNG); -EINTR when
 * *o->stop is set before gnuplot has finished (within a tenth of a second,
 * whatever gnuplot does: one that lingers after closing its pipes too):
 * gnuplot is killed and nothing is written. */
int plot_render(const metrics_series *s, const plot_opts *o, const char *path, char *err,
                size_t errlen);

#endif

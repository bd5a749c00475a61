/* `ddp-train plot METRICS`: the training curve of a --metrics file as a
 * PNG (metrics_series.h reads it, gnuplot.h draws it), once, or again
 * every --refresh seconds while the job writes it. */
#ifndef DDPRUN_WORKER_PLOT_PLOT_H
#define DDPRUN_WORKER_PLOT_PLOT_H

/* argv[0] is "plot". Returns the exit status: 0, 1 when the picture could
 * not be drawn (the reason printed), 2 for a bad command line. */
int plot_main(int argc, char **argv);

#endif

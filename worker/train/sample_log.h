/* --sample-log DIR: which samples each rank trains, step by step, so that
 * a test can count that an elastic job, resized and restarted, trains
 * every sample of every epoch exactly once. Each process appends to its
 * own file, DIR/samples.<rank>.<pid>.log, one line per step, written
 * before the step's gradients are all-reduced (a step kept by the job has
 * the line of every rank that trained it), in one write(2) with O_APPEND
 * (whole even when the process is killed next):
 *
 *   <wall ns> <epoch> <pos> <global step> <world> <rank> <i1>,<i2>,...
 *
 * pos: the samples of the epoch consumed before the step, by all ranks;
 * i: the indices, in the epoch's data set, of this rank's batch. A step
 * trained twice (lost with a failed attempt and redone) has several lines:
 * the newest attempt's are the ones the job kept (tests/chaos/chaos.py
 * reads them so). Off (nothing written) without the flag. */
#ifndef DDPRUN_WORKER_TRAIN_SAMPLE_LOG_H
#define DDPRUN_WORKER_TRAIN_SAMPLE_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int fd;   /* -1: off */
    char *line;
    size_t cap;
} sample_log;

/* Opens DIR/samples.<rank>.<pid>.log (DIR made if missing); dir "" or
 * NULL: off. 0, or -errno with err naming the file. */
int sample_log_open(sample_log *s, const char *dir, int rank, char *err, size_t errlen);
/* One step's line. 0 or -errno (a short write: the disk is full). */
int sample_log_step(sample_log *s, int epoch, int64_t pos, int64_t global_step, int world,
                    int rank, const int64_t *idx, int n);
void sample_log_close(sample_log *s);

#endif

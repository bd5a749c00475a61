/* Writes snapshots on a thread of its own, so that the step after the one
 * captured need not wait for the file: the trainer copies the state into
 * host memory (a memcpy on the CPU, a download on a GPU), hands the copy
 * over and goes on; the writer writes the checkpoint file (checksums,
 * temporary file, rename, retention) meanwhile. One write at a time: a
 * snapshot handed over while the last is still being written is refused
 * (-EBUSY), never queued, so memory stays bounded (two host copies). */
#ifndef DDPRUN_WORKER_TRAIN_SNAPSHOT_WRITER_H
#define DDPRUN_WORKER_TRAIN_SNAPSHOT_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "worker/train/checkpoint.h"

typedef struct snapshot_writer snapshot_writer;

/* A writer for snapshots of `bytes` of host copies, into dir, keeping the
 * newest `keep`. 0, or -errno. */
int snapshot_writer_start(const char *dir, int keep, size_t bytes, snapshot_writer **out);

/* The host copy to fill for the next snapshot (bytes long), or NULL while
 * the last one is still being written (skip this one). */
float *snapshot_writer_buffer(snapshot_writer *w);

/* Writes the filled buffer: its header (taken: freed by the writer), the
 * step, and the tensors (name, offset into the buffer in floats, bytes).
 * Returns at once. */
typedef struct {
    const char *name;
    size_t offset;
    uint64_t nbytes;
} snapshot_tensor;
void snapshot_writer_put(snapshot_writer *w, uint64_t step, char *header,
                         const snapshot_tensor *ts, int n);

/* The first failure so far, at once: 0, or -errno with its message. */
int snapshot_writer_error(snapshot_writer *w, char *err, size_t errlen);

/* The step of the newest file written so far (-1: none yet), and its path. */
int64_t snapshot_writer_written(snapshot_writer *w, char *path, size_t pathlen);

/* Waits for the write under way; the first failure so far (0, or -errno
 * with its message in err), which stops the writing of later ones. */
int snapshot_writer_flush(snapshot_writer *w, char *err, size_t errlen);

/* Flushes, ends the thread and frees all. */
void snapshot_writer_stop(snapshot_writer *w);

#endif

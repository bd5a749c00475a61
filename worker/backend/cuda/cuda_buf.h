/* A device buffer that only grows: the CUDA backend's scratch whose size
 * depends on the shapes that come along (cuDNN's and cuBLAS's workspaces,
 * a filter gradient in cuDNN's layout, partial sums). The files that
 * compute operations (cuda_conv.c, cuda_linear.c, cuda_ops.c) take it from
 * here, not from cuda_backend.c, which gathers their operations into its
 * table: so no two files of the backend depend on each other. */
#ifndef DDPRUN_WORKER_BACKEND_CUDA_CUDA_BUF_H
#define DDPRUN_WORKER_BACKEND_CUDA_CUDA_BUF_H

#include <stddef.h>

typedef struct {
    void *p;
    size_t bytes;
} cuda_buf;

typedef struct cuda_state cuda_state; /* cuda_internal.h */

/* Makes buf at least `bytes` long. Growing waits for st's stream first:
 * queued work may still read the old buffer (and a recording may hold
 * it: growing makes the recording stale). 0, or -errno with the failed
 * call logged. */
int cuda_buf_reserve(cuda_state *st, cuda_buf *buf, size_t bytes);
/* Frees buf's memory (none is fine) and leaves it empty. */
void cuda_buf_release(cuda_buf *buf);

#endif

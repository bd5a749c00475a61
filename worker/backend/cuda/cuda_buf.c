/* See cuda_buf.h. */
#include "worker/backend/cuda/cuda_buf.h"

#include "worker/backend/cuda/cuda_internal.h"

int cuda_buf_reserve(cuda_state *st, cuda_buf *buf, size_t bytes) {
    if (bytes <= buf->bytes) return 0;
    if (buf->p) {
        CUDA_CHECK(cudaStreamSynchronize(st->stream));
        CUDA_CHECK(cudaFree(buf->p));
        buf->p = NULL, buf->bytes = 0;
        if (st->graph) st->graph_stale = 1;
    }
    /* Half again as much, so a run of slightly growing shapes does not
     * reallocate each time. */
    size_t want = bytes + bytes / 2;
    CUDA_CHECK(cudaMalloc(&buf->p, want));
    buf->bytes = want;
    return 0;
}

void cuda_buf_release(cuda_buf *buf) {
    if (buf->p) cudaFree(buf->p);
    buf->p = NULL, buf->bytes = 0;
}

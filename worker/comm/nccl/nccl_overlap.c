/* See nccl_overlap.h. */
#include "worker/comm/nccl/nccl_overlap.h"

#include <errno.h>
#include <stdlib.h>

#include "common/log.h"
#include "worker/backend/cuda/cuda_check.h"

/* One timed all-reduce: the compute stream at its issue, NCCL's stream
 * before and after it. */
typedef struct {
    cudaEvent_t issue, start, end;
    uint64_t bytes;
} timed;

struct nccl_overlap {
    int step;   /* the sync whose step is timed */
    int syncs;  /* steps synced so far */
    int failed; /* a CUDA call failed: no more timing */
    timed *v;
    int n, made, cap; /* in use this step; with events made; allocated */
};

int nccl_overlap_create(int step, nccl_overlap **out) {
    *out = NULL;
    if (step <= 0) return 0;
    nccl_overlap *o = calloc(1, sizeof *o);
    if (!o) return -ENOMEM;
    o->step = step;
    *out = o;
    return 0;
}

int nccl_overlap_timing(const nccl_overlap *o) {
    return o && !o->failed && o->syncs + 1 == o->step;
}

/* The next entry, with its events made. */
static timed *next_entry(nccl_overlap *o) {
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 32;
        timed *v = realloc(o->v, (size_t)cap * sizeof *v);
        if (!v) return NULL;
        o->v = v, o->cap = cap;
    }
    timed *t = &o->v[o->n];
    if (o->n == o->made) {
        *t = (timed){0};
        if (CUDA_CHECK_RC(cudaEventCreate(&t->issue)) || CUDA_CHECK_RC(cudaEventCreate(&t->start)) ||
            CUDA_CHECK_RC(cudaEventCreate(&t->end)))
            return NULL;
        o->made++;
    }
    o->n++;
    return t;
}

void nccl_overlap_before(nccl_overlap *o, cudaStream_t compute, cudaStream_t nccl,
                         uint64_t bytes) {
    if (!nccl_overlap_timing(o)) return;
    timed *t = next_entry(o);
    if (!t || CUDA_CHECK_RC(cudaEventRecord(t->issue, compute)) ||
        CUDA_CHECK_RC(cudaEventRecord(t->start, nccl))) {
        o->failed = 1;
        return;
    }
    t->bytes = bytes;
}

void nccl_overlap_after(nccl_overlap *o, cudaStream_t nccl) {
    if (!nccl_overlap_timing(o) || o->n == 0) return;
    if (CUDA_CHECK_RC(cudaEventRecord(o->v[o->n - 1].end, nccl))) o->failed = 1;
}

/* Milliseconds from a to b (both completed). */
static int ms_between(cudaEvent_t a, cudaEvent_t b, double *ms) {
    float f = 0;
    if (CUDA_CHECK_RC(cudaEventElapsedTime(&f, a, b))) return -EIO;
    *ms = f;
    return 0;
}

static void report(nccl_overlap *o, int rank) {
    if (o->n == 0) return;
    cudaEvent_t t0 = o->v[0].issue;
    double end_of_backward, total = 0, overlapped = 0, mb = 0;
    int before = 0;
    if (ms_between(t0, o->v[o->n - 1].issue, &end_of_backward)) return;
    for (int i = 0; i < o->n; i++) {
        double s, e;
        if (ms_between(t0, o->v[i].start, &s) || ms_between(t0, o->v[i].end, &e)) return;
        total += e - s;
        if (s < end_of_backward) overlapped += (e < end_of_backward ? e : end_of_backward) - s;
        if (e <= end_of_backward) before++;
        mb += (double)o->v[i].bytes / 1e6;
    }
    if (rank != 0) return;
    log_info("overlap of step %d on the GPU: %d all-reduces (%.1f MB) took %.2f ms on NCCL's "
             "stream; %.2f ms of it (%.0f%%) ran before the compute stream reached the last "
             "one's issue, the end of backward, %.2f ms after the first's; %d of them had "
             "finished by then",
             o->step, o->n, mb, total, overlapped, total > 0 ? 100.0 * overlapped / total : 0.0,
             end_of_backward, before);
}

void nccl_overlap_synced(nccl_overlap *o, int rank) {
    if (!o) return;
    if (nccl_overlap_timing(o)) report(o, rank);
    o->syncs++;
    o->n = 0;
}

void nccl_overlap_destroy(nccl_overlap *o) {
    if (!o) return;
    for (int i = 0; i < o->made; i++) {
        (void)CUDA_CHECK_RC(cudaEventDestroy(o->v[i].issue));
        (void)CUDA_CHECK_RC(cudaEventDestroy(o->v[i].start));
        (void)CUDA_CHECK_RC(cudaEventDestroy(o->v[i].end));
    }
    free(o->v);
    free(o);
}

/* Parameters as the libraries read them, cached. Our weights are fp32 and
 * OIHW; cuDNN's NHWC convolutions want the filter in KRSC (OHWI) and in
 * the activations' type, and the bf16 linear layer wants a bf16 copy of
 * its weight for cuBLAS. Converting before every call would cost a kernel
 * per convolution per direction; instead each (pointer, shape) keeps its
 * converted copy, which stays valid until something writes the
 * parameters: normally the optimizer step, so the forward pass converts
 * each weight once per step and the backward pass reuses the copy.
 *
 * Validity is tracked by address range (cuda_internal.h says who reports
 * writes). A conversion is queued on the backend's stream like every
 * other operation, so it sees every write queued before it and every
 * reader queued after sees it; a copy being converted again is rewritten
 * in place, which is safe for the same reason (one stream, in order). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend/cuda/cuda_internal.h"

/* More entries than any model has weights; past it, everything is
 * dropped and converted again (a bound on device memory when a caller
 * keeps showing new pointers, as tests do). */
#define MAX_ENTRIES 1024

typedef struct {
    const float *w; /* the parameters, fp32 OIHW */
    int k, c, r, s;
    backend_dtype dt;
    int valid; /* 0 once w's memory has been written */
    void *copy; /* device memory: KRSC in dt */
} wc_entry;

struct cuda_weight_cache {
    wc_entry *e;
    int n, cap;
};

static size_t entry_count(const wc_entry *e) { return (size_t)e->k * e->c * e->r * e->s; }

int cuda_weights_init(cuda_state *st) {
    st->wcache = calloc(1, sizeof *st->wcache);
    return st->wcache ? 0 : -ENOMEM;
}

int cuda_weights_clear(cuda_state *st) {
    cuda_weight_cache *wc = st->wcache;
    int rc = 0;
    if (wc->n && st->graph) st->graph_stale = 1; /* it may convert into these copies */
    /* Every copy is freed, whatever happens to the others; the first
     * failure is the one returned. */
    for (int i = 0; i < wc->n; i++) {
        int e = CUDA_CHECK_RC(cudaFree(wc->e[i].copy));
        if (e && !rc) rc = e;
    }
    wc->n = 0;
    return rc;
}

void cuda_weights_destroy(cuda_state *st) {
    if (!st->wcache) return;
    cuda_weights_clear(st);
    free(st->wcache->e);
    free(st->wcache);
    st->wcache = NULL;
}

void cuda_weights_invalidate(cuda_state *st) {
    for (int i = 0; i < st->wcache->n; i++) st->wcache->e[i].valid = 0;
}

void cuda_weights_written(cuda_state *st, const void *p, size_t bytes) {
    cuda_weight_cache *wc = st->wcache;
    uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    for (int i = 0; i < wc->n; i++) {
        wc_entry *e = &wc->e[i];
        uintptr_t wlo = (uintptr_t)e->w, whi = wlo + entry_count(e) * sizeof(float);
        if (lo < whi && wlo < hi) e->valid = 0;
    }
}

/* A new entry's slot, growing the table (or emptying it at the bound). */
static int entry_new(cuda_state *st, wc_entry **out) {
    cuda_weight_cache *wc = st->wcache;
    if (wc->n == MAX_ENTRIES) {
        CUDA_CHECK(cudaStreamSynchronize(st->stream));
        int rc = cuda_weights_clear(st);
        if (rc) return rc;
    }
    if (wc->n == wc->cap) {
        int cap = wc->cap ? 2 * wc->cap : 64;
        wc_entry *e = realloc(wc->e, (size_t)cap * sizeof *e);
        if (!e) return -ENOMEM;
        wc->e = e, wc->cap = cap;
    }
    *out = &wc->e[wc->n];
    memset(*out, 0, sizeof **out);
    return 0;
}

static wc_entry *entry_find(cuda_state *st, const float *w, int k, int c, int r, int s) {
    cuda_weight_cache *wc = st->wcache;
    for (int i = 0; i < wc->n; i++) {
        wc_entry *e = &wc->e[i];
        if (e->w == w && e->k == k && e->c == c && e->r == r && e->s == s && e->dt == st->act)
            return e;
    }
    return NULL;
}

int cuda_weights_get(cuda_state *st, const float *w, int k, int c, int r, int s,
                     const void **out) {
    if (cuda_weights_native(st, c, r, s)) {
        *out = w;
        return 0;
    }
    wc_entry *e = entry_find(st, w, k, c, r, s);
    if (!e) {
        int rc = entry_new(st, &e);
        if (rc) return rc;
        *e = (wc_entry){.w = w, .k = k, .c = c, .r = r, .s = s, .dt = st->act};
        size_t bytes = entry_count(e) * (st->act == DTYPE_BF16 ? 2 : 4);
        CUDA_CHECK(cudaMalloc(&e->copy, bytes ? bytes : 256));
        st->wcache->n++; /* only now: the entry owns its copy */
    }
    if (!e->valid) {
        CUDA_CHECK(kern_weights_to_krsc(st->stream, st->act, k, c, r, s, w, e->copy));
        e->valid = 1;
    }
    *out = e->copy;
    return 0;
}

/* Convolution and the linear layer through oneDNN (the engine PyTorch uses
 * on CPUs). Activations stay NHWC; oneDNN picks the weights layout it runs
 * fastest with, and our OIHW weights are reordered into it (and gradients
 * back out of it), which costs little next to the convolution itself.
 * Primitives are built once per shape and kept in a small cache. */
#include <dnnl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "worker/backend/cpu/cpu_kernels.h"

#define MAX_CONVS 128

#define DNNL_CHECK(expr)                                                                \
    do {                                                                                \
        dnnl_status_t st_ = (expr);                                                     \
        if (st_ != dnnl_success) {                                                      \
            log_error("%s:%d: oneDNN: %s failed (status %d)", __FILE__, __LINE__, #expr, \
                      (int)st_);                                                        \
            return -EIO;                                                                \
        }                                                                               \
    } while (0)

/* One weights reorder between OIHW and a primitive's chosen layout. */
typedef struct {
    dnnl_primitive_t prim; /* NULL if the layouts are the same */
    dnnl_memory_t from, to;
    void *buf;             /* the reordered weights */
} wreorder;

typedef struct {
    conv_shape s;
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    dnnl_memory_t src, dst, diff_src, diff_dst, w_fwd, w_bwd, diff_w;
    wreorder to_fwd, to_bwd, from_diff; /* OIHW -> fwd, OIHW -> bwd data, diff -> OIHW */
} conv_entry;

typedef struct {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    conv_entry convs[MAX_CONVS];
    int nconvs;
    float *dx_sum;     /* conv_bwd with dx_add: oneDNN's dx, before it is added */
    size_t dx_sum_len; /* its floats */
} dnnl_state;

static dnnl_state *state(backend *b) { return b->impl; }

int cpu_dnnl_init(backend *b, char *err, size_t errlen) {
    dnnl_state *st = calloc(1, sizeof *st);
    if (!st) return -ENOMEM;
    if (dnnl_engine_create(&st->engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&st->stream, st->engine, dnnl_stream_default_flags) != dnnl_success) {
        snprintf(err, errlen, "cannot create a oneDNN CPU engine");
        free(st);
        return -EIO;
    }
    b->impl = st;
    return 0;
}

static void wreorder_free(wreorder *r) {
    if (r->prim) dnnl_primitive_destroy(r->prim);
    if (r->from) dnnl_memory_destroy(r->from);
    if (r->to) dnnl_memory_destroy(r->to);
    free(r->buf);
}

void cpu_dnnl_destroy(backend *b) {
    dnnl_state *st = state(b);
    if (!st) return;
    for (int i = 0; i < st->nconvs; i++) {
        conv_entry *e = &st->convs[i];
        dnnl_primitive_t prims[] = {e->fwd, e->bwd_data, e->bwd_weights};
        for (int k = 0; k < 3; k++)
            if (prims[k]) dnnl_primitive_destroy(prims[k]);
        dnnl_memory_t mems[] = {e->src, e->dst, e->diff_src, e->diff_dst, e->w_fwd, e->w_bwd,
                                e->diff_w};
        for (int k = 0; k < 7; k++)
            if (mems[k]) dnnl_memory_destroy(mems[k]);
        wreorder_free(&e->to_fwd);
        wreorder_free(&e->to_bwd);
        wreorder_free(&e->from_diff);
    }
    dnnl_stream_destroy(st->stream);
    dnnl_engine_destroy(st->engine);
    free(st->dx_sum);
    free(st);
    b->impl = NULL;
}

/* A reorder from `from_md` to `to_md`; with equal layouts none is needed
 * and the caller uses the source buffer directly. */
static int make_reorder(dnnl_state *st, const dnnl_memory_desc_t *from_md,
                        const dnnl_memory_desc_t *to_md, wreorder *r) {
    memset(r, 0, sizeof *r);
    if (dnnl_memory_desc_equal(from_md, to_md)) return 0;
    dnnl_primitive_desc_t pd;
    DNNL_CHECK(dnnl_reorder_primitive_desc_create(&pd, from_md, st->engine, to_md, st->engine,
                                                  NULL));
    dnnl_status_t s = dnnl_primitive_create(&r->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    DNNL_CHECK(s);
    r->buf = aligned_alloc(64, (dnnl_memory_desc_get_size(to_md) + 63) / 64 * 64);
    if (!r->buf) return -ENOMEM;
    DNNL_CHECK(dnnl_memory_create(&r->from, from_md, st->engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&r->to, to_md, st->engine, r->buf));
    return 0;
}

static int run_reorder(dnnl_state *st, wreorder *r, const void *from, void *to) {
    DNNL_CHECK(dnnl_memory_set_data_handle(r->from, (void *)from));
    DNNL_CHECK(dnnl_memory_set_data_handle(r->to, to));
    dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, r->from}, {DNNL_ARG_TO, r->to}};
    DNNL_CHECK(dnnl_primitive_execute(r->prim, st->stream, 2, args));
    return 0;
}

static int make_prim(dnnl_state *st, const void *desc, const_dnnl_primitive_desc_t hint,
                     dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim) {
    DNNL_CHECK(dnnl_primitive_desc_create(pd, desc, NULL, st->engine, hint));
    DNNL_CHECK(dnnl_primitive_create(prim, *pd));
    return 0;
}

static int mem(dnnl_state *st, const dnnl_memory_desc_t *md, dnnl_memory_t *m) {
    DNNL_CHECK(dnnl_memory_create(m, md, st->engine, DNNL_MEMORY_NONE));
    return 0;
}

/* Builds the three convolution primitives for one shape. */
static int conv_build(dnnl_state *st, const conv_shape *s, conv_entry *e) {
    memset(e, 0, sizeof *e);
    e->s = *s;
    dnnl_memory_desc_t src, dst, w_any, w_oihw;
    dnnl_dims_t sd = {s->n, s->c, s->h, s->w}, dd = {s->n, s->k, s->p, s->q},
                wd = {s->k, s->c, s->r, s->s};
    dnnl_dims_t strides = {s->stride, s->stride}, pad = {s->pad, s->pad};
    int padr_h = (s->p - 1) * s->stride + s->r - s->h - s->pad;
    int padr_w = (s->q - 1) * s->stride + s->s - s->w - s->pad;
    dnnl_dims_t padr = {padr_h, padr_w};
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_nhwc));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nhwc));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&w_oihw, 4, wd, dnnl_f32, dnnl_oihw));
    dnnl_convolution_desc_t fd, bdd, bwd;
    DNNL_CHECK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                  dnnl_convolution_direct, &src, &w_any, NULL,
                                                  &dst, strides, pad, padr));
    DNNL_CHECK(dnnl_convolution_backward_data_desc_init(&bdd, dnnl_convolution_direct, &src,
                                                        &w_any, &dst, strides, pad, padr));
    DNNL_CHECK(dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &src,
                                                           &w_any, NULL, &dst, strides, pad,
                                                           padr));
    dnnl_primitive_desc_t fpd = NULL, bdpd = NULL, bwpd = NULL;
    int rc = make_prim(st, &fd, NULL, &fpd, &e->fwd);
    if (rc == 0) rc = make_prim(st, &bdd, fpd, &bdpd, &e->bwd_data);
    if (rc == 0) rc = make_prim(st, &bwd, fpd, &bwpd, &e->bwd_weights);
    if (rc == 0) {
        const dnnl_memory_desc_t *wf = dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
        const dnnl_memory_desc_t *wb = dnnl_primitive_desc_query_md(bdpd, dnnl_query_weights_md, 0);
        const dnnl_memory_desc_t *dw = dnnl_primitive_desc_query_md(bwpd, dnnl_query_diff_weights_md, 0);
        rc = make_reorder(st, &w_oihw, wf, &e->to_fwd);
        if (rc == 0) rc = make_reorder(st, &w_oihw, wb, &e->to_bwd);
        if (rc == 0) rc = make_reorder(st, dw, &w_oihw, &e->from_diff);
        if (rc == 0) rc = mem(st, &src, &e->src);
        if (rc == 0) rc = mem(st, &dst, &e->dst);
        if (rc == 0) rc = mem(st, &src, &e->diff_src);
        if (rc == 0) rc = mem(st, &dst, &e->diff_dst);
        if (rc == 0) rc = mem(st, wf, &e->w_fwd);
        if (rc == 0) rc = mem(st, wb, &e->w_bwd);
        if (rc == 0) rc = mem(st, dw, &e->diff_w);
        if (rc == 0 && e->from_diff.prim) {
            /* The gradient lands in the primitive's layout first. */
            free(e->from_diff.buf);
            e->from_diff.buf = aligned_alloc(64, (dnnl_memory_desc_get_size(dw) + 63) / 64 * 64);
            if (!e->from_diff.buf) rc = -ENOMEM;
        }
    }
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (bdpd) dnnl_primitive_desc_destroy(bdpd);
    if (bwpd) dnnl_primitive_desc_destroy(bwpd);
    return rc;
}

static conv_entry *conv_get(backend *b, const conv_shape *s) {
    dnnl_state *st = state(b);
    for (int i = 0; i < st->nconvs; i++)
        if (memcmp(&st->convs[i].s, s, sizeof *s) == 0) return &st->convs[i];
    if (st->nconvs == MAX_CONVS) {
        log_error("oneDNN: more than %d convolution shapes", MAX_CONVS);
        return NULL;
    }
    conv_entry *e = &st->convs[st->nconvs];
    if (conv_build(st, s, e) != 0) return NULL;
    st->nconvs++;
    return e;
}

static int set(dnnl_memory_t m, const void *p) {
    DNNL_CHECK(dnnl_memory_set_data_handle(m, (void *)p));
    return 0;
}

int cpu_conv_fwd_dnnl(backend *b, const conv_shape *s, const void *x_, const float *w, void *y_) {
    const float *x = x_;
    float *y = y_;
    dnnl_state *st = state(b);
    conv_entry *e = conv_get(b, s);
    if (!e) return -EIO;
    const void *wf = w;
    if (e->to_fwd.prim) {
        int rc = run_reorder(st, &e->to_fwd, w, e->to_fwd.buf);
        if (rc) return rc;
        wf = e->to_fwd.buf;
    }
    if (set(e->src, x) || set(e->w_fwd, wf) || set(e->dst, y)) return -EIO;
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_WEIGHTS, e->w_fwd},
                              {DNNL_ARG_DST, e->dst}};
    DNNL_CHECK(dnnl_primitive_execute(e->fwd, st->stream, 3, args));
    DNNL_CHECK(dnnl_stream_wait(st->stream));
    return 0;
}

/* oneDNN's backward data has no sum post-op: with dx_add its result goes
 * to dx_sum first, then adds into dx. */
static float *dx_sum(dnnl_state *st, size_t n) {
    if (n > st->dx_sum_len) {
        float *p = realloc(st->dx_sum, n * sizeof *p);
        if (!p) return NULL;
        st->dx_sum = p, st->dx_sum_len = n;
    }
    return st->dx_sum;
}

int cpu_conv_bwd_dnnl(backend *b, const conv_shape *s, const void *x_, const float *w,
                      const void *dy_, void *dx_, int dx_add, float *dw) {
    const float *x = x_;
    const float *dy = dy_;
    float *dx = dx_, *into = dx_; /* where oneDNN writes dx */
    size_t nx = (size_t)s->n * s->h * s->w * s->c;
    dnnl_state *st = state(b);
    conv_entry *e = conv_get(b, s);
    if (!e) return -EIO;
    int rc;
    if (dx && dx_add && !(into = dx_sum(st, nx))) return -ENOMEM;
    if (dx) {
        const void *wb = w;
        if (e->to_bwd.prim) {
            if ((rc = run_reorder(st, &e->to_bwd, w, e->to_bwd.buf))) return rc;
            wb = e->to_bwd.buf;
        }
        if (set(e->diff_dst, dy) || set(e->w_bwd, wb) || set(e->diff_src, into)) return -EIO;
        dnnl_exec_arg_t args[] = {{DNNL_ARG_DIFF_DST, e->diff_dst}, {DNNL_ARG_WEIGHTS, e->w_bwd},
                                  {DNNL_ARG_DIFF_SRC, e->diff_src}};
        DNNL_CHECK(dnnl_primitive_execute(e->bwd_data, st->stream, 3, args));
    }
    void *dwp = e->from_diff.prim ? e->from_diff.buf : dw;
    if (set(e->src, x) || set(e->diff_dst, dy) || set(e->diff_w, dwp)) return -EIO;
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_DIFF_DST, e->diff_dst},
                              {DNNL_ARG_DIFF_WEIGHTS, e->diff_w}};
    DNNL_CHECK(dnnl_primitive_execute(e->bwd_weights, st->stream, 3, args));
    if (e->from_diff.prim && (rc = run_reorder(st, &e->from_diff, dwp, dw))) return rc;
    DNNL_CHECK(dnnl_stream_wait(st->stream));
    if (dx && dx_add) cpu_accumulate(b, nx, into, dx);
    return 0;
}

/* The linear layer through oneDNN's sgemm (row-major). */
int cpu_linear_fwd_dnnl(backend *b, int n, int in, int out, const void *x_, const float *w,
                        const float *bias, void *y_) {
    const float *x = x_;
    float *y = y_;
    (void)b;
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) y[(size_t)i * out + o] = bias ? bias[o] : 0;
    DNNL_CHECK(dnnl_sgemm('N', 'T', n, out, in, 1.0f, x, in, w, in, 1.0f, y, out));
    return 0;
}

int cpu_linear_bwd_dnnl(backend *b, int n, int in, int out, const void *x_, const float *w,
                        const void *dy_, void *dx_, float *dw, float *dbias) {
    const float *x = x_;
    const float *dy = dy_;
    float *dx = dx_;
    (void)b;
    if (dx) DNNL_CHECK(dnnl_sgemm('N', 'N', n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in));
    DNNL_CHECK(dnnl_sgemm('T', 'N', out, in, n, 1.0f, dy, out, x, in, 0.0f, dw, in));
    if (dbias)
        for (int o = 0; o < out; o++) {
            float acc = 0;
            for (int i = 0; i < n; i++) acc += dy[(size_t)i * out + o];
            dbias[o] = acc;
        }
    return 0;
}

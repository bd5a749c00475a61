/* model-dump: runs one training step of a model on a fixed batch and
 * writes everything a reference implementation needs to repeat it, for
 * tests/compat/torch_resnet_grads.py to compare with PyTorch:
 *
 *   model-dump MODEL C H W CLASSES BATCH OUTDIR
 *
 * OUTDIR/meta.json   model, input shape, batch, loss, parameter names,
 *                    shapes and offsets (torchvision's names and order)
 * OUTDIR/params.f32  all parameters, little-endian float32, in that order
 * OUTDIR/input.f32   the batch, NCHW float32
 * OUTDIR/labels.i32  its labels, int32
 * OUTDIR/grads.f32   the gradients after backward, like params.f32
 * OUTDIR/relu.u8     each ReLU's decisions in forward order (1: the output is
 *                    positive), NCHW bytes, one block per ReLU (meta.json's
 *                    "relus" gives their shapes): where a pre-activation is
 *                    within rounding of zero, the reference takes ours
 *
 * DUMP_REFERENCE_KERNELS=1 dumps the plain-C reference kernels' step
 * instead of oneDNN's. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "worker/backend/backend.h"
#include "worker/model/arch.h"

static int write_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "model-dump: cannot write %s\n", path);
        return 1;
    }
    return fclose(f) != 0;
}

/* The forward pass's ReLU decisions (output > 0), NCHW, in op order, and
 * their shapes into relus. On the CPU backend activations are host fp32. */
static int write_relus(const char *dir, const model *m, int n, json_t *relus) {
    size_t total = 0;
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].kind == OP_RELU || m->ops[i].relu) {
            const model_act *a = &m->acts[m->ops[i].out];
            total += (size_t)n * a->h * a->w * a->c;
        }
    uint8_t *mask = malloc(total ? total : 1), *at = mask;
    if (!mask) return 1;
    for (int i = 0; i < m->nops; i++) {
        if (!(m->ops[i].kind == OP_RELU || m->ops[i].relu)) continue;
        const model_act *a = &m->acts[m->ops[i].out];
        const float *y = a->data;
        int hw = a->h * a->w;
        for (int s = 0; s < n; s++)
            for (int ch = 0; ch < a->c; ch++)
                for (int p = 0; p < hw; p++)
                    *at++ = y[((size_t)s * hw + p) * a->c + ch] > 0;
        json_array_append_new(relus, json_pack("[i,i,i,i]", n, a->c, a->h, a->w));
    }
    int rc = write_file(dir, "relu.u8", mask, total);
    free(mask);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: model-dump MODEL C H W CLASSES BATCH OUTDIR\n");
        return 2;
    }
    int c = atoi(argv[2]), h = atoi(argv[3]), w = atoi(argv[4]), k = atoi(argv[5]), n = atoi(argv[6]);
    const char *dir = argv[7];
    backend *be;
    model *m;
    char err[512];
    if (cpu_backend_create(getenv("DUMP_REFERENCE_KERNELS") != NULL, 0, &be, err, sizeof err) ||
        arch_build(be, &(model_spec){argv[1], c, h, w, k, 7, 0, 0}, &m, err, sizeof err)) {
        fprintf(stderr, "model-dump: %s\n", err);
        return 1;
    }
    size_t per = (size_t)c * h * w;
    float *x = malloc(n * per * sizeof *x), *nhwc = malloc(n * per * sizeof *x);
    int32_t *y = malloc(n * sizeof *y);
    rng_t r;
    rng_seed(&r, 11, 22, 33);
    for (size_t i = 0; i < n * per; i++) x[i] = rng_normal(&r);
    for (int i = 0; i < n; i++) y[i] = (int32_t)rng_below(&r, (uint64_t)k);
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < h * w; p++) nhwc[((size_t)i * h * w + p) * c + ch] = x[((size_t)i * c + ch) * h * w + p];
    int rc = write_file(dir, "params.f32", m->param, m->nparam * 4);
    void *logits;
    double loss = 0;
    int correct;
    json_t *relus = json_array();
    if (rc == 0) rc = model_set_labels(m, y, n) || model_forward(m, nhwc, n, 1, &logits);
    if (rc == 0) rc = write_relus(dir, m, n, relus);
    if (rc == 0) rc = model_backward(m, n, 0);
    if (rc == 0) rc = model_read_loss(m, &loss, &correct);
    if (rc == 0)
        rc = write_file(dir, "input.f32", x, n * per * 4) || write_file(dir, "labels.i32", y, n * 4) ||
             write_file(dir, "grads.f32", m->grad, m->nparam * 4);
    json_t *params = json_array();
    for (int i = 0; i < m->nparams; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < m->params[i].ndim; d++) json_array_append_new(shape, json_integer(m->params[i].shape[d]));
        json_array_append_new(params, json_pack("{s:s, s:I, s:I, s:o}", "name", m->params[i].name,
                                                "offset", (json_int_t)m->params[i].offset, "count",
                                                (json_int_t)m->params[i].count, "shape", shape));
    }
    json_t *meta = json_pack("{s:s, s:[i,i,i], s:i, s:i, s:f, s:o, s:o}", "model", argv[1],
                             "input_shape", c, h, w, "classes", k, "batch", n, "loss", loss / n,
                             "params", params, "relus", relus);
    char path[4096];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    if (rc == 0) rc = json_dump_file(meta, path, JSON_INDENT(1));
    json_decref(meta);
    model_destroy(m);
    be->ops->destroy(be);
    free(x), free(nhwc), free(y);
    return rc ? 1 : 0;
}

/* The input pipeline (worker/train/loader.c): every batch it hands out is
 * the one the sampler and the data set give for that step, converted to
 * NHWC in the backend's type, whatever the thread count; across an
 * epoch's end; after a jump (a resume); it builds ahead while the caller
 * is away; and a sample that cannot be drawn fails its batch, naming the
 * batch's first such sample whatever the threads. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/unit/test.h"
#include "worker/backend/bf16.h"
#include "worker/data/ds_format.h"
#include "worker/data/sampler.h"
#include "worker/train/loader.h"

enum { C = 3, H = 5, W = 7, N = 50, BATCH = 8, WORLD = 2, RANK = 1, SEED = 9 };

static dataset *open_set(void) {
    dataset_opts o = {.name = "synthetic", .train = 1, .c = C, .h = H, .w = W, .classes = 10,
                      .size = N, .seed = 4};
    dataset *d;
    char err[256];
    if (dataset_open(&o, &d, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    return d;
}

static backend *open_backend(int bf16) {
    backend *be, *b16;
    char err[256];
    if (cpu_backend_create(0, 1, &be, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    if (!bf16) return be;
    CHECK_EQ(cpu_bf16_backend_create(be, &b16), 0);
    return b16;
}

/* What the step at (epoch, pos) must hold, built the plain way: the
 * sampler's indices, dataset_batch, an index-by-index transpose. */
static void expected(const dataset *d, backend_dtype dt, int epoch, int64_t pos, void *x,
                     int32_t *y) {
    int64_t order[N], idx[BATCH];
    float nchw[BATCH * C * H * W];
    sampler_epoch_order(N, SEED, epoch, 1, order);
    sampler_rank_batch(order, N, pos, WORLD, RANK, BATCH, idx);
    char err[256];
    if (dataset_batch(d, idx, BATCH, 1, SEED, epoch, nchw, y, err, sizeof err))
        test_fail(__FILE__, __LINE__, "%s", err);
    for (int i = 0; i < BATCH; i++)
        for (int ch = 0; ch < C; ch++)
            for (int p = 0; p < H * W; p++) {
                float v = nchw[(i * C + ch) * H * W + p];
                size_t at = ((size_t)i * H * W + p) * C + ch;
                if (dt == DTYPE_BF16) ((uint16_t *)x)[at] = bf16_from_float(v);
                else ((float *)x)[at] = v;
            }
}

static void check_step(loader *l, const dataset *d, backend *be, int epoch, int64_t pos) {
    static char want[BATCH * C * H * W * 4];
    int32_t ywant[BATCH];
    const void *x;
    const int32_t *y;
    char err[256];
    if (loader_get(l, epoch, pos, &x, &y, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    expected(d, be->act, epoch, pos, want, ywant);
    size_t bytes = (size_t)BATCH * C * H * W * backend_act_size(be);
    if (memcmp(x, want, bytes) != 0 || memcmp(y, ywant, sizeof ywant) != 0)
        test_fail(__FILE__, __LINE__, "the batch at epoch %d position %lld differs", epoch,
                  (long long)pos);
}

static loader *make(const dataset *d, backend *be, int threads) {
    loader_opts o = {.ds = d, .batch = BATCH, .world = WORLD, .rank = RANK, .seed = SEED,
                     .augment = 1, .epochs = 3, .threads = threads, .depth = 2, .be = be};
    loader *l;
    char err[256];
    if (loader_create(&o, &l, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    return l;
}

/* Every step of two epochs and the first of a third (positions wrap past
 * N = 50: 16 samples a step), for 0, 1 and 3 threads, fp32 and bf16. */
TEST(loader_batches_are_the_samplers) {
    dataset *d = open_set();
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        backend *be = open_backend(bf16);
        int counts[] = {0, 1, 3};
        for (int k = 0; k < 3; k++) {
            loader *l = make(d, be, counts[k]);
            for (int epoch = 0; epoch < 2; epoch++)
                for (int64_t pos = 0; pos < N; pos += BATCH * WORLD) check_step(l, d, be, epoch, pos);
            check_step(l, d, be, 2, 0);
            loader_destroy(l);
        }
        be->ops->destroy(be);
    }
    dataset_close(d);
}

/* A resume asks for a step out of the predicted order: the batches built
 * ahead are dropped, and the step asked for comes, then its successors. */
TEST(loader_jumps_to_the_step_asked_for) {
    dataset *d = open_set();
    backend *be = open_backend(0);
    loader *l = make(d, be, 2);
    check_step(l, d, be, 0, 0);
    check_step(l, d, be, 1, 32);
    check_step(l, d, be, 1, 48);
    check_step(l, d, be, 2, 0);
    check_step(l, d, be, 0, 16); /* backwards too */
    check_step(l, d, be, 0, 32);
    loader_destroy(l);
    be->ops->destroy(be);
    dataset_close(d);
}

/* With a pool the next two steps are built while the caller is away (a
 * step running): after a pause far longer than building a batch of these
 * takes (microseconds), both are found ready. */
TEST(loader_builds_ahead) {
    dataset *d = open_set();
    backend *be = open_backend(0);
    loader *l = make(d, be, 2);
    int64_t gets, ready;
    check_step(l, d, be, 0, 0);
    usleep(300 * 1000);
    check_step(l, d, be, 0, 16);
    check_step(l, d, be, 0, 32);
    loader_stats(l, &gets, &ready);
    CHECK_EQ(gets, 3);
    CHECK_EQ(ready, 2);
    loader_destroy(l);
    /* Without a pool nothing is built ahead. */
    l = make(d, be, 0);
    check_step(l, d, be, 0, 0);
    usleep(100 * 1000);
    check_step(l, d, be, 0, 16);
    loader_stats(l, &gets, &ready);
    CHECK_EQ(ready, 0);
    loader_destroy(l);
    be->ops->destroy(be);
    dataset_close(d);
}

/* A format whose samples of index 3 mod 5 fail, as files gone would make
 * one that reads a file per sample fail; the others are zeros. */
static int flaky_open(const dataset_format *f, const dataset_opts *o, void **state,
                      ds_info *info, char *err, size_t errlen) {
    (void)f, (void)o, (void)err, (void)errlen;
    *state = NULL;
    *info = (ds_info){.n = N, .c = C, .h = H, .w = W, .classes = 10, .pixels = DS_FLOATS};
    return 0;
}

static int flaky_sample(const void *state, int64_t index, const ds_draw *dr, void *px,
                        int32_t *label, char *err, size_t errlen) {
    (void)state, (void)dr;
    if (index % 5 == 3) {
        snprintf(err, errlen, "sample %lld is gone", (long long)index);
        return -ENOENT;
    }
    memset(px, 0, C * H * W * sizeof(float));
    *label = 0;
    return 0;
}

static void flaky_close(void *state) { (void)state; }

TEST(loader_reports_a_batchs_first_failed_sample) {
    static const dataset_format flaky = {
        .name = "flaky", .open = flaky_open, .sample = flaky_sample, .close = flaky_close};
    dataset *d;
    char err[256], want[256];
    CHECK_EQ(ds_open_format(&flaky, &(dataset_opts){.name = "flaky"}, &d, err, sizeof err), 0);
    backend *be = open_backend(0);
    int counts[] = {0, 1, 3}, failed = 0, whole = 0;
    for (int k = 0; k < 3; k++) {
        loader *l = make(d, be, counts[k]);
        for (int epoch = 0; epoch < 2; epoch++)
            for (int64_t pos = 0; pos < N; pos += BATCH * WORLD) {
                int64_t order[N], idx[BATCH];
                sampler_epoch_order(N, SEED, epoch, 1, order);
                sampler_rank_batch(order, N, pos, WORLD, RANK, BATCH, idx);
                int first = 0;
                while (first < BATCH && idx[first] % 5 != 3) first++;
                const void *x;
                const int32_t *y;
                int rc = loader_get(l, epoch, pos, &x, &y, err, sizeof err);
                CHECK_EQ(rc, first < BATCH ? -ENOENT : 0);
                failed += first < BATCH, whole += first == BATCH;
                if (first == BATCH) continue;
                snprintf(want, sizeof want, "sample %lld is gone", (long long)idx[first]);
                CHECK_STR(err, want);
            }
        loader_destroy(l);
    }
    CHECK(failed > 0 && whole > 0); /* both kinds of batch were seen */
    be->ops->destroy(be);
    dataset_close(d);
}

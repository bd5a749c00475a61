/* What nvJPEG's batched decode waits for when other work runs on the GPU.
 *
 * On an H200, --decode gpu's batch of 256 JPEGs took about 18 ms on an
 * idle GPU and 48-52 ms beside a training step, and the host call itself
 * returned only then (docs/results.md). Either the decode's own kernels
 * wait for SMs that the step's kernels hold (then a stream of higher
 * priority helps), or the call waits for the whole device (then work on
 * a single SM holds it up as long as work on all of them). This program
 * tells them apart: it decodes the files given as one batch, with
 * nvJPEG's hardware decoder where the GPU has one, on a GPU that is
 *   idle;
 *   busy on every SM (kernels of a ~0.5 ms spin, back to back, ~60 ms),
 *     the decode on a stream of normal priority, then of the highest;
 *   busy on one SM (one block spinning ~60 ms);
 *   busy on half of each SM's threads (one block of 1024 per SM),
 * and prints, per case, the host call's time, the time until the decode
 * was done (its event), its time on its stream, and when the busy work
 * ended; the median of REPS runs. Each case runs with nvJPEG set up in
 * several ways (SETUPS: the letters of those to run, a the first): as
 * ddp-train sets it up; with its batch buffers
 * allocated ahead (nvjpegDecodeBatchedPreAllocate); with allocators that
 * keep what nvJPEG frees for its next request (no cudaFree, which waits
 * for the whole device); with both; with the YUV planes out, or the
 * planes as coded, instead of interleaved RGB; nvJPEG's CUDA decoder
 * instead of the hardware one; and only a centred box of each image
 * decoded, half or a quarter of its area (nvjpegDecodeBatchedEx's ROI);
 * with nvJPEG's memory pools; with its hardware decoding not pipelined.
 *
 *   nvjpeg-beside FILE...      (REPS in the environment, 5 by default) */
#include <cuda_runtime.h>
#include <nvjpeg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "nvjpeg-beside: %s: %s\n", #x, cudaGetErrorString(e_));        \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define NJ(x)                                                                              \
    do {                                                                                   \
        nvjpegStatus_t s_ = (x);                                                           \
        if (s_ != NVJPEG_STATUS_SUCCESS) {                                                 \
            fprintf(stderr, "nvjpeg-beside: %s: nvJPEG status %d\n", #x, (int)s_);         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

__global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    unsigned char *p = (unsigned char *)malloc(*len);
    if (!p || fread(p, 1, *len, f) != *len) {
        fprintf(stderr, "nvjpeg-beside: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    return p;
}

enum busy { IDLE, ALL_SMS, ONE_SM, HALF_SMS };

/* Allocators that keep what nvJPEG frees, for its next request of at
 * most that size: memory is never given back while the program runs. */
typedef struct {
    void *p[256];
    size_t size[256];
    int n;
    int pinned;
} keeper;

static int keep_malloc(void *ctx, void **ptr, size_t size, cudaStream_t st) {
    keeper *k = (keeper *)ctx;
    (void)st;
    for (int i = 0; i < k->n; i++)
        if (k->size[i] >= size) {
            *ptr = k->p[i];
            k->p[i] = k->p[--k->n], k->size[i] = k->size[k->n];
            return 0;
        }
    return k->pinned ? (int)cudaHostAlloc(ptr, size, cudaHostAllocDefault)
                     : (int)cudaMalloc(ptr, size);
}

static int keep_free(void *ctx, void *ptr, size_t size, cudaStream_t st) {
    keeper *k = (keeper *)ctx;
    (void)st;
    if (k->n == 256) return k->pinned ? (int)cudaFreeHost(ptr) : (int)cudaFree(ptr);
    k->p[k->n] = ptr, k->size[k->n++] = size;
    return 0;
}

static keeper dev_keep, pinned_keep = {{0}, {0}, 0, 1};

enum setup { AS_TRAINER, PREALLOCATED, KEEPING, BOTH, YUV, UNCHANGED, CUDA_DECODER, ROI_HALF,
             ROI_QUARTER, POOLS, NO_PIPELINE, POOLS_KEEPING, SETUPS };
static const char *setup_names[] = {"as ddp-train", "preallocated", "keeping allocators",
                                    "preallocated, keeping allocators",
                                    "YUV planes out, not RGB", "planes as coded out",
                                    "CUDA decoder", "the centre half of each image (ROI)",
                                    "the centre quarter of each image (ROI)",
                                    "nvJPEG's memory pools", "hardware decoding not pipelined",
                                    "nvJPEG's memory pools, keeping allocators"};

static unsigned flags_of(enum setup how) {
    unsigned f = NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION; /* as ddp-train */
    if (how == POOLS || how == POOLS_KEEPING) f |= NVJPEG_FLAGS_ENABLE_MEMORY_POOLS;
    if (how == NO_PIPELINE) f |= NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE;
    return f;
}

static nvjpegOutputFormat_t format_of(enum setup how) {
    return how == YUV ? NVJPEG_OUTPUT_YUV : how == UNCHANGED ? NVJPEG_OUTPUT_UNCHANGED
                                                             : NVJPEG_OUTPUT_RGBI;
}

/* A handle and a batch state set up one way; NULL where it cannot be. */
static nvjpegHandle_t open_setup(enum setup how, int n, nvjpegJpegState_t *state) {
    nvjpegHandle_t h = NULL;
    nvjpegBackend_t be = how == CUDA_DECODER ? NVJPEG_BACKEND_DEFAULT : NVJPEG_BACKEND_HARDWARE;
    nvjpegDevAllocatorV2_t dev = {keep_malloc, keep_free, &dev_keep};
    nvjpegPinnedAllocatorV2_t pin = {keep_malloc, keep_free, &pinned_keep};
    int keep = how == KEEPING || how == BOTH || how == POOLS_KEEPING;
    nvjpegStatus_t rc = keep ? nvjpegCreateExV2(be, &dev, &pin, flags_of(how), &h)
                             : nvjpegCreateEx(be, NULL, NULL, flags_of(how), &h);
    if (rc != NVJPEG_STATUS_SUCCESS) {
        printf("%s: nvJPEG cannot be created so (status %d)\n", setup_names[how], (int)rc);
        return NULL;
    }
    NJ(nvjpegJpegStateCreate(h, state));
    NJ(nvjpegDecodeBatchedInitialize(h, *state, n, 1, format_of(how)));
    if (how == PREALLOCATED || how == BOTH) {
        rc = nvjpegDecodeBatchedPreAllocate(h, *state, n, 512, 512, NVJPEG_CSS_420,
                                            NVJPEG_OUTPUT_RGBI);
        if (rc != NVJPEG_STATUS_SUCCESS)
            printf("%s: nvjpegDecodeBatchedPreAllocate: status %d\n", setup_names[how], (int)rc);
    }
    return h;
}

/* BUSY_ALONE=S: this process only keeps every SM busy for S seconds, with
 * kernels of a 0.5 ms spin, and says how long each took on average: run
 * beside a decoding process, the difference is what decoding in another
 * process costs the work it shares the GPU with. */
static int busy_alone(double seconds) {
    int sms = 0, khz = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    double t0 = now_ms();
    long k = 0;
    while (now_ms() - t0 < seconds * 1e3) {
        for (int i = 0; i < 100; i++, k++) spin<<<sms * 2, 1024, 0, st>>>((long long)khz / 2);
        CK(cudaStreamSynchronize(st));
    }
    printf("busy alone: %ld kernels of a 0.5 ms spin on every SM, %.3f ms each\n", k,
           (now_ms() - t0) / (double)k);
    return 0;
}

int main(int argc, char **argv) {
    if (getenv("BUSY_ALONE")) return busy_alone(atof(getenv("BUSY_ALONE")));
    int n = argc - 1, reps = getenv("REPS") ? atoi(getenv("REPS")) : 5;
    const char *only = getenv("SETUPS"); /* e.g. "ac": the setups to run, a the first */
    if (n < 1 || reps < 1 || reps > 64) {
        fprintf(stderr, "usage: nvjpeg-beside FILE... (REPS 1-64)\n");
        return 2;
    }
    const unsigned char **data = (const unsigned char **)calloc(n, sizeof *data);
    size_t *len = (size_t *)calloc(n, sizeof *len);
    nvjpegImage_t *rgb = (nvjpegImage_t *)calloc(n, sizeof *rgb);
    nvjpegImage_t *planes = (nvjpegImage_t *)calloc(n, sizeof *planes);
    for (int i = 0; i < n; i++) data[i] = slurp(argv[i + 1], &len[i]);

    int sms = 0, khz = 0, least = 0, greatest = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t normal, high, busy;
    CK(cudaStreamCreateWithPriority(&normal, cudaStreamNonBlocking, least));
    CK(cudaStreamCreateWithPriority(&high, cudaStreamNonBlocking, greatest));
    CK(cudaStreamCreateWithPriority(&busy, cudaStreamNonBlocking, least));
    cudaEvent_t begun, decoded, busy_end;
    CK(cudaEventCreate(&begun));
    CK(cudaEventCreate(&decoded));
    CK(cudaEventCreate(&busy_end));
    printf("nvjpeg-beside: %d JPEGs, %d SMs at %d MHz, stream priorities %d (normal) to %d\n", n,
           sms, khz / 1000, least, greatest);
    struct {
        const char *name;
        enum busy busy;
        cudaStream_t st;
    } cases[] = {{"idle", IDLE, normal},
                 {"every SM busy, normal priority", ALL_SMS, normal},
                 {"every SM busy, highest priority", ALL_SMS, high},
                 {"one SM busy, normal priority", ONE_SM, normal},
                 {"half of each SM busy", HALF_SMS, normal}};
    const long long slice = (long long)khz / 2; /* 0.5 ms of cycles */
    for (int how = 0; how < SETUPS; how++) {
        if (only && !strchr(only, 'a' + how)) continue;
        nvjpegJpegState_t state;
        nvjpegHandle_t h = open_setup((enum setup)how, n, &state);
        if (!h) continue;
        int planar = format_of((enum setup)how) != NVJPEG_OUTPUT_RGBI;
        nvjpegImage_t *dest = planar ? planes : rgb;
        nvjpegDecodeParams_t *roi = NULL; /* ROI_*: each image's box, centred */
        if (how == ROI_HALF || how == ROI_QUARTER) {
            roi = (nvjpegDecodeParams_t *)calloc(n, sizeof *roi);
            dest = (nvjpegImage_t *)calloc(n, sizeof *dest);
        }
        for (int i = 0; i < n; i++) {
            if (dest[i].channel[0]) continue;
            int nc, w[NVJPEG_MAX_COMPONENT], ht[NVJPEG_MAX_COMPONENT];
            nvjpegChromaSubsampling_t sub;
            NJ(nvjpegGetImageInfo(h, data[i], len[i], &nc, &sub, w, ht));
            if (roi) {
                double side = how == ROI_HALF ? 0.7071 : 0.5;
                int rw = (int)(w[0] * side), rh = (int)(ht[0] * side);
                NJ(nvjpegDecodeParamsCreate(h, &roi[i]));
                NJ(nvjpegDecodeParamsSetOutputFormat(roi[i], NVJPEG_OUTPUT_RGBI));
                NJ(nvjpegDecodeParamsSetROI(roi[i], (w[0] - rw) / 2, (ht[0] - rh) / 2, rw, rh));
                w[0] = rw, ht[0] = rh;
            }
            for (int c = 0; c < (planar ? nc : 1); c++) {
                dest[i].pitch[c] = (size_t)w[c] * (planar ? 1 : 3);
                CK(cudaMalloc((void **)&dest[i].channel[c], dest[i].pitch[c] * ht[c]));
            }
        }
        printf("\n%s\n%-34s %10s %10s %10s %10s  (ms, median of %d)\n", setup_names[how], "case",
               "call", "decoded", "on stream", "busy end", reps);
        for (int warm = 0; warm < 2; warm++) { /* nvJPEG's first batches set up */
            NJ(roi ? nvjpegDecodeBatchedEx(h, state, data, len, dest, roi, normal)
                   : nvjpegDecodeBatched(h, state, data, len, dest, normal));
            CK(cudaDeviceSynchronize());
        }
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            double call[64], done[64], stream[64], bend[64];
            for (int r = 0; r < reps; r++) {
                CK(cudaDeviceSynchronize());
                double t0 = now_ms();
                if (cases[c].busy == ALL_SMS)
                    for (int k = 0; k < 120; k++) spin<<<sms * 2, 1024, 0, busy>>>(slice);
                else if (cases[c].busy == ONE_SM)
                    spin<<<1, 32, 0, busy>>>(slice * 120);
                else if (cases[c].busy == HALF_SMS) /* one block of 1024 threads of 2048 */
                    for (int k = 0; k < 120; k++) spin<<<sms, 1024, 0, busy>>>(slice);
                CK(cudaGetLastError());
                CK(cudaEventRecord(busy_end, busy));
                double t1 = now_ms();
                CK(cudaEventRecord(begun, cases[c].st));
                NJ(roi ? nvjpegDecodeBatchedEx(h, state, data, len, dest, roi, cases[c].st)
                       : nvjpegDecodeBatched(h, state, data, len, dest, cases[c].st));
                call[r] = now_ms() - t1;
                CK(cudaEventRecord(decoded, cases[c].st));
                CK(cudaEventSynchronize(decoded));
                done[r] = now_ms() - t1;
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, begun, decoded));
                stream[r] = ms;
                CK(cudaEventSynchronize(busy_end));
                bend[r] = cases[c].busy == IDLE ? 0 : now_ms() - t0;
            }
            qsort(call, reps, sizeof *call, cmp), qsort(done, reps, sizeof *done, cmp);
            qsort(stream, reps, sizeof *stream, cmp), qsort(bend, reps, sizeof *bend, cmp);
            printf("%-34s %10.1f %10.1f %10.1f %10.1f\n", cases[c].name, call[reps / 2],
                   done[reps / 2], stream[reps / 2], bend[reps / 2]);
        }
        CK(cudaDeviceSynchronize());
        nvjpegJpegStateDestroy(state);
        nvjpegDestroy(h);
    }
    return 0;
}

/* kern_crop_resize (cuda_kernels.h): a thread per output pixel of each
 * sample, computing the function the host twin computes
 * (worker/backend/crop_resize.h), stored as fp32 or rounded to bf16 as the
 * other kernels store activations. */
#include <cuda_bf16.h>

#include "worker/backend/crop_resize.h"
#include "worker/backend/cuda/cuda_kernels.h"

#define THREADS 256

typedef struct {
    float scale[3], shift[3];
} crop_norm;

__device__ __forceinline__ void store(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16 *p, size_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
}

template <class T>
__global__ void crop_resize(const kern_crop *crops, int size, crop_norm nm, T *x) {
    const kern_crop *c = &crops[blockIdx.y];
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (!c->pix || p >= size * size) return;
    int oy = p / size, ox = p - oy * size;
    float v[3];
    cr_pixel(c->pix, c->width, c->height, c->pitch, 3, c->box, c->flip, size, ox, oy, nm.scale,
             nm.shift, v);
    size_t at = ((size_t)blockIdx.y * size * size + (size_t)p) * 3;
    store(x, at, v[0]), store(x, at + 1, v[1]), store(x, at + 2, v[2]);
}

extern "C" cudaError_t kern_crop_resize(cudaStream_t st, backend_dtype dt, int n,
                                        const kern_crop *crops, int size, const float scale[3],
                                        const float shift[3], void *x) {
    if (n <= 0) return cudaSuccess;
    crop_norm nm;
    for (int c = 0; c < 3; c++) nm.scale[c] = scale[c], nm.shift[c] = shift[c];
    dim3 grid((unsigned)((size * size + THREADS - 1) / THREADS), (unsigned)n);
    if (dt == DTYPE_BF16)
        crop_resize<<<grid, THREADS, 0, st>>>(crops, size, nm, (__nv_bfloat16 *)x);
    else
        crop_resize<<<grid, THREADS, 0, st>>>(crops, size, nm, (float *)x);
    return cudaGetLastError();
}

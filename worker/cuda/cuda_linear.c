/* The linear layer on the GPU: matrix products through cuBLAS, the bias
 * and its gradient through our kernels.
 *
 * cuBLAS is column-major: a row-major [rows][cols] matrix is, to cuBLAS,
 * its transpose, a cols x rows matrix with leading dimension cols. So
 * x[n][in] is X^T (in x n), W[out][in] is W^T (in x out), y[n][out] is
 * Y^T (out x n), and each product below is the row-major one transposed:
 *   y  = x W^T   becomes  Y^T  = W X^T       sgemm(T, N, out, n, in)
 *   dx = dy W    becomes  dX^T = W^T dY^T    sgemm(N, N, in, n, out)
 *   dw = dy^T x  becomes  dW^T = X^T dY      sgemm(N, T, in, out, n)
 * With fp32 precision the handle's default math keeps fp32 arithmetic;
 * with tf32 cuda_backend.c lets it use tensor cores. */
#include "worker/cuda/cuda_internal.h"

int cuda_linear_fwd(backend *b, int n, int in, int out, const void *x_, const float *w,
                    const float *bias, void *y_) {
    const float *x = x_;
    float *y = y_;
    cuda_state *st = cuda_state_of(b);
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(st->blas.sgemm(st->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in, x,
                             in, &zero, y, out));
    if (bias) CUDA_CHECK(kern_bias_add(st->stream, n, out, bias, y));
    return 0;
}

int cuda_linear_bwd(backend *b, int n, int in, int out, const void *x_, const float *w,
                    const void *dy_, void *dx_, float *dw, float *dbias) {
    const float *x = x_;
    const float *dy = dy_;
    float *dx = dx_;
    cuda_state *st = cuda_state_of(b);
    const float one = 1.0f, zero = 0.0f;
    if (dx)
        CUBLAS_CHECK(st->blas.sgemm(st->cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w, in,
                                 dy, out, &zero, dx, in));
    CUBLAS_CHECK(st->blas.sgemm(st->cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, in, dy,
                             out, &zero, dw, in));
    if (dbias) {
        int rc = cuda_buf_reserve(st, &st->partials, kern_partials_bytes(n, out));
        if (rc) return rc;
        CUDA_CHECK(kern_bias_grad(st->stream, n, out, dy, st->partials.p, dbias));
    }
    return 0;
}

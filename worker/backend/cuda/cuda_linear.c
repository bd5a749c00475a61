/* The linear layer on the GPU: matrix products through cuBLAS, the bias
 * and its gradient through our kernels.
 *
 * cuBLAS is column-major: a row-major [rows][cols] matrix is, to cuBLAS,
 * its transpose, a cols x rows matrix with leading dimension cols. So
 * x[n][in] is X^T (in x n), W[out][in] is W^T (in x out), y[n][out] is
 * Y^T (out x n), and each product below is the row-major one transposed:
 *   y  = x W^T   becomes  Y^T  = W X^T       gemm(T, N, out, n, in)
 *   dx = dy W    becomes  dX^T = W^T dY^T    gemm(N, N, in, n, out)
 *   dw = dy^T x  becomes  dW^T = X^T dY      gemm(N, T, in, out, n)
 * With fp32 precision the handle's default math keeps fp32 arithmetic;
 * with tf32 cuda_backend.c lets it use tensor cores.
 *
 * In bf16 the products are cublasGemmEx on bf16 operands with fp32
 * accumulation (CUBLAS_COMPUTE_32F): the weight's bf16 copy comes from
 * cuda_weights.c; y is computed in fp32 into a scratch buffer and the bias
 * is added before the one rounding to bf16 (as the CPU's reference does);
 * dx is rounded by cuBLAS; dw is written in fp32 directly. */
#include "worker/backend/cuda/cuda_internal.h"

/* C = op(A) op(B) on bf16 A and B with fp32 accumulation; C of type ct. */
static int gemm_bf16(cuda_state *st, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                     int k, const void *a, int lda, const void *b, int ldb, void *c,
                     cudaDataType ct, int ldc) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(st->blas.gemm_ex(st->cublas, ta, tb, m, n, k, &one, a, CUDA_R_16BF, lda, b,
                                  CUDA_R_16BF, ldb, &zero, c, ct, ldc, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    return 0;
}

static int fwd_bf16(cuda_state *st, int n, int in, int out, const void *x, const float *w,
                    const float *bias, void *y) {
    const void *wb;
    int rc = cuda_weights_get(st, w, out, in, 1, 1, &wb);
    if (!rc) rc = cuda_buf_reserve(st, &st->product, (size_t)n * out * sizeof(float));
    if (!rc) rc = gemm_bf16(st, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, wb, in, x, in,
                            st->product.p, CUDA_R_32F, out);
    if (rc) return rc;
    CUDA_CHECK(kern_bias_out(st->stream, DTYPE_BF16, n, out, st->product.p, bias, y));
    return 0;
}

int cuda_linear_fwd(backend *b, int n, int in, int out, const void *x_, const float *w,
                    const float *bias, void *y_) {
    cuda_state *st = cuda_state_of(b);
    if (st->act == DTYPE_BF16) return fwd_bf16(st, n, in, out, x_, w, bias, y_);
    const float *x = x_;
    float *y = y_;
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(st->blas.sgemm(st->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in, x,
                             in, &zero, y, out));
    if (bias) CUDA_CHECK(kern_bias_out(st->stream, DTYPE_F32, n, out, y, bias, y));
    return 0;
}

static int bwd_bf16(cuda_state *st, int n, int in, int out, const void *x, const float *w,
                    const void *dy, void *dx, float *dw) {
    int rc = 0;
    if (dx) {
        const void *wb;
        rc = cuda_weights_get(st, w, out, in, 1, 1, &wb);
        if (!rc) rc = gemm_bf16(st, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, wb, in, dy, out, dx,
                                CUDA_R_16BF, in);
        if (rc) return rc;
    }
    return gemm_bf16(st, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, x, in, dy, out, dw, CUDA_R_32F,
                     in);
}

int cuda_linear_bwd(backend *b, int n, int in, int out, const void *x_, const float *w,
                    const void *dy_, void *dx_, float *dw, float *dbias) {
    cuda_state *st = cuda_state_of(b);
    cuda_weights_written(st, dw, (size_t)out * in * sizeof(float));
    if (dbias) cuda_weights_written(st, dbias, (size_t)out * sizeof(float));
    if (st->act == DTYPE_BF16) {
        int rc = bwd_bf16(st, n, in, out, x_, w, dy_, dx_, dw);
        if (rc) return rc;
    } else {
        const float *x = x_;
        const float *dy = dy_;
        float *dx = dx_;
        const float one = 1.0f, zero = 0.0f;
        if (dx)
            CUBLAS_CHECK(st->blas.sgemm(st->cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w,
                                     in, dy, out, &zero, dx, in));
        CUBLAS_CHECK(st->blas.sgemm(st->cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, in,
                                 dy, out, &zero, dw, in));
    }
    if (dbias) {
        int rc = cuda_buf_reserve(st, &st->partials, kern_partials_bytes(n, out));
        if (rc) return rc;
        CUDA_CHECK(kern_bias_grad(st->stream, st->act, n, out, dy_, st->partials.p, dbias));
    }
    return 0;
}

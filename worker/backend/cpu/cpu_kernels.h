/* The CPU backend's plain-C kernels (see backend.h for each operation's
 * meaning) and its oneDNN convolution and linear layer. Only
 * cpu_backend.c assembles them into a backend. */
#ifndef DDPRUN_WORKER_BACKEND_CPU_CPU_KERNELS_H
#define DDPRUN_WORKER_BACKEND_CPU_CPU_KERNELS_H

#include "worker/backend/backend.h"

int cpu_bn_stats(backend *b, const bn_args *a);
int cpu_bn_finalize(backend *b, const bn_args *a);
int cpu_bn_running(backend *b, const bn_args *a);
int cpu_bn_apply(backend *b, const bn_args *a);
int cpu_bn_bwd_reduce(backend *b, const bn_args *a);
int cpu_bn_bwd_apply(backend *b, const bn_args *a);
int cpu_relu_fwd(backend *b, size_t n, const void *x, void *y);
int cpu_relu_bwd(backend *b, size_t n, const void *y, const void *dy, void *dx);
int cpu_add_fwd(backend *b, size_t n, const void *a, const void *x2, int relu, void *y);
int cpu_accumulate(backend *b, size_t n, const void *src, void *dst);
int cpu_scale(backend *b, size_t n, float alpha, float *x);
int cpu_axpy(backend *b, size_t n, float alpha, const float *x, float *y);
int cpu_maxpool_fwd(backend *b, const pool_shape *s, const void *x, void *y, int32_t *argmax);
int cpu_maxpool_bwd(backend *b, const pool_shape *s, const void *dy, const int32_t *argmax,
                    void *dx);
int cpu_avgpool_fwd(backend *b, int n, int hw, int c, const void *x, void *y);
int cpu_avgpool_bwd(backend *b, int n, int hw, int c, const void *dy, void *dx);
int cpu_linear_fwd_ref(backend *b, int n, int in, int out, const void *x, const float *w,
                       const float *bias, void *y);
int cpu_linear_bwd_ref(backend *b, int n, int in, int out, const void *x, const float *w,
                       const void *dy, void *dx, float *dw, float *dbias);
int cpu_xent(backend *b, int n, int classes, const void *logits, const int32_t *labels,
             float smoothing, void *dlogits, backend_loss *out);
int cpu_sgd(backend *b, size_t n, float *param, const float *grad, float *mom,
            const uint8_t *decay_mask, const float *lr, float momentum, float weight_decay,
            int nesterov, int first_step);
int cpu_conv_fwd_ref(backend *b, const conv_shape *s, const void *x, const float *w, void *y);
int cpu_conv_bwd_ref(backend *b, const conv_shape *s, const void *x, const float *w,
                     const void *dy, void *dx, int dx_add, float *dw);

/* oneDNN (cpu_dnnl.c): state lives in b->impl. */
int cpu_dnnl_init(backend *b, char *err, size_t errlen);
void cpu_dnnl_destroy(backend *b);
int cpu_conv_fwd_dnnl(backend *b, const conv_shape *s, const void *x, const float *w, void *y);
int cpu_conv_bwd_dnnl(backend *b, const conv_shape *s, const void *x, const float *w,
                      const void *dy, void *dx, int dx_add, float *dw);
int cpu_linear_fwd_dnnl(backend *b, int n, int in, int out, const void *x, const float *w,
                        const float *bias, void *y);
int cpu_linear_bwd_dnnl(backend *b, int n, int in, int out, const void *x, const float *w,
                        const void *dy, void *dx, float *dw, float *dbias);

#endif

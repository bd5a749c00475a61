/* The CPU backend's plain-C kernels (see backend.h for each operation's
 * meaning) and its oneDNN convolution and linear layer. Only
 * cpu_backend.c assembles them into a backend. */
#ifndef DDPRUN_WORKER_CPU_KERNELS_H
#define DDPRUN_WORKER_CPU_KERNELS_H

#include "worker/backend.h"

int cpu_bn_stats(backend *b, int rows, int c, const float *x, float *sum, float *sumsq);
int cpu_bn_finalize(backend *b, int c, double count, float eps, float momentum,
                    const float *sum, const float *sumsq, float *mean, float *invstd,
                    float *running);
int cpu_bn_running(backend *b, int c, float eps, const float *running, float *mean,
                   float *invstd);
int cpu_bn_apply(backend *b, int rows, int c, const float *x, const float *mean,
                 const float *invstd, const float *gamma, const float *beta, int relu, float *y);
int cpu_bn_bwd_reduce(backend *b, int rows, int c, const float *x, const float *y,
                      const float *mean, const float *invstd, int relu, float *dy,
                      float *sum_dy, float *sum_dy_xhat);
int cpu_bn_bwd_apply(backend *b, int rows, int c, const float *x, const float *dy,
                     const float *mean, const float *invstd, const float *gamma,
                     const float *sum_dy, const float *sum_dy_xhat, float m, int add_to,
                     float *dx);
int cpu_relu_fwd(backend *b, size_t n, const float *x, float *y);
int cpu_relu_bwd(backend *b, size_t n, const float *y, const float *dy, float *dx);
int cpu_add_fwd(backend *b, size_t n, const float *a, const float *x2, int relu, float *y);
int cpu_accumulate(backend *b, size_t n, const float *src, float *dst);
int cpu_scale(backend *b, size_t n, float alpha, float *x);
int cpu_maxpool_fwd(backend *b, const pool_shape *s, const float *x, float *y, int32_t *argmax);
int cpu_maxpool_bwd(backend *b, const pool_shape *s, const float *dy, const int32_t *argmax,
                    float *dx);
int cpu_avgpool_fwd(backend *b, int n, int hw, int c, const float *x, float *y);
int cpu_avgpool_bwd(backend *b, int n, int hw, int c, const float *dy, float *dx);
int cpu_linear_fwd_ref(backend *b, int n, int in, int out, const float *x, const float *w,
                       const float *bias, float *y);
int cpu_linear_bwd_ref(backend *b, int n, int in, int out, const float *x, const float *w,
                       const float *dy, float *dx, float *dw, float *dbias);
int cpu_xent(backend *b, int n, int classes, const float *logits, const int32_t *labels,
             float smoothing, float *dlogits, double *loss_sum, int *correct);
int cpu_sgd(backend *b, size_t n, float *param, const float *grad, float *mom,
            const uint8_t *decay_mask, float lr, float momentum, float weight_decay,
            int nesterov, int first_step);
int cpu_conv_fwd_ref(backend *b, const conv_shape *s, const float *x, const float *w, float *y);
int cpu_conv_bwd_ref(backend *b, const conv_shape *s, const float *x, const float *w,
                     const float *dy, float *dx, float *dw);

/* oneDNN (cpu_dnnl.c): state lives in b->impl. */
int cpu_dnnl_init(backend *b, char *err, size_t errlen);
void cpu_dnnl_destroy(backend *b);
int cpu_conv_fwd_dnnl(backend *b, const conv_shape *s, const float *x, const float *w, float *y);
int cpu_conv_bwd_dnnl(backend *b, const conv_shape *s, const float *x, const float *w,
                      const float *dy, float *dx, float *dw);
int cpu_linear_fwd_dnnl(backend *b, int n, int in, int out, const float *x, const float *w,
                        const float *bias, float *y);
int cpu_linear_bwd_dnnl(backend *b, int n, int in, int out, const float *x, const float *w,
                        const float *dy, float *dx, float *dw, float *dbias);

#endif

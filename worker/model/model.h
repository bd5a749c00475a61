/* A model as ddp-train runs it: a list of operations (convolution, batch
 * norm, ReLU, residual add, pooling, linear) over numbered activation
 * tensors, executed forward in order and backward in reverse on a compute
 * backend. Parameters, their gradients and the optimizer's momentum live in
 * one allocation each, with every layer's tensors as views into it (in
 * PyTorch's state_dict order), which is what makes bucketed all-reduce and
 * checkpoints a matter of byte ranges. The runner knows no architecture:
 * layers.h builds layers from the model_add_* blocks below, an
 * architecture file (resnet.c) builds a network from layers, and arch.c
 * finds the architecture by name. */
#ifndef DDPRUN_WORKER_MODEL_MODEL_H
#define DDPRUN_WORKER_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "worker/backend/backend.h"

typedef enum { OP_CONV, OP_BN, OP_RELU, OP_ADD, OP_MAXPOOL, OP_AVGPOOL, OP_LINEAR } op_kind;

typedef struct {
    op_kind kind;
    int in, in2, out; /* activation ids (in2: ADD's second input, or what
                         a BN with add adds) */
    int relu;         /* BN and ADD: ReLU fused after */
    int add;          /* BN: in2 is added before the ReLU (a residual sum
                         fused into the batch norm before it: model_fuse_add) */
    int k, r, stride, pad; /* CONV: out channels, kernel, stride, pad; MAXPOOL: window */
    int features;     /* LINEAR: out features */
    size_t w, b;      /* parameter offsets: CONV weight; BN gamma, beta; LINEAR weight, bias */
    size_t buf;       /* BN: running mean at buf, running var at buf + c */
    /* set by model_set_batch */
    conv_shape cs;
    pool_shape ps;
    int rows, c;      /* BN: rows = n*h*w; channels */
    float *stats;     /* BN, device: mean, invstd, then the sums (4c floats) */
    int32_t *argmax;  /* MAXPOOL */
} model_op;

typedef struct {
    int h, w, c;      /* per-sample shape (NHWC) */
    void *data;       /* n*h*w*c elements of the backend's activation type */
    void *grad;       /* during backward only, from the model's pool */
    int consumers;    /* ops reading it (their gradients add up) */
    int grad_set;     /* during backward: grad holds a first contribution */
} model_act;

/* How a parameter starts, as PyTorch initialises its layer: Kaiming
 * normal (fan_out, ReLU gain) for convolutions as torchvision does, ones
 * and zeros for batch norm, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for a linear
 * layer's weight and bias. */
typedef enum { INIT_KAIMING_FAN_OUT, INIT_ONES, INIT_ZEROS, INIT_UNIFORM_FAN_IN } param_init;

/* One named parameter tensor (PyTorch's name and shape). */
typedef struct {
    char name[64];
    size_t offset, count; /* set by model_add_param */
    int ndim;
    int shape[4];
    int decay;            /* gets weight decay (conv and linear weights) */
    param_init init;
    int fan_in;           /* INIT_UNIFORM_FAN_IN */
} model_param;

/* A buffer (batch norm's running statistics): saved, not trained. */
typedef struct {
    char name[64];
    size_t offset, count;
    float init; /* every element's first value */
} model_buffer;

typedef struct model model;

/* SyncBatchNorm and DDP plug in here (the model itself knows nothing of
 * other ranks). */
typedef struct {
    void *ctx;
    /* sum a small buffer over all ranks (SyncBatchNorm); NULL: local BN */
    int (*allreduce)(void *ctx, float *buf, size_t n);
    double count_scale; /* SyncBatchNorm: all ranks' rows over this rank's (the world size
                         * when the ranks share the global batch evenly) */
    float loss_weight;  /* fp32 activations: the loss gradient's factor, this rank's share
                         * weight (ddp_set_share); 0 or 1: none */
    /* called in backward once the gradients of every parameter at offset
     * >= `offset` are final (DDP launches its buckets from here) */
    int (*grads_ready)(void *ctx, size_t offset);
} model_hooks;

struct model {
    backend *be;
    char arch[32];
    int in_c, in_h, in_w, classes;
    int batch;    /* the current batch's samples */
    int capacity; /* activations are sized for this many (a smaller batch
                     reuses them, so memory stays where a recorded step
                     put it) */
    model_op *ops;
    int nops, cap_ops;
    model_act *acts;
    int nacts, cap_acts;
    model_param *params;
    int nparams, cap_params;
    model_buffer *buffers;
    int nbuffers, cap_buffers;
    size_t nparam, nbuf; /* floats */
    float *param, *grad, *mom; /* device memory */
    float *buf;                /* BN running statistics */
    uint8_t *decay_mask;       /* host + device (the CPU shares it) */
    void *scratch;             /* a gradient being added into an activation */
    /* Activation gradients live only between the backward steps of their
     * first consumer and their producer; they come from this pool, so a
     * ResNet holds a few of each shape instead of one per activation. */
    struct {
        void *p;
        size_t bytes;
        int used;
    } *pool;
    int npool, cap_pool;
    float bn_momentum, bn_eps;
    int unfused;               /* model_spec's */
    model_hooks hooks;
    int32_t *labels;           /* device copy of the batch's labels */
    backend_loss *loss;        /* device: the last loss's result */
    const int32_t *labels_at;  /* model_point: the caller's labels instead (NULL: labels) */
    backend_loss *loss_at;     /* model_point: the caller's loss slot instead (NULL: loss) */
};

/* What a model is made for: its name (kept for checkpoints), one sample's
 * shape (channels, height, width) and the number of classes, and the seed
 * its weights come from. */
typedef struct {
    const char *arch;
    int in_c, in_h, in_w, classes;
    uint64_t seed;
    int unfused; /* every operation writes its own output: no residual sum
                    folded into a batch norm (model_fuse_add), no second
                    gradient blended into a convolution's (conv_bwd's dx_add) */
    int undrawn; /* the parameters are left for model_draw_weights: a run
                    about to load them (a resume) skips drawing 25 million
                    normal samples for ResNet-50 (a third of a second) */
} model_spec;

/* An empty model for spec: activation 0 is the input; the layers come
 * next (model_add_*), then model_finish. -EINVAL with a message for a bad
 * shape or fewer than 2 classes. */
int model_new(backend *be, const model_spec *spec, model **out, char *err, size_t errlen);
/* Allocates parameters, gradients, momentum and buffers for the layers
 * added, and initialises the buffers (each at its init). The parameters
 * are drawn by model_draw_weights. */
int model_finish(model *m);
/* Each parameter as its `init` says, from its own stream of seed (so the
 * parameters are drawn in parallel, the same values on any number of
 * threads), uploaded into the model. */
int model_draw_weights(model *m, uint64_t seed);
void model_destroy(model *m);
/* Sets the batch size to n, allocating activations when n exceeds
 * every batch before it. -EOVERFLOW above model_max_batch. */
int model_set_batch(model *m, int n);
/* The largest batch whose every activation tensor has at most INT32_MAX
 * elements: the backends index them (max pooling's argmax, say) with
 * 32-bit integers. */
int model_max_batch(const model *m);
/* Queues the upload of the n labels of the batch (host memory) for the
 * next model_backward or model_loss: labels must stay as they are until
 * the loss is read (backend.h's upload_async). */
int model_set_labels(model *m, const int32_t *labels, int n);
/* Micro-batches (a step's batch trained in parts, their gradients
 * summed by the caller): the next backward takes its labels from the
 * caller's device memory and writes its loss to the caller's slot, each
 * part its own; NULL, NULL: the model's own again (model_set_labels,
 * model_read_loss). */
void model_point(model *m, const int32_t *labels, backend_loss *loss);
/* Runs forward on x (n x H x W x C, device memory, the backend's
 * activation type); returns the logits (n x classes, likewise). train: batch
 * statistics (and running statistics updated); else running statistics. */
int model_forward(model *m, const void *x, int n, int train, void **logits);
/* Loss and backward for the last forward: gradients land in m->grad (for
 * one rank's batch, averaged over its n samples), the loss in m->loss.
 * Only queues work: nothing here waits for the device. */
int model_backward(model *m, int n, float smoothing);
/* Loss and accuracy only (evaluation), into m->loss. */
int model_loss(model *m, int n);
/* The last loss's sum and correct count, downloaded (waits for the device).
 * Also where a failure of the memory operations since the last sync (the
 * batch's upload, say) is reported: 0 or -errno. */
int model_read_loss(model *m, double *loss_sum, int *correct);

/* The building blocks layers.c builds layers from: a new activation of
 * one sample's shape h x w x c (returns its id), an operation over
 * activations (returns its index), a parameter tensor described by p
 * (name, shape, decay, init; its offset is returned) and a buffer of count
 * floats that start at init. Each returns -ENOMEM when memory runs out. */
int model_add_act(model *m, int h, int w, int c);
int model_add_op(model *m, const model_op *op);
int model_add_param(model *m, const model_param *p, size_t *offset);
int model_add_buffer(model *m, const char *name, size_t count, float init, size_t *offset);
/* The sum a + b (then ReLU if relu) folded into the operation just added,
 * when that is a batch norm without ReLU whose output is a or b and is
 * read by nothing else: the batch norm then adds the other operand before
 * its ReLU, and its output is the sum. This saves writing and reading the
 * batch norm's output and, backward, a pass for the ReLU's mask and one
 * for the second operand's copy of the gradient. Returns the sum's
 * activation, or -1 where the sum must be an operation of its own (or the
 * model was made unfused). */
int model_fuse_add(model *m, int a, int b, int relu);

#endif

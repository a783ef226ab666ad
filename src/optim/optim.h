/* The optimizer: AdamW with decoupled weight decay, global-norm gradient
 * clipping, and the learning-rate schedule.
 *
 * One optimizer updates a list of segments of flat parameter, gradient and
 * moment arrays. A process that holds the whole model has one segment per
 * tensor of its buffers; a ZeRO rank has one per slice of the blocks it owns
 * (src/dist). Both step through the same loop, so every update of every
 * layout is the same arithmetic. The caller decides which segments take
 * weight decay: the optimizer knows nothing of the model. */
#ifndef ANVIL_OPTIM_OPTIM_H
#define ANVIL_OPTIM_OPTIM_H

#include <stddef.h>

#include "kernels/kernels.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
} anvil_adamw_config;

/* len consecutive elements: where they start in the parameter, gradient and moment arrays. */
typedef struct {
    size_t param, grad, moment, len;
    int decay; /* 1: weight decay applies */
} anvil_adamw_segment;

typedef struct {
    anvil_adamw_config cfg;
    const anvil_kernels *k;
    anvil_adamw_segment *segs;
    int nsegs;
    size_t n;     /* elements of m and v */
    int whole;    /* the segments tile [0, n) of whole buffers */
    float *m, *v; /* backend memory, n each */
    int t;        /* updates taken so far */
} anvil_adamw;

/* An optimizer of nsegs segments (copied) whose moments take n elements, zeroed. */
int anvil_adamw_init(anvil_adamw *o, const anvil_kernels *k, const anvil_adamw_config *cfg,
                     const anvil_adamw_segment *segs, int nsegs, size_t n);
/* The optimizer of whole buffers of ntensors tensors, tensor i at [offsets[i], offsets[i+1]) of each,
 * decayed when decays[i] says so. */
int anvil_adamw_init_whole(anvil_adamw *o, const anvil_kernels *k, const anvil_adamw_config *cfg,
                           const size_t *offsets, int ntensors, const int *decays);
void anvil_adamw_free(anvil_adamw *o);

/* The sum of squares of the gradients the segments cover, the square of their part of the global
 * norm. Whole buffers are summed in one pass, a shard's segments one by one: each order fixes the
 * rounding of its layout, as it always has, so runs continue bit-identically. */
double anvil_adamw_grad_sumsq(const anvil_adamw *o, const float *grads);
/* One update at learning rate lr from the gradients, params and grads being the bases the segments'
 * offsets refer to. sumsq is the global sum of squares (anvil_adamw_grad_sumsq, summed over the
 * ranks that share the model); when max_norm > 0 and the norm exceeds it, the update takes the
 * gradients scaled by max_norm / (norm + 1e-6), as after torch.nn.utils.clip_grad_norm_ (grads
 * itself is not written). Returns the norm before clipping. */
float anvil_adamw_step(anvil_adamw *o, float *params, const float *grads, double sumsq, float max_norm, float lr);

typedef enum { ANVIL_LR_COSINE, ANVIL_LR_CONSTANT } anvil_lr_kind;

typedef struct {
    anvil_lr_kind kind;
    float lr;      /* peak */
    float min_lr;  /* floor of the cosine */
    int warmup;    /* steps of linear warmup */
    int total;     /* steps in the run; the cosine reaches min_lr at the last */
} anvil_lr_schedule;

/* Learning rate of 0-based step: (step+1)/warmup * lr during warmup, then constant or a cosine
 * from lr down to min_lr. */
float anvil_lr_at(const anvil_lr_schedule *s, int step);

#endif

/* AdamW with decoupled weight decay (on matrices and embeddings only, the
 * nanoGPT convention), global-norm gradient clipping, and the learning-rate
 * schedule. The moments mirror the model's flat parameter buffer. */
#ifndef ANVIL_TRAIN_OPTIM_H
#define ANVIL_TRAIN_OPTIM_H

#include "model/gpt2.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
} anvil_adamw_config;

typedef struct {
    anvil_adamw_config cfg;
    float *m, *v; /* backend memory, nparams each */
    int t;        /* updates taken so far */
} anvil_adamw;

int anvil_adamw_init(anvil_adamw *o, const anvil_gpt2 *model, const anvil_adamw_config *cfg);
void anvil_adamw_free(anvil_adamw *o, const anvil_gpt2 *model);
/* One update of every parameter from model->grads at learning rate lr. */
void anvil_adamw_step(anvil_adamw *o, anvil_gpt2 *model, float lr);

/* The global L2 norm of all gradients, before clipping. When max_norm > 0 and the norm exceeds it,
 * scales the gradients by max_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_ does. */
float anvil_clip_grad_norm(anvil_gpt2 *model, float max_norm);

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

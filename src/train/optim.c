#include "train/optim.h"

#include <math.h>
#include <string.h>

#include "core/error.h"

int anvil_adamw_init(anvil_adamw *o, const anvil_gpt2 *model, const anvil_adamw_config *cfg) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->m = model->k->alloc(model->nparams * sizeof(float));
    o->v = model->k->alloc(model->nparams * sizeof(float));
    if (!o->m || !o->v) {
        anvil_adamw_free(o, model);
        return anvil_fail("optimizer: cannot allocate AdamW state for %zu parameters", model->nparams);
    }
    return 0;
}

void anvil_adamw_free(anvil_adamw *o, const anvil_gpt2 *model) {
    model->k->free(o->m);
    model->k->free(o->v);
    o->m = o->v = NULL;
}

void anvil_adamw_step(anvil_adamw *o, anvil_gpt2 *model, float lr) {
    o->t++;
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        size_t off = model->offsets[i], n = model->offsets[i + 1] - off;
        float wd = anvil_gpt2_param_decays(i) ? o->cfg.weight_decay : 0.0f;
        model->k->adamw(model->params + off, model->grads + off, o->m + off, o->v + off, n, lr, o->cfg.beta1,
                        o->cfg.beta2, o->cfg.eps, wd, o->t);
    }
}

float anvil_clip_grad_norm(anvil_gpt2 *model, float max_norm) {
    double norm = sqrt(model->k->sumsq(model->grads, model->nparams));
    if (max_norm > 0.0f) {
        float coef = (float)(max_norm / (norm + 1e-6));
        if (coef < 1.0f) model->k->scale(model->grads, coef, model->nparams);
    }
    return (float)norm;
}

float anvil_lr_at(const anvil_lr_schedule *s, int step) {
    if (step < s->warmup) return s->lr * (float)(step + 1) / (float)s->warmup;
    if (s->kind == ANVIL_LR_CONSTANT) return s->lr;
    int span = s->total - s->warmup;
    if (span <= 1) return s->lr;
    double progress = (double)(step - s->warmup) / (double)(span - 1);
    if (progress > 1.0) progress = 1.0;
    return s->min_lr + (float)(0.5 * (1.0 + cos(M_PI * progress))) * (s->lr - s->min_lr);
}

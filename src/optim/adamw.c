#include "optim/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int anvil_adamw_init(anvil_adamw *o, const anvil_kernels *k, const anvil_adamw_config *cfg,
                     const anvil_adamw_segment *segs, int nsegs, size_t n) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->k = k;
    o->n = n;
    o->nsegs = nsegs;
    /* At least one element each, so that a rank owning nothing still has valid buffers. */
    size_t bytes = (n ? n : 1) * sizeof(float);
    o->segs = malloc((size_t)(nsegs ? nsegs : 1) * sizeof *segs);
    o->m = k->alloc(bytes);
    o->v = k->alloc(bytes);
    if (!o->segs || !o->m || !o->v) {
        anvil_adamw_free(o);
        return anvil_fail("optimizer: cannot allocate AdamW state for %zu parameters", n);
    }
    if (nsegs) memcpy(o->segs, segs, (size_t)nsegs * sizeof *segs);
    return 0;
}

int anvil_adamw_init_whole(anvil_adamw *o, const anvil_kernels *k, const anvil_adamw_config *cfg,
                           const size_t *offsets, int ntensors, const int *decays) {
    anvil_adamw_segment *segs = malloc((size_t)(ntensors ? ntensors : 1) * sizeof *segs);
    if (!segs) return anvil_fail("optimizer: out of memory");
    for (int i = 0; i < ntensors; i++) {
        size_t off = offsets[i];
        segs[i] = (anvil_adamw_segment){off, off, off, offsets[i + 1] - off, decays[i]};
    }
    int rc = anvil_adamw_init(o, k, cfg, segs, ntensors, offsets[ntensors] - offsets[0]);
    free(segs);
    o->whole = 1;
    return rc;
}

void anvil_adamw_free(anvil_adamw *o) {
    if (o->k) {
        o->k->free(o->m);
        o->k->free(o->v);
    }
    free(o->segs);
    o->segs = NULL;
    o->m = o->v = NULL;
}

double anvil_adamw_grad_sumsq(const anvil_adamw *o, const float *grads) {
    if (o->whole) return o->k->sumsq(grads, o->n);
    double s = 0.0;
    for (int i = 0; i < o->nsegs; i++) s += o->k->sumsq(grads + o->segs[i].grad, o->segs[i].len);
    return s;
}

float anvil_adamw_step(anvil_adamw *o, float *params, const float *grads, double sumsq, float max_norm, float lr) {
    double norm = sqrt(sumsq);
    float coef = max_norm > 0.0f ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
    o->t++;
    const anvil_adamw_config *a = &o->cfg;
    /* Clipping is folded into the update's one pass (the kernel scales each gradient as it reads
     * it): the bits of scaling every gradient in place first, one pass over them fewer. */
    const float gscale = coef < 1.0f ? coef : 1.0f;
    for (int i = 0; i < o->nsegs; i++) {
        const anvil_adamw_segment *s = &o->segs[i];
        o->k->adamw(params + s->param, grads + s->grad, gscale, o->m + s->moment, o->v + s->moment, s->len, lr,
                    a->beta1, a->beta2, a->eps, s->decay ? a->weight_decay : 0.0f, o->t);
    }
    return (float)norm;
}

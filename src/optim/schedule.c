#include "optim/optim.h"

#include <math.h>

float anvil_lr_at(const anvil_lr_schedule *s, int step) {
    if (step < s->warmup) return s->lr * (float)(step + 1) / (float)s->warmup;
    if (s->kind == ANVIL_LR_CONSTANT) return s->lr;
    int span = s->total - s->warmup;
    if (span <= 1) return s->lr;
    double progress = (double)(step - s->warmup) / (double)(span - 1);
    if (progress > 1.0) progress = 1.0;
    return s->min_lr + (float)(0.5 * (1.0 + cos(M_PI * progress))) * (s->lr - s->min_lr);
}

#include "train/ckpt_auto.h"

#include <math.h>
#include <stdio.h>

int anvil_ckpt_auto_every(double cost_ms, double write_ms, double step_ms, double mtbf_s, int max_steps, char *why,
                          size_t cap) {
    double cost_s = (isfinite(cost_ms) && cost_ms >= 0 ? cost_ms : write_ms) / 1e3, write_s = write_ms / 1e3;
    double young_s = sqrt(2.0 * cost_s * mtbf_s), floor_s = 2.0 * write_s;
    double interval_s = young_s > floor_s ? young_s : floor_s, steps = step_ms > 0 ? interval_s / (step_ms / 1e3) : 1;
    int every = steps < 1 ? 1 : steps > max_steps ? max_steps : (int)lround(steps);
    if (every < 1) every = 1;
    snprintf(why, cap,
             "checkpoint every %d steps (--ckpt-every auto: a checkpoint costs training %.0f ms and takes %.0f ms to "
             "write, MTBF %.0f s: sqrt(2 x cost x MTBF) = %.1f s%s, at %.1f ms a step)",
             every, cost_s * 1e3, write_ms, mtbf_s, young_s,
             young_s < floor_s ? ", raised to twice the write" : "", step_ms);
    return every;
}

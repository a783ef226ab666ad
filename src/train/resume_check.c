#include "train/resume_check.h"

#include <string.h>

#include "core/json.h"

static int recorded(const cJSON *cfg, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!cJSON_IsNumber(v)) return 0;
    *out = (int)v->valuedouble;
    return 1;
}

int anvil_resume_check(const char *train_config, int batch, int seq, int steps, FILE *log) {
    cJSON *cfg = train_config ? anvil_json_parse_str(train_config) : NULL;
    int was, n = 0;
    if (recorded(cfg, "batch", &was) && was != batch && ++n)
        fprintf(log, "warning: resuming with --batch %d where the checkpoint's run had %d: each step now reads %d "
                "sequences instead of %d, so the tokens per step and the data each step sees from here differ "
                "from the original run's\n", batch, was, batch, was);
    if (recorded(cfg, "seq", &was) && was != seq && ++n)
        fprintf(log, "warning: resuming with --seq %d where the checkpoint's run had %d: sequences of %d tokens "
                "instead of %d, so the tokens per step and the data each step sees from here differ from the "
                "original run's\n", seq, was, seq, was);
    if (recorded(cfg, "steps", &was) && was != steps && ++n)
        fprintf(log, "warning: resuming with --steps %d where the checkpoint's run had %d: the run now ends at "
                "step %d, and the learning-rate schedule, laid over --steps, follows the new end (its decay "
                "from here differs from the original run's)\n", steps, was, steps);
    cJSON_Delete(cfg);
    return n;
}

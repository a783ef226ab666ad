/* What the families' passes share: the batch's checks, the mean loss, the
 * vocabulary-parallel loss's combination over a tensor-parallel group,
 * activation buffers allocated from a plan, a unit's weights and gradients
 * (the hooks' or the flat buffers') and a shard's collectives; and text from
 * files, shown in one-line messages. */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "model/family.h"

const char *anvil_model_shown(const char *text, char *out, size_t cap) {
    size_t n = 0;
    for (; text[n] && n < 64 && n + 1 < cap; n++)
        out[n] = (unsigned char)text[n] < 0x20 || text[n] == 0x7f ? '?' : text[n];
    out[n] = 0;
    return out;
}

int anvil_model_shard_batch_check(const anvil_model *m, int s, const int32_t *inputs, const int32_t *targets, int B,
                                  int T) {
    if (anvil_model_batch_check(&m->cfg, B, T)) return -1;
    if (s < 0 || s >= m->shard.nslots)
        return anvil_fail("tensor parallel: micro-batch slot %d of %d", s, m->shard.nslots);
    if (!targets) return anvil_fail("tensor parallel: a pass needs targets");
    return anvil_model_check_tokens(m, "tensor parallel", inputs, targets, (size_t)B * T);
}

int anvil_model_get_params(anvil_model *m, int u, anvil_model_view *v) {
    if (m->hooks) return m->hooks->get_params(m->hooks->ctx, u, v);
    anvil_model_view_flat(m, u, m->params, v);
    return 0;
}

int anvil_model_put_params(anvil_model *m, int u) { return m->hooks ? m->hooks->put_params(m->hooks->ctx, u) : 0; }

int anvil_model_get_grads(anvil_model *m, int u, anvil_model_view *v) {
    if (m->hooks) return m->hooks->get_grads(m->hooks->ctx, u, v);
    anvil_model_view_flat(m, u, m->grads, v);
    return 0;
}

int anvil_model_put_grads(anvil_model *m, int u) { return m->hooks ? m->hooks->put_grads(m->hooks->ctx, u) : 0; }

int anvil_model_tp_reduce(anvil_model *m, float *buf, size_t n, const char *what) {
    return m->comm->reduce(m->comm->ctx, buf, n, what);
}

int anvil_model_tp_gather(anvil_model *m, const float *local, float *full, size_t n, const char *what) {
    return m->comm->gather(m->comm->ctx, local, full, n, what);
}

int anvil_model_tp_scatter(anvil_model *m, const float *full, float *local, size_t n, const char *what) {
    return m->comm->scatter(m->comm->ctx, full, local, n, what);
}

int anvil_model_check_tokens(const anvil_model *m, const char *who, const int32_t *inputs, const int32_t *targets,
                             size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (inputs[i] < 0 || inputs[i] >= m->cfg.vocab_size)
            return anvil_fail("%s: input token %d at position %zu is outside the vocabulary (%d)", who, inputs[i], i,
                              m->cfg.vocab_size);
        if (targets && targets[i] >= m->cfg.vocab_size)
            return anvil_fail("%s: target token %d at position %zu is outside the vocabulary (%d)", who, targets[i], i,
                              m->cfg.vocab_size);
    }
    return 0;
}

int anvil_model_count_targets(const int32_t *targets, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += targets[i] >= 0;
    return c;
}

float anvil_model_mean_loss(const anvil_model *m, const float *losses, size_t n, int count) {
    float *host = malloc(n * sizeof(float));
    m->k->download(host, losses, n * sizeof(float));
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += host[i];
    free(host);
    return count ? (float)(s / count) : 0.0f;
}

int anvil_model_vocab_loss(anvil_model *m, float *lse, float *tlogit, float *lse_all, const int32_t *targets, int N,
                           int count, float *loss) {
    const anvil_kernels *k = m->k;
    int tp = m->shard.tp;
    float *host = malloc(((size_t)tp + 2) * N * sizeof(float));
    if (!host) return anvil_fail("tensor parallel: out of memory in the loss");
    int rc = m->comm->gather(m->comm->ctx, lse, lse_all, (size_t)N, "tp loss log-sum-exp");
    if (!rc) rc = m->comm->reduce(m->comm->ctx, tlogit, (size_t)N, "tp loss target logit");
    if (!rc) {
        float *all = host, *tl = host + (size_t)tp * N, *glse = tl + N;
        k->download(all, lse_all, (size_t)tp * N * sizeof(float));
        k->download(tl, tlogit, (size_t)N * sizeof(float));
        double sum = 0.0;
        /* max + log sum exp, in double, the same on every rank. */
        for (int i = 0; i < N; i++) {
            float mx = -INFINITY;
            for (int r = 0; r < tp; r++) mx = all[(size_t)r * N + i] > mx ? all[(size_t)r * N + i] : mx;
            double s = 0.0;
            for (int r = 0; r < tp; r++) s += exp((double)all[(size_t)r * N + i] - mx);
            glse[i] = (float)(mx + log(s));
            if (targets[i] >= 0) sum += (double)glse[i] - tl[i];
        }
        k->upload(lse, glse, (size_t)N * sizeof(float));
        *loss = count ? (float)(sum / count) : 0.0f;
    }
    free(host);
    return rc;
}

int anvil_alloc_plan(const anvil_kernels *k, const anvil_buffer_plan *plan, int n, void **owned, int *nowned,
                     size_t *bytes) {
    for (int i = 0; i < n; i++) {
        void *b = k->alloc(plan[i].bytes);
        if (!b) return -1;
        owned[(*nowned)++] = b;
        *bytes += plan[i].bytes;
        *(void **)plan[i].p = b;
    }
    return 0;
}

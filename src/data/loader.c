#include "data/loader.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/shard.h"

struct anvil_loader {
    int B, T, rank, world, vocab_size;
    int64_t bt;     /* B*T: one process's tokens per batch */
    int64_t global; /* world*B*T: the position's step */
    int nshards;
    char **paths;
    int64_t *ntokens;
    anvil_shard cur; /* the open shard, cur_index < 0 when none */
    int64_t cur_index;
    anvil_loader_state st;
    int32_t *buf; /* B*T+1 */
};

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void anvil_loader_close(anvil_loader *L) {
    if (!L) return;
    if (L->cur_index >= 0) anvil_shard_close(&L->cur);
    for (int i = 0; i < L->nshards; i++) free(L->paths[i]);
    free(L->paths);
    free(L->ntokens);
    free(L->buf);
    free(L);
}

anvil_loader *anvil_loader_open(const char *pattern, int B, int T, int rank, int world, int vocab_size) {
    if (B <= 0 || T <= 0 || world <= 0 || rank < 0 || rank >= world || vocab_size <= 0) {
        anvil_fail("loader %s: bad geometry B=%d T=%d rank=%d world=%d vocab_size=%d", pattern, B, T, rank, world,
                   vocab_size);
        return NULL;
    }
    anvil_loader *L = calloc(1, sizeof *L);
    if (!L) {
        anvil_fail("loader %s: out of memory", pattern);
        return NULL;
    }
    L->B = B;
    L->T = T;
    L->rank = rank;
    L->world = world;
    L->vocab_size = vocab_size;
    L->bt = (int64_t)B * T;
    L->global = L->bt * world;
    L->cur_index = -1;

    glob_t g;
    int rc = glob(pattern, GLOB_ERR, NULL, &g);
    if (rc != 0) {
        if (rc == GLOB_NOMATCH) anvil_fail("loader: no files match '%s'", pattern);
        else anvil_fail("loader: cannot expand '%s' (unreadable folder?)", pattern);
        globfree(&g);
        free(L);
        return NULL;
    }
    /* glob sorts by the locale's collation; the shard order must not depend on it. */
    L->paths = calloc(g.gl_pathc, sizeof *L->paths);
    L->ntokens = calloc(g.gl_pathc, sizeof *L->ntokens);
    L->buf = malloc((size_t)(L->bt + 1) * sizeof *L->buf);
    if (!L->paths || !L->ntokens || !L->buf) {
        globfree(&g);
        anvil_fail("loader %s: out of memory", pattern);
        anvil_loader_close(L);
        return NULL;
    }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        L->paths[i] = strdup(g.gl_pathv[i]);
        if (!L->paths[i]) break;
        L->nshards++;
    }
    globfree(&g);
    if ((size_t)L->nshards != g.gl_pathc) {
        anvil_fail("loader %s: out of memory", pattern);
        anvil_loader_close(L);
        return NULL;
    }
    qsort(L->paths, (size_t)L->nshards, sizeof *L->paths, cmp_str);

    for (int i = 0; i < L->nshards; i++) {
        anvil_shard s;
        if (anvil_shard_open(&s, L->paths[i])) {
            anvil_loader_close(L);
            return NULL;
        }
        L->ntokens[i] = s.ntokens;
        anvil_shard_close(&s);
        if (L->ntokens[i] < L->global + 1) {
            anvil_fail("shard %s: %lld tokens, too few for one batch of world*B*T+1 = %d*%d*%d+1 = %lld tokens",
                       L->paths[i], (long long)L->ntokens[i], world, B, T, (long long)(L->global + 1));
            anvil_loader_close(L);
            return NULL;
        }
    }
    return L;
}

static int open_current(anvil_loader *L) {
    if (L->cur_index == L->st.shard) return 0;
    if (L->cur_index >= 0) anvil_shard_close(&L->cur);
    L->cur_index = -1;
    if (anvil_shard_open(&L->cur, L->paths[L->st.shard])) return -1;
    L->cur_index = L->st.shard;
    if (L->cur.ntokens != L->ntokens[L->st.shard])
        return anvil_fail("shard %s: now %lld tokens, %lld when the loader opened it", L->cur.path,
                          (long long)L->cur.ntokens, (long long)L->ntokens[L->st.shard]);
    return 0;
}

int anvil_loader_next(anvil_loader *L, int32_t *inputs, int32_t *targets) {
    anvil_loader_state next = L->st;
    if (next.position + L->global + 1 > L->ntokens[next.shard]) {
        next.position = 0;
        if (++next.shard == L->nshards) {
            next.shard = 0;
            next.epoch++;
        }
    }
    /* The state only moves once the batch has been read, so a failed read can
     * be retried or checkpointed without skipping data. */
    anvil_loader_state saved = L->st;
    L->st = next;
    int rc = open_current(L);
    if (!rc) rc = anvil_shard_read(&L->cur, next.position + L->rank * L->bt, L->bt + 1, L->buf, L->vocab_size);
    if (rc) {
        L->st = saved;
        return -1;
    }
    memcpy(inputs, L->buf, (size_t)L->bt * sizeof *inputs);
    memcpy(targets, L->buf + 1, (size_t)L->bt * sizeof *targets);
    L->st.position += L->global;
    return 0;
}

void anvil_loader_reset(anvil_loader *L) { L->st = (anvil_loader_state){0, 0, 0}; }

anvil_loader_state anvil_loader_get_state(const anvil_loader *L) { return L->st; }

int anvil_loader_set_state(anvil_loader *L, anvil_loader_state st) {
    if (st.shard < 0 || st.shard >= L->nshards || st.position < 0 || st.epoch < 0)
        return anvil_fail("loader: state shard=%lld position=%lld epoch=%lld does not fit its %d shards",
                          (long long)st.shard, (long long)st.position, (long long)st.epoch, L->nshards);
    if (st.position > L->ntokens[st.shard])
        return anvil_fail("loader: state position %lld is past the end of shard %s (%lld tokens)",
                          (long long)st.position, L->paths[st.shard], (long long)L->ntokens[st.shard]);
    L->st = st;
    return 0;
}

int anvil_loader_num_shards(const anvil_loader *L) { return L->nshards; }

const char *anvil_loader_shard_path(const anvil_loader *L, int i) {
    return i >= 0 && i < L->nshards ? L->paths[i] : NULL;
}

int64_t anvil_loader_total_tokens(const anvil_loader *L) {
    int64_t n = 0;
    for (int i = 0; i < L->nshards; i++) n += L->ntokens[i];
    return n;
}

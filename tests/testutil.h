/* A minimal check harness for the C tests: each failed check prints where
 * and why; the test exits 1 when a check failed, 77 (CTest's skip) when a
 * part was skipped, else 0. */
#ifndef ANVIL_TESTS_TESTUTIL_H
#define ANVIL_TESTS_TESTUTIL_H

#include <stddef.h>

#include "model/model.h"
#include "optim/optim.h"

extern int t_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) t_fail(__FILE__, __LINE__, "check failed: %s", #cond);                        \
    } while (0)

void t_fail(const char *file, int line, const char *fmt, ...);
/* Compares arrays elementwise: |a-b| <= atol + rtol*|b|. Reports the worst element. */
int t_close(const char *what, const float *got, const float *want, size_t n, float rtol, float atol);
/* For tests run once per kernel path (CTest sets ANVIL_ISA): prints the path
 * in use, or, when this CPU cannot run the path asked for, prints why and
 * exits with 77, which CTest reports as skipped. Returns the path's name. */
const char *t_path(const char *test);
/* A reference the test needs (a file, a program) is missing: a failure, unless
 * the user allows skips with ANVIL_TEST_ALLOW_SKIP=1; then it prints what is
 * skipped and the test's status becomes 77. The caller skips that part. */
void t_missing(const char *test, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A GPT-2 configuration of these numbers (not yet checked). */
anvil_model_config t_gpt2(int n_layer, int n_head, int n_embd, int block_size, int vocab_size);
/* A Llama configuration of these numbers (not yet checked): RoPE theta 10000 unscaled, RMSNorm epsilon
 * 1e-5. */
anvil_model_config t_llama(int n_layer, int n_head, int n_kv_head, int n_embd, int ffn_hidden, int block_size,
                           int vocab_size, int tied);
/* The index of the tensor named name in cfg's parameter table; a failed check when there is none. */
int t_tensor(const anvil_model_config *cfg, const char *name);
/* An AdamW optimizer of the whole layout at offsets of cfg's tensors, each decayed as the table says. */
int t_adamw_whole(anvil_adamw *o, const anvil_kernels *k, const anvil_adamw_config *ac, const size_t *offsets,
                  const anvil_model_config *cfg);
/* Prints the summary line and returns the process exit status: 1 when a check
 * failed, else 77 when a part was skipped, else 0. */
int t_done(const char *name);

#endif

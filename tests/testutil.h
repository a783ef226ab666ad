/* A minimal check harness for the C tests: each failed check prints where
 * and why, and the test's exit status is the failure count. */
#ifndef ANVIL_TESTS_TESTUTIL_H
#define ANVIL_TESTS_TESTUTIL_H

#include <stddef.h>

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
/* Prints the summary line and returns the process exit status. */
int t_done(const char *name);

#endif

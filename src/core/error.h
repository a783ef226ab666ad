/* Error reporting for libanvil.
 *
 * Library functions never print and never exit: they return a negative
 * value (or NULL) and leave a one-line message here, naming the file, field
 * or offset at fault. The CLI prints it and exits nonzero. The message is
 * per thread so that loader and writer threads cannot clobber the caller's. */
#ifndef ANVIL_CORE_ERROR_H
#define ANVIL_CORE_ERROR_H

#if defined(__GNUC__)
#define ANVIL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ANVIL_PRINTF(a, b)
#endif

/* Records a message and returns -1, so callers can write `return anvil_fail(...)`. */
int anvil_fail(const char *fmt, ...) ANVIL_PRINTF(1, 2);
/* The last message recorded on this thread ("" when none). */
const char *anvil_errmsg(void);

/* How long-lived library code (the job service's threads) tells its caller what it did or what went
 * wrong while it goes on: one line, without a newline; the caller prints or logs it. */
typedef void (*anvil_report_fn)(void *ctx, const char *line);

#endif

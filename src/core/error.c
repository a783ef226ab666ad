#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char errbuf[1024];

int anvil_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return -1;
}

const char *anvil_errmsg(void) { return errbuf; }

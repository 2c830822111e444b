#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Long enough for a path, a tensor name and an offset. */
static _Thread_local char last_error[1024];

const char *lb_last_error(void) { return last_error; }

lb_status lb__fail(lb_status status, const char *fmt, ...)
{
    /* formatted aside first: a caller may pass lb_last_error() itself, to
     * add context to an inner failure's message */
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    return status;
}

const char *lb_status_name(lb_status s)
{
    switch (s) {
    case LB_OK: return "ok";
    case LB_ERR_ARG: return "bad_argument";
    case LB_ERR_FORMAT: return "unknown_format";
    case LB_ERR_NAN: return "nan";
    case LB_ERR_NOMEM: return "out_of_memory";
    case LB_ERR_IO: return "io";
    case LB_ERR_PARSE: return "parse";
    case LB_ERR_UNSUPPORTED: return "unsupported";
    }
    return "unknown_status";
}

const char *lb_version(void) { return LOWBIT_VERSION_STRING; }

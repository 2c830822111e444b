/* Per-thread error message behind lb_last_error(). */
#ifndef LB_UTIL_ERROR_H
#define LB_UTIL_ERROR_H

#include "lowbit.h"

#if defined(__GNUC__)
#define LB__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define LB__PRINTF(a, b)
#endif

/* Records a message for lb_last_error() and returns status, so that a
 * failing path reads: return lb__fail(LB_ERR_ARG, "n=%zu too large", n); */
lb_status lb__fail(lb_status status, const char *fmt, ...) LB__PRINTF(2, 3);

#endif

/* What the plan's files share. */
#ifndef LB_PLAN_INTERNAL_H
#define LB_PLAN_INTERNAL_H

#include "lowbit.h"

/* LB_ERR_ARG naming the term and the shape's values when its parameter
 * count overflows 64 bits (what: the file or preset, for the message). */
lb_status lb__shape_check(const lb_shape *s, const char *what);

#endif

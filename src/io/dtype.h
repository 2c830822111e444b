/* Helpers over the dtype table (dtype.c) for lowbit's own files. */
#ifndef LB_IO_DTYPE_H
#define LB_IO_DTYPE_H

#include "lowbit.h"

/* t's name for a message: "?" for a value outside the table, so a damaged
 * or future dtype still prints. */
const char *lb__dtype_name(lb_dtype t);

#endif

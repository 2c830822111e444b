/* Which x86 vector extensions this CPU and operating system allow. */
#ifndef LB_UTIL_CPU_H
#define LB_UTIL_CPU_H

#include "lowbit.h"

/* Cached after the first call; thread-safe (idempotent computation). */
lb_isa lb__cpu_best_isa(void);

#endif

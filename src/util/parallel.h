/* Splits an index range over threads; each worker gets one contiguous
 * slice, so results never depend on the thread count. */
#ifndef LB_UTIL_PARALLEL_H
#define LB_UTIL_PARALLEL_H

#include <stddef.h>

#include "lowbit.h"

/* Works on [begin, end); returns LB_OK or a status. */
typedef lb_status (*lb__range_fn)(void *ctx, size_t begin, size_t end);

/* Threads to use for a request: threads <= 0 means one per online CPU. */
int lb__thread_count(int threads);

/* Runs fn over [0, n) in at most `threads` slices whose boundaries are
 * multiples of `grain` (so packed outputs split on byte boundaries).
 * Returns the status of the lowest failing slice, so the reported error
 * is the one a single thread would have met first. */
lb_status lb__parallel_for(size_t n, size_t grain, int threads, lb__range_fn fn, void *ctx);

#endif

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

/* Threads worth using for a job of `work` units (bytes read or
 * multiply-adds): at most one per LB__PARALLEL_MIN_WORK, so a small job
 * stays on the calling thread. Handing a job to a sleeping thread costs
 * microseconds on an idle machine and up to a scheduler tick on a busy one,
 * which made decode of a 1 MB model 200x slower on two threads than on one
 * when workers slept between jobs; they now poll for 0.2 ms first
 * (parallel.c), so back-to-back jobs are handed over in well under a
 * microsecond. At 256 KiB, SmolLM2's attention matrices and Q4_K_M's
 * 497 KB down projections ran on one thread while the other polled (26%
 * of its samples): at 32 KiB its int8 decode went 98 -> 121-133 tokens/s
 * (64 KiB: 112-122), stories260K's ppl and generate no slower, loaded or
 * not. */
#define LB__PARALLEL_MIN_WORK ((size_t)32 << 10)
int lb__threads_for(int threads, size_t work);

/* Runs fn over [0, n) in at most `threads` slices whose boundaries are
 * multiples of `grain` (so packed outputs split on byte boundaries).
 * Returns the status of the lowest failing slice, so the reported error
 * is the one a single thread would have met first. */
lb_status lb__parallel_for(size_t n, size_t grain, int threads, lb__range_fn fn, void *ctx);

#endif

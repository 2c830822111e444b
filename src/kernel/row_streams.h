/* Which rows a decode kernel computes together (the AVX-512 kernels of
 * qdot_avx512_run.h, qdot8_vnni_run.h and qdot8k_vnni.c): not R
 * neighbours but row k of each of R streams the range is cut into, so
 * every row is read front to back in a region of its own. R neighbouring
 * rows of a few KB are R interleaved streams inside a page or two, which
 * the hardware prefetchers do not follow (measured on an Intel Xeon, 2 GiB
 * of int4 weights, the same instructions: 0.84 of the read bandwidth with
 * neighbours, 1.03 with streams, each stream prefetched LB__STREAM_AHEAD
 * bytes on). */
#ifndef LB_KERNEL_ROW_STREAMS_H
#define LB_KERNEL_ROW_STREAMS_H

#include <stddef.h>

#include "kernel/qmat.h"
#include "lowbit.h"

#define LB__STREAMS_MAX 4
#define LB__STREAM_AHEAD 2048 /* prefetch distance per stream, rounded up to whole rows */

typedef struct lb__row_streams {
    size_t first[LB__STREAMS_MAX], len[LB__STREAMS_MAX]; /* stream i: rows first[i] .. first[i] + len[i] - 1 */
    size_t per;                                          /* rows of the first, the longest */
    size_t ahead;                                        /* prefetch distance: bytes, whole rows */
} lb__row_streams;

/* Rows r0 .. r1-1 of m as R <= LB__STREAMS_MAX streams (later ones may be
 * shorter or empty). */
static inline void lb__row_streams_init(lb__row_streams *s, const lb__qmat *m, size_t R, size_t r0, size_t r1)
{
    const size_t n = r1 - r0;
    s->per = (n + R - 1) / R;
    for (size_t i = 0; i < R; i++) {
        s->first[i] = r0 + (i * s->per < n ? i * s->per : n);
        s->len[i] = (i + 1) * s->per < n ? s->per : n - (s->first[i] - r0);
    }
    s->ahead = (LB__STREAM_AHEAD + m->row_bytes - 1) / m->row_bytes * m->row_bytes;
}

/* The stream slot i reads at step k: i, or the first once stream i has
 * ended (that row's sums are computed and dropped). */
static inline size_t lb__row_stream_at(const lb__row_streams *s, size_t i, size_t k) { return k < s->len[i] ? i : 0; }

/* The scale codes (and zero points) of rows r .. r+n-1, asked for ahead of
 * their staging: a stream of its own that the rows' prefetching does not
 * cover (the staging's loads waited on memory as long as the dot products
 * took). blocks: scales per row. Prefetches never fault. */
static inline void lb__prefetch_scale_rows(const lb__qmat *m, size_t blocks, size_t r, size_t n)
{
    if (m->plain || m->one_scale || m->ggml_block || m->block_rows > 1 || r >= m->rows) return;
    const char *s = (const char *)m->scales + lb_format_bytes(m->scale_format, r * blocks);
    size_t bytes = lb_format_bytes(m->scale_format, n * blocks);
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(s + o, 0, 3);
    if (!m->zero_points) return;
    const char *z = (const char *)m->zero_points + r * m->zp_row_bytes;
    for (size_t o = 0; o < n * m->zp_row_bytes; o += 64) __builtin_prefetch(z + o, 0, 3);
}

#endif

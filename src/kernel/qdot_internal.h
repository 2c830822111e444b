/* What the decode kernels of every instruction set share: how a matrix is
 * classified, how the scratch is laid out, and the per-call staging of x
 * and per-row-group staging of scales (qdot.h gives the summation order). */
#ifndef LB_KERNEL_QDOT_INTERNAL_H
#define LB_KERNEL_QDOT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernel/qdot.h"
#include "kernel/row_streams.h"

/* How the vector kernels turn a chunk of codes into values. */
typedef enum lb__qkind {
    LB__QK_F32,  /* plain fp32 codes */
    LB__QK_BF16, /* plain bf16: code << 16 */
    LB__QK_F16,  /* fp16 (plain or scaled): vcvtph2ps */
    LB__QK_E4M3, /* fp8 e4m3 (FN): the code moved into an fp16 bit pattern (value * 2^-8) */
    LB__QK_E5M2, /* fp8 e5m2: code << 8 is the fp16 of the same value */
    LB__QK_LUT8, /* other 8-bit floats (fnuz): a 256-entry table, gathered */
    LB__QK_I8,   /* int8 */
    LB__QK_U8,   /* uint8 */
    LB__QK_NIB,  /* 4-bit: a 16-entry table of w per block */
    LB__QK_SIX,  /* 6-bit floats: 32 magnitudes, sign bit 5 */
    LB__QK_E4M3_FINITE, /* never in a plan: the AVX-512 kernels' e4m3 for a matrix without NaN codes
                           (lb__qmat.nan_free); the others decode it as LB__QK_E4M3 */
    LB__QK_SIX_VBMI     /* never in a plan: the AVX-512 VBMI kernels' 6-bit floats whose values are
                           small integers times a power of two (lb__qdot_plan.six_unit); the others
                           decode it as LB__QK_SIX */
} lb__qkind;
/* The kinds a plan holds (the tables indexed by p->kind). Every switch over
 * an lb__qkind lists every kind, with no default: a new kind is a compile
 * error (-Wswitch-enum) in each kernel until it is handled there. */
#define LB__QK_COUNT (LB__QK_SIX + 1)

/* Rows a vector kernel keeps in flight. */
#define LB__QDOT_ROWS 4
/* Rows whose scales can be staged at once (a multiple of LB__QDOT_ROWS):
 * a call into the format layer's decoder per 32 rows, not per 4, which
 * was an eighth of decode time on 576-wide rows in blocks of 32. */
#define LB__QDOT_STAGE_ROWS 32

typedef struct lb__qdot_plan {
    lb__qkind kind;
    const lb_format_info *e;
    size_t cols, blocks;
    size_t chunk;      /* C of qdot.h: 32 for 4-bit elements, else 16 */
    size_t nch;        /* chunks per row: ceil(cols / C) */
    size_t xstride;    /* floats per staged token: nch * C */
    size_t chunk_bytes;/* packed bytes of one whole chunk */
    size_t cpb;        /* chunks per scale block (nch when one block) */
    int plain, affine;
    float *xs;         /* staged x: nx rows of xstride floats (zero padded; 4-bit: even/odd order) */
    float *mul, *zp;   /* LB__QDOT_STAGE_ROWS rows of `blocks` decoded scales (times scale_mul) and zero points */
    float *lut;        /* LB__QK_LUT8: 256 values; NIB: 16 values; SIX: 32 magnitudes */
    float *wrow;       /* the scalar path: one row's xstride values */
    /* LB__QK_SIX where every value is an integer in [-127, 127] times
     * six_unit, a power of two (fp6 e2m3: 1/8), else six_unit = 0:
     * six_units[c] = value(c) / six_unit for each 6-bit code c (a code's
     * sign bit on a zero magnitude gives 0, not -0: qdot_vbmi.c says why
     * that changes no sum) */
    float six_unit;
    _Alignas(64) int8_t six_units[64];
} lb__qdot_plan;

/* The AVX-512 VBMI kernels (qdot_vbmi.c) for a LB__QK_SIX plan with
 * six_unit != 0 whose blocks fit (x staged): 1 when they ran, 0 where the
 * build or the CPU lacks VBMI (the caller runs the AVX-512 kernels). */
int lb__qdot_six_vbmi(const lb__qmat *m, const lb__qdot_plan *p, size_t nx, size_t r0, size_t r1, float *y,
                      size_t ldy);

/* Fills the plan and carves the scratch (lb__qdot_scratch_bytes of it). */
void lb__qdot_plan_init(const lb__qmat *m, void *scratch, lb__qdot_plan *p);

/* 1 when every chunk lies inside one scale block, which is what the vector
 * kernels assume (else they call the scalar reference for the matrix). */
int lb__qdot_blocks_fit(const lb__qmat *m, const lb__qdot_plan *p);

/* Copies x's tokens into p->xs in the kernels' load order, zero padded. */
void lb__qdot_stage_x(const lb__qdot_plan *p, const float *x, size_t nx, size_t ldx);

/* Decodes the scales (times scale_mul) and zero points of rows r .. r+n-1
 * into p->mul / p->zp, row i at (at + i) * blocks (at + n <= LB__QDOT_STAGE_ROWS), with the
 * format layer's bulk decoder of isa: the same function lb_dequantize uses,
 * so the values are the same. */
void lb__qdot_stage_scales(const lb__qmat *m, const lb__qdot_plan *p, lb_isa isa, size_t r, size_t n, size_t at);

/* Scale code i of format f (a scale format) as the format layer decodes
 * it, NaN for codes that are NaN (qdot_scalar.c). */
float lb__qdot_scale_value(lb_format f, const uint8_t *codes, size_t i);

/* Row r's chunk c (c >= the last chunk that may be loaded in place) copied
 * into buf[64] with every element at or past cols as code 0. */
void lb__qdot_tail_chunk(const lb__qmat *m, const lb__qdot_plan *p, const uint8_t *row, size_t c, uint8_t *buf);

/* Slot i of the rows in flight at step k of the row streams s (row_streams.h),
 * whose scales are staged st rows per stream: its codes, first staged scale
 * and zero point (a stream that has ended repeats the first's row; its sums
 * are dropped), and its chunks past `inplace` copied into tail (before the
 * chunk loop: a call inside it would keep the sums out of registers). */
static inline void lb__qdot_stream_slot(const lb__qmat *m, const lb__qdot_plan *p, const lb__row_streams *s, size_t i,
                                        size_t k, size_t st, size_t inplace, const uint8_t **row, const float **mu,
                                        const float **zp, uint8_t tail[2][64])
{
    size_t j = lb__row_stream_at(s, i, k), at = j * st + k % st;
    *row = m->data + (s->first[j] + k) * m->row_bytes;
    *mu = p->mul + at * p->blocks, *zp = p->zp + at * p->blocks;
    for (size_t c = inplace; c < p->nch; c++) lb__qdot_tail_chunk(m, p, *row, c, tail[c - inplace]);
}

/* Chunks of a row that a kernel reading `window` bytes from a chunk's first
 * byte may load in place: whole chunks whose window stays inside the row.
 * With window <= chunk_bytes + 12 at most 2 chunks of a row are left over
 * (the partial one and one whole one), which the kernels' buffers assume. */
size_t lb__qdot_inplace_chunks(const lb__qmat *m, const lb__qdot_plan *p, size_t window);

#endif

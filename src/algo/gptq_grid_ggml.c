/* GPTQ grids for ggml's block types (gptq_grid_ggml.h): params() runs
 * lowbit's ggml quantizer on a group's current values and keeps the block
 * it writes plus, per sub-block, the rule that gives its codes (code_of)
 * and the dequantization of a code (value_of, lowbit's dequantizer's
 * arithmetic, so the bytes decode to exactly GPTQ's values). Block
 * layouts: io/ggml_blocks.h. */
#include "algo/gptq_grid_ggml.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/ggml_blocks.h"
#include "io/ggml_quant_search.h"
#include "io/ggml_quants.h"
#include "io/ggml_quants_k.h"
#include "io/ggml_rows.h"
#include "util/error.h"

/* One sub-block's grid in one row: the rule's parameters a, b (per type,
 * see code_of), the dequantization's scale vd and offset vm, and keep: its
 * stored scale is zero, every code decodes to one value, the quantizer's
 * codes stay. */
typedef struct sub {
    float a, b, vd, vm;
    int keep;
} sub;

struct lb__gptq_ggml {
    lb_dtype t;
    size_t rows, cols, block, block_bytes, nblk, sub_n, subs; /* sub_n values per sub-block, subs per block */
    int imatrix_classic;  /* Q4_0/Q4_1/Q5_0/Q5_1 with an importance vector: ggml's search's codes */
    const float *imatrix; /* cols, or NULL */
    float *sigma2;        /* rows: imatrix_classic's sigma2 of each original row */
    float tscale;         /* NVFP4's tensor scale, else 1 */
    unsigned char *blocks;/* rows x nblk blocks: what the quantizer wrote for each group */
    unsigned char *set;   /* nblk: the group has its parameters */
    sub *s;               /* rows x nblk x subs */
    float *x;             /* rows x block: a group's values, contiguous */
    float *cs;            /* IQ4: the code scales of one row's block (8) */
    size_t fallbacks;
};

int lb__gptq_ggml_supports(lb_dtype t)
{
    switch (t) {
    case LB_DT_Q8_0: case LB_DT_Q5_0: case LB_DT_Q5_1: case LB_DT_Q4_0: case LB_DT_Q4_1: case LB_DT_Q2_K:
    case LB_DT_Q3_K: case LB_DT_Q4_K: case LB_DT_Q5_K: case LB_DT_Q6_K: case LB_DT_IQ4_NL: case LB_DT_IQ4_XS:
    case LB_DT_MXFP4: case LB_DT_NVFP4: return 1;
    case LB_DT_F32: case LB_DT_F16: case LB_DT_BF16: case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2:
    case LB_DT_I8: case LB_DT_I16: case LB_DT_I32: case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL:
    case LB_DT_QUANTIZED: case LB_DT_COUNT: return 0;
    }
    return 0;
}

/* Values per sub-block (the values one scale covers). */
static size_t sub_size(lb_dtype t)
{
    switch (t) {
    case LB_DT_Q2_K: case LB_DT_Q3_K: case LB_DT_Q6_K: case LB_DT_NVFP4: return 16;
    case LB_DT_Q8_0: case LB_DT_Q5_0: case LB_DT_Q5_1: case LB_DT_Q4_0: case LB_DT_Q4_1: case LB_DT_Q4_K:
    case LB_DT_Q5_K: case LB_DT_IQ4_NL: case LB_DT_IQ4_XS: case LB_DT_MXFP4: return 32;
    case LB_DT_F32: case LB_DT_F16: case LB_DT_BF16: case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2:
    case LB_DT_I8: case LB_DT_I16: case LB_DT_I32: case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL:
    case LB_DT_QUANTIZED: case LB_DT_COUNT: break;
    }
    return 0;
}

/* ===== Codes in the block layouts (ggml_blocks.h) ===== */

static inline int nib(const uint8_t *qs, size_t j, size_t half) /* Q4_0's nibble order over 2 * half values */
{
    return j < half ? qs[j] & 0x0F : qs[j - half] >> 4;
}

static inline void put_nib(uint8_t *qs, size_t j, size_t half, int k)
{
    if (j < half) qs[j] = (uint8_t)((qs[j] & 0xF0) | k);
    else qs[j - half] = (uint8_t)((qs[j - half] & 0x0F) | k << 4);
}

/* Element j's code: unsigned for every type but Q8_0 (its signed byte). */
static int get_code(lb_dtype t, const uint8_t *b, size_t j)
{
    switch (t) {
    case LB_DT_Q8_0: return ((const lb__block_q8_0 *)b)->qs[j];
    case LB_DT_Q4_0: return nib(((const lb__block_q4_0 *)b)->qs, j, 16);
    case LB_DT_Q4_1: return nib(((const lb__block_q4_1 *)b)->qs, j, 16);
    case LB_DT_IQ4_NL: return nib(((const lb__block_iq4_nl *)b)->qs, j, 16);
    case LB_DT_MXFP4: return nib(((const lb__block_mxfp4 *)b)->qs, j, 16);
    case LB_DT_Q5_0: {
        const lb__block_q5_0 *y = (const void *)b;
        return nib(y->qs, j, 16) | (int)(lb__le32(y->qh) >> j & 1u) << 4;
    }
    case LB_DT_Q5_1: {
        const lb__block_q5_1 *y = (const void *)b;
        return nib(y->qs, j, 16) | (int)(lb__le32(y->qh) >> j & 1u) << 4;
    }
    case LB_DT_NVFP4: return nib(((const lb__block_nvfp4 *)b)->qs + 8 * (j / 16), j % 16, 8);
    case LB_DT_IQ4_XS: return nib(((const lb__block_iq4_xs *)b)->qs + 16 * (j / 32), j % 32, 16);
    case LB_DT_Q2_K: /* element 128 h + 32 s + l: bits 2 s of qs[32 h + l] */
        return ((const lb__block_q2_k *)b)->qs[32 * (j / 128) + j % 32] >> 2 * (j % 128 / 32) & 3;
    case LB_DT_Q3_K: {
        const lb__block_q3_k *y = (const void *)b;
        int low = y->qs[32 * (j / 128) + j % 32] >> 2 * (j % 128 / 32) & 3;
        return low | (y->hmask[j % 32] >> (j / 32) & 1) << 2;
    }
    case LB_DT_Q4_K: /* element 64 c + 32 t + l: nibble t of qs[32 c + l] */
        return ((const lb__block_q4_k *)b)->qs[32 * (j / 64) + j % 32] >> 4 * (j % 64 / 32) & 0x0F;
    case LB_DT_Q5_K: {
        const lb__block_q5_k *y = (const void *)b;
        int low = y->qs[32 * (j / 64) + j % 32] >> 4 * (j % 64 / 32) & 0x0F;
        return low | (y->qh[j % 32] >> (j / 32) & 1) << 4;
    }
    case LB_DT_Q6_K: { /* element 128 h + r */
        const lb__block_q6_k *y = (const void *)b;
        size_t h = j / 128, r = j % 128;
        int low = y->ql[64 * h + r % 64] >> 4 * (r / 64) & 0x0F;
        return low | (y->qh[32 * h + r % 32] >> 2 * (r / 32) & 3) << 4;
    }
    case LB_DT_F32: case LB_DT_F16: case LB_DT_BF16: case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2:
    case LB_DT_I8: case LB_DT_I16: case LB_DT_I32: case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL:
    case LB_DT_QUANTIZED: case LB_DT_COUNT: break;
    }
    return 0;
}

static void put_code(lb_dtype t, uint8_t *b, size_t j, int k)
{
    switch (t) {
    case LB_DT_Q8_0: ((lb__block_q8_0 *)b)->qs[j] = (int8_t)k; return;
    case LB_DT_Q4_0: put_nib(((lb__block_q4_0 *)b)->qs, j, 16, k); return;
    case LB_DT_Q4_1: put_nib(((lb__block_q4_1 *)b)->qs, j, 16, k); return;
    case LB_DT_IQ4_NL: put_nib(((lb__block_iq4_nl *)b)->qs, j, 16, k); return;
    case LB_DT_MXFP4: put_nib(((lb__block_mxfp4 *)b)->qs, j, 16, k); return;
    case LB_DT_Q5_0: case LB_DT_Q5_1: {
        uint8_t *qs = t == LB_DT_Q5_0 ? ((lb__block_q5_0 *)b)->qs : ((lb__block_q5_1 *)b)->qs;
        uint8_t *qh = t == LB_DT_Q5_0 ? ((lb__block_q5_0 *)b)->qh : ((lb__block_q5_1 *)b)->qh;
        put_nib(qs, j, 16, k & 0x0F);
        qh[j / 8] = (uint8_t)((qh[j / 8] & ~(1u << j % 8)) | (unsigned)(k >> 4 & 1) << j % 8);
        return;
    }
    case LB_DT_NVFP4: put_nib(((lb__block_nvfp4 *)b)->qs + 8 * (j / 16), j % 16, 8, k); return;
    case LB_DT_IQ4_XS: put_nib(((lb__block_iq4_xs *)b)->qs + 16 * (j / 32), j % 32, 16, k); return;
    case LB_DT_Q2_K: case LB_DT_Q3_K: {
        uint8_t *qs = t == LB_DT_Q2_K ? ((lb__block_q2_k *)b)->qs : ((lb__block_q3_k *)b)->qs;
        uint8_t *p = qs + 32 * (j / 128) + j % 32;
        unsigned sh = 2 * (unsigned)(j % 128 / 32);
        *p = (uint8_t)((*p & ~(3u << sh)) | (unsigned)(k & 3) << sh);
        if (t == LB_DT_Q3_K) {
            uint8_t *hm = ((lb__block_q3_k *)b)->hmask + j % 32;
            *hm = (uint8_t)((*hm & ~(1u << j / 32)) | (unsigned)(k >> 2 & 1) << j / 32);
        }
        return;
    }
    case LB_DT_Q4_K: case LB_DT_Q5_K: {
        uint8_t *qs = t == LB_DT_Q4_K ? ((lb__block_q4_k *)b)->qs : ((lb__block_q5_k *)b)->qs;
        uint8_t *p = qs + 32 * (j / 64) + j % 32;
        unsigned sh = 4 * (unsigned)(j % 64 / 32);
        *p = (uint8_t)((*p & ~(0x0Fu << sh)) | (unsigned)(k & 0x0F) << sh);
        if (t == LB_DT_Q5_K) {
            uint8_t *qh = ((lb__block_q5_k *)b)->qh + j % 32;
            *qh = (uint8_t)((*qh & ~(1u << j / 32)) | (unsigned)(k >> 4 & 1) << j / 32);
        }
        return;
    }
    case LB_DT_Q6_K: {
        lb__block_q6_k *y = (void *)b;
        size_t h = j / 128, r = j % 128;
        uint8_t *l = y->ql + 64 * h + r % 64, *hi = y->qh + 32 * h + r % 32;
        unsigned sl = 4 * (unsigned)(r / 64), sh = 2 * (unsigned)(r / 32);
        *l = (uint8_t)((*l & ~(0x0Fu << sl)) | (unsigned)(k & 0x0F) << sl);
        *hi = (uint8_t)((*hi & ~(3u << sh)) | (unsigned)(k >> 4 & 3) << sh);
        return;
    }
    case LB_DT_F32: case LB_DT_F16: case LB_DT_BF16: case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2:
    case LB_DT_I8: case LB_DT_I16: case LB_DT_I32: case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL:
    case LB_DT_QUANTIZED: case LB_DT_COUNT: return;
    }
}

/* The codes a value may take: [lo, hi]. Q8_0 leaves out -128, which ggml
 * never writes (its AVX2 dot products take |q| with a sign trick that
 * -128 breaks). */
static void code_range(lb_dtype t, int *lo, int *hi)
{
    *lo = 0;
    switch (t) {
    case LB_DT_Q8_0: *lo = -127, *hi = 127; return;
    case LB_DT_Q2_K: *hi = 3; return;
    case LB_DT_Q3_K: *hi = 7; return;
    case LB_DT_Q5_0: case LB_DT_Q5_1: case LB_DT_Q5_K: *hi = 31; return;
    case LB_DT_Q6_K: *hi = 63; return;
    case LB_DT_Q4_0: case LB_DT_Q4_1: case LB_DT_Q4_K: case LB_DT_IQ4_NL: case LB_DT_IQ4_XS: case LB_DT_MXFP4:
    case LB_DT_NVFP4: *hi = 15; return;
    case LB_DT_F32: case LB_DT_F16: case LB_DT_BF16: case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2:
    case LB_DT_I8: case LB_DT_I16: case LB_DT_I32: case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL:
    case LB_DT_QUANTIZED: case LB_DT_COUNT: break;
    }
    *hi = 0;
}

/* ===== A code's value, a value's code ===== */

/* The doubled E2M1 values (gguf's kvalues for MXFP4 and NVFP4). */
static const float fp4_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Code k's value in sub-block s, lowbit's dequantizers' operations in
 * their order (ggml_blocks.c, ggml_blocks_k.c, ggml_blocks_iq4.c), the
 * NVFP4 tensor scale applied after, as lb__ggml_round_trip does. */
static inline float value_of(const lb__gptq_ggml *g, const sub *s, int k)
{
    switch (g->t) {
    case LB_DT_Q8_0: return (float)k * s->vd;
    case LB_DT_Q4_0: return s->vd * (float)(k - 8);
    case LB_DT_Q5_0: return s->vd * (float)(k - 16);
    case LB_DT_Q4_1: case LB_DT_Q5_1: return s->vd * (float)k + s->vm;
    case LB_DT_Q2_K: case LB_DT_Q4_K: case LB_DT_Q5_K: return s->vd * (float)k - s->vm;
    case LB_DT_Q3_K: return s->vd * (float)(k - 4);
    case LB_DT_Q6_K: return s->vd * (float)(k - 32);
    case LB_DT_IQ4_NL: case LB_DT_IQ4_XS: return s->vd * (float)lb__kvalues_iq4nl[k];
    case LB_DT_MXFP4: return s->vd * fp4_doubled[k];
    case LB_DT_NVFP4: return s->vd * fp4_doubled[k] * g->tscale;
    case LB_DT_F32: case LB_DT_F16: case LB_DT_BF16: case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2:
    case LB_DT_I8: case LB_DT_I16: case LB_DT_I32: case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL:
    case LB_DT_QUANTIZED: case LB_DT_COUNT: break;
    }
    return 0.0f;
}

static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ggml's nearest_int (ties to even) where it is exact, |v| < 2^22; beyond
 * it ggml's trick gives garbage, which GPTQ's error-compensated values
 * could reach on a block of tiny scale: there the side of v (the clamp
 * follows). ggml's own inputs never get there (|v| <= the code range). */
static inline int nearest_int_safe(float v)
{
    if (fabsf(v) < 4194304.0f) return lb__nearest_int(v);
    return v > 0.0f ? 1 << 23 : -(1 << 23); /* NaN: the low end */
}

/* ggml's best_index_int8 on the IQ4 grid for one value (the branch-free
 * form of lb__iq4_nearest32, one element). */
static inline int iq4_index(float v)
{
    const int8_t *gr = lb__kvalues_iq4nl;
    int ml = 0;
    for (int k = 1; k < 15; k++) ml += !(v < (float)gr[k]);
    return ml + !(v - (float)gr[ml] < (float)gr[ml + 1] - v);
}

/* ggml's best_index_mxfp4: the nearest doubled E2M1 value at scale d, the
 * first of equal errors (compared as bits, as the quantizer does). */
static inline int fp4_index(float x, float d)
{
    int best = 0;
    uint32_t be = lb__bits_from_f32(fabsf(d * fp4_doubled[0] - x));
    for (int k = 1; k < 16; k++) {
        uint32_t e = lb__bits_from_f32(fabsf(d * fp4_doubled[k] - x));
        if ((int32_t)e < (int32_t)be) best = k, be = e;
    }
    return best;
}

/* The code of value x in sub-block s (not a keep one): the rule by which
 * lowbit's (= ggml's) quantizer took that block's final codes, so that the
 * values it quantized get its codes back.
 * - Q8_0: round half away of x / d with a = 1 / d at the unrounded
 *   d = amax / 127 (quantize_row_q8_0_ref: the codes before d goes fp16).
 * - Q4_0, Q5_0 (no imatrix): trunc(x * a + half + 0.5), a = 1 / d at the
 *   unrounded d = max / -half (b = half + 0.5).
 * - Q4_1, Q5_1 (no imatrix): trunc((x - b) * a + 0.5), b the unrounded
 *   block minimum, a = 1 / d unrounded.
 * - Q4_0, Q5_0 with imatrix: nearest_int(a * x) + nmax, a the trial inverse
 *   scale of make_qx_quants that made the block's codes; Q4_1, Q5_1:
 *   nearest_int(a * (x - b)), a make_qkx3_quants' winning trial inverse
 *   scale, b the minimum its codes were taken from. ggml stores the
 *   least-squares scale of those codes, not 1 / a.
 * - K-quants: nearest_int((x + m) / d) (Q3_K, Q6_K: x / d) with the
 *   stored scales' fp32 products a = d, b = m: ggml requantizes every
 *   sub-block with its rounded scales, so these are the nearest points of
 *   the final grid (ties to even on the fp32 quotient).
 * - IQ4_NL, IQ4_XS: best_index_int8(a * x), a = 1 / the scale the codes
 *   were taken at (lb__iq4_code_scales: unrounded, fp32 products).
 * - MXFP4, NVFP4: the nearest point of the final grid (x over the tensor
 *   scale for NVFP4), first of equal errors.
 * Every code is clamped to the type's range: GPTQ's values may leave the
 * block's range, ggml's never do. */
static int code_of(const lb__gptq_ggml *g, const sub *s, float x)
{
    switch (g->t) {
    case LB_DT_Q8_0: {
        float v = x * s->a, m = fabsf(v);
        if (!(m < 127.0f)) return v > 0.0f ? 127 : -127;
        int t = (int)m;
        t += m - (float)t >= 0.5f;
        return v < 0.0f ? -t : t;
    }
    case LB_DT_Q4_0: case LB_DT_Q5_0: case LB_DT_Q4_1: case LB_DT_Q5_1: {
        const int asym = g->t == LB_DT_Q4_1 || g->t == LB_DT_Q5_1;
        const int top = g->t == LB_DT_Q4_0 || g->t == LB_DT_Q4_1 ? 15 : 31;
        if (g->imatrix_classic) {
            if (asym) return clamp_int(nearest_int_safe(s->a * (x - s->b)), 0, top);
            const int nmax = (top + 1) / 2;
            return clamp_int(nearest_int_safe(s->a * x), -nmax, nmax - 1) + nmax;
        }
        float v = asym ? (x - s->b) * s->a + 0.5f : x * s->a + s->b;
        if (!(v >= 1.0f)) return 0;
        return v >= (float)top ? top : (int)v;
    }
    case LB_DT_Q2_K: return clamp_int(nearest_int_safe((x + s->b) / s->a), 0, 3);
    case LB_DT_Q4_K: return clamp_int(nearest_int_safe((x + s->b) / s->a), 0, 15);
    case LB_DT_Q5_K: return clamp_int(nearest_int_safe((x + s->b) / s->a), 0, 31);
    case LB_DT_Q3_K: return clamp_int(nearest_int_safe(x / s->a), -4, 3) + 4;
    case LB_DT_Q6_K: return clamp_int(nearest_int_safe(x / s->a), -32, 31) + 32;
    case LB_DT_IQ4_NL: case LB_DT_IQ4_XS: return iq4_index(s->a * x);
    case LB_DT_MXFP4: return fp4_index(x, s->a);
    case LB_DT_NVFP4: return fp4_index(x / g->tscale, s->a);
    case LB_DT_F32: case LB_DT_F16: case LB_DT_BF16: case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2:
    case LB_DT_I8: case LB_DT_I16: case LB_DT_I32: case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL:
    case LB_DT_QUANTIZED: case LB_DT_COUNT: break;
    }
    return 0;
}

/* The code of x in element j of a kept block b, sub-block s. */
static inline int code_at(const lb__gptq_ggml *g, const sub *s, const uint8_t *b, size_t j, float x)
{
    return s->keep ? get_code(g->t, b, j) : code_of(g, s, x);
}

/* ===== The parameters of one row's block ===== */

/* The value of largest magnitude, the first on ties, with its sign (ggml's
 * scan with a strict compare). */
static float signed_max(const float *x, size_t n, float *amax)
{
    float a = 0.0f, m = 0.0f;
    for (size_t j = 0; j < n; j++)
        if (fabsf(x[j]) > a) a = fabsf(x[j]), m = x[j];
    *amax = a;
    return m;
}

static inline int finite(float v) { return (lb__bits_from_f32(v) & 0x7F800000u) != 0x7F800000u; }

/* Whether rounding x (32 values) with a (and b) gives the block's codes. */
static int codes_match(const lb__gptq_ggml *g, const sub *s, const float *x, const uint8_t *blk)
{
    for (size_t j = 0; j < 32; j++)
        if (code_of(g, s, x[j]) != get_code(g->t, blk, j)) return 0;
    return 1;
}

/* Q4_0/Q5_0/Q4_1/Q5_1 with an importance vector: the rule of ggml's search
 * (ggml_quant_search.c) that made the block's codes. Q4_0/Q5_0
 * (make_qx_quants): its trial inverse scales depend on the block's largest
 * value only, so each is tried in the search's order until one gives the
 * block's codes (the winner is among them; another with the same codes
 * does as well). Q4_1/Q5_1 (make_qkx3_quants): its trials move the minimum
 * as they go, so the search is run again (scalar; the same bits as the
 * AVX2 one) and tells its winner. qw: the block's importance, sigma2 the
 * row's. */
static void classic_search_rule(lb__gptq_ggml *g, sub *s, const float *x, const uint8_t *blk, const float *qw,
                                float sigma2)
{
    const int asym = g->t == LB_DT_Q4_1 || g->t == LB_DT_Q5_1;
    const int nmax = g->t == LB_DT_Q4_0 ? 8 : g->t == LB_DT_Q5_0 ? 16 : g->t == LB_DT_Q4_1 ? 15 : 31;
    if (!asym) {
        float amax, max = signed_max(x, 32, &amax);
        s->a = (float)-nmax / max;
        if (codes_match(g, s, x, blk)) return;
        for (int is = -9; is <= 9; ++is) {
            if (is == 0) continue;
            s->a = -((float)nmax + 0.1f * (float)is) / max;
            if (codes_match(g, s, x, blk)) return;
        }
    } else {
        float w[32], rule[2], the_min;
        uint8_t L[32], aux[32];
        for (int i = 0; i < 32; i++) w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]); /* ggml's importance weights */
        lb__ggml_make_qkx3_quants_rule(32, nmax, x, w, L, &the_min, aux, -0.9f, 0.05f, 36, 0, rule);
        s->a = rule[0], s->b = rule[1];
        if (codes_match(g, s, x, blk)) return;
    }
    /* not expected: the nearest point of the stored grid */
    g->fallbacks++;
    s->a = 1.0f / s->vd;
    if (asym) s->b = -s->vm;
}

/* Q4_K/Q5_K's 6-bit scale and min of sub-block j (ggml_blocks.h). */
static void k4_scale_min(const uint8_t *q, int j, int *d, int *m)
{
    if (j < 4) {
        *d = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

/* E8M0's half scale (ggml_blocks_quant.h's e8m0_half). */
static float e8m0_half(uint32_t e) { return lb__f32_from_bits(e < 2 ? 0x00200000u << e : (e - 1) << 23); }

/* The grids of row r's block (its values x, the quantizer's block blk)
 * into s[0 .. subs). */
static void block_rules(lb__gptq_ggml *g, const float *x, const uint8_t *blk, const float *im, float sigma2, sub *s)
{
    for (size_t k = 0; k < g->subs; k++) s[k] = (sub){0};
    switch (g->t) {
    case LB_DT_Q8_0: {
        float amax;
        signed_max(x, 32, &amax);
        const float d = amax / 127.0f;
        s->a = d != 0.0f ? 1.0f / d : 0.0f;
        s->vd = lb__fp16_to_f32(lb__le16(((const lb__block_q8_0 *)blk)->d));
        s->keep = s->vd == 0.0f || !finite(s->a);
        return;
    }
    case LB_DT_Q4_0: case LB_DT_Q5_0: {
        const float half = g->t == LB_DT_Q4_0 ? 8.0f : 16.0f;
        s->vd = lb__fp16_to_f32(lb__le16(blk)); /* d is the first field of both */
        if (g->imatrix_classic) {
            s->keep = s->vd == 0.0f;
            if (!s->keep) classic_search_rule(g, s, x, blk, im, sigma2);
            return;
        }
        float amax;
        const float d = signed_max(x, 32, &amax) / -half;
        s->a = d != 0.0f ? 1.0f / d : 0.0f;
        s->b = half + 0.5f;
        s->keep = s->vd == 0.0f || !finite(s->a);
        return;
    }
    case LB_DT_Q4_1: case LB_DT_Q5_1: {
        s->vd = lb__fp16_to_f32(lb__le16(blk)), s->vm = lb__fp16_to_f32(lb__le16(blk + 2)); /* d, m first */
        if (g->imatrix_classic) {
            s->keep = s->vd == 0.0f;
            if (!s->keep) classic_search_rule(g, s, x, blk, im, sigma2);
            return;
        }
        float lo = x[0], hi = x[0]; /* ggml's min_max */
        for (size_t j = 1; j < 32; j++) lo = x[j] < lo ? x[j] : lo, hi = x[j] > hi ? x[j] : hi;
        const float d = (hi - lo) / (g->t == LB_DT_Q4_1 ? 15.0f : 31.0f);
        s->a = d != 0.0f ? 1.0f / d : 0.0f;
        s->b = lo;
        s->keep = s->vd == 0.0f || !finite(d) || !finite(s->a);
        return;
    }
    case LB_DT_Q2_K: {
        const lb__block_q2_k *y = (const void *)blk;
        const float d = lb__fp16_to_f32(lb__le16(y->d)), dmin = lb__fp16_to_f32(lb__le16(y->dmin));
        for (int k = 0; k < 16; k++) {
            s[k].a = s[k].vd = d * (float)(y->scales[k] & 0x0F);
            s[k].b = s[k].vm = dmin * (float)(y->scales[k] >> 4);
            s[k].keep = s[k].vd == 0.0f;
        }
        return;
    }
    case LB_DT_Q3_K: {
        const lb__block_q3_k *y = (const void *)blk;
        const float d = lb__fp16_to_f32(lb__le16(y->d));
        int sc[16];
        lb__q3_k_scales(y->scales, sc);
        for (int k = 0; k < 16; k++) {
            s[k].a = s[k].vd = d * (float)sc[k];
            s[k].keep = s[k].vd == 0.0f;
        }
        return;
    }
    case LB_DT_Q4_K: case LB_DT_Q5_K: {
        const uint8_t *dd = blk, *dm = blk + 2, *scales = blk + 4; /* d, dmin, scales first in both */
        const float d = lb__fp16_to_f32(lb__le16(dd)), dmin = lb__fp16_to_f32(lb__le16(dm));
        for (int k = 0; k < 8; k++) {
            int sc, mn;
            k4_scale_min(scales, k, &sc, &mn);
            s[k].a = s[k].vd = d * (float)sc;
            s[k].b = s[k].vm = dmin * (float)mn;
            s[k].keep = s[k].vd == 0.0f;
        }
        return;
    }
    case LB_DT_Q6_K: {
        const lb__block_q6_k *y = (const void *)blk;
        const float d = lb__fp16_to_f32(lb__le16(y->d));
        for (int k = 0; k < 16; k++) {
            s[k].a = s[k].vd = d * (float)y->scales[k];
            s[k].keep = s[k].vd == 0.0f;
        }
        return;
    }
    case LB_DT_IQ4_NL: case LB_DT_IQ4_XS: {
        const int xs = g->t == LB_DT_IQ4_XS;
        lb__iq4_code_scales(xs, x, 1, im, g->cs);
        const float d = lb__fp16_to_f32(lb__le16(blk)); /* d first in both */
        for (size_t k = 0; k < g->subs; k++) {
            s[k].a = g->cs[k] != 0.0f ? 1.0f / g->cs[k] : 0.0f;
            s[k].vd = xs ? d * (float)(lb__iq4_xs_scale_code((const lb__block_iq4_xs *)blk, (int)k) - 32) : d;
            s[k].keep = s[k].vd == 0.0f;
        }
        return;
    }
    case LB_DT_MXFP4:
        s->a = s->vd = e8m0_half(((const lb__block_mxfp4 *)blk)->e);
        return;
    case LB_DT_NVFP4:
        for (int k = 0; k < 4; k++) {
            s[k].a = s[k].vd = lb__nvfp4_scale_half(((const lb__block_nvfp4 *)blk)->d[k]);
            s[k].keep = s[k].vd == 0.0f;
        }
        return;
    case LB_DT_F32: case LB_DT_F16: case LB_DT_BF16: case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2:
    case LB_DT_I8: case LB_DT_I16: case LB_DT_I32: case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL:
    case LB_DT_QUANTIZED: case LB_DT_COUNT: return;
    }
}

/* ===== The callbacks ===== */

static lb_status ggml_params(void *ctx, const float *w, size_t ld, size_t rows, size_t c0, size_t n)
{
    lb__gptq_ggml *g = ctx;
    if (rows != g->rows || n != g->block || c0 % g->block || c0 + n > g->cols)
        return lb__fail(LB_ERR_ARG, "GPTQ %s grid: a group of %zu columns at %zu (blocks of %zu)",
                        lb_dtype_get(g->t)->name, n, c0, g->block);
    const size_t gi = c0 / g->block;
    for (size_t r = 0; r < rows; r++)
        for (size_t t = 0; t < n; t++) g->x[r * n + t] = w[r * ld + t] / g->tscale; /* NVFP4: over the tensor scale */
    const float *im = g->imatrix ? g->imatrix + c0 : NULL;
    for (size_t r = 0; r < rows; r++) {
        const float *x = g->x + r * n;
        uint8_t *blk = g->blocks + (r * g->nblk + gi) * g->block_bytes;
        lb_status st = LB_OK;
        if (g->imatrix_classic) {
            for (size_t t = 0; t < n; t++)
                if (!isfinite(x[t])) return lb__fail(LB_ERR_NAN, "GPTQ: row %zu column %zu is not finite", r, c0 + t);
            lb__ggml_classic c = g->t == LB_DT_Q4_0 ? LB__CLASSIC_Q4_0 : g->t == LB_DT_Q4_1 ? LB__CLASSIC_Q4_1
                                 : g->t == LB_DT_Q5_0 ? LB__CLASSIC_Q5_0 : LB__CLASSIC_Q5_1;
            lb__ggml_quantize_classic_sigma2(c, x, blk, n, im, g->sigma2[r]);
        } else {
            st = lb__ggml_quantize_rows(g->t, x, 1, n, im, blk);
        }
        if (st != LB_OK) return lb__fail(st, "GPTQ: quantizing row %zu, columns %zu..%zu: %s", r, c0, c0 + n - 1,
                                         lb_last_error());
        block_rules(g, x, blk, im, g->sigma2 ? g->sigma2[r] : 0.0f, g->s + (r * g->nblk + gi) * g->subs);
    }
    g->set[gi] = 1;
    return LB_OK;
}

static void ggml_round(void *ctx, size_t c, const float *col, size_t rows, float *out)
{
    const lb__gptq_ggml *g = ctx;
    const size_t gi = c / g->block, j = c % g->block, k = j / g->sub_n;
    for (size_t r = 0; r < rows; r++) {
        const size_t b = r * g->nblk + gi;
        const sub *s = g->s + b * g->subs + k;
        out[r] = value_of(g, s, code_at(g, s, g->blocks + b * g->block_bytes, j, col[r]));
    }
}

lb__gptq_grid lb__gptq_ggml_grid(lb__gptq_ggml *g)
{
    return (lb__gptq_grid){.group = g ? g->block : 0, .params = ggml_params, .round = ggml_round, .ctx = g};
}

float lb__gptq_ggml_tensor_scale(const lb__gptq_ggml *g) { return g ? g->tscale : 1.0f; }
size_t lb__gptq_ggml_fallbacks(const lb__gptq_ggml *g) { return g ? g->fallbacks : 0; }

/* ===== Lifetime ===== */

void lb__gptq_ggml_free(lb__gptq_ggml *g)
{
    if (!g) return;
    free(g->sigma2), free(g->blocks), free(g->set), free(g->s), free(g->x), free(g->cs);
    free(g);
}

lb_status lb__gptq_ggml_new(lb_dtype t, const float *w0, size_t rows, size_t cols, const float *imatrix,
                            lb__gptq_ggml **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb__gptq_ggml_new: out is NULL");
    *out = NULL;
    const lb_dtype_info *d = lb_dtype_get(t);
    if (!lb__gptq_ggml_supports(t) || !lb__ggml_rows_can(t))
        return lb__fail(LB_ERR_UNSUPPORTED, "GPTQ has no grid for %s (the ggml block types lowbit writes)",
                        d ? d->name : "an unknown dtype");
    if (!w0 || rows == 0 || cols == 0 || cols % d->block)
        return lb__fail(LB_ERR_ARG, "GPTQ %s grid: a %zu x %zu weight (rows of whole blocks of %u)", d->name, rows,
                        cols, d->block);
    for (size_t k = 0; k < rows * cols; k++)
        if (!isfinite(w0[k]))
            return lb__fail(LB_ERR_NAN, "GPTQ %s grid: element %zu (row %zu, column %zu) is not finite", d->name, k,
                            k / cols, k % cols);
    lb__gptq_ggml *g = calloc(1, sizeof *g);
    if (!g) return lb__fail(LB_ERR_NOMEM, "GPTQ %s grid: out of memory", d->name);
    g->t = t, g->rows = rows, g->cols = cols, g->block = d->block, g->block_bytes = d->block_bytes;
    g->nblk = cols / d->block, g->sub_n = sub_size(t), g->subs = g->block / g->sub_n;
    g->imatrix = imatrix;
    g->imatrix_classic = imatrix && (t == LB_DT_Q4_0 || t == LB_DT_Q4_1 || t == LB_DT_Q5_0 || t == LB_DT_Q5_1);
    g->tscale = t == LB_DT_NVFP4 ? lb__ggml_nvfp4_scale(w0, rows * cols) : 1.0f;
    g->blocks = calloc(rows * g->nblk, g->block_bytes);
    g->set = calloc(g->nblk, 1);
    g->s = calloc(rows * g->nblk * g->subs, sizeof *g->s);
    g->x = malloc(rows * g->block * sizeof *g->x);
    g->cs = malloc(8 * sizeof *g->cs);
    g->sigma2 = g->imatrix_classic ? malloc(rows * sizeof *g->sigma2) : NULL;
    if (!g->blocks || !g->set || !g->s || !g->x || !g->cs || (g->imatrix_classic && !g->sigma2)) {
        lb__gptq_ggml_free(g);
        return lb__fail(LB_ERR_NOMEM, "GPTQ %s grid: out of memory for a %zu x %zu weight", d->name, rows, cols);
    }
    for (size_t r = 0; g->sigma2 && r < rows; r++) { /* ggml's: sum of squares in order, over cols */
        float s = 0;
        for (size_t c = 0; c < cols; c++) s += w0[r * cols + c] * w0[r * cols + c];
        g->sigma2[r] = s / (float)cols;
    }
    *out = g;
    return LB_OK;
}

/* ===== The bytes ===== */

lb_status lb__gptq_ggml_bytes(const lb__gptq_ggml *g, const float *q, void *dst)
{
    if (!g || !q || !dst) return lb__fail(LB_ERR_ARG, "lb__gptq_ggml_bytes: NULL argument");
    const char *name = lb_dtype_get(g->t)->name;
    for (size_t gi = 0; gi < g->nblk; gi++)
        if (!g->set[gi]) return lb__fail(LB_ERR_ARG, "GPTQ %s grid: columns %zu.. have no parameters", name, gi * g->block);
    int lo, hi;
    code_range(g->t, &lo, &hi);
    uint8_t *out = dst;
    for (size_t r = 0; r < g->rows; r++)
        for (size_t gi = 0; gi < g->nblk; gi++) {
            const size_t b = r * g->nblk + gi;
            uint8_t *blk = out + b * g->block_bytes;
            memcpy(blk, g->blocks + b * g->block_bytes, g->block_bytes);
            for (size_t j = 0; j < g->block; j++) {
                const sub *s = g->s + b * g->subs + j / g->sub_n;
                const float x = q[r * g->cols + gi * g->block + j];
                const uint32_t xb = lb__bits_from_f32(x);
                /* the rule's code; else (a value it does not map back, e.g.
                 * two codes of one value) any code of exactly this value */
                int k = code_at(g, s, g->blocks + b * g->block_bytes, j, x);
                if (lb__bits_from_f32(value_of(g, s, k)) != xb) {
                    k = lo - 1;
                    for (int c = lo; c <= hi && k < lo; c++)
                        if (lb__bits_from_f32(value_of(g, s, c)) == xb) k = c;
                    if (k < lo)
                        return lb__fail(LB_ERR_ARG, "GPTQ %s grid: the value %g at row %zu, column %zu is on no point "
                                        "of its block's grid", name, (double)x, r, gi * g->block + j);
                }
                put_code(g->t, blk, j, k);
            }
        }
    return LB_OK;
}

/* ===== The whole way ===== */

/* Plain rounding through the grid: each group's parameters from w, then
 * each of its columns rounded (the RTN blocks). */
static lb_status grid_rtn(lb__gptq_ggml *g, float *w)
{
    lb__gptq_grid grid = lb__gptq_ggml_grid(g);
    float *col = malloc(2 * g->rows * sizeof *col);
    if (!col) return lb__fail(LB_ERR_NOMEM, "GPTQ grid: out of memory");
    float *res = col + g->rows;
    lb_status st = LB_OK;
    for (size_t a = 0; st == LB_OK && a < g->cols; a += g->block) {
        st = grid.params(g, w + a, g->cols, g->rows, a, g->block);
        for (size_t c = a; st == LB_OK && c < a + g->block; c++) {
            for (size_t r = 0; r < g->rows; r++) col[r] = w[r * g->cols + c];
            grid.round(g, c, col, g->rows, res);
            for (size_t r = 0; r < g->rows; r++) w[r * g->cols + c] = res[r];
        }
    }
    free(col);
    return st;
}

lb_status lb__gptq_ggml_run(lb_dtype t, float *w, size_t rows, size_t cols, const double *h, const float *imatrix,
                        const lb__gptq_options *o, void *dst, float *tensor_scale, lb__gptq_report *rep)
{
    if (!dst || (h && !o)) return lb__fail(LB_ERR_ARG, "lb__gptq_ggml_run: NULL argument");
    lb__gptq_ggml *g = NULL;
    lb_status st = lb__gptq_ggml_new(t, w, rows, cols, imatrix, &g);
    if (st != LB_OK) return st;
    if (h) {
        lb__gptq_grid grid = lb__gptq_ggml_grid(g);
        st = lb__gptq(w, rows, cols, h, o, &grid, rep);
    } else {
        st = grid_rtn(g, w);
    }
    if (st == LB_OK) st = lb__gptq_ggml_bytes(g, w, dst);
    if (st == LB_OK && tensor_scale) *tensor_scale = g->tscale;
    lb__gptq_ggml_free(g);
    return st;
}

lb_status lb__gptq_ggml_test(int t, float *w, size_t rows, size_t cols, const double *h, const float *imatrix,
                             int actorder, int static_groups, int threads, void *dst, float *tensor_scale,
                             double *stats)
{
    if (t < 0 || t >= (int)LB_DT_COUNT) return lb__fail(LB_ERR_ARG, "lb__gptq_ggml_test: dtype %d", t);
    lb__gptq_options o = {.damp = 0.01, .actorder = actorder, .static_groups = static_groups, .threads = threads};
    lb__gptq_report rep = {0};
    lb__gptq_ggml *g = NULL;
    lb_status st = lb__gptq_ggml_new((lb_dtype)t, w, rows, cols, imatrix, &g);
    if (st != LB_OK) return st;
    if (h) {
        lb__gptq_grid grid = lb__gptq_ggml_grid(g);
        st = lb__gptq(w, rows, cols, h, &o, &grid, &rep);
    } else {
        st = grid_rtn(g, w);
    }
    if (st == LB_OK) st = lb__gptq_ggml_bytes(g, w, dst);
    if (st == LB_OK && tensor_scale) *tensor_scale = g->tscale;
    if (stats) {
        stats[0] = (double)g->fallbacks;
        stats[1] = rep.err_proxy;
    }
    lb__gptq_ggml_free(g);
    return st;
}

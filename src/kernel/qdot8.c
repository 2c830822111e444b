/* The int8-activation decode path (qdot8.h): which matrices it takes, the
 * activations quantized and staged once per call, the weight scales
 * staged per batch of rows, the scalar reference (qdot8.h's definition
 * read literally) and the product split over threads. */
#include "kernel/qdot8.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "format/convert.h"
#include "kernel/qdot_internal.h"
#include "kernel/w8a8_kernels.h"
#include "quant/qkernels.h"
#include "util/cpu.h"
#include "util/bits.h"
#include "util/error.h"
#include "util/parallel.h"

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* How the path takes an element format. Every format is listed: a new
 * one is a compile error here. */
typedef enum element_kind {
    EK_NONE,  /* not taken */
    EK_FOUR,  /* int4, uint4, fp4 e2m1: 4-bit codes, integer values u */
    EK_SIX,   /* fp6 e2m3: eight times its value is an integer, -60 .. 60 */
    EK_EIGHT, /* int8 */
    EK_FP8    /* fp8 e4m3 / e5m2: values exact in bf16, summed in pairs (qdot8.h) */
} element_kind;

static element_kind kind_of(lb_format f)
{
    switch (f) {
    case LB_FMT_INT4:
    case LB_FMT_UINT4:
    case LB_FMT_FP4_E2M1: return EK_FOUR;
    case LB_FMT_INT8: return EK_EIGHT;
    case LB_FMT_FP6_E2M3: return EK_SIX;
    case LB_FMT_FP8_E4M3:
    case LB_FMT_FP8_E5M2: return EK_FP8;
    case LB_FMT_UINT8:          /* u up to 255: AVX2's maddubs pairs would saturate */
    case LB_FMT_FP8_E4M3FNUZ:   /* code 0x80 is NaN: not a sign bit over a magnitude */
    case LB_FMT_FP8_E5M2FNUZ:
    case LB_FMT_FP6_E3M2:       /* not small integers times one scale, nor 8-bit codes */
    case LB_FMT_FP32:
    case LB_FMT_BF16:
    case LB_FMT_FP16:
    case LB_FMT_E8M0:
    case LB_FMT_UE4M3:
    case LB_FMT_COUNT: return EK_NONE;
    }
    return EK_NONE;
}

int lb__qdot8_bf16_pairs(const lb__qmat *m) { return !m->ggml_block && kind_of(m->element) == EK_FP8; }

size_t lb__qdot8_lane_elems(const lb__qmat *m) { return kind_of(m->element) == EK_FOUR ? 8 : 4; }

static size_t blocks_of(const lb__qmat *m) { return m->blocks ? m->blocks : 1; }

float lb__qdot8_unit(lb_format element)
{
    return element == LB_FMT_FP4_E2M1 ? 0.5f : element == LB_FMT_FP6_E2M3 ? 0.125f : 1.0f;
}

int lb__qdot8_supported(const lb__qmat *m) { return lb__qdot8_takes(m, lb__qdot8_get(lb_isa_active())); }

int lb__qdot8_takes(const lb__qmat *m, const lb__qdot8_set *set)
{
    if (m->ggml_block) return lb__qdot8k_type(m->ggml) && lb__qdot8k_cols_ok(m);
    const element_kind k = kind_of(m->element);
    if (m->plain || k == EK_NONE) return 0;
    if (k == EK_SIX && (!set->six || m->zero_points)) return 0; /* fp6: where a set unpacks it */
    if (k == EK_FP8 && (!set->fp8 || m->zero_points)) return 0; /* fp8: where a set has the bf16 pair products */
    const lb_format_info *sf = lb_format_get(m->scale_format);
    if (!sf || !(m->scale_format == LB_FMT_FP32 || m->scale_format == LB_FMT_BF16 || m->scale_format == LB_FMT_FP16 ||
                 m->scale_format == LB_FMT_E8M0 || m->scale_format == LB_FMT_UE4M3))
        return 0;
    size_t e = lb__qdot8_lane_elems(m), g = LB__QDOT8_LANES * e;
    if (blocks_of(m) == 1 || m->one_scale) return 1;
    /* fp8: a lane's four elements lie in one 16-element run (qdot8.h) */
    const size_t unit = k == EK_FP8 ? 16 : e;
    return m->block % unit == 0 && (g % m->block == 0 || m->block % g == 0);
}

/* The integer value u of an element code: the value over lb__qdot8_unit
 * (the code for integers, twice the value for fp4, eight times for fp6
 * e2m3; exact: a power of two). */
static int unit_value(lb_format f, uint32_t code)
{
    const lb_format_info *e = lb_format_get(f);
    return (int)(lb__f32_from_bits(e->decode(e, code)) / lb__qdot8_unit(f));
}

void lb__qdot8_code_table(lb_format element, int off, uint8_t *lut, size_t n)
{
    for (uint32_t c = 0; c < n; c++) lut[c] = (uint8_t)(unit_value(element, c) + off);
}

static void build_bf16_tables(lb_format element, uint8_t t[256])
{
    const lb_format_info *f = lb_format_get(element);
    for (uint32_t c = 0; c < 128; c++) {
        uint32_t b = f->decode(f, c) >> 16; /* exact: an fp8 value has at most 4 significant bits */
        t[c] = (uint8_t)(b & 0xFF), t[128 + c] = (uint8_t)(b >> 8);
    }
}

/* Built once per format and kept: the decoder costs ~1 us a table, and a
 * kernel call needs one (rebuilt per call it was a tenth of SmolLM2's
 * decode time in this mode). The first caller to claim a slot fills it;
 * until it is marked ready, callers use their own copy. */
static uint8_t bf16_tables[2][256];
static atomic_int bf16_state[2]; /* 0 empty, 1 being filled, 2 ready */

const uint8_t *lb__qdot8_bf16_tables(lb_format element, uint8_t local[256])
{
    const int k = element == LB_FMT_FP8_E5M2;
    if (atomic_load_explicit(&bf16_state[k], memory_order_acquire) == 2) return bf16_tables[k];
    build_bf16_tables(element, local);
    int empty = 0;
    if (atomic_compare_exchange_strong(&bf16_state[k], &empty, 1)) {
        memcpy(bf16_tables[k], local, 256);
        atomic_store_explicit(&bf16_state[k], 2, memory_order_release);
    }
    return local;
}

void lb__qdot8_nibble_table(lb_format element, int off, uint8_t lut[16]) { lb__qdot8_code_table(element, off, lut, 16); }

/* whole cache lines: a row's stores and the kernels' loads never split one */
size_t lb__qdot8_stage_stride(const lb__qmat *m) { return (blocks_of(m) + LB__QDOT8_LANES + 15) / 16 * 16; }

size_t lb__qdot8_scratch_bytes(const lb__qmat *m)
{
    return 2 * align64(LB__QDOT8_STAGE_ROWS * lb__qdot8_stage_stride(m) * sizeof(float));
}

size_t lb__qdot8_group_block(const lb__qmat *m, size_t g)
{
    if (blocks_of(m) == 1 || m->one_scale) return 0;
    return g * LB__QDOT8_LANES * lb__qdot8_lane_elems(m) / m->block;
}

void lb__qdot8_lane_blocks(const lb__qmat *m, int32_t lane_block[LB__QDOT8_LANES])
{
    size_t e = lb__qdot8_lane_elems(m);
    for (size_t l = 0; l < LB__QDOT8_LANES; l++)
        lane_block[l] = blocks_of(m) == 1 || m->one_scale ? 0 : (int32_t)(l * e / m->block);
}

/* w[nb .. nb + 16) = w[nb - 1]: what a kernel loading 16 from the last
 * block reads (qdot8.h), not the whole stride (31 floats one by one after
 * a per-channel row's one scale were most of its staging, 12% of SmolLM2's
 * int8:channel decode) */
static void fill_tail(float *w, size_t nb)
{
    const float last = w[nb - 1];
    for (size_t k = 0; k < LB__QDOT8_LANES; k++) w[nb + k] = last; /* a fixed count: vector stores */
}

/* Block scales of rows r .. r+n-1 without zero points back to back (the
 * rows' codes are contiguous): decoded in one call of isa's decoder, then
 * scaled, then 16 zeros after. 0 if a scale came out NaN or infinite (a
 * row's last group reads into the next row's scales, in lanes whose sums
 * are 0: harmless only for finite scales), else 1. */
static int stage_back_to_back(const lb__qmat *m, lb_isa isa, lb__qdot8_scale_fn scale, lb__qdot8_decode_fn decode,
                              size_t r, size_t n, float *mw)
{
    const size_t nb = m->blocks, total = n * nb, vec = total / 16 * 16;
    const float f = lb__qdot8_unit(m->element), sm = m->scale_mul;
    const uint8_t *codes = m->scales + lb_format_bytes(m->scale_format, r * nb);
    int finite = decode ? decode(m->scale_format, codes, total, sm, f, mw) : -1;
    if (finite < 0) { /* the format layer's decoder, then the products */
        if (vec) lb__decode_kernel(isa)(lb_format_get(m->scale_format), codes, vec, mw);
        for (size_t b = vec; b < total; b++) mw[b] = lb__qdot_scale_value(m->scale_format, codes, b);
        if (sm != 1.0f || f != 1.0f) scale(mw, total, sm, f); /* products by 1 are exact: skipped */
        finite = lb__qkernels_get(isa)->first_nonfinite(mw, total) == total;
    }
    if (!finite) return 0;
    memset(mw + total, 0, LB__QDOT8_LANES * sizeof *mw);
    return 1;
}

size_t lb__qdot8_stage_rows(const lb__qmat *m, lb_isa isa, lb__qdot8_scale_fn scale, lb__qdot8_decode_fn decode,
                            size_t r, size_t n, float *mw, int32_t *zp)
{
    size_t nb = blocks_of(m), st = lb__qdot8_stage_stride(m);
    const float f = lb__qdot8_unit(m->element), sm = m->scale_mul;
    if (scale && nb > 1 && !m->one_scale && m->block_rows <= 1 && !m->zero_points &&
        stage_back_to_back(m, isa, scale, decode, r, n, mw))
        return nb;
    if (m->blocks == 1 && !m->one_scale && m->block_rows <= 1) {
        /* one scale a row (per-channel): the n rows' codes lie together and
         * are decoded at once (row by row this was 12-16% of SmolLM2's
         * int8:channel decode: it has ~190k rows a token) */
        float v[LB__QDOT8_STAGE_ROWS];
        const uint8_t *codes = m->scales + lb_format_bytes(m->scale_format, r);
        if (isa != LB_ISA_SCALAR) lb__decode_kernel(isa)(lb_format_get(m->scale_format), codes, n, v);
        else for (size_t i = 0; i < n; i++) v[i] = lb__qdot_scale_value(m->scale_format, codes, i);
        for (size_t i = 0; i < n; i++) {
            float *w = mw + i * st;
            w[0] = sm != 1.0f || f != 1.0f ? (v[i] * sm) * f : v[i]; /* products by 1 are exact: skipped */
            fill_tail(w, 1);
        }
        if (m->zero_points) lb__qdot8_stage_zero_points(m, r, n, zp);
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        float *w = mw + i * st;
        if (m->one_scale) {
            w[0] = lb__qdot_scale_value(m->scale_format, m->scales, 0);
            for (size_t b = 1; b < nb; b++) w[b] = w[0];
        } else {
            size_t first = lb__qmat_scale_row(m, r + i) * nb;
            const uint8_t *codes = m->scales + lb_format_bytes(m->scale_format, first);
            /* whole vectors through the format layer's decoder (the same
             * values), the rest one by one; e8m0/ue4m3 codes are bytes, the
             * others start on their own byte too */
            size_t vec = isa == LB_ISA_SCALAR ? 0 : nb / 16 * 16;
            if (vec) lb__decode_kernel(isa)(lb_format_get(m->scale_format), codes, vec, w);
            for (size_t b = vec; b < nb; b++) w[b] = lb__qdot_scale_value(m->scale_format, codes, b);
        }
        if (sm != 1.0f || f != 1.0f) { /* products by 1 are exact: skipped */
            if (scale) scale(w, nb, sm, f);
            else for (size_t b = 0; b < nb; b++) w[b] = (w[b] * sm) * f;
        }
        fill_tail(w, nb);
    }
    if (m->zero_points) lb__qdot8_stage_zero_points(m, r, n, zp);
    return st;
}

void lb__qdot8_stage_zero_points(const lb__qmat *m, size_t r, size_t n, int32_t *zp)
{
    size_t nb = blocks_of(m), st = lb__qdot8_stage_stride(m);
    const int nib = kind_of(m->element) == EK_FOUR, sign = m->element != LB_FMT_UINT4;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *zrow = m->zero_points + (m->one_scale ? 0 : r + i) * m->zp_row_bytes;
        int32_t *z = zp + i * st;
        /* the element format's codes (lowbit.h: two's complement, 4-bit two
         * per byte low first): decoded here, not through the generic code
         * loader, which took 5 ms per token on SmolLM2's int4:g128:affine head */
        if (nib && sign) /* (c ^ 8) - 8 sign-extends a 4-bit code without a branch (a random one per block) */
            for (size_t b = 0; b < nb; b++) z[b] = (((zrow[b / 2] >> (4 * (b & 1))) & 15) ^ 8) - 8;
        else if (nib)
            for (size_t b = 0; b < nb; b++) z[b] = (zrow[b / 2] >> (4 * (b & 1))) & 15;
        else
            for (size_t b = 0; b < nb; b++) z[b] = (int8_t)zrow[b];
        /* none past the last block: lanes there hold no element of the
         * row (codes 0, lane sums 0), so whatever zero point a kernel loads
         * for them adds 0 (the pads cost a third of decode on 5-block rows) */
    }
}

/* ---- activations ---- */

/* Position of element e of a group in the staged codes. */
static size_t staged_pos(int nib, size_t e) { return nib ? (e & 1) * 64 + e / 2 : e; }

/* Position of element e of a group in fp8's staged bf16 words: the
 * elements 16L + i of each 16-element run L go to word 8L + i for i < 8
 * (the first 32 words: pair operand A) and 32 + 8L + i - 8 for i >= 8 (B). */
size_t lb__qdot8_bf16_pos(size_t e) { return (e & 8 ? 32 : 0) + (e >> 4) * 8 + (e & 7); }

/* The bf16 of an int8 code: exact, its float's upper half. */
static uint16_t bf16_of_code(int8_t c) { return (uint16_t)(lb__f32_bits((float)c) >> 16); }

void lb__qdot8_act8_free(lb__act8 *a)
{
    free(a->buf);
    memset(a, 0, sizeof *a);
}

/* Quantizes and stages x's n tokens for m with the set's quantizer and
 * offset. LB_ERR_NOMEM only. */
lb_status lb__qdot8_stage(const lb__qmat *m, const float *x, size_t n, const lb__qdot8_set *set, lb__act8 *a)
{
    const size_t e = lb__qdot8_lane_elems(m), G = LB__QDOT8_LANES * e, cols = m->cols;
    const int nib = e == 8, off = set->offset(m->element), pairs = lb__qdot8_bf16_pairs(m);
    memset(a, 0, sizeof *a);
    a->n = n;
    a->groups = (cols + G - 1) / G;
    const size_t padded = a->groups * G;
    a->stride = pairs ? 2 * padded : padded; /* bytes: fp8's codes are staged as bf16 */
    a->lanes = a->groups * LB__QDOT8_LANES;
    int affine = m->zero_points != NULL;
    size_t qb = align64(n * a->stride), lb = align64(n * a->lanes * 4);
    a->buf = aligned_alloc(64, qb + (affine ? 3 : 2) * lb);
    if (!a->buf) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu staged activations", n * a->stride);
    uint8_t *p = a->buf;
    a->q = (int8_t *)p, p += qb;
    a->cxs = (int32_t *)p, p += lb;
    a->d = (float *)p, p += lb;
    a->xs = affine ? (int32_t *)p : NULL;
    if (set->stage_token && !pairs) {
        for (size_t t = 0; t < n; t++)
            set->stage_token(x + t * cols, cols, a->groups, e, off, a->q + t * a->stride, a->cxs + t * a->lanes,
                             affine ? a->xs + t * a->lanes : NULL, a->d + t * a->lanes);
        return LB_OK;
    }
    for (size_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        int8_t *q = a->q + t * a->stride;
        int32_t *cxs = a->cxs + t * a->lanes, *xs = affine ? a->xs + t * a->lanes : NULL;
        float *d = a->d + t * a->lanes;
        for (size_t k0 = 0; k0 < padded; k0 += LB__ACT8_BLOCK) {
            int8_t c[LB__ACT8_BLOCK] = {0}; /* past the row: code 0 */
            float s = 0.0f;                  /* a block wholly past it: d = 0 */
            if (k0 < cols) s = set->quant->quant_i8(xt + k0, cols - k0 < LB__ACT8_BLOCK ? cols - k0 : LB__ACT8_BLOCK, 0.0f, c);
            if (pairs) {
                /* the block's two runs of 16 (lb__qdot8_bf16_pos): elements 0-7 of run L to words 8L.., 8-15 to 32 + 8L.. */
                uint16_t *qg = (uint16_t *)(void *)q + k0 / G * G + k0 % G / 16 * 8;
                for (size_t r = 0; r < 2; r++)
                    for (size_t i = 0; i < 8; i++)
                        qg[8 * r + i] = bf16_of_code(c[16 * r + i]), qg[32 + 8 * r + i] = bf16_of_code(c[16 * r + 8 + i]);
            } else if (nib) { /* even elements to the group's first 64 codes, odd ones to the next (staged_pos) */
                int8_t *qe = q + k0 / G * G + k0 % G / 2;
                for (size_t i = 0; i < LB__ACT8_BLOCK / 2; i++) qe[i] = c[2 * i], qe[64 + i] = c[2 * i + 1];
            } else {
                memcpy(q + k0, c, sizeof c);
            }
            /* lane sums in fixed-length loops the compiler unrolls (element
             * by element, with the scatter through staged_pos, the staging
             * was 8% of SmolLM2's mxfp4 decode, on one thread while the
             * other waits) */
            int32_t sums[LB__ACT8_BLOCK / 4];
            for (size_t i = 0; i < LB__ACT8_BLOCK / 4; i++) sums[i] = c[4 * i] + c[4 * i + 1] + c[4 * i + 2] + c[4 * i + 3];
            if (e == 8) /* in place: sums[i] reads 2i and 2i + 1, not yet written */
                for (size_t i = 0; i < LB__ACT8_BLOCK / 8; i++) sums[i] = sums[2 * i] + sums[2 * i + 1];
            const size_t l0 = k0 / e;
            for (size_t i = 0; i < LB__ACT8_BLOCK / e; i++) {
                d[l0 + i] = s, cxs[l0 + i] = -off * sums[i];
                if (xs) xs[l0 + i] = sums[i];
            }
        }
    }
    return LB_OK;
}

/* ---- the reference ---- */

/* Element k's code (k < cols). */
static uint32_t element_code(const lb__qmat *m, const uint8_t *row, size_t k)
{
    switch (kind_of(m->element)) {
    case EK_FOUR: return (row[k / 2] >> (4 * (k & 1))) & 15u;
    case EK_SIX: { /* code k at bits 6k .. 6k + 5 of the row, little-endian; the second byte only where it reaches it */
        size_t bit = 6 * k;
        uint32_t c = row[bit / 8] >> (bit % 8);
        if (bit % 8 > 2) c |= (uint32_t)row[bit / 8 + 1] << (8 - bit % 8);
        return c & 63u;
    }
    case EK_EIGHT:
    case EK_FP8: return row[k]; /* the byte (read only here: past a 4- or 6-bit row's bytes it would be out of bounds) */
    case EK_NONE: break;
    }
    return 0; /* not reached: lb__qdot8_takes refuses the rest */
}

static int element_unit(const lb__qmat *m, const uint8_t *row, size_t k)
{
    if (k >= m->cols) return 0; /* padding: its activation code is 0 anyway */
    return unit_value(m->element, element_code(m, row, k));
}

static float bf16_value(uint16_t h) { return lb__f32_from_bits((uint32_t)h << 16); }

/* fp8: lane l's sum in group g, as qdot8.h defines it (vdpbf16ps's order:
 * the odd element of a pair first, operand A's pair, then B's). */
static float pair_lane_sum(const lb__qmat *m, const uint8_t *row, const uint16_t *xg, size_t g, size_t l)
{
    static const size_t order[4] = {1, 0, 9, 8};
    const lb_format_info *f = lb_format_get(m->element);
    const size_t first = (l / 4) * 16 + 2 * (l % 4);
    float p = 0.0f;
    for (int j = 0; j < 4; j++) {
        size_t e = first + order[j], k = g * 64 + e;
        float w = k < m->cols ? lb__f32_from_bits(f->decode(f, element_code(m, row, k))) : 0.0f; /* 0: padding */
        p = fmaf(w, bf16_value(xg[lb__qdot8_bf16_pos(e)]), p);
    }
    return p;
}

static void rows_scalar(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                        size_t ldy, void *scratch)
{
    const size_t e = lb__qdot8_lane_elems(m), G = LB__QDOT8_LANES * e, st = lb__qdot8_stage_stride(m);
    const int nib = e == 8, pairs = lb__qdot8_bf16_pairs(m);
    float *mw = scratch;
    int32_t *zp = (int32_t *)((uint8_t *)scratch + align64(LB__QDOT8_STAGE_ROWS * st * sizeof(float)));
    int32_t lane_block[LB__QDOT8_LANES];
    lb__qdot8_lane_blocks(m, lane_block);
    for (size_t r = r0; r < r1; r++) {
        lb__qdot8_stage_rows(m, LB_ISA_SCALAR, NULL, NULL, r, 1, mw, zp);
        const uint8_t *row = m->data + r * m->row_bytes;
        for (size_t t = 0; t < nx; t++) {
            const int8_t *q = a->q + (t0 + t) * a->stride;
            const float *d = a->d + (t0 + t) * a->lanes;
            float p[16] = {0};
            for (size_t g = 0; g < a->groups; g++)
                for (size_t l = 0; l < LB__QDOT8_LANES; l++) {
                    size_t b = lb__qdot8_group_block(m, g) + (size_t)lane_block[l];
                    float s = d[g * LB__QDOT8_LANES + l] * mw[b];
                    if (pairs) {
                        p[l] = fmaf(pair_lane_sum(m, row, (const uint16_t *)(const void *)q + g * G, g, l), s, p[l]);
                        continue;
                    }
                    int32_t z = m->zero_points ? zp[b] : 0, sum = 0;
                    for (size_t k = g * G + l * e; k < g * G + (l + 1) * e; k++)
                        sum += q[g * G + staged_pos(nib, k % G)] * (element_unit(m, row, k) - z);
                    p[l] = fmaf((float)sum, s, p[l]);
                }
            y[t * ldy + r] = lb__sum16f(p);
        }
    }
}

int lb__qdot8_no_offset(lb_format element)
{
    (void)element;
    return 0;
}

int lb__qdot8_nibble_offset(lb_format element)
{
    switch (element) {
    case LB_FMT_INT4: return 8;        /* -8 .. 7 -> 0 .. 15 */
    case LB_FMT_FP4_E2M1: return 12;   /* twice E2M1, -12 .. 12 -> 0 .. 24 */
    case LB_FMT_UINT4:                 /* unsigned already */
    case LB_FMT_INT8:                  /* not 4-bit: a set says what it does with int8 */
    case LB_FMT_FP32:
    case LB_FMT_BF16:
    case LB_FMT_FP16:
    case LB_FMT_FP8_E4M3:
    case LB_FMT_FP8_E5M2:
    case LB_FMT_FP8_E4M3FNUZ:
    case LB_FMT_FP8_E5M2FNUZ:
    case LB_FMT_FP6_E2M3:
    case LB_FMT_FP6_E3M2:
    case LB_FMT_UINT8:
    case LB_FMT_E8M0:
    case LB_FMT_UE4M3:
    case LB_FMT_COUNT: return 0;
    }
    return 0;
}

const lb__qdot8_set lb__qdot8_scalar_set = {"scalar", lb__qdot8_no_offset, rows_scalar, lb__qdot8k_rows_scalar,
                                            &lb__w8a8_scalar_ops, 1, 1, NULL};

const lb__qdot8_set *lb__qdot8_get(lb_isa isa)
{
    isa = lb__isa_clamp(isa);
    if (isa == LB_ISA_NEON && lb__qdot8_neon_set.rows) return &lb__qdot8_neon_set;
    unsigned vnni = LB__CPU_AVX512_VNNI, vbmi = LB__CPU_AVX512_VNNI | LB__CPU_AVX512_VBMI;
    if (isa == LB_ISA_AVX512 && lb__qdot8_bf16_set.rows && (lb__cpu_extras() & (vbmi | LB__CPU_AVX512_BF16)) ==
        (vbmi | LB__CPU_AVX512_BF16) && lb__qdot8_bf16_rounds_as_defined())
        return &lb__qdot8_bf16_set;
    if (isa == LB_ISA_AVX512 && lb__qdot8_vbmi_set.rows && (lb__cpu_extras() & vbmi) == vbmi) return &lb__qdot8_vbmi_set;
    if (isa == LB_ISA_AVX512 && lb__qdot8_vnni_set.rows && (lb__cpu_extras() & vnni)) return &lb__qdot8_vnni_set;
    if ((isa == LB_ISA_AVX512 || isa == LB_ISA_AVX2) && lb__qdot8_avxvnni_set.rows &&
        (lb__cpu_extras() & LB__CPU_AVX_VNNI))
        return &lb__qdot8_avxvnni_set;
    if ((isa == LB_ISA_AVX512 || isa == LB_ISA_AVX2) && lb__qdot8_avx2_set.rows) return &lb__qdot8_avx2_set;
    return &lb__qdot8_scalar_set;
}

/* ---- the product ---- */

/* Several matrices on one input: their rows as one range that the threads
 * split (one parallel section, one staging of the activations); paired
 * (an epilogue given): two matrices of as many rows, each thread taking
 * the same rows of both, then the epilogue on them. */
typedef struct act8_job {
    const lb__qmat *const *m;
    size_t k;
    const lb__act8 *a;
    float *const *y;
    const lb__qdot8_set *set;
    size_t scratch;
    lb__qdot8_epilogue epilogue;
    void *epilogue_ctx;
} act8_job;

static lb_status act8_rows(void *ctx, size_t r0, size_t r1)
{
    const act8_job *j = ctx;
    void *scratch = aligned_alloc(64, j->scratch);
    if (!scratch) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu bytes of kernel scratch", j->scratch);
    if (j->m[0]->zero_points) /* the unstaged zero points past a row's last block read as 0 (the matrices share that) */
        memset(scratch, 0, j->scratch);
    const int paired = j->epilogue != NULL;
    for (size_t i = 0, first = 0; i < j->k; first += paired ? 0 : j->m[i]->rows, i++) {
        const lb__qmat *m = j->m[i];
        size_t a = r0 > first ? r0 - first : 0, b = r1 - first < m->rows ? r1 - first : m->rows;
        if (r1 <= first || a >= b) continue;
        for (size_t t = 0; t < j->a->n; t += LB__QDOT_MAX_NX) {
            size_t nx = j->a->n - t < LB__QDOT_MAX_NX ? j->a->n - t : LB__QDOT_MAX_NX;
            (m->ggml_block ? j->set->krows : j->set->rows)(m, j->a, t, nx, a, b, j->y[i] + t * m->rows, m->rows,
                                                           scratch);
        }
    }
    free(scratch);
    if (paired) j->epilogue(j->epilogue_ctx, r0, r1);
    return LB_OK;
}

int lb__qdot8_shares_input(const lb__qmat *a, const lb__qmat *b)
{
    /* a property of the two matrices, not of a set: the scalar reference takes all the path does */
    const lb__qdot8_set *all = &lb__qdot8_scalar_set;
    if (!lb__qdot8_takes(a, all) || !lb__qdot8_takes(b, all) || a->cols != b->cols) return 0;
    if (a->ggml_block || b->ggml_block) /* one staging per kind of K-quant */
        return a->ggml_block && b->ggml_block && lb__qdot8k_type(a->ggml) == lb__qdot8k_type(b->ggml);
    return lb__qdot8_lane_elems(a) == lb__qdot8_lane_elems(b) && a->element == b->element &&
           (a->zero_points != NULL) == (b->zero_points != NULL);
}

/* lb__qmat_matmul_act8_multi, or paired (epilogue not NULL: k = 2, the
 * same rows) lb__qmat_matmul_act8_pair. */
static lb_status act8_call(const lb__qmat *const *ms, size_t k, const float *x, size_t n, float *const *ys, int threads,
                           const lb__qdot8_set *set, lb__qdot8_epilogue epilogue, void *epilogue_ctx)
{
    for (size_t i = 0; i < k; i++)
        if (!lb__qdot8_takes(ms[i], set) || !lb__qdot8_shares_input(ms[0], ms[i])) return LB_ERR_UNSUPPORTED;
    const lb__qmat *m = ms[0];
    size_t rows = 0, bytes = 0, scratch = 64;
    for (size_t i = 0; i < k; i++) {
        rows += ms[i]->rows, bytes += ms[i]->bytes;
        size_t sb = lb__qdot8_scratch_bytes(ms[i]);
        scratch = sb > scratch ? sb : scratch;
    }
    if (epilogue) rows = m->rows; /* the range is one matrix's rows, taken in both */
    if (n == 0 || rows == 0) return LB_OK;
    lb_status st = LB_OK;
    if (m->cols == 0) {
        for (size_t i = 0; i < k; i++) memset(ys[i], 0, n * ms[i]->rows * sizeof(float));
    } else if (lb__qkernels_get(lb_isa_active())->first_nonfinite(x, n * m->cols) < n * m->cols) {
        /* NaN or infinity cannot be quantized: the exact kernels carry them */
        for (size_t i = 0; i < k && st == LB_OK; i++) st = lb__qmat_matmul(ms[i], x, n, ys[i], threads);
    } else {
        lb__act8 a;
        st = m->ggml_block ? lb__qdot8k_stage(m, x, n, set, &a) : lb__qdot8_stage(m, x, n, set, &a);
        if (st != LB_OK) return st;
        act8_job j = {.m = ms, .k = k, .a = &a, .y = ys, .set = set, .scratch = (scratch + 63) / 64 * 64,
                      .epilogue = epilogue, .epilogue_ctx = epilogue_ctx};
        st = lb__parallel_for(rows, 16, lb__threads_for(threads, bytes * n), act8_rows, &j);
        lb__qdot8_act8_free(&a);
        return st;
    }
    if (st == LB_OK && epilogue) epilogue(epilogue_ctx, 0, rows);
    return st;
}

lb_status lb__qmat_matmul_act8_multi(const lb__qmat *const *ms, size_t k, const float *x, size_t n, float *const *ys,
                                     int threads, const lb__qdot8_set *set)
{
    return act8_call(ms, k, x, n, ys, threads, set, NULL, NULL);
}

lb_status lb__qmat_matmul_act8_pair(const lb__qmat *a, const lb__qmat *b, const float *x, size_t n, float *ya,
                                    float *yb, int threads, const lb__qdot8_set *set, lb__qdot8_epilogue epilogue,
                                    void *ctx)
{
    if (a->rows != b->rows || !epilogue) return LB_ERR_UNSUPPORTED;
    const lb__qmat *ms[2] = {a, b};
    float *ys[2] = {ya, yb};
    return act8_call(ms, 2, x, n, ys, threads, set, epilogue, ctx);
}

lb_status lb__qmat_matmul_act8_set(const lb__qmat *m, const float *x, size_t n, float *y, int threads,
                                   const lb__qdot8_set *set)
{
    return lb__qmat_matmul_act8_multi(&m, 1, x, n, &y, threads, set);
}

lb_status lb__qmat_matmul_act8(const lb__qmat *m, const float *x, size_t n, float *y, int threads, lb_isa isa)
{
    return lb__qmat_matmul_act8_set(m, x, n, y, threads, lb__qdot8_get(isa));
}

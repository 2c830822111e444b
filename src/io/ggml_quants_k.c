/* ggml's K-quant quantizers and the importance-weighted classic ones, row
 * by row (ggml_quants_k.h). Each type has ggml's two paths: without an
 * importance matrix the reference quantizer (scale searches with weights
 * made from the values themselves, super-block scales by plain rounding),
 * with one the weights qw * sqrt(sigma2 + x^2) and super-block scales by
 * their own weighted search. The scale searches are in
 * ggml_quant_search.c; this file chooses their parameters, packs the
 * codes and requantizes with the fp16-rounded scales, as ggml does.
 *
 * The arithmetic is ggml's, op for op, in fp32 (ggml_quant_search.h says
 * why): keep each expression's order. */
#include <math.h>
#include <stddef.h>

#include "io/ggml_blocks.h"
#include "io/ggml_quant_search.h"
#include "io/ggml_quants_k.h"

/* The scale searches run eight or sixteen groups (sub-blocks, or blocks
 * of the classic types) at a time, interleaved (ggml_quant_search.h): the
 * AVX2 set does eight a lane each, the AVX-512 one sixteen, the scalar set
 * one after another, with the same bits. */
typedef struct {
    const lb__ggml_search8 *s8;
    const lb__ggml_search16 *s16; /* NULL: sixteen groups run as two eights */
} searches;

static searches searches_get(void)
{
    const lb_isa isa = lb_isa_active();
    return (searches){lb__ggml_search8_get(isa), lb__ggml_search16_get(isa)};
}

static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ggml's GGML_FP32_TO_FP16 (round to nearest even) stored little-endian,
 * and the value it stands for (GGML_FP16_TO_FP32 of it). */
static inline float store_fp16(uint8_t p[2], float v)
{
    uint16_t h = lb__fp16_from_f32(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
    return lb__fp16_to_f32(h);
}

/* Sum of squares in element order (ggml's sigma2 numerator). */
static float sum_squares(const float *x, size_t n)
{
    float s = 0;
    for (size_t j = 0; j < n; ++j) s += x[j] * x[j];
    return s;
}

static inline float sum_floats(const float *w, int n)
{
    float s = 0;
    for (int l = 0; l < n; ++l) s += w[l];
    return s;
}

/* Interleave groups g < groups (group g at src + g * n, n values) into
 * t[lanes i + g]; lanes from `groups` on repeat group 0 (their results are
 * dropped). */
static void interleave(const float *src, int n, int groups, int lanes, float *t)
{
    for (int g = 0; g < lanes; ++g) {
        const float *p = src + (g < groups ? (size_t)g : 0) * (size_t)n;
        for (int i = 0; i < n; ++i) t[lanes * i + g] = p[i];
    }
}

static void deinterleave(const uint8_t *t, int n, int groups, int lanes, uint8_t *dst)
{
    for (int g = 0; g < groups; ++g)
        for (int i = 0; i < n; ++i) dst[(size_t)g * (size_t)n + i] = t[lanes * i + g];
}

/* Which search a batch runs: the asymmetric qkx (make_qkx2/3_quants, with
 * its trial parameters) or the symmetric qx (make_qx_quants). */
typedef struct {
    int asym, nmax;
    float rmin, rdelta;
    int nstep, use_mad, flat_le;
} search_kind;

/* A search over groups <= 16 consecutive groups of n <= 32 values at x
 * (weights w alike; for qx NULL means x^2): codes to L, scale[g] and, for
 * qkx, the_min[g]. One sixteen-lane call for more than eight groups where
 * the ISA has it, else eight groups a call. */
static void groups_search(const searches *S, const search_kind *k, int groups, int n, const float *x, const float *w,
                          uint8_t *L, float *scale, float *the_min)
{
    float xt[16 * 32], wt[16 * 32], sc[16], mn[16];
    uint8_t Lt[16 * 32];
    for (int g0 = 0; g0 < groups;) {
        const int lanes = S->s16 && groups - g0 > 8 ? 16 : 8, m = groups - g0 < lanes ? groups - g0 : lanes;
        const size_t at = (size_t)g0 * (size_t)n;
        const float *wl = w ? wt : NULL;
        const int transposes = lanes == 16 && n % 16 == 0; /* the AVX-512 set's, in and out */
        if (transposes) {
            S->s16->interleave(x + at, n, m, xt);
            if (w) S->s16->interleave(w + at, n, m, wt);
        } else {
            interleave(x + at, n, m, lanes, xt);
            if (w) interleave(w + at, n, m, lanes, wt);
        }
        if (k->asym && lanes == 16)
            S->s16->qkx(n, k->nmax, xt, wl, Lt, sc, mn, k->rmin, k->rdelta, k->nstep, k->use_mad, k->flat_le);
        else if (k->asym) S->s8->qkx(n, k->nmax, xt, wl, Lt, sc, mn, k->rmin, k->rdelta, k->nstep, k->use_mad, k->flat_le);
        else if (lanes == 16) S->s16->qx(n, k->nmax, xt, wl, (int8_t *)Lt, sc);
        else S->s8->qx(n, k->nmax, xt, wl, (int8_t *)Lt, sc);
        if (transposes) S->s16->deinterleave(Lt, n, m, L + at);
        else deinterleave(Lt, n, m, lanes, L + at);
        for (int g = 0; g < m; ++g) {
            scale[g0 + g] = sc[g];
            if (k->asym) the_min[g0 + g] = mn[g];
        }
        g0 += m;
    }
}

/* The asymmetric search (qkx) over groups groups, weights w (given). */
static void groups_qkx(const searches *S, int groups, int n, int nmax, const float *x, const float *w, uint8_t *L,
                       float *scale, float *the_min, float rmin, float rdelta, int nstep, int use_mad, int flat_le)
{
    const search_kind k = {1, nmax, rmin, rdelta, nstep, use_mad, flat_le};
    groups_search(S, &k, groups, n, x, w, L, scale, the_min);
}

/* The symmetric search (qx): weights qw, or x^2 when NULL. */
static void groups_qx(const searches *S, int groups, int n, int nmax, const float *x, const float *qw, int8_t *L,
                      float *scale)
{
    const search_kind k = {0, nmax, 0.f, 0.f, 0, 0, 0};
    groups_search(S, &k, groups, n, x, qw, (uint8_t *)L, scale, NULL);
}

/* Eight bytes as one word (memcpy: any alignment, either byte order: the
 * word operations below never carry from one byte into another). */
static inline uint64_t load8(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* Four 2-bit codes a byte: byte 32 h + l holds elements 128 h + l + 32 s
 * in bits 2 s (Q2_K's and Q3_K's low bits); codes < 4, so whole words
 * can be shifted and or-ed. */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < LB__QK_K; j += 128)
        for (int l = 0; l < 32; l += 8) {
            uint64_t w = load8(L + j + l) | load8(L + j + l + 32) << 2 | load8(L + j + l + 64) << 4 |
                         load8(L + j + l + 96) << 6;
            memcpy(qs + j / 4 + l, &w, 8);
        }
}

/* ===== Q2_K ===== */

/* With the scales and super-block scales stored: recompute each sub-block's
 * codes from the rounded scales (a sub-block whose scale rounds to zero
 * keeps its search codes), then pack them. */
static void q2_k_finish(const lb__ggml_search8 *search, const float *x, lb__block_q2_k *y, float dm, float mm,
                        uint8_t *L)
{
    for (int j = 0; j < LB__QK_K / 16; ++j) {
        const float d = dm * (float)(y->scales[j] & 0xF);
        if (!d) continue;
        const float m = mm * (float)(y->scales[j] >> 4);
        search->requant(x + 16 * j, 16, d, m, 1, 0, 3, 0, L + 16 * j);
    }
    pack_2bit(L, y->qs);
}

static void q2_k_ref_block(const searches *S, const float *x, lb__block_q2_k *y)
{
    uint8_t L[LB__QK_K];
    float w[LB__QK_K], mins[LB__QK_K / 16], scales[LB__QK_K / 16];
    const float q4scale = 15.f;
    for (int k = 0; k < LB__QK_K; ++k) w[k] = fabsf(x[k]); /* weights |x| */
    groups_qkx(S, 16, 16, 3, x, w, L, scales, mins, -0.5f, 0.1f, 15, 1, 0);
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < LB__QK_K / 16; ++j) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float dm, mm;
    if (max_scale > 0) {
        float iscale = q4scale / max_scale;
        for (int j = 0; j < LB__QK_K / 16; ++j) y->scales[j] = (uint8_t)lb__nearest_int(iscale * scales[j]);
        dm = store_fp16(y->d, max_scale / q4scale);
    } else {
        memset(y->scales, 0, sizeof y->scales);
        dm = store_fp16(y->d, 0.f);
    }
    if (max_min > 0) {
        float iscale = q4scale / max_min;
        for (int j = 0; j < LB__QK_K / 16; ++j)
            y->scales[j] = (uint8_t)(y->scales[j] | (unsigned)lb__nearest_int(iscale * mins[j]) << 4);
        mm = store_fp16(y->dmin, max_min / q4scale);
    } else {
        mm = store_fp16(y->dmin, 0.f);
    }
    q2_k_finish(S->s8, x, y, dm, mm, L);
}

static void q2_k_imatrix_block(const searches *S, const float *x, const float *qw, lb__block_q2_k *y)
{
    uint8_t L[LB__QK_K], Ls[LB__QK_K / 16], Lm[LB__QK_K / 16];
    float weight[LB__QK_K], mins[LB__QK_K / 16], scales[LB__QK_K / 16], sw[LB__QK_K / 16];
    const float sigma2 = sum_squares(x, LB__QK_K) / LB__QK_K;
    S->s8->imatrix_weights(qw, x, sigma2, LB__QK_K, weight);
    for (int j = 0; j < LB__QK_K / 16; ++j) sw[j] = sum_floats(weight + 16 * j, 16);
    groups_qkx(S, 16, 16, 3, x, weight, L, scales, mins, -0.9f, 0.05f, 36, 0, 1);
    float dm = lb__ggml_make_qp_quants(LB__QK_K / 16, 15, scales, Ls, sw);
    float mm = lb__ggml_make_qp_quants(LB__QK_K / 16, 15, mins, Lm, sw);
    dm = store_fp16(y->d, dm);
    mm = store_fp16(y->dmin, mm);
    for (int j = 0; j < LB__QK_K / 16; ++j) y->scales[j] = (uint8_t)(Ls[j] | Lm[j] << 4);
    q2_k_finish(S->s8, x, y, dm, mm, L);
}

void lb__ggml_quantize_row_q2_k(const float *x, void *dst, size_t cols, const float *imatrix)
{
    lb__block_q2_k *y = dst;
    const searches S = searches_get();
    for (size_t i = 0; i < cols / LB__QK_K; ++i, x += LB__QK_K)
        if (imatrix) q2_k_imatrix_block(&S, x, imatrix + LB__QK_K * i, &y[i]);
        else q2_k_ref_block(&S, x, &y[i]);
}

/* ===== Q3_K ===== */

/* Store sixteen 6-bit codes l (0..63, standing for l - 32) in Q3_K's
 * 12-byte scale layout (ggml_blocks.h). */
static void q3_k_put_scales(const int *ls, uint8_t scales[12])
{
    memset(scales, 0, 12);
    for (int j = 0; j < 16; ++j) {
        int l = ls[j];
        if (j < 8) scales[j] = (uint8_t)(l & 0xF);
        else scales[j - 8] = (uint8_t)(scales[j - 8] | (l & 0xF) << 4);
        l >>= 4;
        scales[j % 4 + 8] = (uint8_t)(scales[j % 4 + 8] | l << (2 * (j / 4)));
    }
}

/* With scales and d stored: requantize each sub-block with its rounded
 * scale (codes 0..7 for -4..3; a zero scale keeps the search codes), move
 * the high bit of each code into hmask, pack the low two bits. */
static void q3_k_finish(const lb__ggml_search8 *search, const float *x, lb__block_q3_k *y, int8_t *L)
{
    const float d_all = lb__fp16_to_f32(lb__le16(y->d));
    for (int j = 0; j < 16; ++j) {
        int lo = j < 8 ? y->scales[j] & 0xF : y->scales[j - 8] >> 4;
        int sc = (lo | ((y->scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
        float d = d_all * (float)sc;
        if (!d) continue;
        search->requant(x + 16 * j, 16, d, 0.f, 0, -4, 3, 4, (uint8_t *)L + 16 * j);
    }
    /* codes are 0..7: element j's bit 2 goes to bit j / 32 of hmask[j % 32]
     * (branch-free: the bit is data, and mispredicted branches cost more
     * than the search) */
    const uint64_t ones = 0x0101010101010101u;
    uint8_t low[LB__QK_K];
    for (int l = 0; l < 32; l += 8) {
        uint64_t h = 0;
        for (int b = 0; b < 8; ++b) {
            uint64_t w = load8((const uint8_t *)L + 32 * b + l);
            h |= (w >> 2 & ones) << b;
            w &= 3 * ones;
            memcpy(low + 32 * b + l, &w, 8);
        }
        memcpy(y->hmask + l, &h, 8);
    }
    pack_2bit(low, y->qs);
}

static void q3_k_ref_block(const lb__ggml_search8 *search, const float *x, lb__block_q3_k *y)
{
    int8_t L[LB__QK_K];
    uint8_t Lt[128];
    float scales[16], xt[128];
    for (int h = 0; h < 2; ++h) { /* eight lanes: make_q3_quants has no AVX-512 twin (yet) */
        interleave(x + 128 * h, 16, 8, 8, xt);
        search->q3(16, 4, xt, (int8_t *)Lt, scales + 8 * h);
        deinterleave(Lt, 16, 8, 8, (uint8_t *)L + 128 * h);
    }
    float amax;
    const float max_scale = lb__ggml_signed_max(scales, 16, &amax);
    if (max_scale != 0) {
        float iscale = -32.f / max_scale;
        int ls[16];
        for (int j = 0; j < 16; ++j) {
            /* ggml keeps the rounded scale in an int8 before clamping */
            int8_t l = (int8_t)lb__nearest_int(iscale * scales[j]);
            ls[j] = clamp_int(l, -32, 31) + 32;
        }
        q3_k_put_scales(ls, y->scales);
        store_fp16(y->d, 1 / iscale);
    } else {
        memset(y->scales, 0, sizeof y->scales);
        store_fp16(y->d, 0.f);
    }
    q3_k_finish(search, x, y, L);
}

static void q3_k_imatrix_block(const searches *S, const float *x, const float *qw, lb__block_q3_k *y)
{
    const lb__ggml_search8 *search = S->s8;
    int8_t L[LB__QK_K], Ls[16];
    float scales[16], weight[LB__QK_K], sw[16];
    const float sigma2 = 2 * sum_squares(x, LB__QK_K) / LB__QK_K;
    search->imatrix_weights(qw, x, sigma2, LB__QK_K, weight);
    for (int j = 0; j < 16; ++j) sw[j] = sum_floats(weight + 16 * j, 16);
    groups_qx(S, 16, 16, 4, x, weight, L, scales);
    float d_block = search->qx1(16, 32, scales, Ls, sw);
    int ls[16];
    for (int j = 0; j < 16; ++j) ls[j] = Ls[j];
    q3_k_put_scales(ls, y->scales);
    store_fp16(y->d, d_block);
    q3_k_finish(search, x, y, L);
}

void lb__ggml_quantize_row_q3_k(const float *x, void *dst, size_t cols, const float *imatrix)
{
    lb__block_q3_k *y = dst;
    const searches S = searches_get();
    for (size_t i = 0; i < cols / LB__QK_K; ++i, x += LB__QK_K)
        if (imatrix) q3_k_imatrix_block(&S, x, imatrix + LB__QK_K * i, &y[i]);
        else q3_k_ref_block(S.s8, x, &y[i]);
}

/* ===== Q4_K and Q5_K ===== */

/* Eight 6-bit scales and mins into the 12-byte layout (ggml_blocks.h). */
static void k4_put_scales(const uint8_t ls[8], const uint8_t lm[8], uint8_t scales[12])
{
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            scales[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
            scales[j - 4] = (uint8_t)(scales[j - 4] | (ls[j] >> 4) << 6);
            scales[j] = (uint8_t)(scales[j] | (lm[j] >> 4) << 6);
        }
    }
}

static void k4_get_scale_min(int j, const uint8_t *q, int *d, int *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

/* Requantize the eight sub-blocks of 32 to codes 0..nmax with the stored
 * (fp16-rounded) scales; a zero scale keeps the search codes. */
static void k4_requantize(const lb__ggml_search8 *search, const float *x, const uint8_t scales[12], float d_all,
                          float dmin_all, int nmax, uint8_t *L)
{
    for (int j = 0; j < 8; ++j) {
        int sc, m;
        k4_get_scale_min(j, scales, &sc, &m);
        const float d = d_all * (float)sc;
        if (!d) continue;
        const float dm = dmin_all * (float)m;
        search->requant(x + 32 * j, 32, d, dm, 1, 0, nmax, 0, L + 32 * j);
    }
}

/* A K-quant super-block's head, where k4_*_scales leave their results. */
typedef struct {
    uint8_t *scales12, *d16, *dmin16;
} k4_head;

/* The reference path's per-sub-block search and 6-bit rounding of the
 * scales, shared by Q4_K (nmax 15) and Q5_K (31), for nsb (1 or 2)
 * consecutive super-blocks at x (two: their sixteen sub-blocks searched in
 * one sixteen-lane call where the ISA has it): weights av_x + |x| with
 * av_x the sub-block's rms. Fills each head and the final codes L. */
static void k4_ref_scales(const searches *S, const float *x, int nsb, int nmax, float rmin, float rdelta, int nstep,
                          const k4_head *head, uint8_t *L)
{
    float w[2 * LB__QK_K], mins[16], scales[16];
    for (int g = 0; g < 8 * nsb; ++g) {
        const float *xg = x + 32 * g;
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += xg[l] * xg[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) w[32 * g + l] = av_x + fabsf(xg[l]);
    }
    groups_qkx(S, 8 * nsb, 32, nmax, x, w, L, scales, mins, rmin, rdelta, nstep, 0, 0);
    for (int b = 0; b < nsb; ++b) {
        const float *sc = scales + 8 * b, *mn = mins + 8 * b;
        uint8_t ls[8], lm[8];
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; ++j) {
            if (sc[j] > max_scale) max_scale = sc[j];
            if (mn[j] > max_min) max_min = mn[j];
        }
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < 8; ++j) {
            /* ggml rounds into a byte first, then caps at 63 */
            uint8_t c = (uint8_t)lb__nearest_int(inv_scale * sc[j]);
            uint8_t m = (uint8_t)lb__nearest_int(inv_min * mn[j]);
            ls[j] = c < 63 ? c : 63;
            lm[j] = m < 63 ? m : 63;
        }
        k4_put_scales(ls, lm, head[b].scales12);
        float d = store_fp16(head[b].d16, max_scale / 63.f);
        float dmin = store_fp16(head[b].dmin16, max_min / 63.f);
        k4_requantize(S->s8, x + LB__QK_K * b, head[b].scales12, d, dmin, nmax, L + LB__QK_K * b);
    }
}

/* The imatrix path's search, shared by Q4_K and Q5_K (cap63: Q5_K caps the
 * codes at 63, Q4_K stores them as they are), nsb super-blocks as above
 * (qw their importance weights). */
static void k4_imatrix_scales(const searches *S, const float *x, const float *qw, int nsb, int nmax, int cap63,
                              const k4_head *head, uint8_t *L)
{
    float weights[2 * LB__QK_K], mins[16], scales[16];
    for (int b = 0; b < nsb; ++b) { /* sigma2 is each super-block's own */
        const float *xb = x + LB__QK_K * b;
        const float sigma2 = 2 * sum_squares(xb, LB__QK_K) / LB__QK_K;
        S->s8->imatrix_weights(qw + LB__QK_K * b, xb, sigma2, LB__QK_K, weights + LB__QK_K * b);
    }
    groups_qkx(S, 8 * nsb, 32, nmax, x, weights, L, scales, mins, -0.9f, 0.05f, 36, 0, 1);
    for (int b = 0; b < nsb; ++b) {
        uint8_t Ls[8], Lm[8];
        float sw[8];
        for (int j = 0; j < 8; ++j) sw[j] = sum_floats(weights + LB__QK_K * b + 32 * j, 32);
        float d_block = lb__ggml_make_qp_quants(8, 63, scales + 8 * b, Ls, sw);
        float m_block = lb__ggml_make_qp_quants(8, 63, mins + 8 * b, Lm, sw);
        if (cap63)
            for (int j = 0; j < 8; ++j) {
                if (Ls[j] > 63) Ls[j] = 63;
                if (Lm[j] > 63) Lm[j] = 63;
            }
        k4_put_scales(Ls, Lm, head[b].scales12);
        float d = store_fp16(head[b].d16, d_block);
        float dmin = store_fp16(head[b].dmin16, m_block);
        k4_requantize(S->s8, x + LB__QK_K * b, head[b].scales12, d, dmin, nmax, L + LB__QK_K * b);
    }
}

static void pack_q4_k(void *block, const uint8_t *L)
{
    lb__block_q4_k *y = block;
    for (int j = 0, q = 0; j < LB__QK_K; j += 64, q += 32)
        for (int l = 0; l < 32; ++l) y->qs[q + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
}

/* sub-block pair (2p, 2p + 1) shares qs[32 p ..]; their fifth bits are
 * bits 2p and 2p + 1 of qh[l] */
static void pack_q5_k(void *block, const uint8_t *L)
{
    lb__block_q5_k *y = block;
    memset(y->qh, 0, sizeof y->qh);
    for (int p = 0; p < 4; ++p)
        for (int l = 0; l < 32; ++l) {
            int l1 = L[64 * p + l], l2 = L[64 * p + l + 32];
            y->qh[l] = (uint8_t)(y->qh[l] | (l1 >> 4) << (2 * p) | (l2 >> 4) << (2 * p + 1));
            y->qs[32 * p + l] = (uint8_t)((l1 & 0xF) | (l2 & 0xF) << 4);
        }
}

/* What differs between Q4_K and Q5_K: the codes' range, the reference
 * search's trials, the block's layout and packing. */
typedef struct {
    int nmax, cap63;
    float rmin, rdelta;
    int nstep;
    size_t block_bytes, off_scales, off_d, off_dmin;
    void (*pack)(void *block, const uint8_t *L);
} k4_type;

static const k4_type k4_q4 = {15, 0, -1.f, 0.1f, 20, sizeof(lb__block_q4_k), offsetof(lb__block_q4_k, scales),
                              offsetof(lb__block_q4_k, d), offsetof(lb__block_q4_k, dmin), pack_q4_k};
static const k4_type k4_q5 = {31, 1, -0.5f, 0.1f, 15, sizeof(lb__block_q5_k), offsetof(lb__block_q5_k, scales),
                              offsetof(lb__block_q5_k, d), offsetof(lb__block_q5_k, dmin), pack_q5_k};

/* A row of super-blocks, two at a time where sixteen lanes take them. */
static void k4_row(const k4_type *t, const float *x, void *dst, size_t cols, const float *imatrix)
{
    const searches S = searches_get();
    const size_t nb = cols / LB__QK_K;
    uint8_t L[2 * LB__QK_K];
    for (size_t i = 0; i < nb;) {
        const int nsb = S.s16 && i + 1 < nb ? 2 : 1;
        uint8_t *y = (uint8_t *)dst + t->block_bytes * i;
        k4_head head[2];
        for (int b = 0; b < nsb; ++b) {
            uint8_t *yb = y + t->block_bytes * (size_t)b;
            head[b] = (k4_head){yb + t->off_scales, yb + t->off_d, yb + t->off_dmin};
        }
        const float *xi = x + LB__QK_K * i;
        if (imatrix) k4_imatrix_scales(&S, xi, imatrix + LB__QK_K * i, nsb, t->nmax, t->cap63, head, L);
        else k4_ref_scales(&S, xi, nsb, t->nmax, t->rmin, t->rdelta, t->nstep, head, L);
        for (int b = 0; b < nsb; ++b) t->pack(y + t->block_bytes * (size_t)b, L + LB__QK_K * b);
        i += (size_t)nsb;
    }
}

void lb__ggml_quantize_row_q4_k(const float *x, void *dst, size_t cols, const float *imatrix)
{
    k4_row(&k4_q4, x, dst, cols, imatrix);
}

void lb__ggml_quantize_row_q5_k(const float *x, void *dst, size_t cols, const float *imatrix)
{
    k4_row(&k4_q5, x, dst, cols, imatrix);
}

/* ===== Q6_K ===== */

void lb__ggml_quantize_row_q6_k(const float *x, void *dst, size_t cols, const float *imatrix)
{
    lb__block_q6_k *y = dst;
    const searches S = searches_get();
    const lb__ggml_search8 *search = S.s8;
    int8_t L[LB__QK_K];
    float scales[16];
    for (size_t i = 0; i < cols / LB__QK_K; ++i, x += LB__QK_K) {
        /* the imatrix path weights by the imatrix alone (no sigma2) */
        groups_qx(&S, 16, 16, 32, x, imatrix ? imatrix + LB__QK_K * i : NULL, L, scales);
        float max_abs_scale;
        const float max_scale = lb__ggml_signed_max(scales, 16, &max_abs_scale);
        if (max_abs_scale < LB__GGML_GROUP_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        const float d_all = store_fp16(y[i].d, 1 / iscale);
        for (int ib = 0; ib < 16; ++ib) {
            int l = lb__nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(l < 127 ? l : 127);
        }
        for (int j = 0; j < 16; ++j) {
            float d = d_all * (float)y[i].scales[j];
            if (!d) continue;
            search->requant(x + 16 * j, 16, d, 0.f, 0, -32, 31, 32, (uint8_t *)L + 16 * j);
        }
        for (int h = 0; h < 2; ++h) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; ++l) {
                ql[l] = (uint8_t)((Lh[l] & 0xF) | (Lh[l + 64] & 0xF) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | (Lh[l + 96] & 0xF) << 4);
                qh[l] = (uint8_t)(Lh[l] >> 4 | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

/* ===== Classic types with an importance matrix =====
 * sigma2 is the mean square of the whole row (not of a super-block). */

/* The searches of up to eight consecutive blocks of 32 at once: their
 * importance weights, then the symmetric (qx: Q4_0, Q5_0) or asymmetric
 * (qkx, make_qkx3_quants: Q4_1, Q5_1) search. Fills codes L[32 g + i],
 * d[g] and (asymmetric) m[g] = -min for blocks g < groups. */
static void classic_search(const searches *S, const float *x, const float *qw, float sigma2, int groups, int nmax,
                           int asym, uint8_t *L, float *d, float *m)
{
    float weight[16 * LB__QK], min[16];
    S->s8->imatrix_weights(qw, x, sigma2, LB__QK * groups, weight);
    if (asym) groups_qkx(S, groups, LB__QK, nmax, x, weight, L, d, min, -0.9f, 0.05f, 36, 0, 1);
    else groups_qx(S, groups, LB__QK, nmax, x, weight, (int8_t *)L, d);
    if (asym)
        for (int g = 0; g < groups; ++g) m[g] = -min[g];
}

/* Q5_0 / Q5_1 packing: low nibbles as Q4, fifth bit of element i in bit i
 * of the little-endian qh word. */
static void pack_q5(const uint8_t *L, uint8_t qs[16], uint8_t qh[4])
{
    uint32_t h = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = (uint8_t)((L[j] & 0x0F) | (L[j + 16] & 0x0F) << 4);
        h |= (uint32_t)(L[j] >> 4 & 1) << j | (uint32_t)(L[j + 16] >> 4 & 1) << (j + 16);
    }
    for (int b = 0; b < 4; ++b) qh[b] = (uint8_t)(h >> (8 * b));
}

typedef lb__ggml_classic classic_type;

static void classic_row(classic_type t, const float *x, void *dst, size_t cols, const float *imatrix, float sigma2)
{
    const searches S = searches_get();
    const int batch = S.s16 ? 16 : 8; /* blocks a search call takes */
    int nmax = 0, asym = 0;
    switch (t) {
    case LB__CLASSIC_Q4_0: nmax = 8; break;
    case LB__CLASSIC_Q4_1: nmax = 15, asym = 1; break;
    case LB__CLASSIC_Q5_0: nmax = 16; break;
    case LB__CLASSIC_Q5_1: nmax = 31, asym = 1; break;
    }
    const size_t nb = cols / LB__QK;
    uint8_t L[16 * LB__QK];
    float d[16], m[16];
    for (size_t b0 = 0; b0 < nb; b0 += (size_t)batch) {
        int groups = nb - b0 < (size_t)batch ? (int)(nb - b0) : batch;
        classic_search(&S, x + LB__QK * b0, imatrix + LB__QK * b0, sigma2, groups, nmax, asym, L, d, m);
        for (int g = 0; g < groups; ++g) {
            const uint8_t *Lg = L + LB__QK * g;
            const size_t ib = b0 + (size_t)g;
            switch (t) {
            case LB__CLASSIC_Q4_0: {
                lb__block_q4_0 *y = (lb__block_q4_0 *)dst + ib;
                store_fp16(y->d, d[g]);
                for (int j = 0; j < 16; ++j) y->qs[j] = (uint8_t)(Lg[j] | Lg[j + 16] << 4);
                break;
            }
            case LB__CLASSIC_Q4_1: {
                lb__block_q4_1 *y = (lb__block_q4_1 *)dst + ib;
                store_fp16(y->d, d[g]);
                store_fp16(y->m, m[g]);
                for (int j = 0; j < 16; ++j) y->qs[j] = (uint8_t)(Lg[j] | Lg[j + 16] << 4);
                break;
            }
            case LB__CLASSIC_Q5_0: {
                lb__block_q5_0 *y = (lb__block_q5_0 *)dst + ib;
                store_fp16(y->d, d[g]);
                pack_q5(Lg, y->qs, y->qh);
                break;
            }
            case LB__CLASSIC_Q5_1: {
                lb__block_q5_1 *y = (lb__block_q5_1 *)dst + ib;
                store_fp16(y->d, d[g]);
                store_fp16(y->m, m[g]);
                pack_q5(Lg, y->qs, y->qh);
                break;
            }
            }
        }
    }
}

/* sigma2 is the mean square of the whole row (not of a super-block) */
static float row_sigma2(const float *x, size_t cols) { return sum_squares(x, cols) / (float)cols; }

void lb__ggml_quantize_classic_sigma2(lb__ggml_classic t, const float *x, void *dst, size_t cols,
                                      const float *imatrix, float sigma2)
{
    classic_row(t, x, dst, cols, imatrix, sigma2);
}

void lb__ggml_quantize_row_q4_0_imatrix(const float *x, void *dst, size_t cols, const float *imatrix)
{
    classic_row(LB__CLASSIC_Q4_0, x, dst, cols, imatrix, row_sigma2(x, cols));
}

void lb__ggml_quantize_row_q4_1_imatrix(const float *x, void *dst, size_t cols, const float *imatrix)
{
    classic_row(LB__CLASSIC_Q4_1, x, dst, cols, imatrix, row_sigma2(x, cols));
}

void lb__ggml_quantize_row_q5_0_imatrix(const float *x, void *dst, size_t cols, const float *imatrix)
{
    classic_row(LB__CLASSIC_Q5_0, x, dst, cols, imatrix, row_sigma2(x, cols));
}

void lb__ggml_quantize_row_q5_1_imatrix(const float *x, void *dst, size_t cols, const float *imatrix)
{
    classic_row(LB__CLASSIC_Q5_1, x, dst, cols, imatrix, row_sigma2(x, cols));
}

/* The scale searches behind ggml's K-quants and its importance-weighted
 * classic types: given a group of values (a sub-block, or a super-block's
 * sub-block scales), pick a scale (and for the asymmetric searches a
 * minimum) and the integer codes, the way the pinned llama.cpp does.
 *
 * Byte identity with ggml is the point, so every function keeps ggml's
 * arithmetic exactly: fp32 throughout, each sum accumulated in element
 * order, products evaluated left to right as written (w * x * l is
 * (w * x) * l), integers turned into floats where ggml's C does, and
 * no fused multiply-add (the build has -ffp-contract=off; the oracle,
 * libggml-base, is built for baseline x86-64 where no FMA exists).
 * Change the order of any operation and some rows come out different. */
#ifndef LB_IO_GGML_QUANT_SEARCH_H
#define LB_IO_GGML_QUANT_SEARCH_H

#include <stdint.h>
#include <string.h>

#include "lowbit.h"

/* ggml's threshold under which a group's largest magnitude counts as zero. */
#define LB__GGML_GROUP_EPS 1e-15f

/* Round to nearest (ties to even) by adding 1.5 * 2^23 and reading the low
 * mantissa bits: ggml's trick, exact for |v| < 2^22. Outside that range it
 * returns what ggml's does (garbage), which byte identity requires; callers
 * clamp the result anyway. */
static inline int lb__nearest_int(float v)
{
    float t = v + 12582912.f;
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    return (int)(bits & 0x007FFFFFu) - 0x00400000;
}

/* Symmetric search (ggml's make_qx_quants with rmse_type 1): codes
 * L[i] in [0, 2 nmax - 1] standing for L[i] - nmax, weights qw[i] (or
 * x[i]^2 when qw is NULL), the scale from the weighted least squares of
 * the best of 19 trial inverse scales. Returns the scale (0 for a group
 * below LB__GGML_GROUP_EPS, codes 0). */
/* The value of largest magnitude (the first one on ties, with its sign),
 * its magnitude in *amax: the symmetric searches (and Q3_K/Q6_K's scales
 * of scales) scale it to -nmax. */
float lb__ggml_signed_max(const float *x, int n, float *amax);
float lb__ggml_make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw);

/* Q3_K's reference search (make_q3_quants): like the above with weights
 * x[i]^2, then (do_rmse) up to 5 passes that move single codes while the
 * weighted fit improves. Codes L[i] in [0, 2 nmax - 1]. */
float lb__ggml_make_q3_quants(int n, int nmax, const float *x, int8_t *L, int do_rmse);

/* Asymmetric search with weights (make_qkx2_quants): codes in [0, nmax],
 * x ~ scale * L - the_min; nstep + 1 trial inverse scales
 * (rmin + rdelta * is + nmax) / (max - min), each refit by weighted least
 * squares, the lowest weighted error (absolute when use_mad) kept. Laux is
 * n bytes of scratch. Returns the scale, *the_min the (non-negative) min. */
float lb__ggml_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                                float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad);

/* make_qkx3_quants: make_qkx2_quants with weights x[i]^2 when weights is
 * NULL, and a group counted as flat when max <= min (not just ==). */
float lb__ggml_make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                                float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad);

/* make_qkx3_quants, also giving the rule of its final codes: L[i] =
 * clamp(nearest_int(rule[0] * (x[i] - rule[1])), 0, nmax) (the trial
 * inverse scale that won and the minimum its codes were taken from; the
 * returned scale is their least-squares refit, not 1 / rule[0]). For
 * GPTQ's grid (algo/gptq_grid_ggml.c), which must round as ggml did. */
float lb__ggml_make_qkx3_quants_rule(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                                     float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                                     int use_mad, float rule[2]);

/* The search for a super-block's non-negative sub-block scales or mins
 * (make_qp_quants): codes in [0, nmax], 9 trial scales by weighted squared
 * error, then a weighted least-squares refit with up to 5 passes of single
 * code moves. Returns the scale of the codes. */
float lb__ggml_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *quant_weights);


/* ===== Eight groups at once =====
 * The same searches over 8 independent groups of n <= 32 values, laid out
 * interleaved: x[8 i + g] is element i of group g (likewise weights and
 * the codes L). Each group's result is exactly the one-group function's,
 * whatever the instruction set: the AVX2 twin runs one group per lane,
 * every lane doing the scalar op sequence. */
typedef struct {
    /* make_qkx2_quants (flat_le 0) / make_qkx3_quants (flat_le 1), weights
     * given; scale[g] and the_min[g] per group */
    void (*qkx)(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *scale, float *the_min,
                float rmin, float rdelta, int nstep, int use_mad, int flat_le);
    /* make_qx_quants (rmse_type 1): weights qw, or x^2 when qw is NULL */
    void (*qx)(int n, int nmax, const float *x, const float *qw, int8_t *L, float *scale);
    /* make_qx_quants of one group (n <= 32): the AVX2 twin runs the 19
     * trial scales in lanes, the choice among them in order after */
    float (*qx1)(int n, int nmax, const float *x, int8_t *L, const float *qw);
    /* make_q3_quants with do_rmse */
    void (*q3)(int n, int nmax, const float *x, int8_t *L, float *scale);
    /* Not a search, one run of n (a multiple of 8) values with one scale:
     * L[i] = clamp(nearest_int((x[i] + m) / d), lo, hi) + offset, the
     * requantization with the rounded scales ((x[i] / d) when add_m is 0,
     * as Q3_K and Q6_K write it). */
    void (*requant)(const float *x, int n, float d, float m, int add_m, int lo, int hi, int offset, uint8_t *L);
    /* ggml's importance weights w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]),
     * n a multiple of 8 (elementwise; sqrt is correctly rounded either way) */
    void (*imatrix_weights)(const float *qw, const float *x, float sigma2, int n, float *w);
} lb__ggml_search8;

/* The set for isa (x86 levels from AVX2 up get the AVX2 one when it was
 * compiled in); the scalar one otherwise. */
const lb__ggml_search8 *lb__ggml_search8_get(lb_isa isa);

extern const lb__ggml_search8 lb__ggml_search8_scalar, lb__ggml_search8_avx2;

/* ===== Sixteen groups at once =====
 * qkx and qx of the set above over 16 groups, interleaved x[16 i + g]:
 * one group a lane of an AVX-512 vector, each group's result exactly the
 * one-group function's. Only where the instruction set has it: callers
 * with 16 groups at hand (a super-block's sixteen sub-blocks of 16, two
 * super-blocks' eight of 32) run two eight-group calls otherwise. */
typedef struct {
    void (*qkx)(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *scale, float *the_min,
                float rmin, float rdelta, int nstep, int use_mad, int flat_le);
    void (*qx)(int n, int nmax, const float *x, const float *qw, int8_t *L, float *scale);
    /* The layout the two take, in vector code (n a multiple of 16): groups
     * g < groups of n values at src + g n into t[16 i + g] (lanes from
     * groups on repeat group 0), and codes back, dst[g n + i] = t[16 i + g]. */
    void (*interleave)(const float *src, int n, int groups, float *t);
    void (*deinterleave)(const uint8_t *t, int n, int groups, uint8_t *dst);
} lb__ggml_search16;

/* The sixteen-group set for isa (AVX-512 when compiled in), or NULL. */
const lb__ggml_search16 *lb__ggml_search16_get(lb_isa isa);

extern const lb__ggml_search16 lb__ggml_search16_avx512;

#endif

/* The quantization loops of every instruction set against the scalar
 * twins, bit for bit, at block sizes and lengths that exercise the masked
 * tails; the fused integer trial against the unfused chain; and the fused
 * scale-and-encode kernels against scaling then the scalar encoder. */
#undef NDEBUG
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/convert.h"
#include "check.h"
#include "lowbit.h"
#include "quant/qkernels.h"
#include "util/cpu.h"


static uint64_t state = 42;
static float rndf(void)
{
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    double u = (double)(state >> 11) / 9007199254740992.0;
    return (float)((u - 0.5) * pow(10.0, (double)(state % 7) - 3.0));
}

#if defined(__x86_64__)
#include <fenv.h>
#include <xmmintrin.h>

/* lb_quantize gives the same bytes whatever the caller's FP environment:
 * round downward, flush-to-zero and denormals-are-zero on. */
static void test_quantize_in_hostile_fp_environment(void)
{
    static const char *const specs[] = {"nvfp4", "fp8_e4m3:g16:scale=ue4m3:twolevel", "int8:tensor:clip=mse",
                                        "int4:g32:affine:clip=mse", "mxfp4", "fp6_e3m2:channel:scale=fp16"};
    enum { R = 5, C = 67 };
    float x[R * C], y1[R * C], y2[R * C];
    for (int i = 0; i < R * C; i++) x[i] = rndf() * (i % 11 == 0 ? 1e-30f : 1.0f);
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        lb_qspec spec;
        lb_qtensor *q1, *q2;
        lb_qtensor_view v1, v2;
        CHECK(lb_qspec_parse(specs[k], &spec) == LB_OK, "%s", lb_last_error());
        lb_quantize(&spec, x, R, C, 2, &q1);
        lb_dequantize(q1, y1, 2);
        unsigned saved = _mm_getcsr();
        fesetround(FE_DOWNWARD);
        _mm_setcsr(_mm_getcsr() | 0x8040);
        lb_quantize(&spec, x, R, C, 2, &q2);
        lb_dequantize(q2, y2, 2);
        _mm_setcsr(saved);
        fesetround(FE_TONEAREST);
        lb_qtensor_view_get(q1, &v1);
        lb_qtensor_view_get(q2, &v2);
        CHECK(memcmp(v1.data, v2.data, v1.data_bytes) == 0 && memcmp(v1.scales, v2.scales, v1.scale_bytes) == 0 &&
                  memcmp(&v1.tensor_scale, &v2.tensor_scale, 4) == 0 && memcmp(y1, y2, sizeof y1) == 0,
              "%s changed under round-down/FTZ/DAZ", specs[k]);
        lb_qtensor_free(q1), lb_qtensor_free(q2);
    }
}
#endif

/* The block scales of integer specs from their extremes, against the
 * scalar formulas, with ties of both rules and all-zero blocks. */
static void test_scales_from_extremes(void)
{
    enum { N = 1000 };
    float lo[N], hi[N], o1[N], o2[N + 1]; /* o2[n]: written past the end? */
    for (int i = 0; i < N; i++) {
        lo[i] = -fabsf(rndf()), hi[i] = fabsf(rndf());
        if (i % 5 == 0) hi[i] = -lo[i];                   /* signed: the tie takes lo */
        if (i % 7 == 0) hi[i] = -lo[i] * 127.0f / 128.0f; /* full range: a * qmax against hi */
        if (i % 11 == 0) lo[i] = hi[i] = 0.0f;
    }
    static const size_t lengths[] = {1, 5, 8, 16, 31, 64, 97, 1000};
    const lb__qkernels *ref = lb__qkernels_get(LB_ISA_SCALAR);
    for (int isa = 0; isa < LB__ISA_COUNT; isa++) {
        if (!lb__isa_supported((lb_isa)isa)) continue;
        const lb__qkernels *k = lb__qkernels_get((lb_isa)isa);
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
            for (int ri = 0; ri < 3; ri++) {
                size_t n = lengths[li];
                float ratio = ri == 0 ? 1.0f : ri == 1 ? 0.85f : 0.55f, ts = ri == 2 ? 3.0e-3f : 1.0f;
                memset(o2, 0xFF, sizeof o2);
                ref->full_range_scales(lo, hi, n, ratio, 128.0f * ts, 127.0f * ts, o1);
                k->full_range_scales(lo, hi, n, ratio, 128.0f * ts, 127.0f * ts, o2);
                CHECK(memcmp(o1, o2, n * 4) == 0 && o2[n] != o2[n], "full-range scales isa=%d n=%zu ratio=%g", isa,
                      n, (double)ratio);
                ref->signed_scales(lo, hi, n, ratio, -8.0f, o1);
                k->signed_scales(lo, hi, n, ratio, -8.0f, o2);
                CHECK(memcmp(o1, o2, n * 4) == 0, "signed scales isa=%d n=%zu ratio=%g", isa, n, (double)ratio);
            }
    }
    CHECK(lb__full_range_scale(-1.0f, 0.5f, 1.0f, 8.0f, 7.0f) == 0.125f, "lo on qmin when hi fits");
    CHECK(lb__full_range_scale(-0.5f, 1.0f, 1.0f, 8.0f, 7.0f) == 1.0f / 7.0f, "hi on qmax when it would clip");
    CHECK(lb__signed_scale(-1.0f, 1.0f, 1.0f, -8.0f) == 0.125f && lb__signed_scale(-1.0f, 2.0f, 1.0f, -8.0f) == -0.25f,
          "signed: the larger magnitude on qmin, a tie on the negative side");
}

/* The fused scale-and-encode kernel against block_div_clamp then the
 * scalar encoder: every format kind, FP4's own fast path at its ties (the
 * grid's midpoints and their neighbours, both signs, zeros, values past
 * the clamp), a prefetch distance and a NULL offset array (for offsets of
 * -0) that must not change a byte. */
static void test_encode_prescaled(void)
{
    enum { N = 4096 };
    float *x = malloc(N * 4), *scaled = malloc(N * 4), div[N / 16], add[N / 16];
    uint8_t *c1 = malloc(N * 4), *c2 = malloc(N * 4);
    static const float grid[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    int at = 0;
    for (int g = 0; g < 8 && at < N - 64; g++)
        for (int h = 0; h < 2; h++) { /* grid points and the midpoints above them, with their neighbours */
            float v = h == 0 || g == 7 ? grid[g] : (grid[g] + grid[g + 1]) / 2;
            float near[] = {v, nextafterf(v, 0.0f), nextafterf(v, 10.0f)};
            for (int j = 0; j < 3; j++) x[at++] = near[j], x[at++] = -near[j];
        }
    x[at++] = 1e-40f, x[at++] = -1e-40f, x[at++] = 6.5f, x[at++] = -7.0f;
    for (; at < N; at++) x[at] = rndf();
    static const lb_format formats[] = {LB_FMT_FP4_E2M1, LB_FMT_INT4, LB_FMT_INT8, LB_FMT_FP8_E4M3, LB_FMT_FP6_E2M3};
    for (int isa = 0; isa < LB__ISA_COUNT; isa++) {
        size_t width;
        lb__encode_prescaled_fn fused = lb__isa_supported((lb_isa)isa) ? lb__encode_prescaled_kernel((lb_isa)isa, &width) : NULL;
        if (!fused) continue;
        for (size_t fi = 0; fi < sizeof formats / sizeof formats[0]; fi++) {
            const lb_format_info *f = lb_format_get(formats[fi]);
            int integer = f->kind == LB_KIND_INT;
            float lo = integer ? (float)f->min_finite : -(float)f->max_finite, hi = (float)f->max_finite;
            for (int unit = 0; unit < 2; unit++) { /* unit: divisor 1 (the ties as given), else random */
                for (int b = 0; b < N / 16; b++)
                    div[b] = unit ? 1.0f : fabsf(rndf()) + 1e-3f, add[b] = integer && !unit ? (float)(b % 3) - 1 : -0.0f;
                int offsets = integer && !unit; /* else add[] is all -0: NULL must give the same bytes */
                for (size_t ahead = 0; ahead <= 504; ahead += 504) { /* 0: no prefetch; else a row stride */
                    lb__prescale ps = {div, offsets || ahead == 0 ? add : NULL, 16, lo, hi, ahead};
                    size_t n = N - 64; /* the prefetch reaches 4.25 strides on, still inside x: it changes no byte */
                    lb__qkernels_get(LB_ISA_SCALAR)->block_div_clamp(x, n, 16, div, add, lo, hi, scaled);
                    memset(c1, 0, N), memset(c2, 0, N);
                    lb__encode_scalar(f, LB_SATURATE, scaled, n, c1);
                    fused(f, x, n, &ps, c2);
                    CHECK(memcmp(c1, c2, lb_format_bytes(f->id, n)) == 0, "prescaled %s isa=%d unit=%d ahead=%zu",
                          f->name, isa, unit, ahead);
                }
            }
        }
    }
    free(x), free(scaled), free(c1), free(c2);
}

/* rows4_absmax against four calls of the scalar block_absmax, bit for bit,
 * and its flag for a NaN or infinity in any row, tails included. */
static void test_rows4_absmax(const float *x)
{
    static const size_t lengths[] = {1, 5, 16, 31, 64, 97, 250};
    const lb__qkernels *ref = lb__qkernels_get(LB_ISA_SCALAR);
    float row[4][250];
    for (int isa = 0; isa < LB__ISA_COUNT; isa++) {
        if (!lb__isa_supported((lb_isa)isa)) continue;
        const lb__qkernels *k = lb__qkernels_get((lb_isa)isa);
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            size_t n = lengths[li];
            const float *rows[4] = {row[0], row[1], row[2], row[3]};
            for (int r = 0; r < 4; r++) memcpy(row[r], x + 250 * r, n * sizeof(float));
            float want[4], got[4];
            for (int r = 0; r < 4; r++) CHECK(ref->block_absmax(row[r], n, n, &want[r]) == 0, "finite row");
            CHECK(k->rows4_absmax(rows, n, got) == 0 && memcmp(want, got, sizeof want) == 0,
                  "rows4_absmax isa=%d n=%zu", isa, n);
            for (int r = 0; r < 4; r++) { /* each row, first and last value */
                for (size_t at = 0; at < n; at += n - 1 ? n - 1 : 1) {
                    float keep = row[r][at];
                    row[r][at] = (r + at) % 2 ? NAN : -INFINITY;
                    CHECK(k->rows4_absmax(rows, n, got) == 1, "non-finite seen isa=%d n=%zu row %d at %zu", isa, n, r,
                          at);
                    row[r][at] = -3.0e38f;
                    CHECK(k->rows4_absmax(rows, n, got) == 0 && got[r] == 3.0e38f, "huge finite isa=%d n=%zu", isa, n);
                    row[r][at] = keep;
                }
            }
        }
    }
}

/* A tensor-wide pass reads four rows at a time from the four quarters of
 * its slice, but an error still names the first bad row in row order. */
static void test_first_bad_row_named(void)
{
    enum { ROWS = 10, COLS = 64 };
    float *x = calloc(ROWS * COLS, sizeof *x);
    lb_qspec spec;
    CHECK(lb_qspec_parse("nvfp4", &spec) == LB_OK, "nvfp4 parses");
    for (int i = 0; i < ROWS * COLS; i++) x[i] = (float)(i % 13) - 6.0f;
    static const struct { int bad[2]; int first; } cases[] = {
        {{6, 1}, 1}, /* row 6 is read with rows 0, 2, 4, before row 1 */
        {{9, 9}, 9}, /* a row left over after the quarters */
        {{5, 7}, 5},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        x[cases[c].bad[0] * COLS + 3] = NAN;
        x[cases[c].bad[1] * COLS + 60] = INFINITY;
        lb_qtensor *q = NULL;
        CHECK(lb_quantize(&spec, x, ROWS, COLS, 1, &q) == LB_ERR_NAN && !q, "case %zu refused", c);
        char want[32];
        snprintf(want, sizeof want, "(row %d,", cases[c].first);
        CHECK(strstr(lb_last_error(), want) != NULL, "case %zu names the first bad row: %s", c, lb_last_error());
        x[cases[c].bad[0] * COLS + 3] = 1.0f;
        x[cases[c].bad[1] * COLS + 60] = 1.0f;
    }
    free(x);
}

/* The tensor-wide amax sees every row: the four-row pass's rows and the
 * rows left over after the quarters, with one or two threads. The
 * largest value in each row in turn gives the same tensor scale. */
static void test_tensor_amax_every_row(void)
{
    enum { COLS = 48 };
    lb_qspec spec;
    CHECK(lb_qspec_parse("nvfp4", &spec) == LB_OK, "nvfp4 parses");
    for (size_t rows = 1; rows <= 11; rows++)
        for (int threads = 1; threads <= 2; threads++) {
            float *x = malloc(rows * COLS * sizeof *x), first = 0;
            for (size_t i = 0; i < rows * COLS; i++) x[i] = 0.01f * (float)(i % 7) - 0.03f;
            for (size_t r = 0; r < rows; r++) {
                x[r * COLS + 7] = -100.0f;
                lb_qtensor *q = NULL;
                lb_qtensor_view v;
                CHECK(lb_quantize(&spec, x, rows, COLS, threads, &q) == LB_OK && lb_qtensor_view_get(q, &v) == LB_OK,
                      "%s", lb_last_error());
                if (r == 0) first = v.tensor_scale;
                CHECK(v.tensor_scale == first && first > 0.0297f, "rows=%zu threads=%d: the largest value in row %zu "
                      "gives tensor scale %g, in row 0 %g", rows, threads, r, (double)v.tensor_scale, (double)first);
                lb_qtensor_free(q);
                x[r * COLS + 7] = 0.0f;
            }
            free(x);
        }
}

/* The vector trials divide by a reciprocal and Markstein's correction
 * where the operands allow it, by the division elsewhere: the same bits as
 * the scalar twin's x / d either way. Divisors inside, at and outside
 * [2^-40, 2^40] (negative, subnormal, huge too); values that are zero,
 * tiny, subnormal or huge; and quotients an ulp or two either side of the
 * rounding midpoints k + 1/2, where x * (1/d) alone is often off. */
static void test_trial_quotients_exact(void)
{
    enum { N = 4096 };
    static const float divisors[] = {1.0f, 1.5f, 0.1f, 3.3e-3f, -0.37f, 0x1p-40f, 0x1.fffffep-41f, 0x1p40f,
                                     0x1.000002p40f, 3e-39f, 1e-30f, 1e30f, 7.0f / 3.0f, 2e38f, -1.3e38f};
    static const size_t blocks[] = {16, 32, 7, 33};
    float *x = malloc(N * 4), *div = malloc(N * 4), *add = malloc(N * 4), e1[N], e2[N];
    int near_misses = 0; /* quotients where x * RN(1/d) is not RN(x / d): the correction matters */
    for (size_t di = 0; di < sizeof divisors / sizeof divisors[0]; di++) {
        float d = divisors[di];
        for (int i = 0; i < N; i++) {
            div[i] = d, add[i] = i % 3 ? -0.0f : (float)(i % 5) - 2.0f;
            float v;
            switch (i % 8) {
            case 0: v = 0.0f; break;
            case 1: v = rndf() * 1e-30f; break;
            case 2: v = rndf() * 1e-38f; break; /* subnormal or nearly */
            case 3: v = rndf() * 1e30f; break;
            default: { /* d * (k + 1/2), nudged by up to two ulps (|k + 1/2| <= 1.5 for the largest d:
                        * 1/d is subnormal there, which the divisor's range check keeps from the fast path) */
                float m = (float)((int)(i % 17) - 8) + 0.5f;
                if (fabsf(d) > 1e37f) m = (float)((int)(i % 4) - 2) + 0.5f;
                v = nextafterf(m * d, (i & 8) ? INFINITY : -INFINITY);
                if (i & 16) v = nextafterf(v, (i & 8) ? INFINITY : -INFINITY);
            }
            }
            x[i] = v;
            near_misses += isfinite(x[i] / d) && x[i] * (1.0f / d) != x[i] / d;
        }
        const lb__qkernels *ref = lb__qkernels_get(LB_ISA_SCALAR);
        for (int isa = 0; isa < LB__ISA_COUNT; isa++) {
            if (!lb__isa_supported((lb_isa)isa)) continue;
            const lb__qkernels *k = lb__qkernels_get((lb_isa)isa);
            for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
                size_t bl = blocks[bi], nb = (N + bl - 1) / bl;
                ref->block_trial_err_int(x, N, bl, div, add, -8, 7, e1);
                k->block_trial_err_int(x, N, bl, div, add, -8, 7, e2);
                CHECK(memcmp(e1, e2, nb * 4) == 0, "trial quotients isa=%d d=%a block=%zu", isa, (double)d, bl);
            }
        }
    }
    CHECK(near_misses > 1000, "the data has quotients a product alone gets wrong (%d)", near_misses);
    free(x), free(div), free(add);
}

int main(void)
{
    enum { N = 1000 };
    static const size_t blocks[] = {1, 3, 7, 8, 15, 16, 17, 32, 33, 100, 1000};
    static const size_t lengths[] = {1, 5, 16, 31, 64, 97, 1000};
    float *x = malloc(N * 4), *o1 = malloc(N * 4), *o2 = malloc(N * 4), *dq = malloc(N * 4);
    float div[N], add[N], sub[N], mul[N], a1[N], a2[N], l1[N], l2[N], h1[N], h2[N];
    float e1[N], e2[N];
    uint8_t *codes = malloc(N * 4);
    for (int i = 0; i < N; i++) x[i] = rndf();
    for (int i = 0; i < N; i++) {
        div[i] = fabsf(rndf()) + 1e-3f, add[i] = (float)(i % 5) - 2.0f;
        sub[i] = add[i], mul[i] = div[i];
    }
    const lb__qkernels *ref = lb__qkernels_get(LB_ISA_SCALAR);
    const lb_format_info *int4 = lb_format_get(LB_FMT_INT4);
    for (int isa = 0; isa < LB__ISA_COUNT; isa++) {
        if (!lb__isa_supported((lb_isa)isa)) continue;
        const lb__qkernels *k = lb__qkernels_get((lb_isa)isa);
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
                size_t n = lengths[li], bl = blocks[bi], nb = (n + bl - 1) / bl;
                CHECK(ref->block_absmax(x, n, bl, a1) == 0 && k->block_absmax(x, n, bl, a2) == 0, "finite input");
                CHECK(memcmp(a1, a2, nb * 4) == 0, "absmax isa=%d block=%zu n=%zu", isa, bl, n);
                ref->block_minmax(x, n, bl, l1, h1);
                k->block_minmax(x, n, bl, l2, h2);
                CHECK(memcmp(l1, l2, nb * 4) == 0 && memcmp(h1, h2, nb * 4) == 0, "minmax isa=%d block=%zu", isa, bl);
                ref->block_div_clamp(x, n, bl, div, add, -8, 7, o1);
                k->block_div_clamp(x, n, bl, div, add, -8, 7, o2);
                CHECK(memcmp(o1, o2, n * 4) == 0, "div_clamp isa=%d block=%zu n=%zu", isa, bl, n);
                ref->block_sub_mul(x, n, bl, sub, mul, o1);
                k->block_sub_mul(x, n, bl, sub, mul, o2);
                CHECK(memcmp(o1, o2, n * 4) == 0, "sub_mul isa=%d block=%zu n=%zu", isa, bl, n);
                ref->block_scaled_err(x, o1, n, bl, div, add, e1);
                k->block_scaled_err(x, o1, n, bl, div, add, e2);
                CHECK(memcmp(e1, e2, nb * 4) == 0, "scaled_err isa=%d block=%zu n=%zu", isa, bl, n);
                /* fused integer trial = div_clamp, int4 encode, decode, scaled_err */
                k->block_trial_err_int(x, n, bl, div, add, -8, 7, e1);
                ref->block_div_clamp(x, n, bl, div, add, -8, 7, o1);
                lb__encode_kernel(LB_ISA_SCALAR)(int4, LB_SATURATE, o1, n, codes);
                lb__decode_kernel(LB_ISA_SCALAR)(int4, codes, n, dq);
                ref->block_scaled_err(x, dq, n, bl, div, add, e2);
                CHECK(memcmp(e1, e2, nb * 4) == 0, "fused trial isa=%d block=%zu n=%zu", isa, bl, n);
            }
        x[77] = NAN;
        CHECK(k->block_absmax(x, 100, 16, a1) == 1 && k->block_minmax(x, 100, 7, l1, h1) == 1, "NaN seen isa=%d", isa);
        x[77] = -INFINITY;
        CHECK(k->block_absmax(x, 100, 33, a1) == 1 && k->first_nonfinite(x, 100) == 77, "inf seen isa=%d", isa);
        x[77] = 0.5f;
        /* inside the 16-blocks-at-once part of the vector kernels too */
        x[700] = -NAN;
        CHECK(k->block_absmax(x, N, 16, a1) == 1 && k->block_absmax(x, N, 32, a1) == 1, "NaN in a batch isa=%d", isa);
        x[700] = INFINITY;
        CHECK(k->block_absmax(x, N, 16, a1) == 1 && k->block_absmax(x, N, 3, a1) == 1, "inf in a batch isa=%d", isa);
        x[700] = -3.0e38f; /* the largest finite magnitudes are not flagged */
        CHECK(k->block_absmax(x, N, 16, a1) == 0 && a1[700 / 16] == 3.0e38f, "huge finite isa=%d", isa);
        x[700] = 0.25f;
    }
    test_rows4_absmax(x);
    free(x), free(o1), free(o2), free(dq), free(codes);
    test_first_bad_row_named();
    test_tensor_amax_every_row();
    test_trial_quotients_exact();
    test_scales_from_extremes();
    test_encode_prescaled();
#if defined(__x86_64__)
    test_quantize_in_hostile_fp_environment();
#endif
    return check_summary();
}

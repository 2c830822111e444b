/* Int8-activation decode kernels (kernel/qdot8.h): this file's own reading
 * of the documented definition, from the public qtensor view (codes,
 * scales, zero points, lb_decode_value), against every kernel set of this
 * build and CPU, bit for bit; thread counts; the matrices refused; a
 * non-finite activation running the exact kernels; and a sanity bound on
 * how far the rounded activations move the result from the exact one.
 *
 * No tolerance in the kernel comparisons: the lane sums are exact
 * integers and the float arithmetic has one documented order. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/ggml_quants.h"
#include "kernel/qdot8.h"
#include "kernel/qmat.h"
#include "lowbit.h"
#include "util/cpu.h"

#define QDOT8_TEST_SEED 0x2545F4914F6CDD1Dull
#include "qdot8_sets.h"

static float decode(lb_format f, uint32_t code)
{
    float v;
    lb_decode_value(f, code, &v);
    return v;
}

static uint32_t code_at(lb_format f, const uint8_t *row, size_t k)
{
    const int bits = lb_format_get(f)->bits;
    if (bits == 6) { /* bits 6k .. 6k + 5 of the row, little-endian: four codes in three bytes */
        const uint8_t *b = row + k / 4 * 3;
        uint32_t w = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
        return (w >> (6 * (k % 4))) & 63u;
    }
    return bits == 4 ? (row[k / 2] >> (4 * (k & 1))) & 15u : row[k];
}

/* The weight of one unit of u: fp4 1/2, fp6 e2m3 1/8, else 1. */
static float unit_weight(lb_format f) { return f == LB_FMT_FP4_E2M1 ? 0.5f : f == LB_FMT_FP6_E2M3 ? 0.125f : 1.0f; }

/* Element k's integer value u as the header defines it. */
static int unit_of(lb_format f, uint32_t code) { return (int)(decode(f, code) / unit_weight(f)); }

static uint32_t load_le(const uint8_t *p, int bytes)
{
    uint32_t c = 0;
    for (int b = 0; b < bytes; b++) c |= (uint32_t)p[b] << (8 * b);
    return c;
}

/* The definition, token by token, row by row, on a tensor's public view. */
static void reference_of(const lb_qtensor_view *vp, const float *x, size_t n, float *y)
{
    const lb_qtensor_view v = *vp;
    const lb_format ef = v.spec.element;
    const size_t rows = v.rows, cols = v.cols;
    const size_t E = lb_format_get(ef)->bits == 4 ? 8 : 4, G = 16 * E;
    const int fp8 = ef == LB_FMT_FP8_E4M3 || ef == LB_FMT_FP8_E5M2;
    const size_t groups = (cols + G - 1) / G, padded = groups * G;
    const size_t block = v.spec.granularity == LB_GRAN_GROUP ? v.spec.group : cols;
    const size_t nb = (cols + block - 1) / block;
    const int sbytes = lb_format_get(v.spec.scale_format)->bits / 8;
    const size_t band = v.spec.granularity == LB_GRAN_GROUP && v.spec.group_rows > 1 ? v.spec.group_rows : 1;
    int *q = malloc(padded * sizeof *q);
    float *d = malloc((padded / 32 + 1) * sizeof *d);
    for (size_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        for (size_t j = 0; j * 32 < padded; j++) {
            if (j * 32 >= cols) { /* wholly past the row */
                d[j] = 0.0f;
                for (size_t k = j * 32; k < j * 32 + 32; k++) q[k] = 0;
                continue;
            }
            float amax = 0.0f;
            for (size_t k = j * 32; k < j * 32 + 32 && k < cols; k++) amax = fmaxf(amax, fabsf(xt[k]));
            d[j] = amax / 127.0f;
            if (d[j] == 0.0f) d[j] = 1.0f;
            for (size_t k = j * 32; k < j * 32 + 32; k++) {
                if (k >= cols) {
                    q[k] = 0;
                    continue;
                }
                float c = fminf(fmaxf(xt[k] / d[j], -127.0f), 127.0f);
                q[k] = (int)nearbyintf(c); /* the default mode: half to even */
            }
        }
        for (size_t r = 0; r < rows; r++) {
            const uint8_t *row = v.data + r * v.row_bytes;
            float p[16] = {0};
            for (size_t g = 0; g < groups; g++)
                for (size_t l = 0; l < 16; l++) {
                    size_t k0 = g * G + l * E, b = k0 / block;
                    if (b >= nb) b = nb - 1;
                    size_t si = v.spec.granularity == LB_GRAN_TENSOR ? 0 : (r / band) * nb + b;
                    float mw = decode(v.spec.scale_format, load_le(v.scales + si * (size_t)sbytes, sbytes));
                    mw = (mw * v.tensor_scale) * unit_weight(ef);
                    int zp = 0;
                    if (v.zero_points) {
                        const uint8_t *zr = v.zero_points + (v.spec.granularity == LB_GRAN_TENSOR ? 0 : r) * v.zero_point_row_bytes;
                        zp = unit_of(ef, code_at(ef, zr, b));
                    }
                    if (fp8) { /* the pairs of vdpbf16ps: lane l is pair l % 4 of run l / 4, odd element first */
                        size_t a = g * G + (l / 4) * 16 + 2 * (l % 4), ks[4] = {a + 1, a, a + 9, a + 8};
                        float sum = 0.0f;
                        for (int j = 0; j < 4; j++) {
                            float w8 = ks[j] < cols ? decode(ef, code_at(ef, row, ks[j])) : 0.0f;
                            sum = fmaf(w8, (float)q[ks[j]], sum);
                        }
                        p[l] = fmaf(sum, d[k0 / 32] * mw, p[l]);
                        continue;
                    }
                    int32_t sum = 0;
                    for (size_t k = k0; k < k0 + E; k++)
                        if (k < cols) sum += q[k] * (unit_of(ef, code_at(ef, row, k)) - zp);
                    p[l] = fmaf((float)sum, d[k0 / 32] * mw, p[l]);
                }
            float t8[8];
            for (int i = 0; i < 8; i++) t8[i] = p[i] + p[i + 8];
            for (int i = 0; i < 4; i++) t8[i] = t8[i] + t8[i + 4];
            y[t * rows + r] = (t8[0] + t8[2]) + (t8[1] + t8[3]);
        }
    }
    free(q);
    free(d);
}

static void reference(const lb_qtensor *qt, const float *x, size_t n, float *y)
{
    lb_qtensor_view v;
    lb_qtensor_view_get(qt, &v);
    reference_of(&v, x, n, y);
}

/* The same on a matrix built by hand (its spec, codes and scales). */
static void reference_view(const lb__qmat *m, const float *x, size_t n, float *y)
{
    lb_qtensor_view v = {.spec = m->spec, .rows = m->rows, .cols = m->cols, .data = m->data, .row_bytes = m->row_bytes,
                         .scales = m->scales, .tensor_scale = m->scale_mul};
    reference_of(&v, x, n, y);
}

/* Weights whose magnitudes span 2^-14 .. 1 (fp8 codes from the smallest
 * to the largest exponents in one row): the lane sums of fp8 products
 * then need more than fp32's 24 bits and round, which random weights of
 * one magnitude almost never make them do. */
static int wide_weights;

static float rand_wide(void)
{
    float m = ldexpf(1.0f + (float)(next_u32() & 0xFF) / 256.0f, -(int)(next_u32() % 15));
    return next_u32() & 1 ? -m : m;
}

static void check_spec(const char *spec_text, size_t rows, size_t cols, size_t n)
{
    lb_qspec spec;
    CHECK(lb_qspec_parse(spec_text, &spec) == LB_OK, "%s", spec_text);
    float *w = malloc(rows * cols * sizeof *w), *x = malloc(n * cols * sizeof *x);
    float *want = malloc(n * rows * sizeof *want), *got = malloc(n * rows * sizeof *got);
    float *exact = malloc(n * rows * sizeof *exact);
    for (size_t i = 0; i < rows * cols; i++) w[i] = wide_weights ? rand_wide() : rand_f();
    for (size_t i = 0; i < n * cols; i++) x[i] = rand_f();
    lb__qmat m;
    CHECK(lb__qmat_from_f32(w, rows, cols, &spec, 1, &m) == LB_OK, "%s", spec_text);
    /* fp6 taken only by the sets that unpack 6-bit codes, fp8 by those with bf16 pair products */
    const int six = spec.element == LB_FMT_FP6_E2M3;
    const int fp8 = spec.element == LB_FMT_FP8_E4M3 || spec.element == LB_FMT_FP8_E5M2;
    const lb__qdot8_set *active = lb__qdot8_get(lb_isa_active());
    CHECK(lb__qdot8_supported(&m) == (six ? active->six : fp8 ? active->fp8 : 1), "%s %zux%zu is taken", spec_text,
          rows, cols);
    reference(m.owned_q, x, n, want);
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        if (!set_runs(sets[s])) continue;
        if ((six && !sets[s]->six) || (fp8 && !sets[s]->fp8)) {
            CHECK(lb__qmat_matmul_act8_set(&m, x, n, got, 1, sets[s]) == LB_ERR_UNSUPPORTED, "%s refused by set %s",
                  spec_text, sets[s]->name);
            continue;
        }
        for (int threads = 1; threads <= 2; threads++) {
            memset(got, 0xFF, n * rows * sizeof *got);
            CHECK(lb__qmat_matmul_act8_set(&m, x, n, got, threads, sets[s]) == LB_OK, "%s", spec_text);
            size_t at = 0;
            CHECK(same_bits(want, got, n * rows, &at), "%s %zux%zu n=%zu set %s threads %d: y[%zu] %.9g want %.9g",
                  spec_text, rows, cols, n, sets[s]->name, threads, at, got[at], want[at]);
        }
    }
    /* the rounded activations move each output by at most what rounding
     * each activation by half its block's step d_j can: sum |w_k| d_j / 2
     * (no clipping: |x / d| <= 127), plus the float sums' rounding */
    CHECK(lb__qmat_matmul(&m, x, n, exact, 1) == LB_OK, "%s", spec_text);
    float *wd = malloc(rows * cols * sizeof *wd);
    lb_dequantize(m.owned_q, wd, 1);
    int close = 1;
    for (size_t t = 0; t < n; t++)
        for (size_t r = 0; r < rows; r++) {
            double bound = 0, mag = 0;
            for (size_t k = 0; k < cols; k++) {
                double amax = 0;
                for (size_t i = k / 32 * 32; i < k / 32 * 32 + 32 && i < cols; i++)
                    amax = fmax(amax, fabs(x[t * cols + i]));
                bound += fabs(wd[r * cols + k]) * amax / 127.0 / 2.0;
                mag += fabs((double)x[t * cols + k] * wd[r * cols + k]);
            }
            if (fabs((double)got[t * rows + r] - exact[t * rows + r]) > bound * 1.001 + mag * 1e-5) close = 0;
        }
    CHECK(close, "%s: int8 activations within sum |w| d / 2 of the exact product", spec_text);
    free(wd);
    lb__qmat_free(&m);
    free(w), free(x), free(want), free(got), free(exact);
}

static void check_refused(const char *spec_text)
{
    lb_qspec spec;
    CHECK(lb_qspec_parse(spec_text, &spec) == LB_OK, "%s", spec_text);
    float w[4 * 96], x[96], y[4];
    for (size_t i = 0; i < 4 * 96; i++) w[i] = rand_f();
    for (size_t i = 0; i < 96; i++) x[i] = rand_f();
    lb__qmat m;
    CHECK(lb__qmat_from_f32(w, 4, 96, &spec, 1, &m) == LB_OK, "%s", spec_text);
    CHECK(!lb__qdot8_supported(&m), "%s is refused", spec_text);
    CHECK(lb__qmat_matmul_act8(&m, x, 1, y, 1, lb_isa_active()) == LB_ERR_UNSUPPORTED, "%s", spec_text);
    lb__qmat_free(&m);
}

/* A NaN or infinity cannot be quantized: the call gives the exact kernels' bits. */
static void check_nonfinite(void)
{
    lb_qspec spec;
    lb_qspec_parse("int4:g32", &spec);
    size_t rows = 8, cols = 256;
    float *w = malloc(rows * cols * sizeof *w), x[2 * 256], y8[16], y[16];
    for (size_t i = 0; i < rows * cols; i++) w[i] = rand_f();
    for (size_t i = 0; i < 2 * cols; i++) x[i] = rand_f();
    lb__qmat m;
    lb__qmat_from_f32(w, rows, cols, &spec, 1, &m);
    for (int kind = 0; kind < 2; kind++) {
        x[cols + 7] = kind ? INFINITY : NAN;
        CHECK(lb__qmat_matmul_act8(&m, x, 2, y8, 1, lb_isa_active()) == LB_OK, "non-finite");
        CHECK(lb__qmat_matmul(&m, x, 2, y, 1) == LB_OK, "exact");
        size_t at = 0;
        int same = 1;
        for (size_t i = 0; i < 2 * rows; i++)
            if (!(isnan(y[i]) && isnan(y8[i])) && memcmp(&y[i], &y8[i], 4) != 0) same = 0, at = i;
        CHECK(same, "%s in x: the exact kernels' results (y[%zu])", kind ? "inf" : "NaN", at);
    }
    lb__qmat_free(&m);
    free(w);
}

/* q/k/v in one call: each matrix's bits are those of its own call, and
 * matrices that cannot share the staged input are refused. */
/* What a paired call's epilogue saw: each row's count, whether both
 * outputs were there (the same matrix twice: a == b bit for bit), and a
 * copy of the first product; then it overwrites a, as silu does. */
typedef struct pair_check {
    float *a, *b;
    size_t rows, n;
    int seen[576];
    int mismatch;
    float first[3 * 576];
} pair_check;

static void pair_epilogue(void *ctx, size_t r0, size_t r1)
{
    pair_check *pc = ctx;
    for (size_t r = r0; r < r1; r++) {
        pc->seen[r]++;
        for (size_t t = 0; t < pc->n; t++) {
            size_t i = t * pc->rows + r;
            pc->mismatch += memcmp(&pc->a[i], &pc->b[i], sizeof(float)) != 0;
            pc->first[i] = pc->a[i];
            pc->a[i] = -1.0f;
        }
    }
}

static void check_multi(void)
{
    static const size_t rows[3] = {576, 192, 37};
    const size_t cols = 576, n = 3;
    lb_qspec spec;
    lb_qspec_parse("int4:g32", &spec);
    lb__qmat m[3];
    float *x = malloc(n * cols * sizeof *x), *y[3], *y1[3];
    for (size_t i = 0; i < n * cols; i++) x[i] = rand_f();
    for (int i = 0; i < 3; i++) {
        float *w = malloc(rows[i] * cols * sizeof *w);
        for (size_t k = 0; k < rows[i] * cols; k++) w[k] = rand_f();
        lb__qmat_from_f32(w, rows[i], cols, &spec, 1, &m[i]);
        free(w);
        y[i] = malloc(n * rows[i] * sizeof(float)), y1[i] = malloc(n * rows[i] * sizeof(float));
    }
    const lb__qmat *ms[3] = {&m[0], &m[1], &m[2]};
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        if (!set_runs(sets[s])) continue;
        for (int threads = 1; threads <= 2; threads++) {
            CHECK(lb__qmat_matmul_act8_multi(ms, 3, x, n, y, threads, sets[s]) == LB_OK, "multi");
            for (int i = 0; i < 3; i++) {
                CHECK(lb__qmat_matmul_act8_set(&m[i], x, n, y1[i], 1, sets[s]) == LB_OK, "single");
                size_t at = 0;
                CHECK(same_bits(y[i], y1[i], n * rows[i], &at), "multi %s threads %d matrix %d: y[%zu]", sets[s]->name,
                      threads, i, at);
            }
        }
    }
    /* paired (gate/up): each thread's rows of both, then the epilogue on
     * them -- every row once, after both products (it reads them) */
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        if (!set_runs(sets[s])) continue;
        for (int threads = 1; threads <= 2; threads++) {
            pair_check pc = {.a = y[0], .b = y1[0], .rows = rows[0], .n = n};
            memset(pc.seen, 0, sizeof pc.seen);
            memset(y[0], 0xFF, n * rows[0] * sizeof(float)); /* NaN until written */
            memset(y1[0], 0xFF, n * rows[0] * sizeof(float));
            CHECK(lb__qmat_matmul_act8_pair(&m[0], &m[0], x, n, y[0], y1[0], threads, sets[s], pair_epilogue, &pc) ==
                      LB_OK, "pair");
            int once = 1;
            for (size_t r = 0; r < rows[0]; r++) once &= pc.seen[r] == 1;
            CHECK(once && pc.mismatch == 0, "pair %s threads %d: every row once (%d), both products before it (%d)",
                  sets[s]->name, threads, once, pc.mismatch);
            float *single = malloc(n * rows[0] * sizeof *single);
            CHECK(lb__qmat_matmul_act8_set(&m[0], x, n, single, 1, sets[s]) == LB_OK, "single");
            size_t at = 0;
            CHECK(same_bits(pc.first, single, n * rows[0], &at), "pair %s threads %d: the products of a single call",
                  sets[s]->name, threads);
            free(single);
        }
    }
    CHECK(lb__qmat_matmul_act8_pair(&m[0], &m[1], x, n, y[0], y[1], 1, sets[0], pair_epilogue, NULL) ==
              LB_ERR_UNSUPPORTED, "a pair of different rows is refused");
    lb_qspec other;
    lb_qspec_parse("mxfp4", &other);
    lb__qmat mx;
    float *w = calloc(8 * cols, sizeof *w);
    lb__qmat_from_f32(w, 8, cols, &other, 1, &mx);
    const lb__qmat *mixed[2] = {&m[0], &mx};
    CHECK(!lb__qdot8_shares_input(&m[0], &mx), "int4 and fp4 stage their inputs differently");
    CHECK(lb__qmat_matmul_act8_multi(mixed, 2, x, 1, y, 1, lb__qdot8_get(lb_isa_active())) == LB_ERR_UNSUPPORTED,
          "a pair that cannot share is refused");
    lb__qmat_free(&mx);
    free(w);
    for (int i = 0; i < 3; i++) lb__qmat_free(&m[i]), free(y[i]), free(y1[i]);
    free(x);
}

/* An activation value for the staging check: rand_f's mix, and blocks
 * that test the corners of quant_i8 -- all zero (scale 1, codes 0), one
 * tiny value (a subnormal scale), and exact half steps (max 127, so
 * x / d = k + 1/2: ties to even). */
static float staging_value(size_t k, size_t kind)
{
    switch (kind % 4) {
    case 0: return rand_f();
    case 1: return 0.0f;
    case 2: return k % 32 == 5 ? 1e-39f : 0.0f;
    default: return k % 32 == 0 ? 127.0f : (float)(int)(next_u32() % 255 - 127) + (next_u32() & 1 ? 0.5f : 0.0f);
    }
}

/* Every set's staged activations (stage_token where it has one) equal the
 * reference staging's bytes: codes, lane sums, scales; zero blocks, tiny
 * ones, ties, rows ending inside a block or a group. */
static void check_staging(void)
{
    static const char *specs[] = {"int4:g32", "mxfp4", "int4:g32:affine", "int8:channel", "int8:g128:affine",
                                  "fp6_e2m3:g32", "uint4:g32:affine"};
    static const size_t widths[] = {1, 31, 32, 33, 64, 100, 128, 200, 576, 1000};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
        for (size_t h = 0; h < sizeof widths / sizeof widths[0]; h++) {
            const size_t cols = widths[h], n = 3;
            lb_qspec spec;
            lb_qspec_parse(specs[s], &spec);
            float *w = calloc(2 * cols, sizeof *w), *x = malloc(n * cols * sizeof *x);
            for (size_t k = 0; k < n * cols; k++) x[k] = staging_value(k, k / 32 + s);
            lb__qmat m;
            CHECK(lb__qmat_from_f32(w, 2, cols, &spec, 1, &m) == LB_OK, "%s", specs[s]);
            for (size_t i = 1; i < sizeof sets / sizeof sets[0]; i++) {
                if (!set_runs(sets[i]) || !lb__qdot8_takes(&m, sets[i])) continue;
                lb__act8 want, got;
                /* the reference loop with this set's offset: the scalar set's loop, other c */
                lb__qdot8_set ref = *sets[i];
                ref.stage_token = NULL;
                CHECK(lb__qdot8_stage(&m, x, n, &ref, &want) == LB_OK, "stage");
                CHECK(lb__qdot8_stage(&m, x, n, sets[i], &got) == LB_OK, "stage");
                const size_t lanes = n * want.lanes;
                int same = memcmp(want.q, got.q, n * want.stride) == 0 &&
                           memcmp(want.cxs, got.cxs, lanes * sizeof(int32_t)) == 0 &&
                           memcmp(want.d, got.d, lanes * sizeof(float)) == 0 &&
                           (!want.xs || memcmp(want.xs, got.xs, lanes * sizeof(int32_t)) == 0);
                CHECK(same, "%s cols %zu: set %s stages what the reference loop does", specs[s], cols, sets[i]->name);
                lb__qdot8_act8_free(&want), lb__qdot8_act8_free(&got);
            }
            lb__qmat_free(&m);
            free(w), free(x);
        }
}

/* A NaN block scale makes its own row NaN and no other: the kernels may
 * stage a batch of rows back to back, where a row's last group reads
 * into the next row's scales (qdot8_vnni_run.h's stage_rows), and must
 * not once a NaN is among them. Rows equal the reference bit for bit or
 * are NaN in both. */
static void check_nan_scales(void)
{
    static const char *specs[] = {"mxfp4", "nvfp4", "int4:g32", "int8:g32", "mxfp6_e2m3"};
    const size_t rows = 40, cols = 576, n = 2;
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        lb_qspec spec;
        lb_qspec_parse(specs[s], &spec);
        float *w = malloc(rows * cols * sizeof *w), *x = malloc(n * cols * sizeof *x);
        float *want = malloc(n * rows * sizeof *want), *got = malloc(n * rows * sizeof *got);
        for (size_t i = 0; i < rows * cols; i++) w[i] = rand_f();
        for (size_t i = 0; i < n * cols; i++) x[i] = rand_f();
        lb__qmat m;
        CHECK(lb__qmat_from_f32(w, rows, cols, &spec, 1, &m) == LB_OK, "%s", specs[s]);
        const size_t sb = lb_format_get(m.scale_format)->bits / 8, row_codes = m.blocks * sb;
        uint8_t nan_code = m.scale_format == LB_FMT_UE4M3 ? 0x7F : 0xFF;
        uint8_t *scales = (uint8_t *)(uintptr_t)m.scales; /* from_f32's own allocation */
        memset(scales + 9 * row_codes, nan_code, sb);                        /* row 9, first block */
        memset(scales + 20 * row_codes + (m.blocks - 1) * sb, nan_code, sb); /* row 20, last block */
        reference_view(&m, x, n, want);
        CHECK(isnan(want[9]) && isnan(want[20]) && !isnan(want[8]) && !isnan(want[21]), "%s: NaN rows 9 and 20",
              specs[s]);
        for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
            if (!set_runs(sets[i]) || !lb__qdot8_takes(&m, sets[i])) continue;
            CHECK(lb__qmat_matmul_act8_set(&m, x, n, got, 1, sets[i]) == LB_OK, "%s", specs[s]);
            int same = 1;
            for (size_t k = 0; k < n * rows; k++)
                same &= (isnan(want[k]) && isnan(got[k])) || memcmp(&want[k], &got[k], sizeof(float)) == 0;
            CHECK(same, "%s set %s: a NaN scale stays in its row", specs[s], sets[i]->name);
        }
        lb__qmat_free(&m);
        free(w), free(x), free(want), free(got);
    }
}

/* Q8_0 and MXFP4 copied into lowbit's layout: every row's values
 * are the ggml blocks' to the bit, the int8 kernels take the copy and give
 * the definition's result on it; other types are left as they are. */
static void check_repack(void)
{
    static const lb_dtype types[] = {LB_DT_Q8_0, LB_DT_MXFP4};
    const size_t rows = 19, cols = 768;
    float *w = malloc(rows * cols * sizeof *w), *a = malloc(cols * sizeof *a), *b = malloc(cols * sizeof *b);
    float x[768], y[19], want[19];
    for (size_t i = 0; i < rows * cols; i++) w[i] = rand_f();
    for (size_t i = 0; i < cols; i++) x[i] = rand_f();
    uint8_t *blocks = malloc(rows * cols * 2);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        CHECK(lb__ggml_quantize_rows(types[k], w, rows, cols, NULL, blocks) == LB_OK, "quantize %d", (int)types[k]);
        lb__qmat g, q;
        CHECK(lb__qmat_from_ggml(types[k], blocks, rows, cols, NULL, &g) == LB_OK, "view");
        CHECK(lb__qmat_repack_ggml(&g, &q) == LB_OK, "repack %s", lb_dtype_get(types[k])->name);
        CHECK(q.bytes == g.bytes, "%s: %zu bytes, want %zu", lb_dtype_get(types[k])->name, q.bytes, g.bytes);
        int same = 1;
        for (size_t r = 0; r < rows; r++) {
            lb__qmat_row_f32(&g, r, a);
            lb__qmat_row_f32(&q, r, b);
            if (memcmp(a, b, cols * sizeof *a) != 0) same = 0;
        }
        CHECK(same, "%s: the repacked rows' values are the blocks'", lb_dtype_get(types[k])->name);
        CHECK(lb__qdot8_supported(&q), "the int8 kernels take repacked %s", lb_dtype_get(types[k])->name);
        CHECK(lb__qmat_matmul_act8(&q, x, 1, y, 2, lb_isa_active()) == LB_OK, "product");
        reference_view(&q, x, 1, want);
        size_t at = 0;
        CHECK(same_bits(want, y, rows, &at), "%s: y[%zu]", lb_dtype_get(types[k])->name, at);
        lb__qmat_free(&q);
    }
    lb__qmat g, q;
    lb__ggml_quantize_rows(LB_DT_Q4_K, w, rows, 512, NULL, blocks);
    lb__qmat_from_ggml(LB_DT_Q4_K, blocks, rows, 512, NULL, &g);
    CHECK(lb__qmat_repack_ggml(&g, &q) == LB_ERR_UNSUPPORTED, "Q4_K stays as read (its minima are no zero points)");
    lb__ggml_quantize_rows(LB_DT_Q6_K, w, rows, 512, NULL, blocks);
    lb__qmat_from_ggml(LB_DT_Q6_K, blocks, rows, 512, NULL, &g);
    CHECK(lb__qmat_repack_ggml(&g, &q) == LB_ERR_UNSUPPORTED, "Q6_K stays as read (its own kernels: test_qdot8k.c)");
    lb__ggml_quantize_rows(LB_DT_Q4_0, w, rows, 96, NULL, blocks);
    lb__qmat_from_ggml(LB_DT_Q4_0, blocks, rows, 96, NULL, &g);
    CHECK(lb__qmat_repack_ggml(&g, &q) == LB_ERR_UNSUPPORTED && lb__qdot8_supported(&g),
          "Q4_0 stays as read, rows of 96 too (the IQ4 kernels: test_qdot8k.c)");
    lb__ggml_quantize_rows(LB_DT_Q5_0, w, rows, 96, NULL, blocks);
    lb__qmat_from_ggml(LB_DT_Q5_0, blocks, rows, 96, NULL, &g);
    CHECK(lb__qmat_repack_ggml(&g, &q) == LB_ERR_UNSUPPORTED && lb__qdot8_supported(&g),
          "Q5_0 stays as read, rows of 96 too (test_qdot8k.c)");
    free(w), free(a), free(b), free(blocks);
}

int main(void)
{
    static const char *specs[] = {"int4:g32",     "int4:channel", "int4:g128:affine", "int4:g64",  "int4:g16",
                                  "int4:g256",    "int4:tensor",  "int4:g32:affine",  "uint4:g32:affine",
                                  "int4:b4x32",   "mxfp4",        "nvfp4",            "int8:channel",
                                  "int8:g32",     "int8:g16",     "int8:g128:affine", "int8:tensor",
                                  "int4:g8",      "int8:g4",      "mxfp6_e2m3",       "fp6_e2m3:g32",
                                  "fp6_e2m3:channel", "fp6_e2m3:g64", "fp6_e2m3:g16", "fp8_e4m3:channel",
                                  "fp8_e5m2:channel", "fp8_e4m3:g32",  "mxfp8_e4m3",  "mxfp8_e5m2",
                                  "fp8_e4m3:g16",     "fp8_e4m3:g128", "fp8_e4m3:tensor", "fp8_e5m2:g64",
                                  "fp8_e4m3:b4x32", "fp8_e4m3:b128x128"};
    static const size_t shapes[][2] = {{16, 128}, {5, 96}, {37, 576}, {9, 1000}, {3, 2048}, {1, 64}};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
        for (size_t h = 0; h < sizeof shapes / sizeof shapes[0]; h++) {
            size_t cols = shapes[h][1];
            for (size_t n = 1; n <= 6; n += (n < 4 ? 1 : 2)) check_spec(specs[s], shapes[h][0], cols, n);
        }
    static const char *fp8_specs[] = {"fp8_e4m3:channel", "fp8_e5m2:channel", "mxfp8_e4m3", "fp8_e4m3:g16"};
    wide_weights = 1;
    for (size_t s = 0; s < sizeof fp8_specs / sizeof fp8_specs[0]; s++)
        for (size_t h = 0; h < sizeof shapes / sizeof shapes[0]; h++) {
            check_spec(fp8_specs[s], shapes[h][0], shapes[h][1], 2);
            /* one group a row: a lane sum that rounds otherwise shows in the output */
            check_spec(fp8_specs[s], 64 * shapes[h][0], 64, 3);
        }
    wide_weights = 0;
    check_refused("fp8_e4m3:g8");      /* a lane's four elements span two blocks of 8 */
    check_refused("fp8_e4m3fnuz:channel");
    check_refused("mxfp6_e3m2");
    check_refused("int4:g48");
    check_nonfinite();
    check_multi();
    check_staging();
    check_nan_scales();
    check_repack();
    return check_summary();
}

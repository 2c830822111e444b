/* The ggml-typed matrices (lb__qmat_from_ggml) and their decode kernels
 * (kernel/gdot.h): every instruction set bit-identical to the scalar
 * reference for every readable ggml dtype, the reference equal to gdot.h's
 * order written out here over lb_dtype_to_f32's values, rows equal to
 * lb_dtype_to_f32's, and prefill equal to lb__matmul on those values. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernel/gdot.h"
#include "kernel/matmul.h"
#include "kernel/qmat.h"
#include "lowbit.h"
#include "quant/qkernels.h"
#include "util/cpu.h"

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint32_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float unif(void) { return (float)(rnd() & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f; }

typedef struct {
    const char *name;
    lb_isa isa;
} isa_entry;

/* Byte offsets of a block's fp16 scale fields (the rest are codes or small
 * scales, any byte of which is valid), -1 ended; for the types whose scales
 * can take extreme values. */
static const int *fp16_fields(lb_dtype t)
{
    static const int d0[] = {0, -1}, d0m2[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1}, q6k[] = {208, -1},
                     none[] = {-1};
    switch (t) {
    case LB_DT_Q4_0: case LB_DT_Q5_0: case LB_DT_Q8_0: case LB_DT_IQ4_NL: case LB_DT_IQ4_XS: return d0;
    case LB_DT_Q4_1: case LB_DT_Q5_1: case LB_DT_Q4_K: case LB_DT_Q5_K: return d0m2;
    case LB_DT_Q2_K: return q2k;
    case LB_DT_Q3_K: return q3k;
    case LB_DT_Q6_K: return q6k;
    case LB_DT_F32: case LB_DT_F16: case LB_DT_BF16: case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2:
    case LB_DT_I8: case LB_DT_I16: case LB_DT_I32: case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL:
    case LB_DT_MXFP4: case LB_DT_NVFP4: case LB_DT_QUANTIZED: case LB_DT_COUNT: return none;
    }
    return none;
}

/* One random block of t whose values are all finite; a quarter of them
 * with an extreme scale (fp16: largest, smallest subnormal, zero, negative
 * largest; MXFP4: exponents 0, 1, 254, 255). */
static void random_block(lb_dtype t, const lb_dtype_info *d, uint8_t *b, float *vals)
{
    static const uint16_t extreme16[] = {0x7BFF, 0x0001, 0x0000, 0xFBFF, 0x0400, 0x03FF};
    static const uint8_t extreme8[] = {0, 1, 254, 255, 127};
    for (int tries = 0;; tries++) {
        for (unsigned i = 0; i < d->block_bytes; i++) b[i] = (uint8_t)rnd();
        if (rnd() % 4 == 0) {
            for (const int *f = fp16_fields(t); *f >= 0; f++) {
                uint16_t h = extreme16[rnd() % 6];
                b[*f] = (uint8_t)h, b[*f + 1] = (uint8_t)(h >> 8);
            }
            if (t == LB_DT_MXFP4) b[0] = extreme8[rnd() % 5];
        }
        lb_dtype_to_f32(t, b, d->block, vals);
        int finite = 1;
        for (unsigned i = 0; i < d->block; i++) finite &= isfinite(vals[i]) != 0;
        if (finite || tries > 1000) return;
    }
}

/* gdot.h's order, written out: partial sum k % 16, padding with +0, the tree. */
static float canonical_dot(const float *x, const float *w, size_t cols)
{
    float s[16] = {0};
    size_t padded = (cols + 15) / 16 * 16;
    for (size_t k = 0; k < padded; k++) s[k % 16] = fmaf(k < cols ? x[k] : 0.0f, k < cols ? w[k] : 0.0f, s[k % 16]);
    return lb__sum16f(s);
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_case(lb_dtype t, size_t rows, size_t cols, const isa_entry *isas, int nisa)
{
    const lb_dtype_info *d = lb_dtype_get(t);
    size_t nb = cols / d->block, row_bytes = nb * d->block_bytes;
    uint8_t *data = malloc(rows * row_bytes + 1);
    float *w = malloc(rows * cols * sizeof *w), *x = malloc(LB__QDOT_MAX_NX * (cols + 3) * sizeof *x);
    float *yref = malloc(LB__QDOT_MAX_NX * rows * sizeof *yref), *y = malloc(LB__QDOT_MAX_NX * rows * sizeof *y);
    float *row = malloc(cols * sizeof *row);
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < nb; b++)
            random_block(t, d, data + r * row_bytes + b * d->block_bytes, w + r * cols + b * d->block);
    size_t ldx = cols + 3; /* rows of x not packed back to back */
    for (size_t i = 0; i < LB__QDOT_MAX_NX * ldx; i++) x[i] = unif() * (rnd() % 8 == 0 ? 1e4f : 1.0f);
    lb__qmat m;
    lb_status st = lb__qmat_from_ggml(t, data, rows, cols, NULL, &m);
    CHECK(st == LB_OK, "%s: lb__qmat_from_ggml %d", d->name, st);
    if (st != LB_OK) goto done;
    CHECK(m.bytes == rows * row_bytes, "%s: bytes %zu", d->name, m.bytes);
    for (size_t r = 0; r < rows; r++) {
        CHECK(lb__qmat_row_f32(&m, r, row) == LB_OK, "%s: row %zu", d->name, r);
        CHECK(memcmp(row, w + r * cols, cols * sizeof *row) == 0, "%s: row %zu differs from lb_dtype_to_f32", d->name,
              r);
    }
    void *scratch = aligned_alloc(64, (lb__gdot_scratch_bytes(&m) + 63) / 64 * 64);
    size_t ranges[2][2] = {{0, rows}, {1, rows > 2 ? rows - 2 : rows}};
    for (size_t nx = 1; nx <= LB__QDOT_MAX_NX; nx++)
        for (int g = 0; g < 2; g++) {
            size_t r0 = ranges[g][0], r1 = ranges[g][1];
            for (size_t i = 0; i < nx * rows; i++) yref[i] = y[i] = -7.0f;
            lb__gdot_scalar(&m, x, nx, ldx, r0, r1, yref, rows, scratch);
            int ok = 1;
            for (size_t tk = 0; tk < nx; tk++)
                for (size_t r = 0; r < rows; r++) {
                    float want = r >= r0 && r < r1 ? canonical_dot(x + tk * ldx, w + r * cols, cols) : -7.0f;
                    ok &= same_bits(yref[tk * rows + r], want);
                }
            CHECK(ok, "%s rows %zu cols %zu nx %zu: the reference is not gdot.h's order", d->name, rows, cols, nx);
            for (int i = 0; i < nisa; i++) {
                for (size_t k = 0; k < nx * rows; k++) y[k] = -7.0f;
                lb__gdot_get(isas[i].isa)(&m, x, nx, ldx, r0, r1, y, rows, scratch);
                int same = 1;
                size_t bad = 0;
                for (size_t k = 0; k < nx * rows; k++)
                    if (!same_bits(y[k], yref[k])) same = 0, bad = k;
                CHECK(same, "%s %s rows %zu cols %zu nx %zu r [%zu,%zu): y[%zu] %a vs reference %a", isas[i].name,
                      d->name, rows, cols, nx, r0, r1, bad, y[bad], yref[bad]);
            }
        }
    /* lb__qmat_matmul: decode (n < 16) equals the kernel; prefill (n >= 16)
     * equals lb__matmul on the dequantized values */
    {
        size_t n = 20;
        float *xs = malloc(n * cols * sizeof *xs), *ya = malloc(n * rows * sizeof *ya), *yb = malloc(n * rows * sizeof *yb);
        for (size_t i = 0; i < n * cols; i++) xs[i] = unif();
        lb__packed pk;
        CHECK(lb__pack_weight(w, rows, cols, &pk) == LB_OK, "pack");
        CHECK(lb__qmat_matmul(&m, xs, n, ya, 2) == LB_OK && lb__matmul(xs, n, &pk, yb, 2) == LB_OK, "matmuls");
        CHECK(memcmp(ya, yb, n * rows * sizeof *ya) == 0, "%s: prefill differs from lb__matmul on the values", d->name);
        CHECK(lb__qmat_matmul(&m, xs, 3, ya, 2) == LB_OK, "decode");
        lb__gdot_scalar(&m, xs, 3, cols, 0, rows, yb, rows, scratch);
        CHECK(memcmp(ya, yb, 3 * rows * sizeof *ya) == 0, "%s: lb__qmat_matmul decode differs from the kernel",
              d->name);
        lb__packed_free(&pk);
        free(xs), free(ya), free(yb);
    }
    free(scratch);
    lb__qmat_free(&m);
done:
    free(data), free(w), free(x), free(yref), free(y), free(row);
}

int main(void)
{
    isa_entry isas[3];
    int nisa = 0;
    if (lb__isa_supported(LB_ISA_AVX2) && lb__gdot_avx2_fn) isas[nisa++] = (isa_entry){"avx2", LB_ISA_AVX2};
    if (lb__isa_supported(LB_ISA_AVX512)) isas[nisa++] = (isa_entry){"avx512", LB_ISA_AVX512};
    if (lb__isa_supported(LB_ISA_NEON)) isas[nisa++] = (isa_entry){"neon", LB_ISA_NEON};
    printf("comparing %d instruction set(s) with the scalar reference\n", nisa);
    int types = 0;
    for (int i = 0; i < LB_DT_COUNT; i++) {
        lb_dtype t = (lb_dtype)i;
        const lb_dtype_info *d = lb_dtype_get(t);
        if (d->ggml_type < 0 || !d->can_read || d->block_bytes == 0) continue;
        types++;
        if (d->block == 1) {
            static const size_t cols[] = {1, 15, 17, 33, 256, 300};
            for (size_t c = 0; c < sizeof cols / sizeof *cols; c++) test_case(t, 5, cols[c], isas, nisa);
        } else {
            static const size_t nblocks[] = {1, 3, 8, 9, 17};
            for (size_t c = 0; c < sizeof nblocks / sizeof *nblocks; c++)
                test_case(t, 7, nblocks[c] * d->block, isas, nisa);
        }
    }
    CHECK(types >= 16, "%d ggml dtypes tested", types);
    /* the refusals */
    lb__qmat m;
    uint8_t buf[64] = {0};
    CHECK(lb__qmat_from_ggml(LB_DT_Q4_K, buf, 1, 100, NULL, &m) == LB_ERR_ARG, "q4_k rows of 100");
    CHECK(lb__qmat_from_ggml(LB_DT_QUANTIZED, buf, 1, 32, NULL, &m) == LB_ERR_UNSUPPORTED, "quantized");
    CHECK(lb__qmat_from_ggml((lb_dtype)LB_DT_COUNT, buf, 1, 32, NULL, &m) == LB_ERR_ARG, "unknown");
    CHECK(lb__qmat_from_ggml(LB_DT_Q8_0, NULL, 2, 32, NULL, &m) == LB_ERR_ARG, "NULL data");
    return check_summary();
}

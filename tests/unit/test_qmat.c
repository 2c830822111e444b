/* Packed weight matrices (kernel/qmat.h): a row's values equal
 * lb_dequantize's bit for bit; prefill (n >= LB__QMAT_PANEL_MIN_N) equals
 * lb__matmul on the dequantized weights bit for bit, for every instruction
 * set and thread count; decode (n < LB__QMAT_PANEL_MIN_N) gives each token
 * exactly the row kernel's dot, however many tokens share a pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernel/qdot.h"
#include "kernel/qmat.h"
#include "lowbit.h"
#include "kernel/matmul.h"
#include "util/cpu.h"

static unsigned seed = 777;
static float frand(void)
{
    seed = seed * 1664525u + 1013904223u;
    return (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

static const char *const specs[] = {"fp32",      "bf16",           "fp16",          "fp8_e4m3:channel", "fp8_e5m2:g32",
                                    "int8:g16",  "int8:g32:affine", "int4:g32",     "int4:g64:affine",  "uint4:g32:affine",
                                    "int4:g3",   "mxfp4",          "nvfp4",         "mxfp6_e2m3",       "mxfp6_e3m2",
                                    "mxfp8_e4m3", "mxint8",        "fp8_e4m3:tensor", "int8:tensor",    "fp16:g64",
                                    "fp8_e4m3:b128x128", "fp8_e4m3:b3x16:scale=bf16", "int4:b5x32",
                                    "int4:g32:range=signed", "int8:g16:range=signed"};

static lb_status make(const char *text, const float *w, size_t rows, size_t cols, lb__qmat *m)
{
    lb_qspec spec = {0};
    if (!strcmp(text, "fp32") || !strcmp(text, "bf16") || !strcmp(text, "fp16"))
        spec.element = !strcmp(text, "fp32") ? LB_FMT_FP32 : !strcmp(text, "bf16") ? LB_FMT_BF16 : LB_FMT_FP16;
    else if (lb_qspec_parse(text, &spec) != LB_OK)
        return LB_ERR_ARG;
    return lb__qmat_from_f32(w, rows, cols, &spec, 1, m);
}

/* the values lb_dequantize (or the plain format's rounding) gives */
static void reference_values(const char *text, const float *w, size_t rows, size_t cols, float *out)
{
    lb_qspec spec;
    int plain = !strcmp(text, "fp32") || !strcmp(text, "bf16") || !strcmp(text, "fp16");
    if (!plain && lb_qspec_parse(text, &spec) == LB_OK) {
        lb_qtensor *q;
        lb_quantize(&spec, w, rows, cols, 1, &q);
        lb_dequantize(q, out, 1);
        lb_qtensor_free(q);
        return;
    }
    lb_format f = !strcmp(text, "fp32") ? LB_FMT_FP32 : !strcmp(text, "bf16") ? LB_FMT_BF16 : LB_FMT_FP16;
    void *codes = malloc(rows * cols * 4 + 4);
    lb_encode_f32(f, LB_SATURATE, w, rows * cols, codes, 1);
    lb_decode_f32(f, codes, rows * cols, out, 1);
    free(codes);
}

static void check_spec(const char *text, size_t rows, size_t cols)
{
    size_t n_max = 40;
    float *w = malloc(rows * cols * sizeof *w), *deq = malloc(rows * cols * sizeof *deq);
    float *x = malloc(n_max * cols * sizeof *x), *row = malloc(cols * sizeof *row);
    float *ref = malloc(n_max * rows * sizeof *ref), *y = malloc(n_max * rows * sizeof *y);
    for (size_t i = 0; i < rows * cols; i++) w[i] = frand() * (i % 11 == 0 ? 8.0f : 1.0f);
    for (size_t i = 0; i < n_max * cols; i++) x[i] = frand();
    lb__qmat m;
    if (make(text, w, rows, cols, &m) != LB_OK) {
        CHECK(0, "%s: cannot build %zu x %zu", text, rows, cols);
        return;
    }
    reference_values(text, w, rows, cols, deq);
    int rows_ok = 1;
    for (size_t r = 0; r < rows; r++) {
        if (lb__qmat_row_f32(&m, r, row) != LB_OK || memcmp(row, deq + r * cols, cols * sizeof *row)) rows_ok = 0;
    }
    CHECK(rows_ok, "%s %zu x %zu: rows equal lb_dequantize's", text, rows, cols);

    /* prefill: the fp32 kernels on the dequantized weights, bit for bit */
    lb__packed p;
    lb__pack_weight(deq, rows, cols, &p);
    const lb_isa isas[] = {LB_ISA_SCALAR, LB_ISA_AVX2, LB_ISA_AVX512, LB_ISA_NEON};
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        if (!lb__isa_supported(isas[i])) continue;
        for (int threads = 1; threads <= 3; threads++) {
            size_t n = LB__QMAT_PANEL_MIN_N + (size_t)threads * 7;
            lb__matmul_isa(x, n, &p, ref, 1, isas[i]);
            memset(y, 0xff, n * rows * sizeof *y);
            CHECK(lb__qmat_matmul_isa(&m, x, n, y, threads, isas[i]) == LB_OK, "matmul");
            CHECK(!memcmp(y, ref, n * rows * sizeof *y), "%s %zu x %zu, n %zu, %s, %d threads: prefill equals fp32 matmul of "
                  "the dequantized weights", text, rows, cols, n, lb_isa_name(isas[i]), threads);
        }
        /* decode: each token's dot is the row kernel's, alone or among others */
        size_t bytes = lb__qdot_scratch_bytes(&m);
        void *scratch = aligned_alloc(64, (bytes + 64) / 64 * 64);
        lb__qdot_fn fn = lb__qdot_get(isas[i]);
        for (size_t t = 0; t < LB__QMAT_PANEL_MIN_N - 1; t++) fn(&m, x + t * cols, 1, cols, 0, rows, ref + t * rows, rows, scratch);
        free(scratch);
        for (size_t n = 1; n < LB__QMAT_PANEL_MIN_N; n += 3)
            for (int threads = 1; threads <= 3; threads += 2) {
                lb__qmat_matmul_isa(&m, x, n, y, threads, isas[i]);
                CHECK(!memcmp(y, ref, n * rows * sizeof *y), "%s %zu x %zu, decode n %zu, %s, %d threads", text, rows,
                      cols, n, lb_isa_name(isas[i]), threads);
            }
        /* and close to the double-precision dot of the dequantized values:
         * 16 fused partial sums of cols/16 terms each, then a tree of 15
         * adds: within (cols/16 + 4) * 2^-23 * sum |x w| */
        int close = 1;
        for (size_t r = 0; r < rows; r++) {
            double s = 0, a = 0;
            for (size_t k = 0; k < cols; k++) s += (double)x[k] * deq[r * cols + k], a += fabs((double)x[k] * deq[r * cols + k]);
            if (fabs(ref[r] - s) > ((double)cols / 16 + 4) * ldexp(1, -23) * a) close = 0;
        }
        CHECK(close, "%s %zu x %zu, %s: decode dot within its rounding bound", text, rows, cols, lb_isa_name(isas[i]));
    }
    lb__packed_free(&p);
    lb__qmat_free(&m);
    free(w), free(deq), free(x), free(row), free(ref), free(y);
}

/* A matrix whose element or scale format the kernels have no decoder for
 * (an e8m0 element, int8 scales, a plain fp8 matrix: none lb_quantize
 * makes, but a hand-built or future one) is refused before any kernel
 * runs, never decoded as some other format (before, the kernels' switches
 * fell to a default: e8m0 elements read as a table of 8-bit floats, int8
 * scales as ue4m3). */
static void test_unknown_formats_are_refused(void)
{
    const size_t rows = 4, cols = 32;
    float w[4 * 32], x[32], y[4];
    for (size_t i = 0; i < rows * cols; i++) w[i] = frand();
    for (size_t i = 0; i < cols; i++) x[i] = frand();
    lb__qmat good;
    CHECK(make("int8:g16", w, rows, cols, &good) == LB_OK, "int8:g16");
    struct {
        const char *what, *msg;
        lb_format element, scale;
        int plain;
    } bad[] = {{"e8m0 elements", "cannot decode e8m0 elements", LB_FMT_E8M0, LB_FMT_FP32, 0},
               {"ue4m3 elements", "cannot decode ue4m3 elements", LB_FMT_UE4M3, LB_FMT_FP32, 0},
               {"int8 scales", "cannot decode int8 scales", LB_FMT_INT8, LB_FMT_INT8, 0},
               {"fp4 scales", "cannot decode fp4_e2m1 scales", LB_FMT_INT8, LB_FMT_FP4_E2M1, 0},
               {"a plain int8 matrix", "holds fp32, bf16 or fp16 codes", LB_FMT_INT8, LB_FMT_FP32, 1},
               {"an out-of-range format", "unknown-format", (lb_format)LB_FMT_COUNT, LB_FMT_FP32, 0}};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        lb__qmat m = good;
        m.element = bad[b].element, m.scale_format = bad[b].scale, m.plain = bad[b].plain;
        m.owned_q = NULL, m.owned_buf = NULL;
        for (int isa = LB_ISA_SCALAR; isa <= LB_ISA_NEON; isa++) {
            for (size_t i = 0; i < rows; i++) y[i] = 12345.0f;
            lb_status st = lb__qmat_matmul_isa(&m, x, 1, y, 1, (lb_isa)isa);
            CHECK(st == LB_ERR_UNSUPPORTED && strstr(lb_last_error(), bad[b].msg) && y[0] == 12345.0f,
                  "%s (isa %d): status %d, '%s'", bad[b].what, isa, st, lb_last_error());
        }
    }
    CHECK(lb__qmat_matmul(&good, x, 1, y, 1) == LB_OK, "the good matrix still runs");
    lb__qmat_free(&good);
}

int main(void)
{
    test_unknown_formats_are_refused();
    /* the last shape is big enough (work >= LB__PARALLEL_MIN_WORK per
     * thread) that 2 and 3 threads really split it */
    const size_t shapes[][2] = {{1, 1}, {33, 17}, {64, 64}, {70, 100}, {5, 257}, {40, 96}, {200, 1040}};
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) check_spec(specs[s], shapes[i][0], shapes[i][1]);
    return check_summary();
}

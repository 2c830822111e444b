/* The decode kernels (kernel/qdot.h): every instruction set bit-identical
 * to the scalar reference, and the reference within a derived bound of a
 * double-precision dot of lb_dequantize's values. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernel/qdot.h"
#include "kernel/qdot_internal.h"
#include "kernel/qmat.h"
#include "lowbit.h"
#include "util/cpu.h"

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint32_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float unif(void) { return (float)(rnd() & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f; }

static const char *specs[] = {
    "fp8_e4m3:channel", "fp8_e4m3:g32",      "fp8_e5m2:g16",       "fp8_e4m3fnuz:g32",  "fp8_e5m2fnuz:channel",
    "fp16:g64",         "fp16:tensor",       "int8:channel",       "int8:g32:affine",   "int8:tensor:affine",
    "uint8:g16:affine", "uint8:channel:affine",     "int4:g32",           "int4:g32:affine",   "uint4:g64:affine",
    "uint4:channel:affine", "int4:channel",      "int4:tensor",        "int4:tensor:affine", "fp6_e2m3:g32",
    "fp6_e3m2:channel", "fp6_e2m3:g16:scale=fp16", "fp4_e2m1:g32:scale=fp16", "int4:g128:scale=bf16",
    "fp8_e4m3:g32:scale=e8m0", "fp4_e2m1:g16:scale=ue4m3", "int8:g64:scale=bf16", "fp8_e5m2:g32:scale=ue4m3",
    "mxfp8_e4m3",       "mxfp8_e5m2",        "mxfp6_e2m3",         "mxfp6_e3m2",        "mxfp4",
    "mxint8",           "nvfp4",             "fp4_e2m1:g32:scale=fp16:twolevel",
    /* 4-bit blocks of 16 (two per chunk: their own vector loops), then blocks
     * that split a chunk otherwise (the vector kernels hand these to the reference) */
    "int4:g16:affine", "uint4:g16:affine", "int4:g48",         "int8:g3",           "fp6_e3m2:g24",
    /* 2-D blocks: a row's scales are its band's (rows r / R) */
    "fp8_e4m3:b128x128", "fp8_e4m3:b3x32:scale=bf16", "int8:b5x16", "int4:b2x32:scale=bf16",
    "fp4_e2m1:b3x16:scale=ue4m3", "fp6_e2m3:b4x32:scale=e8m0",
    /* range=signed: negative scales (ggml's rule), every layout above that takes them */
    "int4:g32:range=signed", "int4:channel:range=signed", "int4:tensor:range=signed", "int8:channel:range=signed",
    "int8:tensor:range=signed", "int4:g16:scale=fp16:range=signed", "int4:g128:scale=bf16:range=signed",
    "int4:g48:range=signed", "int8:g3:range=signed", "int8:g64:scale=bf16:range=signed",
};
static const size_t col_set[] = {1, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 1000};

typedef struct {
    const char *name;
    lb_isa isa;
    unsigned extras_off; /* lb__cpu_extras_disable while it runs: the kernels of a CPU without them */
} isa_entry;

/* Kinds of weights: 0 random normal-ish, 1 extremes (saturation, zeros,
 * subnormal scales), 2 random codes and scales written over the packed bytes. */
static void make_weights(float *w, size_t rows, size_t cols, int kind)
{
    for (size_t r = 0; r < rows; r++) {
        float rs = kind == 1 ? (r % 4 == 0 ? 0.0f : r % 4 == 1 ? 1e-41f : r % 4 == 2 ? 3e38f : 1.0f)
                             : (float)(1 + r % 7);
        for (size_t k = 0; k < cols; k++) {
            float v = unif() * rs;
            if (kind == 1 && rnd() % 5 == 0) v = rnd() & 1 ? -0.0f : 0.0f;
            w[r * cols + k] = v;
        }
    }
}

static void make_x(float *x, size_t nx, size_t ldx, size_t cols, int kind)
{
    for (size_t t = 0; t < nx; t++)
        for (size_t k = 0; k < ldx; k++) {
            float v = unif();
            if (kind == 1) {
                uint32_t s = rnd() % 6;
                v = s == 0 ? v * 1e30f : s == 1 ? v * 1e-30f : s == 2 ? -0.0f : s == 3 ? 1e-44f : v;
            }
            x[t * ldx + k] = k < cols ? v : NAN; /* past cols: never read */
        }
}

/* Random bytes over codes and (8/16-bit) scales: every code, NaN ones too. */
static void scramble(lb__qmat *m)
{
    uint8_t *d = (uint8_t *)m->data;
    for (size_t i = 0; i < m->rows * m->row_bytes; i++) d[i] = (uint8_t)rnd();
    m->nan_free = 0; /* the codes may now hold NaNs: the view must say so (qmat.h) */
    if (!m->plain && m->scale_format != LB_FMT_FP32) {
        size_t n = m->one_scale ? 1 : (lb__qmat_scale_row(m, m->rows - 1) + 1) * m->blocks;
        uint8_t *s = (uint8_t *)m->scales;
        for (size_t i = 0; i < lb_format_bytes(m->scale_format, n); i++) {
            uint8_t b = (uint8_t)rnd();
            if (m->scale_format == LB_FMT_E8M0 && b == 0xFF) b = 0xFE; /* NaN scales: see below */
            s[i] = b;
        }
    }
}

static void *scratch_for(const lb__qmat *m)
{
    size_t n = lb__qdot_scratch_bytes(m);
    return aligned_alloc(64, (n + 63) / 64 * 64);
}

static int test_case(const char *spec_text, size_t rows, size_t cols, size_t nx, int kind, const isa_entry *isas,
                     int nisa)
{
    lb_qspec spec;
    int plain = !strcmp(spec_text, "fp32") || !strcmp(spec_text, "bf16") || !strcmp(spec_text, "fp16");
    if (plain) {
        lb_format f;
        lb_format_by_name(spec_text, &f);
        spec = (lb_qspec){.element = f, .granularity = LB_GRAN_TENSOR, .scale_format = LB_FMT_FP32};
    } else if (lb_qspec_parse(spec_text, &spec) != LB_OK) {
        CHECK(0, "spec %s does not parse", spec_text);
        return 1;
    }
    float *w = malloc(rows * cols * sizeof(float));
    make_weights(w, rows, cols, kind);
    lb__qmat m;
    lb_status st = lb__qmat_from_f32(w, rows, cols, &spec, 1, &m);
    CHECK(st == LB_OK, "%s: qmat_from_f32 %s", spec_text, lb_last_error());
    if (st != LB_OK) return free(w), 1;
    if (kind == 2) scramble(&m);
    /* the values lb_dequantize gives (plain: the codes' values) */
    float *deq = malloc(rows * cols * sizeof(float) + 4);
    if (m.plain) lb_decode_f32(m.element, m.data, rows * cols, deq, 1);
    else lb_dequantize(m.owned_q, deq, 1);

    size_t ldx = cols + 3, ldy = rows + 5;
    float *x = malloc(nx * ldx * sizeof(float));
    make_x(x, nx, ldx, cols, kind);
    size_t r0 = rnd() % rows, r1 = r0 + 1 + rnd() % (rows - r0);
    size_t ny = nx * ldy;
    float *yref = malloc(ny * sizeof(float)), *y = malloc(ny * sizeof(float));
    memset(yref, 0x5A, ny * sizeof(float));
    void *scr = scratch_for(&m);
    lb__qdot_scalar(&m, x, nx, ldx, r0, r1, yref, ldy, scr);

    int bad = 0;
    for (int i = 0; i < nisa; i++) {
        lb__qdot_fn fn = lb__qdot_get(isas[i].isa);
        memset(y, 0x5A, ny * sizeof(float));
        memset(scr, 0xC3, lb__qdot_scratch_bytes(&m)); /* the kernel must not rely on scratch contents */
        lb__cpu_extras_disable(isas[i].extras_off);
        fn(&m, x, nx, ldx, r0, r1, y, ldy, scr);
        lb__cpu_extras_disable(0);
        size_t j = 0;
        while (j < ny && (!memcmp(&y[j], &yref[j], sizeof(float)) || (isnan(y[j]) && isnan(yref[j])))) j++;
        int same = j == ny;
        if (!same) {
            CHECK(same, "%s %s rows %zu cols %zu nx %zu kind %d r [%zu,%zu): y[%zu] %a vs reference %a", isas[i].name,
                  spec_text, rows, cols, nx, kind, r0, r1, j, y[j], yref[j]);
            bad = 1;
        } else
            passed++;
    }

    /* The reference against a double dot of the dequantized values. Each
     * product x*w enters one of 16 lane sums through at most
     * ceil(cols/16) + 1 fmas (C = 32: two per chunk, cols/16 in all), then
     * 4 additions of the tree: at most n = cols/16 + 6 roundings, each a
     * relative error <= u = 2^-24 on a partial sum bounded by sum|x*w|, so
     * |err| <= n u / (1 - n u) * sum|x*w|, plus 2^-149 per operation for
     * results in the subnormal range (absolute, not relative). */
    if (kind != 2)
        for (size_t t = 0; t < nx && !bad; t++)
            for (size_t r = r0; r < r1; r++) {
                double exact = 0, mag = 0;
                for (size_t k = 0; k < cols; k++) {
                    double p = (double)x[t * ldx + k] * (double)deq[r * cols + k];
                    exact += p, mag += fabs(p);
                }
                float got = yref[t * ldy + r];
                if (!(mag < 3e38)) continue; /* fp32 can overflow: only bit-identity is checked */
                double n = (double)cols / 16 + 6, u = 0x1p-24;
                double bound = n * u / (1 - n * u) * mag + (cols + 16) * 0x1p-149;
                if (!(fabs((double)got - exact) <= bound)) {
                    CHECK(0, "%s rows %zu cols %zu t %zu r %zu: %.9g vs exact %.9g (bound %.3g)", spec_text, rows,
                          cols, t, r, got, exact, bound);
                    bad = 1;
                    break;
                } else
                    passed++;
            }
    /* rows outside [r0, r1) and columns past ldy's rows untouched */
    for (size_t j = 0; j < ny; j++) {
        size_t r = j % ldy;
        if (r < r0 || r >= r1) {
            uint32_t b;
            memcpy(&b, &yref[j], 4);
            if (b != 0x5A5A5A5Au) {
                CHECK(0, "%s: y[%zu] written outside the row range", spec_text, j);
                bad = 1;
                break;
            }
        }
    }
    free(scr), free(x), free(y), free(yref), free(deq), free(w);
    lb__qmat_free(&m);
    return bad;
}

/* The VBMI kernels take fp6 e2m3 (values k / 8, |k| <= 60) and not e3m2
 * (28 = 448 / 16 does not fit a byte), and run exactly where the CPU has
 * VBMI on an x86 build (they are compared bit for bit in main's cases). */
static void six_vbmi_taken(void)
{
    const char *names[2] = {"mxfp6_e2m3", "mxfp6_e3m2"};
    for (int e3m2 = 0; e3m2 < 2; e3m2++) {
        float w[4 * 64];
        for (int i = 0; i < 4 * 64; i++) w[i] = unif();
        lb_qspec spec;
        lb__qmat m;
        CHECK(lb_qspec_parse(names[e3m2], &spec) == LB_OK && lb__qmat_from_f32(w, 4, 64, &spec, 1, &m) == LB_OK, "%s",
              names[e3m2]);
        void *scr = scratch_for(&m);
        lb__qdot_plan p;
        lb__qdot_plan_init(&m, scr, &p);
        CHECK(p.kind == LB__QK_SIX && p.six_unit == (e3m2 ? 0.0f : 0.125f), "%s: six_unit %g", names[e3m2],
              (double)p.six_unit);
        CHECK(e3m2 || (p.six_units[5] == 5 && p.six_units[32 + 5] == -5 && p.six_units[31] == 60 &&
                       p.six_units[32] == 0), "e2m3 units");
        if (!e3m2) {
            float x[64] = {0}, y[4];
            lb__qdot_stage_x(&p, x, 1, 64);
#if defined(__x86_64__)
            int want = (lb__cpu_extras() & LB__CPU_AVX512_VBMI) != 0;
#else
            int want = 0;
#endif
            CHECK(lb__qdot_six_vbmi(&m, &p, 1, 0, 4, y, 4) == want, "VBMI kernels ran where VBMI is");
        }
        free(scr);
        lb__qmat_free(&m);
    }
}

int main(void)
{
    isa_entry isas[4];
    int nisa = 0;
    if (lb__isa_supported(LB_ISA_AVX2) && lb__qdot_avx2_fn) isas[nisa++] = (isa_entry){"avx2", LB_ISA_AVX2, 0};
    if (lb__isa_supported(LB_ISA_AVX512) && lb__qdot_avx512_fn) isas[nisa++] = (isa_entry){"avx512", LB_ISA_AVX512, 0};
    if (lb__isa_supported(LB_ISA_AVX512) && lb__qdot_avx512_fn && (lb__cpu_extras() & LB__CPU_AVX512_VBMI))
        isas[nisa++] = (isa_entry){"avx512 without vbmi", LB_ISA_AVX512, LB__CPU_AVX512_VBMI};
    if (lb__isa_supported(LB_ISA_NEON) && lb__qdot_neon_fn) isas[nisa++] = (isa_entry){"neon", LB_ISA_NEON, 0};
    six_vbmi_taken();
    printf("comparing %d instruction set(s) with the scalar reference\n", nisa);
    CHECK(lb__qdot_get(LB_ISA_SCALAR) == lb__qdot_scalar, "scalar entry");
    /* NEON's value (3) is above AVX-512's, but it is no x86 level: asked for
     * where it is missing it gives the reference, never an x86 kernel */
    int neon = lb__isa_supported(LB_ISA_NEON);
    CHECK(neon == (lb_isa_detected() == LB_ISA_NEON), "neon supported exactly on aarch64");
    CHECK(lb__qdot_get(LB_ISA_NEON) == (lb__qdot_neon_fn ? lb__qdot_neon_fn : lb__qdot_scalar), "neon entry");
    CHECK(lb__isa_clamp(LB_ISA_NEON) == (neon ? LB_ISA_NEON : LB_ISA_SCALAR), "neon clamped");
    CHECK(lb__isa_clamp(LB_ISA_AVX512) == (neon ? LB_ISA_SCALAR : lb_isa_detected()), "avx512 clamped");
    CHECK(lb_isa_set(LB_ISA_NEON) == (neon ? LB_OK : LB_ERR_UNSUPPORTED), "lb_isa_set(neon)");
    CHECK(lb_isa_set(LB_ISA_AVX2) == (lb_isa_detected() == LB_ISA_AVX2 || lb_isa_detected() == LB_ISA_AVX512
                                          ? LB_OK : LB_ERR_UNSUPPORTED), "lb_isa_set(avx2)");
    CHECK(lb_isa_set(lb_isa_detected()) == LB_OK && !strcmp(lb_isa_name(LB_ISA_NEON), "neon"), "name, reset");

    const char *plain[] = {"fp32", "bf16", "fp16"};
    size_t nspec = sizeof specs / sizeof specs[0], ncols = sizeof col_set / sizeof col_set[0];
    for (size_t s = 0; s < nspec + 3; s++) {
        const char *name = s < 3 ? plain[s] : specs[s - 3];
        int fails = 0;
        for (size_t ci = 0; ci < ncols && fails < 3; ci++) {
            size_t cols = col_set[ci];
            for (int kind = 0; kind < 3; kind++) {
                size_t rows = 1 + rnd() % 70, nx = 1 + rnd() % 4;
                if (cols == 1000) rows = 1 + rows % 9;
                fails += test_case(name, rows, cols, nx, kind, isas, nisa);
            }
        }
        for (size_t nx = 1; nx <= 4; nx++) fails += test_case(name, 13, 96, nx, 0, isas, nisa); /* every nx */
    }
    return check_summary();
}

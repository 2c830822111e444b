/* C unit tests for the format layer: the numeric edge cases of
 * shared/reference/HARDENING.md as golden vectors, table invariants,
 * argument errors, and every SIMD path against the scalar reference at
 * tail lengths. The ml_dtypes oracle sweep lives in tests/oracle/. */
#undef NDEBUG
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lowbit.h"
#include "format/codec_fast.h" /* internal: the per-value fast path */
#include "util/cpu.h"

#if defined(__x86_64__)
#include <fenv.h>
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#endif


static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Encodes through the bulk API on every instruction set and the scalar
 * API, checks they all give `want`. */
static void expect_code(lb_format f, lb_overflow mode, float x, uint32_t want)
{
    for (int isa = 0; isa < LB__ISA_COUNT; isa++) {
        if (!lb__isa_supported((lb_isa)isa)) continue;
        lb_isa_set((lb_isa)isa);
        /* a 33-element array puts x both in a vector body and in the tail */
        float xs[33];
        uint8_t out[33 * 4];
        for (int i = 0; i < 33; i++) xs[i] = x;
        CHECK(lb_encode_f32(f, mode, xs, 33, out, 1) == LB_OK, "%s", lb_last_error());
        for (int i = 0; i < 33; i += 16) {
            uint32_t got;
            int bits = lb_format_get(f)->bits;
            if (bits == 4) got = (out[i / 2] >> ((i & 1) * 4)) & 0xF;
            else if (bits <= 8) got = out[i];
            else if (bits == 16) got = out[2 * i] | (uint32_t)out[2 * i + 1] << 8;
            else memcpy(&got, out + 4 * i, 4);
            CHECK(got == want, "%s %s isa=%d elem %d: %a (0x%08X) -> 0x%X, want 0x%X", lb_format_get(f)->name,
                  mode ? "ieee" : "saturate", isa, i, (double)x, to_bits(x), got, want);
        }
    }
    uint32_t code = 0xDEAD;
    CHECK(lb_encode_value(f, (double)x, mode, &code) == LB_OK, "%s", lb_last_error());
    if (!isnan(x)) CHECK(code == want, "scalar %s: %a -> 0x%X, want 0x%X", lb_format_get(f)->name, (double)x, code, want);
}

static void test_hardening_vectors(void)
{
    const lb_overflow S = LB_SATURATE, I = LB_IEEE;
    /* 1. ties to even */
    expect_code(LB_FMT_FP4_E2M1, S, 2.5f, 0x4);
    expect_code(LB_FMT_FP4_E2M1, S, 3.5f, 0x6);
    expect_code(LB_FMT_FP4_E2M1, S, 5.0f, 0x6);
    expect_code(LB_FMT_FP4_E2M1, S, 0.25f, 0x0);
    expect_code(LB_FMT_FP16, I, 2049.0f, 0x6800);
    expect_code(LB_FMT_FP16, I, 2051.0f, 0x6802);
    expect_code(LB_FMT_BF16, I, from_bits(0x3F808000), 0x3F80);
    expect_code(LB_FMT_FP8_E4M3, S, 400.0f, 0x7C); /* 400 -> 384, not 416 */
    /* 2. overflow */
    expect_code(LB_FMT_FP16, I, 65519.0f, 0x7BFF);
    expect_code(LB_FMT_FP16, I, 65520.0f, 0x7C00);
    expect_code(LB_FMT_FP16, S, 65520.0f, 0x7BFF);
    expect_code(LB_FMT_FP8_E4M3, I, 464.0f, 0x7E);
    expect_code(LB_FMT_FP8_E4M3, I, nextafterf(464.0f, 1e9f), 0x7F);
    expect_code(LB_FMT_FP8_E4M3, S, nextafterf(464.0f, 1e9f), 0x7E);
    expect_code(LB_FMT_FP8_E4M3, S, -1e30f, 0xFE);
    expect_code(LB_FMT_FP4_E2M1, S, 7.0f, 0x7);
    expect_code(LB_FMT_FP4_E2M1, I, INFINITY, 0x7);
    expect_code(LB_FMT_FP4_E2M1, S, INFINITY, 0x7);
    expect_code(LB_FMT_FP8_E5M2, I, 1e6f, 0x7C);
    expect_code(LB_FMT_FP8_E5M2, S, 1e6f, 0x7B);
    expect_code(LB_FMT_FP8_E4M3FNUZ, I, 1e6f, 0x80);
    expect_code(LB_FMT_FP8_E4M3FNUZ, S, -1e6f, 0xFF);
    /* 3. subnormals */
    expect_code(LB_FMT_FP16, I, 0x1p-25f, 0x0000);
    expect_code(LB_FMT_FP16, I, 0x1p-25f * (1 + 0x1p-10f), 0x0001);
    expect_code(LB_FMT_FP16, I, 0x1p-14f * 2047.0f / 2048.0f, 0x0400);
    expect_code(LB_FMT_BF16, I, from_bits(0x00000001), 0x0000); /* fp32 min subnormal: below bf16's half-quantum */
    expect_code(LB_FMT_BF16, I, from_bits(0x00008000), 0x0000); /* exact tie, even */
    expect_code(LB_FMT_BF16, I, from_bits(0x00018000), 0x0002); /* tie, to even */
    /* 4. specials */
    expect_code(LB_FMT_BF16, I, from_bits(0x7F800001), 0x7FC0);
    expect_code(LB_FMT_FP16, I, -0.0f, 0x8000);
    expect_code(LB_FMT_FP4_E2M1, I, -0.0f, 0x8);
    expect_code(LB_FMT_FP8_E4M3FNUZ, I, -0.0f, 0x00);
    expect_code(LB_FMT_FP8_E4M3FNUZ, I, -1e-30f, 0x00);
    expect_code(LB_FMT_FP8_E4M3, I, NAN, 0x7F);
    expect_code(LB_FMT_FP8_E4M3, I, -NAN, 0xFF);
    expect_code(LB_FMT_FP8_E5M2, S, NAN, 0x7E);
    expect_code(LB_FMT_FP16, I, from_bits(0x7F800001), 0x7C01); /* numpy keeps the payload */
    /* 5. E8M0 */
    float e8 = 0;
    CHECK(lb_decode_value(LB_FMT_E8M0, 0x00, &e8) == LB_OK && to_bits(e8) == 0x00400000, "e8m0 0x00 -> %a", (double)e8);
    expect_code(LB_FMT_E8M0, I, 1.0f, 0x7F);
    expect_code(LB_FMT_E8M0, I, 1.5f, 0x80); /* the tie goes up */
    expect_code(LB_FMT_E8M0, I, 0.0f, 0xFF);
    expect_code(LB_FMT_E8M0, S, 0.0f, 0x00);
    expect_code(LB_FMT_E8M0, I, -2.0f, 0xFF);
    expect_code(LB_FMT_E8M0, S, 0x1p127f * 1.5f, 0xFE);
    expect_code(LB_FMT_E8M0, I, 0x1p127f * 1.5f, 0xFF);
    expect_code(LB_FMT_E8M0, I, from_bits(0x00500000), 0x00); /* 1.25*2^-127: nearer 2^-127 */
    /* unsigned scale ue4m3 */
    expect_code(LB_FMT_UE4M3, S, -3.0f, 0x00);
    expect_code(LB_FMT_UE4M3, I, -3.0f, 0x7F);
    expect_code(LB_FMT_UE4M3, I, -0.0f, 0x00);
    expect_code(LB_FMT_UE4M3, S, 1000.0f, 0x7E);
    /* integers: ties to even, clamp */
    expect_code(LB_FMT_INT8, S, 2.5f, 2);
    expect_code(LB_FMT_INT8, S, -2.5f, 0xFE);
    expect_code(LB_FMT_INT8, I, 1e9f, 0x7F);
    expect_code(LB_FMT_INT4, S, -8.5f, 0x8);
    expect_code(LB_FMT_UINT4, S, -3.0f, 0x0);
    expect_code(LB_FMT_UINT8, S, 255.5f, 0xFF);
    /* double input rounds once (the fp32 detour would give 0x38) */
    uint32_t c;
    CHECK(lb_encode_value(LB_FMT_FP8_E4M3, 1 + 0x1p-4 + 0x1p-24, LB_SATURATE, &c) == LB_OK && c == 0x39, "0x%X", c);
}

static void test_table(void)
{
    for (int i = 0; i < LB_FMT_COUNT; i++) {
        const lb_format_info *f = lb_format_get((lb_format)i);
        CHECK(f && f->id == (lb_format)i, "row %d", i);
        lb_format back;
        CHECK(lb_format_by_name(f->name, &back) == LB_OK && back == (lb_format)i, "%s", f->name);
        if (f->kind == LB_KIND_FLOAT && f->id != LB_FMT_FP32) {
            /* walking every code reproduces the row's numbers */
            double maxv = -INFINITY, minsub = INFINITY;
            uint64_t finite = 0;
            int has_pos_zero = 0;
            for (uint32_t code = 0; code < (1u << f->bits); code++) {
                float v;
                lb_decode_value(f->id, code, &v);
                if (!isfinite(v)) continue;
                if (v == 0 && signbit(v)) continue; /* -0 counts with +0 */
                finite++;
                if (v == 0) has_pos_zero = 1;
                if (v > maxv) maxv = v;
                if (v > 0 && v < minsub) minsub = v;
            }
            CHECK(finite == f->finite_values, "%s: %llu finite, row says %llu", f->name, (unsigned long long)finite,
                  (unsigned long long)f->finite_values);
            CHECK(maxv == f->max_finite, "%s max %g vs %g", f->name, maxv, f->max_finite);
            CHECK(minsub == f->min_subnormal, "%s min subnormal %g vs %g", f->name, minsub, f->min_subnormal);
            CHECK(has_pos_zero == (f->specials != LB_SPECIALS_E8M0), "%s zero", f->name);
        }
    }
    CHECK(lb_format_get(LB_FMT_COUNT) == NULL, "out of range row");
    lb_format out;
    CHECK(lb_format_by_name("fp9_e9m9", &out) == LB_ERR_FORMAT, "unknown name");
    CHECK(strstr(lb_last_error(), "fp8_e4m3") != NULL, "error lists valid names: %s", lb_last_error());
    CHECK(lb_format_by_name("E4M3", &out) == LB_OK && out == LB_FMT_FP8_E4M3, "alias");
    CHECK(lb_format_bytes(LB_FMT_FP4_E2M1, 7) == 4, "nibbles round up");
    CHECK(lb_format_bytes(LB_FMT_FP6_E2M3, 7) == 7, "6-bit: a byte each");
    CHECK(lb_format_bytes(LB_FMT_BF16, SIZE_MAX / 2 + 1) == 0, "overflow gives 0");
}

static void test_errors(void)
{
    float x[4] = {1, 2, NAN, 4};
    uint8_t out[16];
    CHECK(lb_encode_f32(LB_FMT_FP4_E2M1, LB_SATURATE, x, 4, out, 1) == LB_ERR_NAN, "nan into fp4");
    CHECK(strstr(lb_last_error(), "element 2") != NULL, "names the element: %s", lb_last_error());
    CHECK(lb_encode_f32(LB_FMT_FP8_E4M3, LB_SATURATE, x, 4, out, 1) == LB_OK, "nan into e4m3 is fine");
    CHECK(lb_encode_f32((lb_format)99, LB_SATURATE, x, 4, out, 1) == LB_ERR_FORMAT, "bad format id");
    CHECK(lb_encode_f32(LB_FMT_FP8_E4M3, (lb_overflow)7, x, 4, out, 1) == LB_ERR_ARG, "bad mode");
    CHECK(lb_encode_f32(LB_FMT_FP8_E4M3, LB_SATURATE, NULL, 4, out, 1) == LB_ERR_ARG, "NULL src");
    CHECK(lb_encode_f32(LB_FMT_FP8_E4M3, LB_SATURATE, NULL, 0, NULL, 1) == LB_OK, "empty is fine");
    CHECK(lb_decode_f32(LB_FMT_FP8_E4M3, out, 4, NULL, 1) == LB_ERR_ARG, "NULL dst");
    float v;
    CHECK(lb_decode_value(LB_FMT_FP4_E2M1, 0x10, &v) == LB_ERR_ARG, "code too wide");
    CHECK(lb_isa_set((lb_isa)9) == LB_ERR_ARG, "bad isa");
    CHECK(strcmp(lb_status_name(LB_ERR_NAN), "nan") == 0, "status name");
}

/* xorshift: deterministic random fp32 bit patterns */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static void test_simd_matches_scalar(void)
{
    enum { N = 4099 };
    static const size_t lengths[] = {0, 1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 255, 1023, 4099};
    float *x = malloc(N * sizeof *x), *back_ref = malloc(N * 4), *back = malloc(N * 4);
    uint8_t *ref = malloc(N * 4 + 8), *out = malloc(N * 4 + 8);
    for (int i = 0; i < N; i++) x[i] = from_bits(rnd());
    for (int fi = 0; fi < LB_FMT_COUNT; fi++) {
        const lb_format_info *f = lb_format_get((lb_format)fi);
        int nan_ok = f->kind == LB_KIND_FLOAT && f->specials != LB_SPECIALS_NONE;
        float *in = malloc(N * sizeof *in);
        for (int i = 0; i < N; i++) in[i] = (!nan_ok && isnan(x[i])) ? 0.5f * (float)i : x[i];
        for (int mode = 0; mode < 2; mode++)
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
                size_t n = lengths[li], bytes = lb_format_bytes(f->id, n);
                lb_isa_set(LB_ISA_SCALAR);
                memset(ref, 0xAB, N * 4 + 8);
                CHECK(lb_encode_f32(f->id, (lb_overflow)mode, in, n, ref, 1) == LB_OK, "%s", lb_last_error());
                lb_decode_f32(f->id, ref, n, back_ref, 1);
                for (int isa = 1; isa < LB__ISA_COUNT; isa++) {
                    if (!lb__isa_supported((lb_isa)isa)) continue;
                    lb_isa_set((lb_isa)isa);
                    memset(out, 0xAB, N * 4 + 8);
                    CHECK(lb_encode_f32(f->id, (lb_overflow)mode, in, n, out, 1) == LB_OK, "%s", lb_last_error());
                    CHECK(memcmp(out, ref, bytes + 8) == 0, "%s isa=%d n=%zu: encode differs (or wrote past the end)",
                          f->name, isa, n);
                    lb_decode_f32(f->id, ref, n, back, 1);
                    CHECK(memcmp(back, back_ref, n * 4) == 0, "%s isa=%d n=%zu: decode differs", f->name, isa, n);
                }
            }
        free(in);
    }
    lb_isa_set(lb_isa_detected());
    free(x), free(back_ref), free(back), free(ref), free(out);
}

#ifdef HAVE_MXCSR
/* The caller's thread may run with flush-to-zero, denormals-are-zero and
 * another rounding mode (ML frameworks often do): results must not change,
 * and the caller's settings must be back when the call returns. */
static void test_hostile_fp_environment(void)
{
    enum { N = 2053 };
    float *x = malloc(N * 4), *dec_ref = malloc(N * 4), *dec = malloc(N * 4);
    uint8_t *ref = malloc(N * 4), *out = malloc(N * 4);
    for (int i = 0; i < N; i++) {
        uint32_t r = rnd();
        /* a third subnormal or tiny, a third near 1, a third anything */
        x[i] = i % 3 == 0 ? from_bits(r & 0x80FFFFFF) : i % 3 == 1 ? from_bits((r & 0x807FFFFF) | 0x3F000000) : from_bits(r);
        if (isnan(x[i])) x[i] = 0.25f;
    }
    for (int fi = 0; fi < LB_FMT_COUNT; fi++)
        for (int isa = 0; isa < LB__ISA_COUNT; isa++)
            for (int mode = 0; mode < 2 && lb__isa_supported((lb_isa)isa); mode++) {
                lb_format f = (lb_format)fi;
                size_t bytes = lb_format_bytes(f, N);
                lb_isa_set(LB_ISA_SCALAR);
                lb_encode_f32(f, (lb_overflow)mode, x, N, ref, 1);
                lb_decode_f32(f, ref, N, dec_ref, 1);
                uint32_t code_ref, code;
                lb_encode_value(f, (double)x[1], (lb_overflow)mode, &code_ref);
                lb_isa_set((lb_isa)isa);

                unsigned saved = _mm_getcsr();
                fesetround(FE_TOWARDZERO);
                _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ | DAZ */
                unsigned hostile = _mm_getcsr();
                lb_encode_f32(f, (lb_overflow)mode, x, N, out, 2);
                lb_decode_f32(f, ref, N, dec, 2);
                lb_encode_value(f, (double)x[1], (lb_overflow)mode, &code);
                unsigned after = _mm_getcsr();
                _mm_setcsr(saved);
                fesetround(FE_TONEAREST);

                CHECK(after == hostile, "the caller's MXCSR 0x%X came back as 0x%X", hostile, after);
                CHECK(memcmp(out, ref, bytes) == 0, "%s isa=%d mode=%d: encode changed under FTZ/DAZ/RZ",
                      lb_format_get(f)->name, isa, mode);
                CHECK(memcmp(dec, dec_ref, (size_t)N * 4) == 0, "%s isa=%d: decode changed under FTZ/DAZ/RZ",
                      lb_format_get(f)->name, isa);
                CHECK(code == code_ref, "%s: scalar API changed under FTZ/DAZ/RZ", lb_format_get(f)->name);
            }
    lb_isa_set(lb_isa_detected());
    free(x), free(dec_ref), free(dec), free(ref), free(out);
}
#endif

/* The fast single-value path (scales of quantized blocks) equals the
 * reference for finite inputs, saturating. */
static void test_fast_scalar_codec(void)
{
    for (int fi = 0; fi < LB_FMT_COUNT; fi++) {
        const lb_format_info *f = lb_format_get((lb_format)fi);
        int bad = 0;
        for (int i = 0; i < 200000; i++) {
            uint32_t r = rnd();
            /* half anywhere, half near the format's own range */
            float x = i & 1 ? from_bits(r) : (float)ldexp((double)(r & 0xFFFFFF) / 0x1p24 + 0.5, (int)(r >> 24) % 40 - 20);
            if (!isfinite(x)) continue;
            uint32_t want = 0, got = lb__encode_fast(f->id, x);
            f->encode(f, (double)x, LB_SATURATE, &want);
            if (got != want && bad++ < 3) CHECK(0, "%s: fast encode %a -> 0x%X, reference 0x%X", f->name, (double)x, got, want);
        }
        CHECK(bad == 0, "%s: %d fast encodes differ", f->name, bad);
        if (f->bits > 16) continue;
        for (uint32_t c = 0; c < (1u << f->bits); c++) {
            float a = lb__decode_fast(f->id, c), b;
            lb_decode_value(f->id, c, &b);
            if (to_bits(a) != to_bits(b) && !(isnan(a) && isnan(b)) && bad++ < 3)
                CHECK(0, "%s: fast decode 0x%X -> %a, reference %a", f->name, c, (double)a, (double)b);
        }
        CHECK(bad == 0, "%s: fast decodes differ", f->name);
    }
}

int main(void)
{
    printf("instruction set: %s\n", lb_isa_name(lb_isa_detected()));
    test_hardening_vectors();
    test_table();
    test_errors();
    test_simd_matches_scalar();
    test_fast_scalar_codec();
#ifdef HAVE_MXCSR
    test_hostile_fp_environment();
#endif
    return check_summary();
}

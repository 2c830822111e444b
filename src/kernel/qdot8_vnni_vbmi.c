/* The AVX-512 VNNI int8-activation kernels with fp4 codes (mxfp4, nvfp4,
 * fp4_e2m1 specs) unpacked by AVX-512 VBMI's vpermb: the 16-value table
 * repeated in a zmm, so a byte of codes indexes it directly for its low
 * nibble and after one shift for its high one (three instructions instead
 * of five); and fp6 e2m3 codes (mxfp6_e2m3), which only this set takes:
 * 64 codes from 48 bytes by vpermb, vpmultishiftqb and a vpermb into the
 * 64-value table. Compiled with VBMI (Makefile: *_vbmi.o); lb__qdot8_get
 * hands this set out only where the CPU has VNNI and VBMI. Everything
 * else runs qdot8_vnni.c's kernels.
 *
 * The BF16 set adds fp8 e4m3 / e5m2 weights (qdot8.h): codes to bf16 by
 * vpermi2b tables, products summed in pairs by vdpbf16ps. It is handed
 * out where the CPU also has AVX512-BF16 and its vdpbf16ps rounds as the
 * definition says (lb__qdot8_bf16_rounds_as_defined). */
#include <math.h>

#include "kernel/qdot8.h"
#include "kernel/w8a8_kernels.h"
#include "util/bits.h"

#if defined(__x86_64__) && defined(__AVX512VBMI__) && defined(__AVX512VNNI__)

#include "kernel/qdot8_vnni_run.h"

LB__VNNI_RUNS(LB__U8_VBMI)
LB__VNNI_RUNS(LB__U8_SIX)

static void rows_vbmi(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                      size_t ldy, void *scratch)
{
    if (r0 >= r1 || nx == 0) return;
    const int off = lb__qdot8_vnni_offset(m->element);
    if (m->element == LB_FMT_FP4_E2M1) runs_LB__U8_VBMI(m, a, t0, nx, r0, r1, y, ldy, scratch, off);
    else if (m->element == LB_FMT_FP6_E2M3) runs_LB__U8_SIX(m, a, t0, nx, r0, r1, y, ldy, scratch, off);
    else lb__qdot8_rows_vnni(m, a, t0, nx, r0, r1, y, ldy, scratch);
}

const lb__qdot8_set lb__qdot8_vbmi_set = {"avx512-vnni-vbmi", lb__qdot8_vnni_offset, rows_vbmi, lb__qdot8k_rows_vnni,
                                          &lb__w8a8_avx512_ops, 1, 0, lb__qdot8_stage_token_vnni};

#else
const lb__qdot8_set lb__qdot8_vbmi_set = {"avx512-vnni-vbmi", lb__qdot8_no_offset, NULL, lb__qdot8k_rows_scalar,
                                          &lb__w8a8_avx512_ops, 0, 0, NULL};
#endif

#if defined(__x86_64__) && defined(__AVX512VBMI__) && defined(__AVX512VNNI__) && defined(__AVX512BF16__)

LB__VNNI_RUNS(LB__U8_FP8)

static void rows_bf16(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                      size_t ldy, void *scratch)
{
    if (r0 >= r1 || nx == 0) return;
    if (lb__qdot8_bf16_pairs(m)) runs_LB__U8_FP8(m, a, t0, nx, r0, r1, y, ldy, scratch, 0);
    else rows_vbmi(m, a, t0, nx, r0, r1, y, ldy, scratch);
}

const lb__qdot8_set lb__qdot8_bf16_set = {"avx512-vnni-vbmi-bf16", lb__qdot8_vnni_offset, rows_bf16,
                                          lb__qdot8k_rows_vnni, &lb__w8a8_avx512_ops, 1, 1, lb__qdot8_stage_token_vnni};

static uint16_t bf16_bits(float f) { return (uint16_t)(lb__f32_bits(f) >> 16); } /* callers pass bf16 values: exact */

/* The probe: 16 lanes of one vdpbf16ps against two fmaf per lane, odd
 * element first. Lane 0 tells the order (1 - 1 + 2^-30 is 2^-30 only
 * with the odd product first), lane 1 two roundings from one (1 + 2^-24
 * ties to 1, then + 2^-30 stays 1; rounded once it is 1 + 2^-23), lane 2
 * nearest from truncation (1 + 1.5 * 2^-24 is 1 + 2^-23), the rest fp8
 * values times int8 codes as the kernels meet them. */
static int probe(void)
{
    float acc[16], a[32], b[32];
    static const float fixed[3][5] = {/* acc, a_odd * b_odd, a_even * b_even as (a, b) pairs */
                                      {1.0f, -1.0f, 1.0f, 0x1p-15f, 0x1p-15f},
                                      {1.0f, 0x1p-12f, 0x1p-12f, 0x1p-15f, 0x1p-15f},
                                      {1.0f, 0x1.8p-12f, 0x1p-12f, 0.0f, 0.0f}};
    for (int l = 0; l < 3; l++) {
        acc[l] = fixed[l][0];
        a[2 * l + 1] = fixed[l][1], b[2 * l + 1] = fixed[l][2];
        a[2 * l] = fixed[l][3], b[2 * l] = fixed[l][4];
    }
    const lb_format_info *e4 = lb_format_get(LB_FMT_FP8_E4M3);
    uint32_t s = 0x9E3779B9u;
    for (int l = 3; l < 16; l++) {
        acc[l] = (float)(int)(s % 2001) * 0x1p-9f - 1.0f;
        for (int k = 0; k < 2; k++) {
            s ^= s << 13, s ^= s >> 17, s ^= s << 5;
            a[2 * l + k] = lb__f32_from_bits(e4->decode(e4, s & 0x7E)); /* a finite e4m3 value (not 0x7F: NaN) */
            if (s & 0x80) a[2 * l + k] = -a[2 * l + k];
            b[2 * l + k] = (float)((int)((s >> 8) % 255) - 127);
        }
    }
    uint16_t ah[32], bh[32];
    for (int i = 0; i < 32; i++) ah[i] = bf16_bits(a[i]), bh[i] = bf16_bits(b[i]);
    float got[16];
    _mm512_storeu_ps(got, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512(ah),
                                           (__m512bh)_mm512_loadu_si512(bh)));
    for (int l = 0; l < 16; l++) {
        float want = fmaf(a[2 * l], b[2 * l], fmaf(a[2 * l + 1], b[2 * l + 1], acc[l]));
        if (lb__f32_bits(want) != lb__f32_bits(got[l])) return 0;
    }
    return 1;
}

int lb__qdot8_bf16_rounds_as_defined(void)
{
    static int cached = -1; /* benign race: every thread computes the same */
    if (cached < 0) cached = probe();
    return cached;
}

#else
const lb__qdot8_set lb__qdot8_bf16_set = {"avx512-vnni-vbmi-bf16", lb__qdot8_no_offset, NULL, lb__qdot8k_rows_scalar,
                                          &lb__w8a8_avx512_ops, 0, 0, NULL};

int lb__qdot8_bf16_rounds_as_defined(void) { return 0; }
#endif

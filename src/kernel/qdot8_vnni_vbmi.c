/* The AVX-512 VNNI int8-activation kernels with fp4 codes (mxfp4, nvfp4,
 * fp4_e2m1 specs) unpacked by AVX-512 VBMI's vpermb: the 16-value table
 * repeated in a zmm, so a byte of codes indexes it directly for its low
 * nibble and after one shift for its high one (three instructions instead
 * of five); and fp6 e2m3 codes (mxfp6_e2m3), which only this set takes:
 * 64 codes from 48 bytes by vpermb, vpmultishiftqb and a vpermb into the
 * 64-value table. Compiled with VBMI (Makefile: *_vbmi.o); lb__qdot8_get
 * hands this set out only where the CPU has VNNI and VBMI. Everything
 * else runs qdot8_vnni.c's kernels. */
#include "kernel/qdot8.h"
#include "kernel/w8a8_kernels.h"

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
                                          &lb__w8a8_avx512_ops, 1};

#else
const lb__qdot8_set lb__qdot8_vbmi_set = {"avx512-vnni-vbmi", lb__qdot8_no_offset, NULL, lb__qdot8k_rows_scalar,
                                          &lb__w8a8_avx512_ops};
#endif

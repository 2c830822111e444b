/* AVX-512 VNNI int8-activation decode kernels: qdot8.h's sums, bit for
 * bit the scalar reference, on the row loop of qdot8_vnni_run.h. fp4
 * codes go through vpshufb here; qdot8_vnni_vbmi.c's set (CPUs with VBMI)
 * takes them with vpermb and everything else from here. */
#include "kernel/qdot8.h"
#include "kernel/w8a8_kernels.h"

#if defined(__x86_64__)

#include "kernel/qdot8_vnni_run.h"

/* int8 codes xor 0x80 are the unsigned operand: + 128; fp6 e2m3's eight
 * times the value (-60 .. 60) + 60 (the VBMI set's table) */
int lb__qdot8_vnni_offset(lb_format element)
{
    return element == LB_FMT_INT8 ? 128 : element == LB_FMT_FP6_E2M3 ? 60 : lb__qdot8_nibble_offset(element);
}

LB__VNNI_RUNS(LB__U8_INT8)
LB__VNNI_RUNS(LB__U8_NIBX)
LB__VNNI_RUNS(LB__U8_LUT)

void lb__qdot8_rows_vnni(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                         size_t ldy, void *scratch)
{
    if (r0 >= r1 || nx == 0) return;
    const int off = lb__qdot8_vnni_offset(m->element);
    if (lb__qdot8_lane_elems(m) != 8) runs_LB__U8_INT8(m, a, t0, nx, r0, r1, y, ldy, scratch, off);
    else if (m->element == LB_FMT_FP4_E2M1) runs_LB__U8_LUT(m, a, t0, nx, r0, r1, y, ldy, scratch, off);
    else runs_LB__U8_NIBX(m, a, t0, nx, r0, r1, y, ldy, scratch, off); /* int4, uint4 */
}

const lb__qdot8_set lb__qdot8_vnni_set = {"avx512-vnni", lb__qdot8_vnni_offset, lb__qdot8_rows_vnni, lb__qdot8k_rows_vnni,
                                          &lb__w8a8_avx512_ops, 0, 0, lb__qdot8_stage_token_vnni};

#else
const lb__qdot8_set lb__qdot8_vnni_set = {"avx512-vnni", lb__qdot8_no_offset, NULL, lb__qdot8k_rows_scalar, &lb__w8a8_avx512_ops, 0, 0, NULL};
#endif

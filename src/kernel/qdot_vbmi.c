/* AVX-512 VBMI decode kernels for the 6-bit floats whose values are small
 * integers times a power of two (fp6 e2m3, as in mxfp6_e2m3): the row
 * loops of qdot_avx512_run.h with the SIX_VBMI decoder, which takes two
 * chunks (32 codes) in three byte instructions (vpermb, vpmultishiftqb,
 * vpermb) where the AVX-512 one spends four per 16. Same w, same order:
 * bit for bit the scalar reference (qdot.h). */
#include "kernel/qdot_internal.h"

#if defined(__x86_64__) && defined(__AVX512VBMI__)

#include "kernel/qdot_avx512_run.h"

#define INST(N)                                                                                              \
    static void run_six_##N(const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1, float *y,      \
                            size_t ldy)                                                                      \
    {                                                                                                        \
        run(m, p, LB__QK_SIX_VBMI, 0, N, r0, r1, y, ldy);                                                    \
    }                                                                                                        \
    static void runb1_six_##N(const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1, float *y,    \
                              size_t ldy)                                                                    \
    {                                                                                                        \
        run_b1(m, p, LB__QK_SIX_VBMI, 0, N, r0, r1, y, ldy);                                                 \
    }
INST(1) INST(2) INST(3) INST(4)

typedef void (*run_fn)(const lb__qmat *, const lb__qdot_plan *, size_t, size_t, float *, size_t);

int lb__qdot_six_vbmi(const lb__qmat *m, const lb__qdot_plan *p, size_t nx, size_t r0, size_t r1, float *y,
                      size_t ldy)
{
    static const run_fn runs[LB__QDOT_MAX_NX] = {run_six_1, run_six_2, run_six_3, run_six_4};
    static const run_fn runs_b1[LB__QDOT_MAX_NX] = {runb1_six_1, runb1_six_2, runb1_six_3, runb1_six_4};
    if (!(lb__cpu_extras() & LB__CPU_AVX512_VBMI)) return 0;
    if (lb__qdot_takes_b1(p)) runs_b1[nx - 1](m, p, r0, r1, y, ldy);
    else runs[nx - 1](m, p, r0, r1, y, ldy);
    return 1;
}

#else
int lb__qdot_six_vbmi(const lb__qmat *m, const lb__qdot_plan *p, size_t nx, size_t r0, size_t r1, float *y,
                      size_t ldy)
{
    (void)m, (void)p, (void)nx, (void)r0, (void)r1, (void)y, (void)ldy;
    return 0;
}
#endif

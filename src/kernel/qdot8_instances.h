/* The instantiations every int8-activation kernel set makes of its
 * run(m, a, t0, nx, r0, r1, y, ldy, scratch, nib, affine): one function
 * per (4-bit or 8-bit elements, affine or not, tokens 1..4), so every
 * branch on them folds away, and the set's rows() that picks one.
 * Included by qdot8_{vnni,avx2,neon}.c after their run(). */
#ifndef LB_KERNEL_QDOT8_INSTANCES_H
#define LB_KERNEL_QDOT8_INSTANCES_H

#define LB__QDOT8_INST(NIB, AFF, NX)                                                                               \
    static void run_##NIB##_##AFF##_##NX(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t r0, size_t r1, \
                                         float *y, size_t ldy, void *scratch)                                    \
    {                                                                                                             \
        run(m, a, t0, NX, r0, r1, y, ldy, scratch, NIB, AFF);                                                     \
    }
#define LB__QDOT8_INST4(NIB, AFF)                                                                                \
    LB__QDOT8_INST(NIB, AFF, 1) LB__QDOT8_INST(NIB, AFF, 2) LB__QDOT8_INST(NIB, AFF, 3) LB__QDOT8_INST(NIB, AFF, 4)
#define LB__QDOT8_ROW(NIB, AFF) \
    {run_##NIB##_##AFF##_1, run_##NIB##_##AFF##_2, run_##NIB##_##AFF##_3, run_##NIB##_##AFF##_4}

/* Defines static void NAME(...), an lb__qdot8_fn over the instances. */
#define LB__QDOT8_ROWS_FN(NAME)                                                                                   \
    LB__QDOT8_INST4(0, 0) LB__QDOT8_INST4(0, 1) LB__QDOT8_INST4(1, 0) LB__QDOT8_INST4(1, 1)                       \
    static void NAME(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y, \
                     size_t ldy, void *scratch)                                                                   \
    {                                                                                                             \
        typedef void (*run_fn)(const lb__qmat *, const lb__act8 *, size_t, size_t, size_t, float *, size_t, void *); \
        static const run_fn runs[2][2][LB__QDOT_MAX_NX] = {{LB__QDOT8_ROW(0, 0), LB__QDOT8_ROW(0, 1)},           \
                                                           {LB__QDOT8_ROW(1, 0), LB__QDOT8_ROW(1, 1)}};          \
        if (r0 >= r1 || nx == 0) return;                                                                          \
        runs[lb__qdot8_lane_elems(m) == 8][m->zero_points != NULL][nx - 1](m, a, t0, r0, r1, y, ldy, scratch);   \
    }

/* The K-quant kernels' krun45(m, a, t0, nx, r0, r1, y, ldy, five),
 * krun6(...) and krun_iq4(..., layout): one per (lb__qdot8k_kernel: 0 Q4_K,
 * 1 Q5_K, 2 Q6_K, 3 IQ4_XS, 4 IQ4_NL and Q4_0, 5 Q5_0; tokens 1..4), and
 * NAME, the lb__qdot8_fn over them. krun_iq4's layout: LB__IQ4_XS_SB
 * (super-blocks of 256), LB__NL_18 (blocks of 18 bytes), LB__Q5_22 (22,
 * with qh). */
enum { LB__IQ4_XS_SB = 0, LB__NL_18 = 1, LB__Q5_22 = 2 };
#define LB__QDOT8K_INST(KIND, NX)                                                                                   \
    static void krun_##KIND##_##NX(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t r0, size_t r1, float *y, \
                                   size_t ldy)                                                                      \
    {                                                                                                               \
        if (KIND == 2) krun6(m, a, t0, NX, r0, r1, y, ldy);                                                         \
        else if (KIND >= 3) krun_iq4(m, a, t0, NX, r0, r1, y, ldy, KIND - 3);                                       \
        else krun45(m, a, t0, NX, r0, r1, y, ldy, KIND == 1);                                                       \
    }
#define LB__QDOT8K_INST4(KIND) \
    LB__QDOT8K_INST(KIND, 1) LB__QDOT8K_INST(KIND, 2) LB__QDOT8K_INST(KIND, 3) LB__QDOT8K_INST(KIND, 4)
#define LB__QDOT8K_ROWS_FN(NAME)                                                                                    \
    LB__QDOT8K_INST4(0)                                                                                             \
    LB__QDOT8K_INST4(1) LB__QDOT8K_INST4(2) LB__QDOT8K_INST4(3) LB__QDOT8K_INST4(4) LB__QDOT8K_INST4(5)             \
    void NAME(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y, size_t ldy, \
              void *scratch)                                                                                        \
    {                                                                                                               \
        typedef void (*run_fn)(const lb__qmat *, const lb__act8 *, size_t, size_t, size_t, float *, size_t);         \
        static const run_fn runs[6][LB__QDOT_MAX_NX] = {{krun_0_1, krun_0_2, krun_0_3, krun_0_4},                  \
                                                        {krun_1_1, krun_1_2, krun_1_3, krun_1_4},                  \
                                                        {krun_2_1, krun_2_2, krun_2_3, krun_2_4},                  \
                                                        {krun_3_1, krun_3_2, krun_3_3, krun_3_4},                  \
                                                        {krun_4_1, krun_4_2, krun_4_3, krun_4_4},                  \
                                                        {krun_5_1, krun_5_2, krun_5_3, krun_5_4}};                 \
        (void)scratch;                                                                                              \
        if (r0 >= r1 || nx == 0) return;                                                                            \
        runs[lb__qdot8k_kernel(m->ggml)][nx - 1](m, a, t0, r0, r1, y, ldy);                                         \
    }

#endif

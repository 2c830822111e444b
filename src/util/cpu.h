/* Which x86 vector extensions this CPU and operating system allow. */
#ifndef LB_UTIL_CPU_H
#define LB_UTIL_CPU_H

#include "lowbit.h"

/* Cached after the first call; thread-safe (idempotent computation). */
lb_isa lb__cpu_best_isa(void);

/* Extensions beyond an lb_isa level that single kernels use when present
 * (and the active level allows them: VNNI and BF16 only at LB_ISA_AVX512). */
enum {
    LB__CPU_AVX512_VNNI = 1 << 0, /* vpdpbusd: u8 x s8 dot products into int32 */
    LB__CPU_AVX512_BF16 = 1 << 1, /* vcvtne2ps2bf16, vdpbf16ps */
    LB__CPU_AVX_VNNI = 1 << 2,    /* the VEX-encoded vpdpbusd (256-bit) */
    LB__CPU_AVX512_FP16 = 1 << 3  /* fp16 arithmetic (Sapphire Rapids and later) */
};
/* A bit set of the LB__CPU_ flags this CPU and OS support; cached. */
unsigned lb__cpu_extras(void);

#endif

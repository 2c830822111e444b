/* Which vector extensions this CPU and operating system allow (x86-64:
 * AVX2, AVX-512 and extras; aarch64: NEON, always present). */
#ifndef LB_UTIL_CPU_H
#define LB_UTIL_CPU_H

#include "lowbit.h"

/* Cached after the first call; thread-safe (idempotent computation). */
lb_isa lb__cpu_best_isa(void);

/* lb_isa's values are 0 .. LB__ISA_COUNT - 1. */
#define LB__ISA_COUNT 4

/* 1 if this CPU and build can run isa: scalar always; AVX2 and AVX-512 up
 * to the x86 CPU's level; NEON on aarch64. */
int lb__isa_supported(lb_isa isa);

/* The set to run for a requested one: the request where supported; an x86
 * level above the CPU's gives the CPU's; a set of another architecture
 * (NEON on x86, AVX2 on aarch64) gives scalar. */
lb_isa lb__isa_clamp(lb_isa isa);

/* The x86 level isa stands for: itself for AVX2 and AVX-512, scalar for
 * scalar and NEON. x86 code compares levels (isa >= LB_ISA_AVX2) only on
 * this, as NEON's value (3) is above theirs. */
static inline lb_isa lb__isa_x86(lb_isa isa)
{
    return isa == LB_ISA_AVX2 || isa == LB_ISA_AVX512 ? isa : LB_ISA_SCALAR;
}

/* Extensions beyond an lb_isa level that single kernels use when present
 * (and the active level allows them: VNNI and BF16 only at LB_ISA_AVX512). */
enum {
    LB__CPU_AVX512_VNNI = 1 << 0, /* vpdpbusd: u8 x s8 dot products into int32 */
    LB__CPU_AVX512_BF16 = 1 << 1, /* vcvtne2ps2bf16, vdpbf16ps */
    LB__CPU_AVX_VNNI = 1 << 2,    /* the VEX-encoded vpdpbusd (256-bit) */
    LB__CPU_AVX512_FP16 = 1 << 3, /* fp16 arithmetic (Sapphire Rapids and later) */
    LB__CPU_AVX512_VBMI = 1 << 4  /* vpermb, vpmultishiftqb: byte tables and bit fields */
};
/* A bit set of the LB__CPU_ flags this CPU and OS support; cached. */
unsigned lb__cpu_extras(void);
/* Tests: lb__cpu_extras leaves these bits out from now on (0 restores
 * them), so the kernels a CPU without them runs can be checked here too.
 * Not thread-safe: call it with no kernel running. */
void lb__cpu_extras_disable(unsigned bits);

#endif

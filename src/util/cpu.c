#include "util/cpu.h"

#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static lb_isa detect(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return LB_ISA_SCALAR;
    int osxsave = (c >> 27) & 1, f16c = (c >> 29) & 1, fma = (c >> 12) & 1;
    if (!osxsave) return LB_ISA_SCALAR;
    uint64_t xcr0 = read_xcr0();
    /* The OS must save YMM (bits 1,2) and for AVX-512 also the opmask and
     * upper ZMM state (bits 5,6,7), or using them corrupts other threads. */
    int ymm_ok = (xcr0 & 0x6) == 0x6;
    int zmm_ok = (xcr0 & 0xE6) == 0xE6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return LB_ISA_SCALAR;
    int avx2 = (b >> 5) & 1, bmi2 = (b >> 8) & 1;
    int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1;
    int avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    if (!(ymm_ok && avx2 && f16c && fma && bmi2)) return LB_ISA_SCALAR;
    if (zmm_ok && avx512f && avx512dq && avx512bw && avx512vl) return LB_ISA_AVX512;
    return LB_ISA_AVX2;
}

static unsigned detect_extras(void)
{
    unsigned a, b, c, d, out = 0;
    if (detect() != LB_ISA_AVX512) return 0; /* each needs the OS's zmm state too */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if ((c >> 11) & 1) out |= LB__CPU_AVX512_VNNI;
    if ((c >> 1) & 1) out |= LB__CPU_AVX512_VBMI;
    if ((d >> 23) & 1) out |= LB__CPU_AVX512_FP16;
    if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        if ((a >> 5) & 1) out |= LB__CPU_AVX512_BF16;
        if ((a >> 4) & 1) out |= LB__CPU_AVX_VNNI;
    }
    return out;
}
#elif defined(__aarch64__)
/* Advanced SIMD (with fp16 conversions and fused multiply-add) is part of
 * every ARMv8-A CPU: nothing to ask. */
static lb_isa detect(void) { return LB_ISA_NEON; }
static unsigned detect_extras(void) { return 0; }
#else
static lb_isa detect(void) { return LB_ISA_SCALAR; }
static unsigned detect_extras(void) { return 0; }
#endif

lb_isa lb__cpu_best_isa(void)
{
    static int cached = -1; /* benign race: every thread computes the same */
    if (cached < 0) cached = (int)detect();
    return (lb_isa)cached;
}

static unsigned extras_off; /* lb__cpu_extras_disable's */

unsigned lb__cpu_extras(void)
{
    static int cached = -1; /* benign race, as above */
    if (cached < 0) cached = (int)detect_extras();
    return (unsigned)cached & ~extras_off;
}

void lb__cpu_extras_disable(unsigned bits) { extras_off = bits; }

int lb__isa_supported(lb_isa isa)
{
    lb_isa best = lb__cpu_best_isa();
    switch (isa) {
    case LB_ISA_SCALAR: return 1;
    case LB_ISA_AVX2:
    case LB_ISA_AVX512: return isa <= lb__isa_x86(best);
    case LB_ISA_NEON: return best == LB_ISA_NEON;
    }
    return 0;
}

lb_isa lb__isa_clamp(lb_isa isa)
{
    if (lb__isa_supported(isa)) return isa;
    lb_isa x86 = lb__isa_x86(lb__cpu_best_isa());
    if (lb__isa_x86(isa) != LB_ISA_SCALAR && x86 != LB_ISA_SCALAR) return x86; /* above this x86 CPU's level */
    return LB_ISA_SCALAR;
}

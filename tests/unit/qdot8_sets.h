/* What the int8-activation kernel tests (test_qdot8.c, test_qdot8k.c)
 * share: their random numbers, the kernel sets of this build and whether
 * this CPU runs each, and a bit-for-bit comparison. Define QDOT8_TEST_SEED
 * before including. */
#ifndef LB_TESTS_QDOT8_SETS_H
#define LB_TESTS_QDOT8_SETS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernel/qdot8.h"
#include "util/cpu.h"

static uint64_t rng = QDOT8_TEST_SEED;

static uint32_t next_u32(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* mostly in (-1, 1), some small, a few outliers */
static float rand_f(void)
{
    float u = (float)(next_u32() & 0xFFFFFF) / 8388608.0f - 1.0f;
    uint32_t k = next_u32() & 31;
    return k < 8 ? u * 0.01f : k == 31 ? u * 20.0f : u;
}

/* 1 if a and b hold the same bits, else 0 with the first difference at *at */
static int same_bits(const float *a, const float *b, size_t n, size_t *at)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            *at = i;
            return 0;
        }
    return 1;
}

static const lb__qdot8_set *sets[] = {&lb__qdot8_scalar_set, &lb__qdot8_avx2_set,  &lb__qdot8_avxvnni_set,
                                      &lb__qdot8_vnni_set,   &lb__qdot8_vbmi_set, &lb__qdot8_bf16_set,
                                      &lb__qdot8_neon_set};

static int set_runs(const lb__qdot8_set *s)
{
    if (!s->rows) return 0;
    if (s == &lb__qdot8_vnni_set)
        return lb__isa_supported(LB_ISA_AVX512) && (lb__cpu_extras() & LB__CPU_AVX512_VNNI);
    if (s == &lb__qdot8_vbmi_set)
        return lb__isa_supported(LB_ISA_AVX512) && (lb__cpu_extras() & LB__CPU_AVX512_VNNI) &&
               (lb__cpu_extras() & LB__CPU_AVX512_VBMI);
    if (s == &lb__qdot8_bf16_set) {
        unsigned need = LB__CPU_AVX512_VNNI | LB__CPU_AVX512_VBMI | LB__CPU_AVX512_BF16;
        if (!lb__isa_supported(LB_ISA_AVX512) || (lb__cpu_extras() & need) != need) return 0;
        /* a CPU whose vdpbf16ps rounds otherwise never gets the set: say so, do not fail */
        if (!lb__qdot8_bf16_rounds_as_defined()) {
            static int said;
            if (!said++) printf("note: this CPU's vdpbf16ps does not round as qdot8.h defines; BF16 set not run\n");
            return 0;
        }
        return 1;
    }
    if (s == &lb__qdot8_avx2_set) return lb__isa_supported(LB_ISA_AVX2);
    if (s == &lb__qdot8_avxvnni_set) return lb__isa_supported(LB_ISA_AVX2) && (lb__cpu_extras() & LB__CPU_AVX_VNNI);
    if (s == &lb__qdot8_neon_set) return lb__isa_supported(LB_ISA_NEON);
    return 1;
}

#endif

/* Bulk conversion: picks the kernel set for the active instruction set,
 * splits the array over threads, and turns kernel results into errors. */
#include <fenv.h>
#include <stdlib.h>
#include <string.h>

#include "format/convert.h"
#include "util/cpu.h"
#include "util/error.h"
#include "util/parallel.h"

/* Slices start on multiples of this many elements: even, so 4-bit codes
 * split on byte boundaries, and large enough to keep vector loops whole. */
#define LB_CONVERT_GRAIN 4096

static const struct { lb__encode_fn encode; lb__decode_fn decode; } kernels[] = {
    [LB_ISA_SCALAR] = {lb__encode_scalar, lb__decode_scalar},
    [LB_ISA_AVX2] = {lb__encode_avx2, lb__decode_avx2},
    [LB_ISA_AVX512] = {lb__encode_avx512, lb__decode_avx512},
    [LB_ISA_NEON] = {lb__encode_scalar, lb__decode_scalar}, /* no NEON codecs: the reference */
};

lb__encode_fn lb__encode_kernel(lb_isa isa) { return kernels[isa].encode; }
lb__decode_fn lb__decode_kernel(lb_isa isa) { return kernels[isa].decode; }

lb__encode_prescaled_fn lb__encode_prescaled_kernel(lb_isa isa, size_t *width)
{
#if defined(__x86_64__)
    if (isa == LB_ISA_AVX512) return *width = 16, lb__encode_prescaled_avx512;
#endif
    (void)isa;
    *width = 0;
    return NULL;
}

void lb__fenv_begin(lb__fenv_guard *g)
{
    fegetenv(&g->saved);
    fesetenv(FE_DFL_ENV);
}

void lb__fenv_end(lb__fenv_guard *g) { fesetenv(&g->saved); }

static int isa_cap = -1; /* -1: not yet read from LOWBIT_ISA */

const char *lb_isa_name(lb_isa isa)
{
    switch (isa) {
    case LB_ISA_SCALAR: return "scalar";
    case LB_ISA_AVX2: return "avx2";
    case LB_ISA_AVX512: return "avx512";
    case LB_ISA_NEON: return "neon";
    }
    return "unknown";
}

lb_isa lb_isa_detected(void) { return lb__cpu_best_isa(); }

lb_isa lb_isa_active(void)
{
    if (isa_cap < 0) {
        int cap = (int)lb__cpu_best_isa();
        const char *env = getenv("LOWBIT_ISA");
        /* a set this CPU lacks (of another architecture, or above its level) is ignored */
        for (int i = 0; env && i < LB__ISA_COUNT; i++)
            if (strcmp(env, lb_isa_name((lb_isa)i)) == 0 && lb__isa_supported((lb_isa)i)) cap = i;
        isa_cap = cap;
    }
    return (lb_isa)isa_cap;
}

lb_status lb_isa_set(lb_isa isa)
{
    if ((unsigned)isa >= LB__ISA_COUNT) return lb__fail(LB_ERR_ARG, "unknown instruction set %d", (int)isa);
    if (!lb__isa_supported(isa))
        return lb__fail(LB_ERR_UNSUPPORTED, "this CPU does not support %s (best: %s)", lb_isa_name(isa),
                        lb_isa_name(lb__cpu_best_isa()));
    isa_cap = (int)isa;
    return LB_OK;
}

typedef struct job {
    const lb_format_info *f;
    lb_overflow mode;
    const void *src;
    void *dst;
    lb_isa isa;
} job;

/* The kernels use the FPU in places (exact products, a magic-number add
 * for subnormals, conversions in the scalar reference): each slice runs in
 * the default environment (round to nearest, no flush-to-zero, no
 * denormals-are-zero), whatever the caller's thread had set. */
static lb_status encode_range(void *ctx, size_t begin, size_t end)
{
    const job *j = ctx;
    const float *src = (const float *)j->src + begin;
    uint8_t *dst = (uint8_t *)j->dst + lb_format_bytes(j->f->id, begin);
    lb__fenv_guard g;
    lb__fenv_begin(&g);
    size_t bad = kernels[j->isa].encode(j->f, j->mode, src, end - begin, dst);
    lb__fenv_end(&g);
    if (bad == LB_ENCODE_OK) return LB_OK;
    return lb__fail(LB_ERR_NAN, "element %zu is NaN and %s has no NaN encoding", begin + bad, j->f->name);
}

static lb_status decode_range(void *ctx, size_t begin, size_t end)
{
    const job *j = ctx;
    const uint8_t *src = (const uint8_t *)j->src + lb_format_bytes(j->f->id, begin);
    lb__fenv_guard g;
    lb__fenv_begin(&g);
    kernels[j->isa].decode(j->f, src, end - begin, (float *)j->dst + begin);
    lb__fenv_end(&g);
    return LB_OK;
}

static lb_status check_args(lb_format fmt, const void *src, size_t n, const void *dst, const lb_format_info **f)
{
    *f = lb_format_get(fmt);
    if (!*f) return lb__fail(LB_ERR_FORMAT, "format id %d is not in the format table", (int)fmt);
    if (n && (!src || !dst)) return lb__fail(LB_ERR_ARG, "NULL buffer for %zu elements", n);
    if (n > SIZE_MAX / 4) return lb__fail(LB_ERR_ARG, "%zu elements overflow the address space", n);
    return LB_OK;
}

lb_status lb_encode_f32(lb_format fmt, lb_overflow mode, const float *src, size_t n, void *dst, int threads)
{
    const lb_format_info *f;
    lb_status s = check_args(fmt, src, n, dst, &f);
    if (s != LB_OK) return s;
    if (mode != LB_SATURATE && mode != LB_IEEE) return lb__fail(LB_ERR_ARG, "unknown overflow mode %d", (int)mode);
    job j = {f, mode, src, dst, lb_isa_active()};
    return lb__parallel_for(n, LB_CONVERT_GRAIN, threads, encode_range, &j);
}

lb_status lb_decode_f32(lb_format fmt, const void *src, size_t n, float *dst, int threads)
{
    const lb_format_info *f;
    lb_status s = check_args(fmt, src, n, dst, &f);
    if (s != LB_OK) return s;
    job j = {f, LB_SATURATE, src, dst, lb_isa_active()};
    return lb__parallel_for(n, LB_CONVERT_GRAIN, threads, decode_range, &j);
}

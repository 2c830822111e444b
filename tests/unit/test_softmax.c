/* Attention's softmax (kernel/softmax.h): lb__exp against exp in double
 * precision, and the vector softmax of every instruction set equal to the
 * scalar reference bit for bit, on ordinary rows, every tail length, and
 * rows with NaN, infinities, signed zeros and huge values, in the default
 * and a directed rounding mode. */
#include <fenv.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernel/softmax.h"
#include "lowbit.h"
#include "util/bits.h"

static uint64_t rng = 0x9E3779B97F4A7C15u;
static double worst_err; /* ordinary rows against the softmax in double */
static uint32_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float uniform(void) { return (float)next() / 4294967296.0f; }

/* Distance in units in the last place of the float nearest want. */
static double ulps(float got, double want)
{
    float w = (float)want;
    double ulp = nextafterf(fabsf(w), INFINITY) - fabsf(w);
    return fabs((double)got - want) / ulp;
}

static void check_exp(void)
{
    double worst = 0, worst_sub = 0;
    float worst_x = 0;
    size_t n = 0;
    /* every 61st float of [-104, 88.75] (about 35 million), then the edges */
    for (uint32_t u = 0; u < 0xFF800000u; u += 61) {
        float x = lb__f32_from_bits(u);
        if (!(x >= -104.0f && x <= 88.75f)) continue;
        float got = lb__exp(x);
        double want = exp((double)x);
        n++;
        if (want > FLT_MAX) {
            if (!isinf(got)) CHECK(0, "exp(%a) = %a, want inf", (double)x, (double)got);
            continue;
        }
        if (want >= FLT_MIN) {
            double e = ulps(got, want);
            if (e > worst) worst = e, worst_x = x;
        } else {
            /* subnormal results: within one subnormal step and a bit */
            double e = fabs((double)got - want) / 0x1p-149;
            if (e > worst_sub) worst_sub = e;
        }
    }
    printf("lb__exp over %zu floats of [-104, 88.75]: max %.3f ulp (at %a) for normal results, %.3f subnormal steps "
           "below\n", n, worst, (double)worst_x, worst_sub);
    CHECK(worst <= 2.0, "lb__exp: %.3f ulp at %a", worst, (double)worst_x);
    CHECK(worst_sub <= 1.0, "lb__exp: %.3f subnormal steps", worst_sub);
    CHECK(lb__exp(0.0f) == 1.0f && lb__exp(-0.0f) == 1.0f, "exp(0) = 1");
    CHECK(lb__exp(-INFINITY) == 0.0f && lb__exp(-1e30f) == 0.0f && lb__exp(-104.5f) == 0.0f, "exp(-inf) = 0");
    CHECK(isinf(lb__exp(INFINITY)) && isinf(lb__exp(89.0f)) && isinf(lb__exp(1e30f)), "exp(+big) = inf");
    float nan = lb__f32_from_bits(0x7FC01234u);
    CHECK(lb__f32_bits(lb__exp(nan)) == 0x7FC01234u, "exp(NaN) is that NaN");
    CHECK(ulps(lb__exp(1.0f), exp(1.0)) <= 1.0, "exp(1) = %a", (double)lb__exp(1.0f));
}

/* Row kind k of length n: ordinary scores, a peaked row, equal scores,
 * signed zeros, huge values, NaN, +inf, all -inf, one finite among -inf. */
static void fill(float *x, size_t n, unsigned kind)
{
    for (size_t i = 0; i < n; i++) x[i] = (uniform() - 0.5f) * 20.0f;
    switch (kind % 9) {
    case 0: break;
    case 1: x[n / 2] = 60.0f; break;
    case 2:
        for (size_t i = 0; i < n; i++) x[i] = 3.25f;
        break;
    case 3:
        for (size_t i = 0; i < n; i++) x[i] = i % 2 ? -0.0f : 0.0f;
        break;
    case 4:
        for (size_t i = 0; i < n; i++) x[i] = i % 3 ? -1e30f : 1e30f;
        break;
    case 5: x[n / 3] = lb__f32_from_bits(0x7FC00042u); break;
    case 6: x[n - 1] = INFINITY; break;
    case 7:
        for (size_t i = 0; i < n; i++) x[i] = -INFINITY;
        break;
    default:
        for (size_t i = 0; i < n; i++) x[i] = i == n / 2 ? -5.0f : -INFINITY;
        break;
    }
}

/* Every set against the scalar reference on rows of each kind and of every
 * length up to 70, and long ones; valid < len leaves zeros behind. */
static size_t compare_sets(void)
{
    static const size_t longs[] = {255, 256, 257, 1000, 1024, 4099};
    float *x = malloc(4200 * sizeof *x), *want = malloc(4200 * sizeof *want), *got = malloc(4200 * sizeof *got);
    size_t rows = 0;
    for (size_t li = 0; li < 70 + sizeof longs / sizeof longs[0]; li++) {
        size_t n = li < 70 ? li + 1 : longs[li - 70];
        for (unsigned kind = 0; kind < 9; kind++) {
            fill(x, n, kind);
            size_t valid = kind == 0 && n > 3 ? n - 3 : n; /* and a masked tail */
            float scale = kind == 0 ? 0.125f : 1.0f / sqrtf((float)(n % 7 + 1));
            memcpy(want, x, n * sizeof *x);
            lb__softmax(want, valid, n, scale, LB_ISA_SCALAR);
            for (int isa = 1; isa <= (int)lb_isa_detected(); isa++) {
                memcpy(got, x, n * sizeof *x);
                lb__softmax(got, valid, n, scale, (lb_isa)isa);
                if (memcmp(got, want, n * sizeof *got) != 0) {
                    size_t i = 0;
                    while (lb__f32_bits(got[i]) == lb__f32_bits(want[i])) i++;
                    CHECK(0, "%s: row of %zu (%zu valid), kind %u: [%zu] %a, scalar %a", lb_isa_name((lb_isa)isa), n,
                          valid, kind, i, (double)got[i], (double)want[i]);
                } else
                    passed++;
            }
            rows++;
            for (size_t i = valid; i < n; i++) CHECK(want[i] == 0.0f && !signbit(want[i]), "masked tail is +0");
            if (kind == 0 && fegetround() == FE_TONEAREST) { /* ordinary rows: the softmax in double precision */
                double m = -INFINITY, sum = 0, err = 0, total = 0;
                for (size_t i = 0; i < valid; i++) m = fmax(m, (double)(x[i] * scale));
                for (size_t i = 0; i < valid; i++) sum += exp((double)(x[i] * scale) - m);
                for (size_t i = 0; i < valid; i++) {
                    double p = exp((double)(x[i] * scale) - m) / sum;
                    err = fmax(err, fabs(want[i] - p) / p);
                    total += want[i];
                }
                CHECK(err < 4e-6 && fabs(total - 1) < 1e-5, "row of %zu: relative error %g, sum %.9f", n, err, total);
                if (err > worst_err) worst_err = err;
            }
            if (kind == 7) CHECK(isnan(want[0]), "all -inf: NaN (no position to attend), as expf gave");
        }
    }
    free(x), free(want), free(got);
    return rows;
}

int main(void)
{
    check_exp();
    size_t rows = compare_sets();
    int modes[] = {FE_UPWARD, FE_TOWARDZERO};
    for (size_t i = 0; i < 2; i++) { /* the same operations round the same way in any mode */
        fesetround(modes[i]);
        compare_sets();
        fesetround(FE_TONEAREST);
    }
    printf("softmax: %zu rows, every set equal to the scalar reference in 3 rounding modes; ordinary rows within "
           "%.2g (relative) of the softmax in double\n", rows, worst_err);
    return check_summary();
}

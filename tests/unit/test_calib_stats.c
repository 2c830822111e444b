/* The calibration pass's per-column statistics (src/algo/calib_stats.h):
 * the AVX2 kernel gives the scalar reference's absmax and double sums bit
 * for bit, on every width from 1 to 40 (whole vectors and tails), on
 * values of every magnitude with signed zeros, subnormals and infinities;
 * a NaN leaves absmax as it was in both. Counts a skip where the machine
 * or the build has no AVX2. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "algo/calib_stats.h"
#include "check.h"
#include "util/cpu.h"

#define ROWS 13

static uint64_t state = 0x9e3779b97f4a7c15ull;

static float draw(void)
{
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = (uint32_t)(state >> 33);
    switch (u % 16) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return 1e-42f * (float)(u % 100); /* subnormal */
    case 3: return (u & 1) ? INFINITY : -INFINITY;
    default: return ldexpf((float)(u % 2000001) / 1e6f - 1.0f, (int)(u % 60) - 30);
    }
}

int main(void)
{
    if (!lb__column_stats_avx2 || lb__isa_x86(lb__cpu_best_isa()) < LB_ISA_AVX2) {
        printf("skip: no AVX2 kernel here\n");
        return check_summary();
    }
    for (size_t cols = 1; cols <= 40; cols++) {
        float x[ROWS * 40], amax[2][40];
        double sa[2][40], sq[2][40];
        for (size_t i = 0; i < ROWS * cols; i++) x[i] = draw();
        for (int k = 0; k < 2; k++)
            for (size_t j = 0; j < cols; j++) amax[k][j] = (float)j * 0.25f, sa[k][j] = (double)j, sq[k][j] = 1.0;
        lb__column_stats_ref(x, ROWS, cols, amax[0], sa[0], sq[0]);
        lb__column_stats_avx2(x, ROWS, cols, amax[1], sa[1], sq[1]);
        CHECK(memcmp(amax[0], amax[1], cols * sizeof(float)) == 0 && memcmp(sa[0], sa[1], cols * sizeof(double)) == 0 &&
                  memcmp(sq[0], sq[1], cols * sizeof(double)) == 0,
              "%zu columns: the AVX2 statistics differ from the reference's", cols);
    }
    /* a NaN leaves absmax alone in both */
    float x[9] = {1, 2, NAN, 4, 5, 6, 7, 8, NAN}, amax[2][9] = {{0}, {0}};
    double sa[2][9] = {{0}}, sq[2][9] = {{0}};
    lb__column_stats_ref(x, 1, 9, amax[0], sa[0], sq[0]);
    lb__column_stats_avx2(x, 1, 9, amax[1], sa[1], sq[1]);
    CHECK(amax[0][2] == 0 && amax[1][2] == 0 && amax[0][8] == 0 && amax[1][8] == 0 && amax[1][3] == 4,
          "a NaN's absmax: %g %g", (double)amax[0][2], (double)amax[1][2]);
    CHECK(isnan(sa[0][2]) && isnan(sa[1][2]) && isnan(sq[1][8]), "a NaN's sums are NaN");
    return check_summary();
}

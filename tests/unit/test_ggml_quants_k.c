/* ggml's K-quant and importance-weighted quantizers (io/ggml_quants_k.h)
 * without llama.cpp: a round trip through lowbit's dequantizers stays
 * within each type's error, an all-zero row gives all-zero bytes, and
 * scale-free corners (constant rows, one outlier) stay finite and close.
 * Byte identity with ggml itself is tests/llamacpp/test_ggml_quants_k.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/ggml_blocks.h"
#include "io/ggml_quants_k.h"
#include "lowbit.h"
#include "util/cpu.h"

typedef void (*quant_fn)(const float *, void *, size_t, const float *);
typedef void (*dequant_fn)(const void *, size_t, float *);

static const struct {
    const char *name;
    quant_fn quant;
    dequant_fn dequant;
    size_t block, bytes;
    int needs_imatrix;
    double rel_rmse; /* bound on rms(error) / rms(x) for gaussian rows */
} types[] = {
    {"q2_k", lb__ggml_quantize_row_q2_k, lb__dequantize_q2_k, 256, 84, 0, 0.45},
    {"q3_k", lb__ggml_quantize_row_q3_k, lb__dequantize_q3_k, 256, 110, 0, 0.25},
    {"q4_k", lb__ggml_quantize_row_q4_k, lb__dequantize_q4_k, 256, 144, 0, 0.13},
    {"q5_k", lb__ggml_quantize_row_q5_k, lb__dequantize_q5_k, 256, 176, 0, 0.065},
    {"q6_k", lb__ggml_quantize_row_q6_k, lb__dequantize_q6_k, 256, 210, 0, 0.035},
    {"q4_0", lb__ggml_quantize_row_q4_0_imatrix, lb__dequantize_q4_0, 32, 18, 1, 0.15},
    {"q4_1", lb__ggml_quantize_row_q4_1_imatrix, lb__dequantize_q4_1, 32, 20, 1, 0.13},
    {"q5_0", lb__ggml_quantize_row_q5_0_imatrix, lb__dequantize_q5_0, 32, 22, 1, 0.075},
    {"q5_1", lb__ggml_quantize_row_q5_1_imatrix, lb__dequantize_q5_1, 32, 24, 1, 0.065},
};

enum { COLS = 2048 };

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static float gaussian(void) { return (float)(sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform())); }

/* rms(dequant(quant(x)) - x) / rms(x); -1 when the output is not finite. */
static double round_trip(size_t t, const float *x, const float *imatrix, uint8_t *q, float *y)
{
    types[t].quant(x, q, COLS, imatrix);
    types[t].dequant(q, COLS / types[t].block, y);
    double se = 0, sx = 0;
    for (size_t i = 0; i < COLS; i++) {
        if (!isfinite(y[i])) return -1;
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    return sx > 0 ? sqrt(se / sx) : sqrt(se);
}

/* The vector searches against their scalar twin: the same bytes for every
 * type and path, under every instruction set this machine has (AVX2's
 * eight lanes; AVX-512's sixteen: two Q4_K/Q5_K super-blocks a call, a
 * super-block's sixteen sub-blocks of Q2_K/Q3_K/Q6_K, sixteen classic
 * blocks), on rows with flat, zero, tiny and outlier sub-blocks (one so
 * large that Q3_K's sub-block scales overflow), and on
 * rows whose block counts leave a partial call (an odd number of
 * super-blocks, classic rows of 7, 13 and 29 blocks). */
static void isa_twins(void)
{
    const lb_isa best = lb_isa_detected();
    if (lb__isa_x86(best) < LB_ISA_AVX2) {
        printf("no AVX2 here: the twin check is skipped\n");
        return;
    }
    const lb_isa isas[] = {LB_ISA_AVX2, LB_ISA_AVX512};
    static float x[COLS], im[COLS];
    static uint8_t a[COLS], b[COLS];
    for (size_t v = 0; v < sizeof isas / sizeof isas[0]; v++) {
        const lb_isa isa = isas[v];
        if (lb__isa_x86(best) < lb__isa_x86(isa)) continue;
        const char *isa_name = isa == LB_ISA_AVX2 ? "AVX2" : "AVX-512";
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            for (int kind = 0; kind < 7; kind++) {
                for (size_t i = 0; i < COLS; i++) {
                    float g = gaussian();
                    switch (kind) {
                    case 0: x[i] = g; break;
                    case 1: x[i] = (i / 16) % 3 == 0 ? 0.0f : g; break;          /* zero sub-blocks */
                    case 2: x[i] = (i / 32) % 2 ? 1.5f : g * 1e-3f; break;        /* constant blocks */
                    case 3: x[i] = i % 97 == 0 ? 200.0f : g; break;                /* outliers */
                    case 4: x[i] = fabsf(g) + 0.25f; break;                        /* no negative value */
                    case 6: /* a huge outlier among tiny values: Q3_K's weighted sums overflow, and its
                             * sub-block scales, which the super-block search takes, turn infinite */
                        x[i] = i % 256 == 33 ? -8.17e18f : g * 1e-20f;
                        break;
                    default: x[i] = (float)((int)(g * 4)) * 0.5f; break;           /* ties */
                    }
                    im[i] = i % 7 == 0 ? 0.0f : (float)uniform() * 3;
                    if (kind == 6 && i % 256 == 33) im[i] = 2.0f; /* the outlier's w * x * l past FLT_MAX */
                }
                /* the whole row (8 super-blocks, 64 classic blocks), then 3 super-blocks or 29 classic blocks */
                const size_t lens[] = {COLS, types[t].block == 256 ? 3 * 256 : 29 * 32};
                for (size_t li = 0; li < 2; li++)
                    for (int with = types[t].needs_imatrix; with <= 1; with++) {
                        const size_t n = lens[li], nbytes = n / types[t].block * types[t].bytes;
                        lb_isa_set(LB_ISA_SCALAR);
                        types[t].quant(x, a, n, with ? im : NULL);
                        lb_isa_set(isa);
                        types[t].quant(x, b, n, with ? im : NULL);
                        CHECK(memcmp(a, b, nbytes) == 0, "%s kind %d imatrix %d, %zu values: %s bytes differ from scalar",
                              types[t].name, kind, with, n, isa_name);
                    }
            }
        /* classic rows of 7 and 13 blocks: a partial batch of eight, of sixteen */
        for (size_t i = 0; i < 13 * 32; i++) x[i] = gaussian();
        for (size_t nb = 7; nb <= 13; nb += 6) {
            lb_isa_set(LB_ISA_SCALAR);
            lb__ggml_quantize_row_q5_1_imatrix(x, a, nb * 32, im);
            lb__ggml_quantize_row_q4_0_imatrix(x, a + 512, nb * 32, im);
            lb_isa_set(isa);
            lb__ggml_quantize_row_q5_1_imatrix(x, b, nb * 32, im);
            lb__ggml_quantize_row_q4_0_imatrix(x, b + 512, nb * 32, im);
            CHECK(memcmp(a, b, nb * 24) == 0 && memcmp(a + 512, b + 512, nb * 18) == 0,
                  "%zu classic blocks: %s bytes differ from scalar", nb, isa_name);
        }
    }
    lb_isa_set(best);
}

int main(void)
{
    isa_twins();
    static float x[COLS], y[COLS], im[COLS], ones[COLS];
    static uint8_t q[COLS]; /* at most one byte an element (Q6_K: 210 / 256) */
    for (size_t i = 0; i < COLS; i++) {
        im[i] = (float)(0.01 + 5 * uniform());
        ones[i] = 1.0f;
    }
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const char *name = types[t].name;
        const size_t nbytes = COLS / types[t].block * types[t].bytes;
        for (int with = types[t].needs_imatrix; with <= 1; with++) {
            const float *imx = with ? im : NULL;
            const char *how = with ? "imatrix" : "reference";

            /* gaussian rows, several scales */
            const float scales[] = {1.0f, 0.02f, 300.0f};
            for (size_t s = 0; s < 3; s++) {
                for (size_t i = 0; i < COLS; i++) x[i] = scales[s] * gaussian();
                double e = round_trip(t, x, imx, q, y);
                CHECK(e >= 0 && e <= types[t].rel_rmse, "%s %s gaussian*%g: relative rmse %.4f (bound %.3f)", name,
                      how, scales[s], e, types[t].rel_rmse);
            }

            /* all zero: every byte zero, every value zero */
            memset(x, 0, sizeof x);
            memset(q, 0xAB, sizeof q);
            round_trip(t, x, imx, q, y);
            size_t nonzero = 0, nonzero_y = 0;
            for (size_t i = 0; i < nbytes; i++) nonzero += q[i] != 0;
            for (size_t i = 0; i < COLS; i++) nonzero_y += y[i] != 0;
            CHECK(nonzero == 0 && nonzero_y == 0, "%s %s zero row: %zu nonzero bytes, %zu nonzero values", name, how,
                  nonzero, nonzero_y);

            /* a constant row comes back within fp16 and code precision */
            for (size_t i = 0; i < COLS; i++) x[i] = 0.75f;
            double e = round_trip(t, x, imx, q, y);
            CHECK(e >= 0 && e < 0.05, "%s %s constant row: relative rmse %.4f", name, how, e);

            /* one outlier per block keeps the output finite and the outlier close */
            for (size_t i = 0; i < COLS; i++) x[i] = gaussian() * 0.1f;
            for (size_t i = 0; i < COLS; i += types[t].block) x[i + 3] = 40.0f;
            e = round_trip(t, x, imx, q, y);
            CHECK(e >= 0, "%s %s outlier row: non-finite output", name, how);
            double worst = 0;
            for (size_t i = 0; i < COLS; i += types[t].block) worst = fmax(worst, fabs(y[i + 3] - 40.0) / 40.0);
            CHECK(worst < 0.1, "%s %s outlier: relative error %.4f", name, how, worst);

            /* an imatrix of ones is a valid weighting too (and not the reference path) */
            if (with) {
                for (size_t i = 0; i < COLS; i++) x[i] = gaussian();
                e = round_trip(t, x, ones, q, y);
                CHECK(e >= 0 && e <= types[t].rel_rmse, "%s imatrix ones: relative rmse %.4f", name, e);
            }
        }
        /* no hidden state: the same row twice gives the same bytes */
        for (size_t i = 0; i < COLS; i++) x[i] = gaussian();
        static uint8_t a[COLS], b[COLS];
        types[t].quant(x, a, COLS, im);
        types[t].quant(x, b, COLS, im);
        CHECK(memcmp(a, b, nbytes) == 0, "%s: quantizing twice gives the same bytes", name);
    }
    return check_summary();
}

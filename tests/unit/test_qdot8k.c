/* Int8-activation kernels on ggml's Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL, Q4_0 and Q5_0 read in place
 * (kernel/qdot8.h): this file's own reading of the
 * block layout (checked value for value against the ggml dequantizer)
 * and of the documented sums, against every kernel set of this build and
 * CPU, bit for bit, on quantized weights and on random block bytes (every
 * 6-bit scale and min, every code); thread counts; one call for several
 * matrices; a non-finite activation; and a bound on the distance to the
 * exact product. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/ggml_quants.h"
#include "kernel/qdot8.h"
#include "kernel/qmat.h"
#include "lowbit.h"
#include "util/cpu.h"

#define QDOT8_TEST_SEED 0x9E3779B97F4A7C15ull
#include "qdot8_sets.h"

static float half_to_f32(uint16_t h)
{
    int e = (h >> 10) & 31, f = h & 1023;
    float v = e ? ldexpf((float)(f | 1024), e - 25) : ldexpf((float)f, -24);
    return h & 0x8000 ? -v : v;
}

/* The block's numbers as io/ggml_blocks.h documents them. */
typedef struct kblock {
    float d, dmin;
    int sc[8], mn[8], u[256];
    int sc16[16]; /* Q6_K */
    float bs[8];  /* IQ4: each block of 32's scale (u: the signed grid values) */
} kblock;

/* a scale per block of 32 and a value per code (Q4_0: IQ4_NL's layout; Q5_0: its own) */
static int is_iq4(lb_dtype t) { return t == LB_DT_IQ4_XS || t == LB_DT_IQ4_NL || t == LB_DT_Q4_0 || t == LB_DT_Q5_0; }

/* Bytes of 256 elements (eight IQ4_NL blocks of 32 in a row), and of a row. */
static size_t sb_bytes(lb_dtype t) { return lb_dtype_get(t)->block_bytes * (256 / lb_dtype_get(t)->block); }
static size_t row_bytes(lb_dtype t, size_t cols) { return cols / lb_dtype_get(t)->block * lb_dtype_get(t)->block_bytes; }

/* ggml's IQ4 grid, as its source lists it */
static const int kvalues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* IQ4_NL and Q4_0: 8 blocks of d (fp16) + qs[16], the value of code c
 * kvalues[c] (IQ4_NL) or c - 8 (Q4_0); Q5_0: d, qh (LE32), qs[16], element
 * e's value its nibble + 16 (bit e of qh) - 16; IQ4_XS: d, scales_h (LE16),
 * scales_l[4], qs[128]: block j's 6-bit scale has the low nibble j % 2 of
 * scales_l[j / 2] and bits 2j .. of scales_h. Block j's byte i holds its
 * elements i (low nibble) and 16 + i. */
static void read_iq4(lb_dtype t, const uint8_t *b, int nb, kblock *k)
{
    for (int j = 0; j < nb; j++) {
        const uint8_t *qs;
        if (t == LB_DT_Q5_0) {
            const uint8_t *blk = b + 22 * j;
            const uint32_t qh = (uint32_t)blk[2] | (uint32_t)blk[3] << 8 | (uint32_t)blk[4] << 16 | (uint32_t)blk[5] << 24;
            k->bs[j] = half_to_f32((uint16_t)(blk[0] | blk[1] << 8));
            for (int i = 0; i < 16; i++) {
                k->u[32 * j + i] = (blk[6 + i] & 15) + 16 * (int)((qh >> i) & 1) - 16;
                k->u[32 * j + 16 + i] = (blk[6 + i] >> 4) + 16 * (int)((qh >> (16 + i)) & 1) - 16;
            }
            continue;
        }
        if (t != LB_DT_IQ4_XS) {
            const uint8_t *blk = b + 18 * j;
            k->bs[j] = half_to_f32((uint16_t)(blk[0] | blk[1] << 8));
            qs = blk + 2;
        } else {
            int code = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((b[2] | b[3] << 8) >> (2 * j)) & 3) << 4;
            k->bs[j] = half_to_f32((uint16_t)(b[0] | b[1] << 8)) * (float)(code - 32);
            qs = b + 8 + 16 * j;
        }
        for (int i = 0; i < 16; i++) {
            k->u[32 * j + i] = t == LB_DT_Q4_0 ? (qs[i] & 15) - 8 : kvalues[qs[i] & 15];
            k->u[32 * j + 16 + i] = t == LB_DT_Q4_0 ? (qs[i] >> 4) - 8 : kvalues[qs[i] >> 4];
        }
    }
}

/* Q6_K: ql[128] qh[64] scales[16] (int8) d; element 128h + r has nibble
 * r / 64 of ql[64h + r % 64] and bits 2(r / 32) of qh[32h + r % 32] */
static void read_q6_k(const uint8_t *b, kblock *k)
{
    k->d = half_to_f32((uint16_t)(b[208] | b[209] << 8));
    for (int j = 0; j < 16; j++) k->sc16[j] = (int8_t)b[192 + j];
    for (int e = 0; e < 256; e++) {
        int h = e / 128, r = e % 128;
        k->u[e] = ((b[64 * h + r % 64] >> (4 * (r / 64))) & 15) | ((b[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 3) << 4;
    }
}

static float value_of(lb_dtype t, const kblock *k, int e)
{
    if (is_iq4(t)) return k->bs[e / 32] * (float)k->u[e];
    if (t == LB_DT_Q6_K) return k->d * (float)k->sc16[e / 16] * (float)(k->u[e] - 32);
    return k->d * (float)k->sc[e / 32] * (float)k->u[e] - k->dmin * (float)k->mn[e / 32];
}

/* The 256 elements at b, of which the first n are in the row (IQ4_NL,
 * Q4_0 and Q5_0 rows may end inside them; the others' rows are whole
 * 256-blocks). */
static void read_block(lb_dtype t, const uint8_t *b, size_t n, kblock *k)
{
    if (is_iq4(t)) {
        read_iq4(t, b, (int)(n / 32), k);
        return;
    }
    if (t == LB_DT_Q6_K) {
        read_q6_k(b, k);
        return;
    }
    k->d = half_to_f32((uint16_t)(b[0] | b[1] << 8));
    k->dmin = half_to_f32((uint16_t)(b[2] | b[3] << 8));
    const uint8_t *s = b + 4;
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            k->sc[j] = s[j] & 63, k->mn[j] = s[j + 4] & 63;
        } else {
            k->sc[j] = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
            k->mn[j] = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        }
    }
    const uint8_t *qh = b + 16, *qs = b + (t == LB_DT_Q5_K ? 48 : 16);
    for (int e = 0; e < 256; e++) { /* sub-block j = e / 32 takes nibble j % 2 of qs[32 (j / 2) + e % 32] */
        int j = e / 32, l = e % 32;
        k->u[e] = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
        if (t == LB_DT_Q5_K) k->u[e] |= ((qh[l] >> j) & 1) << 4;
    }
}

/* The definition, token by token, row by row. */
static void reference(lb_dtype t, const uint8_t *data, size_t rows, size_t cols, const float *x, size_t n, float *y)
{
    const size_t bb = sb_bytes(t), nsb = (cols + 255) / 256, nblk = cols / 32, rb = row_bytes(t, cols);
    int *q = malloc(cols * sizeof *q), *S = malloc(nblk * sizeof *S);
    float *d = malloc(nblk * sizeof *d);
    kblock kb;
    for (size_t tk = 0; tk < n; tk++) {
        const float *xt = x + tk * cols;
        for (size_t j = 0; j < nblk; j++) {
            float amax = 0.0f;
            for (size_t k = 32 * j; k < 32 * j + 32; k++) amax = fmaxf(amax, fabsf(xt[k]));
            d[j] = amax / 127.0f;
            if (d[j] == 0.0f) d[j] = 1.0f;
            S[j] = 0;
            for (size_t k = 32 * j; k < 32 * j + 32; k++) {
                q[k] = (int)nearbyintf(fminf(fmaxf(xt[k] / d[j], -127.0f), 127.0f));
                S[j] += q[k];
            }
        }
        for (size_t r = 0; r < rows; r++) {
            float p[16] = {0}, mp[8] = {0};
            for (size_t s = 0; s < nsb; s++) {
                const size_t here = cols - 256 * s < 256 ? cols - 256 * s : 256;
                read_block(t, data + r * rb + s * bb, here, &kb);
                if (is_iq4(t)) { /* lane l of group 2s + h: bytes 4 (l % 4) .. of block 4h + l / 4, both nibbles */
                    for (int h = 0; h < 2; h++)
                        for (int l = 0; l < 16; l++) {
                            int j = 4 * h + l / 4, P = 0;
                            if (8 * s + (size_t)j >= nblk) break; /* past the row: nothing */
                            for (int nb = 0; nb < 2; nb++)
                                for (int i = 0; i < 4; i++) {
                                    int e = 32 * j + 16 * nb + 4 * (l % 4) + i;
                                    P += q[256 * s + (size_t)e] * kb.u[e];
                                }
                            p[l] = fmaf((float)P, d[8 * s + (size_t)j] * kb.bs[j], p[l]);
                        }
                    continue;
                }
                if (t == LB_DT_Q6_K) { /* lane l of (h, n): elements 128h + 64n + 4l .. + 3 */
                    for (int h = 0; h < 2; h++)
                        for (int nb = 0; nb < 2; nb++)
                            for (int l = 0; l < 16; l++) {
                                int e = 128 * h + 64 * nb + 4 * l, P = 0;
                                for (int i = 0; i < 4; i++) P += q[256 * s + (size_t)(e + i)] * (kb.u[e + i] - 32);
                                p[l] = fmaf((float)P, d[(256 * s + (size_t)e) / 32] * (kb.d * (float)kb.sc16[e / 16]), p[l]);
                            }
                    continue;
                }
                for (int h = 0; h < 2; h++)
                    for (int nb = 0; nb < 2; nb++)
                        for (int l = 0; l < 16; l++) {
                            int j = 4 * h + 2 * (l >= 8) + nb, P = 0;
                            for (int i = 0; i < 4; i++) {
                                int e = 32 * j + (4 * l + i) % 32; /* byte 4l + i of the half, nibble nb */
                                P += q[256 * s + (size_t)e] * kb.u[e];
                            }
                            p[l] = fmaf((float)P, d[8 * s + (size_t)j] * (kb.d * (float)kb.sc[j]), p[l]);
                        }
                for (int j = 0; j < 8; j++)
                    mp[j] = fmaf(d[8 * s + (size_t)j] * (float)S[8 * s + (size_t)j], kb.dmin * (float)kb.mn[j], mp[j]);
            }
            float t8[8], t4[4];
            for (int i = 0; i < 8; i++) t8[i] = p[i] + p[i + 8];
            for (int i = 0; i < 4; i++) t8[i] = t8[i] + t8[i + 4];
            for (int i = 0; i < 4; i++) t4[i] = mp[i] + mp[i + 4];
            y[tk * rows + r] = ((t8[0] + t8[2]) + (t8[1] + t8[3])) - ((t4[0] + t4[2]) + (t4[1] + t4[3]));
        }
    }
    free(q), free(S), free(d);
}

/* Random block bytes: every scale, min and code pattern; d and dmin
 * finite fp16 of either sign, magnitudes 2^-14 .. 2^0. */
static void random_blocks(lb_dtype t, uint8_t *data, size_t rows, size_t cols)
{
    const size_t bb = lb_dtype_get(t)->block_bytes, nb = rows * cols / lb_dtype_get(t)->block;
    for (size_t i = 0; i < nb * bb; i++) data[i] = (uint8_t)next_u32();
    const size_t at[2] = {t == LB_DT_Q6_K ? 208 : 0, 2}; /* d (and dmin) */
    for (size_t i = 0; i < nb; i++)
        for (int h = 0; h < (t == LB_DT_Q6_K || is_iq4(t) ? 1 : 2); h++) {
            uint16_t v = (uint16_t)((next_u32() % 15 + 1) << 10 | (next_u32() & 1023) | (next_u32() & 1) << 15);
            data[i * bb + at[h]] = (uint8_t)v, data[i * bb + at[h] + 1] = (uint8_t)(v >> 8);
        }
}

static void check_type(lb_dtype t, int random, size_t rows, size_t cols, size_t n)
{
    const char *name = lb_dtype_get(t)->name;
    const size_t rb = row_bytes(t, cols);
    uint8_t *data = malloc(rows * rb);
    float *w = malloc(rows * cols * sizeof *w), *x = malloc(n * cols * sizeof *x);
    float *want = malloc(n * rows * sizeof *want), *got = malloc(n * rows * sizeof *got);
    float *exact = malloc(n * rows * sizeof *exact), *row = malloc(cols * sizeof *row);
    for (size_t i = 0; i < rows * cols; i++) w[i] = rand_f();
    for (size_t i = 0; i < n * cols; i++) x[i] = rand_f();
    if (random) random_blocks(t, data, rows, cols);
    else CHECK(lb__ggml_quantize_rows(t, w, rows, cols, NULL, data) == LB_OK, "quantize %s", name);
    lb__qmat m;
    CHECK(lb__qmat_from_ggml(t, data, rows, cols, NULL, &m) == LB_OK, "view %s", name);
    CHECK(lb__qdot8_supported(&m), "%s %zux%zu is taken", name, rows, cols);
    /* this file's reading of the layout is the dequantizer's, value for value */
    int same = 1;
    kblock kb;
    for (size_t r = 0; r < rows; r++) {
        lb__qmat_row_f32(&m, r, row);
        for (size_t s = 0; s < (cols + 255) / 256; s++) {
            const size_t here = cols - 256 * s < 256 ? cols - 256 * s : 256;
            read_block(t, data + r * rb + s * sb_bytes(t), here, &kb);
            for (size_t e = 0; e < here; e++) {
                float v = value_of(t, &kb, (int)e);
                if (memcmp(&v, row + 256 * s + e, sizeof v) != 0) same = 0;
            }
        }
        memcpy(w + r * cols, row, cols * sizeof *row); /* the values, for the bound below */
    }
    CHECK(same, "%s: this test's reading of the blocks is the dequantizer's", name);
    reference(t, data, rows, cols, x, n, want);
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        if (!set_runs(sets[s])) continue;
        for (int threads = 1; threads <= 2; threads++) {
            memset(got, 0xFF, n * rows * sizeof *got);
            CHECK(lb__qmat_matmul_act8_set(&m, x, n, got, threads, sets[s]) == LB_OK, "%s", name);
            size_t at = 0;
            CHECK(same_bits(want, got, n * rows, &at), "%s%s %zux%zu n=%zu set %s threads %d: y[%zu] %.9g want %.9g",
                  name, random ? " (random bytes)" : "", rows, cols, n, sets[s]->name, threads, at, got[at], want[at]);
        }
    }
    /* each activation moves by at most half its block's step d_j */
    CHECK(lb__qmat_matmul(&m, x, n, exact, 1) == LB_OK, "%s exact", name);
    int close = 1;
    for (size_t tk = 0; tk < n; tk++)
        for (size_t r = 0; r < rows; r++) {
            double bound = 0, mag = 0;
            for (size_t k = 0; k < cols; k++) {
                double amax = 0;
                for (size_t i = k / 32 * 32; i < k / 32 * 32 + 32; i++) amax = fmax(amax, fabs(x[tk * cols + i]));
                bound += fabs(w[r * cols + k]) * amax / 127.0 / 2.0;
                mag += fabs((double)x[tk * cols + k] * w[r * cols + k]);
            }
            if (fabs((double)got[tk * rows + r] - exact[tk * rows + r]) > bound * 1.001 + mag * 1e-5) close = 0;
        }
    CHECK(close, "%s%s: int8 activations within sum |w| d / 2 of the exact product", name, random ? " (random)" : "");
    lb__qmat_free(&m);
    free(data), free(w), free(x), free(want), free(got), free(exact), free(row);
}

/* q/k/v-like: Q4_K, Q5_K, Q4_K on one input, one call, each matrix's bits
 * those of its own call; a K-quant does not share with another layout. */
static void check_multi(void)
{
    const size_t cols = 512, rows[3] = {24, 8, 8}, n = 2;
    const lb_dtype types[3] = {LB_DT_Q4_K, LB_DT_Q5_K, LB_DT_Q4_K};
    uint8_t *data[3];
    lb__qmat m[3];
    float x[2 * 512], *ys[3], *one[3];
    for (size_t i = 0; i < n * cols; i++) x[i] = rand_f();
    for (int i = 0; i < 3; i++) {
        size_t bytes = rows[i] * cols / 256 * lb_dtype_get(types[i])->block_bytes;
        data[i] = malloc(bytes);
        random_blocks(types[i], data[i], rows[i], cols);
        CHECK(lb__qmat_from_ggml(types[i], data[i], rows[i], cols, NULL, &m[i]) == LB_OK, "view");
        ys[i] = malloc(n * rows[i] * sizeof(float)), one[i] = malloc(n * rows[i] * sizeof(float));
        CHECK(lb__qmat_matmul_act8(&m[i], x, n, one[i], 1, lb_isa_active()) == LB_OK, "single");
    }
    const lb__qmat *ms[3] = {&m[0], &m[1], &m[2]};
    CHECK(lb__qdot8_shares_input(ms[0], ms[1]) && lb__qdot8_shares_input(ms[1], ms[2]), "K-quants share an input");
    CHECK(lb__qmat_matmul_act8_multi(ms, 3, x, n, ys, 2, lb__qdot8_get(lb_isa_active())) == LB_OK, "multi");
    for (int i = 0; i < 3; i++)
        CHECK(memcmp(ys[i], one[i], n * rows[i] * sizeof(float)) == 0, "matrix %d: multi == single", i);
    lb_qspec spec;
    lb_qspec_parse("int4:g32", &spec);
    float *w = malloc(8 * cols * sizeof *w);
    for (size_t i = 0; i < 8 * cols; i++) w[i] = rand_f();
    lb__qmat other;
    CHECK(lb__qmat_from_f32(w, 8, cols, &spec, 1, &other) == LB_OK, "int4:g32");
    CHECK(!lb__qdot8_shares_input(&m[0], &other) && !lb__qdot8_shares_input(&other, &m[0]),
          "a K-quant and int4:g32 stage their activations differently");
    /* Q6_K stages its own way (codes in order, lane sums): with itself only */
    uint8_t *d6 = malloc(2 * 8 * cols / 256 * 210);
    random_blocks(LB_DT_Q6_K, d6, 16, cols);
    lb__qmat q6[2];
    float *y6[2], *one6[2];
    for (int i = 0; i < 2; i++) {
        CHECK(lb__qmat_from_ggml(LB_DT_Q6_K, d6 + (size_t)i * 8 * cols / 256 * 210, 8, cols, NULL, &q6[i]) == LB_OK, "q6");
        y6[i] = malloc(n * 8 * sizeof(float)), one6[i] = malloc(n * 8 * sizeof(float));
        CHECK(lb__qmat_matmul_act8(&q6[i], x, n, one6[i], 1, lb_isa_active()) == LB_OK, "q6 single");
    }
    CHECK(!lb__qdot8_shares_input(&m[0], &q6[0]) && lb__qdot8_shares_input(&q6[0], &q6[1]), "Q6_K shares with Q6_K only");
    const lb__qmat *m6[2] = {&q6[0], &q6[1]};
    CHECK(lb__qmat_matmul_act8_multi(m6, 2, x, n, y6, 2, lb__qdot8_get(lb_isa_active())) == LB_OK, "q6 multi");
    for (int i = 0; i < 2; i++) {
        CHECK(memcmp(y6[i], one6[i], n * 8 * sizeof(float)) == 0, "Q6_K matrix %d: multi == single", i);
        free(y6[i]), free(one6[i]);
    }
    free(d6);
    /* Q4_0 and Q5_0 stage as IQ4 does: beside IQ4_XS in one call (a Q4_K_M attention's v can be Q5_0 or Q6_K...) */
    const lb_dtype tt[3] = {LB_DT_Q4_0, LB_DT_IQ4_XS, LB_DT_Q5_0};
    uint8_t *dt[3];
    lb__qmat mt[3];
    float *yt[3], *onet[3];
    for (int i = 0; i < 3; i++) {
        dt[i] = malloc(8 * cols / 256 * sb_bytes(tt[i]));
        random_blocks(tt[i], dt[i], 8, cols);
        CHECK(lb__qmat_from_ggml(tt[i], dt[i], 8, cols, NULL, &mt[i]) == LB_OK, "table view");
        yt[i] = malloc(n * 8 * sizeof(float)), onet[i] = malloc(n * 8 * sizeof(float));
        CHECK(lb__qmat_matmul_act8(&mt[i], x, n, onet[i], 1, lb_isa_active()) == LB_OK, "table single");
    }
    CHECK(lb__qdot8_shares_input(&mt[0], &mt[1]) && !lb__qdot8_shares_input(&mt[0], &m[0]), "Q4_0 shares with IQ4 only");
    CHECK(lb__qdot8_shares_input(&mt[2], &mt[1]) && !lb__qdot8_shares_input(&mt[2], &m[0]), "Q5_0 shares with IQ4 only");
    const lb__qmat *mts[3] = {&mt[0], &mt[1], &mt[2]};
    CHECK(lb__qmat_matmul_act8_multi(mts, 3, x, n, yt, 2, lb__qdot8_get(lb_isa_active())) == LB_OK, "table multi");
    for (int i = 0; i < 3; i++) {
        CHECK(memcmp(yt[i], onet[i], n * 8 * sizeof(float)) == 0, "%s beside IQ4_XS: multi == single",
              lb_dtype_get(tt[i])->name);
        free(dt[i]), free(yt[i]), free(onet[i]);
    }
    lb__qmat_free(&other);
    free(w);
    for (int i = 0; i < 3; i++) free(data[i]), free(ys[i]), free(one[i]);
}

/* NaN or infinity in a token: the exact kernels' bits; types and widths
 * the path does not take. */
static void check_edges(void)
{
    const size_t rows = 7, cols = 256;
    uint8_t data[7 * 144];
    random_blocks(LB_DT_Q4_K, data, rows, cols);
    lb__qmat m;
    CHECK(lb__qmat_from_ggml(LB_DT_Q4_K, data, rows, cols, NULL, &m) == LB_OK, "view");
    float x[256], y[7], want[7];
    for (size_t i = 0; i < cols; i++) x[i] = rand_f();
    x[100] = INFINITY;
    CHECK(lb__qmat_matmul_act8(&m, x, 1, y, 1, lb_isa_active()) == LB_OK, "inf");
    CHECK(lb__qmat_matmul(&m, x, 1, want, 1) == LB_OK, "exact");
    CHECK(memcmp(y, want, sizeof y) == 0, "a token with inf runs the exact kernels");
    static const lb_dtype no[] = {LB_DT_Q2_K, LB_DT_Q3_K, LB_DT_Q4_1};
    float w[4 * 256];
    uint8_t blocks[4 * 256 * 2];
    for (size_t i = 0; i < 4 * 256; i++) w[i] = rand_f();
    for (size_t k = 0; k < sizeof no / sizeof no[0]; k++) {
        const size_t c = 256;
        CHECK(lb__ggml_quantize_rows(no[k], w, 4, c, NULL, blocks) == LB_OK, "quantize");
        lb__qmat g;
        CHECK(lb__qmat_from_ggml(no[k], blocks, 4, c, NULL, &g) == LB_OK, "view");
        CHECK(!lb__qdot8_supported(&g), "%s as read is not taken", lb_dtype_get(no[k])->name);
    }
    /* rows of no whole 128-groups: IQ4_NL and Q4_0 taken (main() runs them), IQ4_XS's blocks are 256 */
    uint8_t nl[4 * 3 * 18];
    random_blocks(LB_DT_IQ4_NL, nl, 4, 96);
    lb__qmat g;
    CHECK(lb__qmat_from_ggml(LB_DT_IQ4_NL, nl, 4, 96, NULL, &g) == LB_OK, "view");
    CHECK(lb__qdot8_supported(&g), "IQ4_NL rows of 96 are taken");
}

int main(void)
{
    static const size_t shapes[][2] = {{1, 256}, {5, 512}, {37, 1536}, {9, 2304}, {64, 256}};
    const lb_dtype types[] = {LB_DT_Q4_K, LB_DT_Q5_K, LB_DT_Q6_K, LB_DT_IQ4_XS, LB_DT_IQ4_NL, LB_DT_Q4_0, LB_DT_Q5_0};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        for (int random = 0; random <= 1; random++)
            for (size_t h = 0; h < sizeof shapes / sizeof shapes[0]; h++)
                for (size_t n = 1; n <= 6; n += (n < 4 ? 1 : 2))
                    check_type(types[k], random, shapes[h][0], shapes[h][1], n);
    /* IQ4_NL, Q4_0 and Q5_0 rows whose last group of 128 ends after 1, 2 or 3 blocks (SmolLM2's 576 = 4.5 x 128) */
    static const size_t tails[][2] = {{3, 576}, {5, 96}, {4, 160}, {7, 32}, {2, 224}};
    for (size_t k = 4; k < 7; k++)
        for (int random = 0; random <= 1; random++)
            for (size_t h = 0; h < sizeof tails / sizeof tails[0]; h++)
                for (size_t n = 1; n <= 4; n++) check_type(types[k], random, tails[h][0], tails[h][1], n);
    check_multi();
    check_edges();
    return check_summary();
}

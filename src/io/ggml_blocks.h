/* ggml's block-quantized storage types: the on-disk block layouts and the
 * loops that turn whole runs of blocks into fp32 and back.
 *
 * Every struct below is the exact byte image of one block in a GGUF file
 * (ggml's block_q4_0 & co.). The fields are byte arrays, never uint16_t:
 * a tensor's data may start at any address, so a block has alignment 1 and
 * multi-byte fields are read little-endian by hand.
 *
 * The dequantizers' arithmetic is the gguf Python package's (gguf.quants,
 * 0.19.0) and the quantizers' is ggml's (ggml-quants.c of the pinned
 * llama.cpp, built for baseline x86-64: plain fp32, no fused multiply-add),
 * op for op in fp32, so results are bit-identical to them: keep every
 * product and sum in the order written (the build has -ffp-contract=off,
 * so no fused multiply-add changes a rounding). */
#ifndef LB_IO_GGML_BLOCKS_H
#define LB_IO_GGML_BLOCKS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LB__QK 32   /* elements per block of the classic types */
#define LB__QK_K 256 /* elements per super-block of the K-quants */

/* Q4_0: x = d * (q - 8), q a 4-bit code. Element j (0..15) is the low
 * nibble of qs[j], element j + 16 its high nibble. */
typedef struct {
    uint8_t d[2];         /* fp16 scale */
    uint8_t qs[LB__QK / 2];
} lb__block_q4_0;
_Static_assert(sizeof(lb__block_q4_0) == 18, "q4_0 block is 18 bytes");

/* Q4_1: x = d * q + m, same nibble order as Q4_0. */
typedef struct {
    uint8_t d[2];         /* fp16 scale */
    uint8_t m[2];         /* fp16 minimum */
    uint8_t qs[LB__QK / 2];
} lb__block_q4_1;
_Static_assert(sizeof(lb__block_q4_1) == 20, "q4_1 block is 20 bytes");

/* Q5_0: x = d * (q - 16), q = nibble (as Q4_0) | bit i of qh << 4, where
 * qh is one little-endian 32-bit word and i the element index. */
typedef struct {
    uint8_t d[2];         /* fp16 scale */
    uint8_t qh[4];        /* fifth bits, element i in bit i */
    uint8_t qs[LB__QK / 2];
} lb__block_q5_0;
_Static_assert(sizeof(lb__block_q5_0) == 22, "q5_0 block is 22 bytes");

/* Q5_1: x = d * q + m, q as in Q5_0 (unsigned). */
typedef struct {
    uint8_t d[2];         /* fp16 scale */
    uint8_t m[2];         /* fp16 minimum */
    uint8_t qh[4];
    uint8_t qs[LB__QK / 2];
} lb__block_q5_1;
_Static_assert(sizeof(lb__block_q5_1) == 24, "q5_1 block is 24 bytes");

/* Q8_0: x = d * q, q a signed byte per element. */
typedef struct {
    uint8_t d[2];         /* fp16 scale */
    int8_t qs[LB__QK];
} lb__block_q8_0;
_Static_assert(sizeof(lb__block_q8_0) == 34, "q8_0 block is 34 bytes");

/* Q2_K: 16 sub-blocks of 16. x = d * (sc & 15) * q - dmin * (sc >> 4).
 * Element 128 h + 32 s + l (h < 2, s < 4, l < 32) is bits 2s..2s+1 of
 * qs[32 h + l]; it belongs to sub-block (128 h + 32 s + l) / 16. */
typedef struct {
    uint8_t scales[LB__QK_K / 16]; /* low nibble: scale, high: min */
    uint8_t qs[LB__QK_K / 4];
    uint8_t d[2];                  /* fp16 super-block scale of the scales */
    uint8_t dmin[2];               /* fp16 super-block scale of the mins */
} lb__block_q2_k;
_Static_assert(sizeof(lb__block_q2_k) == 84, "q2_k block is 84 bytes");

/* Q3_K: 16 sub-blocks of 16. x = d * (s6 - 32) * q, q = low2 - 4 when the
 * element's hmask bit is 0 (the offset applies when the bit is clear).
 * low2 is placed as in Q2_K; element 32 b + l has hmask bit b of hmask[l].
 * The 6-bit scales: the low nibble of scale i is scales[i] & 15 (i < 8)
 * or scales[i - 8] >> 4, its high two bits are bits 2(i / 4).. of
 * scales[8 + i % 4]. */
typedef struct {
    uint8_t hmask[LB__QK_K / 8];
    uint8_t qs[LB__QK_K / 4];
    uint8_t scales[12];
    uint8_t d[2];                  /* fp16 */
} lb__block_q3_k;
_Static_assert(sizeof(lb__block_q3_k) == 110, "q3_k block is 110 bytes");

/* Q4_K: 8 sub-blocks of 32. x = d * sc * q - dmin * m, with 6-bit sc and
 * m packed in 12 bytes (j < 4: sc = scales[j] & 63, m = scales[j + 4] & 63;
 * j >= 4: sc = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4, m =
 * (scales[j + 4] >> 4) | (scales[j] >> 6) << 4). Sub-block 2c + t takes
 * nibble t (low first) of qs[32 c .. 32 c + 31]. */
typedef struct {
    uint8_t d[2];                  /* fp16 */
    uint8_t dmin[2];               /* fp16 */
    uint8_t scales[12];
    uint8_t qs[LB__QK_K / 2];
} lb__block_q4_k;
_Static_assert(sizeof(lb__block_q4_k) == 144, "q4_k block is 144 bytes");

/* Q5_K: Q4_K plus a fifth bit: element 32 j + l of sub-block j has bit j
 * of qh[l]. */
typedef struct {
    uint8_t d[2];                  /* fp16 */
    uint8_t dmin[2];               /* fp16 */
    uint8_t scales[12];
    uint8_t qh[LB__QK_K / 8];
    uint8_t qs[LB__QK_K / 2];
} lb__block_q5_k;
_Static_assert(sizeof(lb__block_q5_k) == 176, "q5_k block is 176 bytes");

/* Q6_K: 16 sub-blocks of 16, x = d * scales[i] * (q - 32), q 6 bits.
 * In each half h (128 elements), element 128 h + r has low nibble
 * (r / 64 selects which) of ql[64 h + r % 64] and high two bits
 * 2(r / 32).. of qh[32 h + r % 32]. */
typedef struct {
    uint8_t ql[LB__QK_K / 2];
    uint8_t qh[LB__QK_K / 4];
    int8_t scales[LB__QK_K / 16];
    uint8_t d[2];                  /* fp16 */
} lb__block_q6_k;
_Static_assert(sizeof(lb__block_q6_k) == 210, "q6_k block is 210 bytes");

/* MXFP4 (OCP MX, 32 FP4 E2M1 elements, one E8M0 scale). gguf stores the
 * element values doubled (kvalues 0, 1, 2, 3, 4, 6, 8, 12 and negatives)
 * and so halves the scale: x = 2^(e - 128) * kvalue. Nibbles as Q4_0. */
typedef struct {
    uint8_t e;                     /* E8M0 exponent */
    uint8_t qs[LB__QK / 2];
} lb__block_mxfp4;
_Static_assert(sizeof(lb__block_mxfp4) == 17, "mxfp4 block is 17 bytes");

/* NVFP4: 4 sub-blocks of 16 E2M1 elements, each with a UE4M3 scale (the
 * per-tensor fp32 scale lives outside the block). Within sub-block s,
 * element k < 8 is the low nibble of qs[8 s + k], element k + 8 its high
 * nibble. gguf decodes the scale with codes 0x00 and 0x7F as zero and
 * ignores the top bit, then halves it for the doubled kvalues. */
typedef struct {
    uint8_t d[4];                  /* UE4M3 scale of each sub-block */
    uint8_t qs[32];
} lb__block_nvfp4;
_Static_assert(sizeof(lb__block_nvfp4) == 36, "nvfp4 block is 36 bytes");

/* IQ4_NL: x = d * kvalues_iq4nl[q], q a 4-bit index into ggml's fixed
 * non-linear grid (lb__kvalues_iq4nl). Nibbles as Q4_0. */
typedef struct {
    uint8_t d[2];                  /* fp16 scale */
    uint8_t qs[LB__QK / 2];
} lb__block_iq4_nl;
_Static_assert(sizeof(lb__block_iq4_nl) == 18, "iq4_nl block is 18 bytes");

/* IQ4_XS: 8 sub-blocks of 32 on the IQ4_NL grid, x = d * (s - 32) *
 * kvalues_iq4nl[q] with a 6-bit sub-block scale s: its low nibble is
 * nibble (ib % 2) of scales_l[ib / 2], its high two bits are bits 2 ib ..
 * of the little-endian scales_h. Sub-block ib's 32 codes are the nibbles of
 * qs[16 ib .. 16 ib + 15], low nibbles first. */
typedef struct {
    uint8_t d[2];                  /* fp16 super-block scale */
    uint8_t scales_h[2];
    uint8_t scales_l[LB__QK_K / 64];
    uint8_t qs[LB__QK_K / 2];
} lb__block_iq4_xs;
_Static_assert(sizeof(lb__block_iq4_xs) == 136, "iq4_xs block is 136 bytes");

/* ===== Scalar helpers (exact) ===== */

static inline float lb__f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t lb__bits_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline uint32_t lb__le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static inline uint32_t lb__le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* fp16 bits to fp32, exact for every code; NaN keeps its payload (numpy's
 * conversion, which the gguf package uses). */
static inline float lb__fp16_to_f32(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F) return lb__f32_from_bits(sign | 0x7F800000u | man << 13);
    if (exp != 0) return lb__f32_from_bits(sign | (exp + 112u) << 23 | man << 13);
    float sub = (float)man * 0x1p-24f; /* subnormal (or zero): man * 2^-24 exactly */
    return sign ? -sub : sub;
}

/* Half the value of a UE4M3 (NVFP4 sub-block) scale the way gguf decodes
 * it: the top bit is ignored, 0x00 and 0x7F (E4M3's NaN) read as zero.
 * Shared by the dequantizer and the decode kernels, which must agree bit
 * for bit. */
static inline float lb__nvfp4_scale_half(uint32_t code)
{
    if (code == 0x00 || code == 0x7F) return 0.0f;
    uint32_t exp = (code >> 3) & 0x0F, man = code & 0x07;
    if (exp == 0) return (float)man * 0x1p-10f;                /* man * 2^-9, halved */
    return lb__f32_from_bits((exp + 119u) << 23 | man << 20); /* (1 + man/8) 2^(exp-7), halved */
}

/* Q3_K's sixteen 6-bit sub-block scales, each minus 32 (the packing is
 * described at lb__block_q3_k). */
static inline void lb__q3_k_scales(const uint8_t *sc, int out[16])
{
    for (int k = 0; k < 16; k++) {
        int lo = k < 8 ? sc[k] & 0x0F : sc[k - 8] >> 4;
        int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
        out[k] = (lo | hi << 4) - 32;
    }
}

/* IQ4_XS sub-block ib's 6-bit scale code (0..63; the scale is code - 32). */
static inline int lb__iq4_xs_scale_code(const lb__block_iq4_xs *b, int ib)
{
    int lo = b->scales_l[ib / 2] >> 4 * (ib % 2) & 0x0F;
    int hi = (int)(lb__le16(b->scales_h) >> 2 * ib & 3u);
    return lo | hi << 4;
}

/* fp32 to fp16 bits, round to nearest even, overflow to inf, NaN keeping
 * its top payload bits (never turning into inf): numpy's astype. */
uint16_t lb__fp16_from_f32(float x);

/* ggml's IQ4 grid (kvalues_iq4nl), ascending. */
extern const int8_t lb__kvalues_iq4nl[16];

/* The grid points nearest to v[j] = id * x[j] for 32 elements: indices
 * into idx and values into val (either may be NULL).
 *
 * ggml's best_index_int8 bisects the sorted grid to the neighbours lo <= v
 * < hi and takes lo only when v - lo < hi - v (fp32 differences), ending
 * at index 0 for v <= -127 and 15 for v >= 113 or NaN. The same choice
 * without branches: lo's index is the number of grid points 1..14 that v
 * is not below (!(v < g), so a NaN counts them all), lo and hi follow
 * from it by adding the gaps, and the same fp32 compare picks one (at the
 * ends it picks the end: v - (-127) <= 0 < hi - v, and 113 - v <= 0). The
 * loop over grid points is outside so the loops over elements vectorize;
 * tests/unit/test_ggml_quants.c checks it against the bisection. Here
 * for that test; the quantizer is ggml_blocks_iq4.c. */
static inline void lb__iq4_nearest32(const float *restrict x, float id, uint8_t *restrict idx,
                                     float *restrict val)
{
    const int8_t *g = lb__kvalues_iq4nl;
    float v[32];
    int32_t ml[32], lo[32], hi[32];
    for (int j = 0; j < 32; j++) v[j] = id * x[j], ml[j] = 0, lo[j] = g[0], hi[j] = g[1];
    for (int k = 1; k < 15; k++) {
        const float gk = (float)g[k];
        const int32_t gap_lo = g[k] - g[k - 1], gap_hi = g[k + 1] - g[k];
        for (int j = 0; j < 32; j++) {
            const int32_t not_below = -(int32_t)!(v[j] < gk); /* all ones or zero */
            ml[j] -= not_below;
            lo[j] += not_below & gap_lo;
            hi[j] += not_below & gap_hi;
        }
    }
    for (int j = 0; j < 32; j++) {
        const int32_t up = -(int32_t)!(v[j] - (float)lo[j] < (float)hi[j] - v[j]);
        if (idx) idx[j] = (uint8_t)(ml[j] - up);
        if (val) val[j] = (float)((hi[j] & up) | (lo[j] & ~up));
    }
}

/* ===== Runs of blocks =====
 * nb blocks of src (the block structs above, packed back to back) become
 * nb * block floats in dst, and back. The quantizers expect finite input
 * (the caller checks). */

void lb__dequantize_q4_0(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_q4_1(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_q5_0(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_q5_1(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_q8_0(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_mxfp4(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_nvfp4(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_q2_k(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_q3_k(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_q4_k(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_q5_k(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_q6_k(const void *restrict src, size_t nb, float *restrict dst);

void lb__dequantize_iq4_nl(const void *restrict src, size_t nb, float *restrict dst);
void lb__dequantize_iq4_xs(const void *restrict src, size_t nb, float *restrict dst);

/* ggml's quantizers without an importance matrix (quantize_row_*_ref),
 * byte for byte: nb blocks of finite src. ggml treats every row of a
 * tensor as one long run for these, so rows need no special care. */
void lb__quantize_q4_0(const float *restrict src, size_t nb, void *restrict dst);
void lb__quantize_q4_1(const float *restrict src, size_t nb, void *restrict dst);
void lb__quantize_q5_0(const float *restrict src, size_t nb, void *restrict dst);
void lb__quantize_q5_1(const float *restrict src, size_t nb, void *restrict dst);
void lb__quantize_q8_0(const float *restrict src, size_t nb, void *restrict dst);
void lb__quantize_mxfp4(const float *restrict src, size_t nb, void *restrict dst);
void lb__quantize_nvfp4(const float *restrict src, size_t nb, void *restrict dst);

/* The three builds of those seven (ggml_blocks_quant.h): the scalar one,
 * the AVX2 one (ggml_blocks_avx2.c), which exists when
 * lb__ggml_blocks_avx2_built() is 1 (an x86-64 compiler that takes -mavx2),
 * and the AVX-512 one (ggml_blocks_avx512.c, in intrinsics), when
 * lb__ggml_blocks_avx512_built() is 1; where it is not,
 * its names run the AVX2 build. The functions above choose by
 * lb_isa_active; all give the same bytes. */
#define LB__CLASSIC_QUANTIZERS(X) X(q4_0) X(q4_1) X(q5_0) X(q5_1) X(q8_0) X(mxfp4) X(nvfp4)
#define LB__DECLARE_TWINS(type)                                                                  \
    void lb__quantize_##type##_scalar(const float *restrict src, size_t nb, void *restrict dst); \
    void lb__quantize_##type##_avx2(const float *restrict src, size_t nb, void *restrict dst);   \
    void lb__quantize_##type##_avx512(const float *restrict src, size_t nb, void *restrict dst);
LB__CLASSIC_QUANTIZERS(LB__DECLARE_TWINS)
int lb__ggml_blocks_avx2_built(void);
int lb__ggml_blocks_avx512_built(void);
/* The same two builds of the IQ4 quantizers (ggml_blocks_iq4_quant.h), and
 * a third, AVX-512 (ggml_blocks_iq4_avx512.c; where it is not built, its
 * names run the AVX2 build): all give the same bytes. */
#define LB__IQ4_QUANTIZERS(X) X(iq4_nl) X(iq4_xs)
#define LB__DECLARE_IQ4_TWINS(type)                                                                    \
    void lb__quantize_##type##_scalar(const float *restrict src, size_t nb, const float *restrict imatrix, \
                                      void *restrict dst);                                              \
    void lb__quantize_##type##_avx2(const float *restrict src, size_t nb, const float *restrict imatrix,   \
                                    void *restrict dst);                                                \
    void lb__quantize_##type##_avx512(const float *restrict src, size_t nb, const float *restrict imatrix, \
                                      void *restrict dst);
LB__IQ4_QUANTIZERS(LB__DECLARE_IQ4_TWINS)
int lb__ggml_blocks_iq4_avx512_built(void);
/* A build that is not compiled here (no such instruction set): its three
 * IQ4 functions run build `to`'s (suffixes: scalar, avx2, avx512). */
#define LB__IQ4_FORWARD(from, to)                                                                             \
    void lb__quantize_iq4_nl_##from(const float *restrict src, size_t nb, const float *restrict imatrix,      \
                                    void *restrict dst)                                                       \
    {                                                                                                         \
        lb__quantize_iq4_nl_##to(src, nb, imatrix, dst);                                                      \
    }                                                                                                         \
    void lb__quantize_iq4_xs_##from(const float *restrict src, size_t nb, const float *restrict imatrix,      \
                                    void *restrict dst)                                                       \
    {                                                                                                         \
        lb__quantize_iq4_xs_##to(src, nb, imatrix, dst);                                                      \
    }                                                                                                         \
    void lb__quantize_iq4_code_scales_##from(int xs, const float *restrict src, size_t nb,                   \
                                             const float *restrict imatrix, float *restrict scale)            \
    {                                                                                                         \
        lb__quantize_iq4_code_scales_##to(xs, src, nb, imatrix, scale);                                       \
    }                                                                                                         \
    void lb__quantize_iq4_fit16_##from(const float *x, const float *w, const float *id, float *sumqx,        \
                                       float *sumq2)                                                          \
    {                                                                                                         \
        lb__quantize_iq4_fit16_##to(x, w, id, sumqx, sumq2);                                                  \
    }
/* In each build (suffix scalar, avx2, avx512): lb__iq4_code_scales
 * (below), and the search's 16 weighted fits of one sub-block (a test
 * hook: sums of w q x and w q^2 for each inverse scale id[t]). */
#define LB__DECLARE_IQ4_EXTRAS(build)                                                                          \
    void lb__quantize_iq4_code_scales_##build(int xs, const float *restrict src, size_t nb,                   \
                                              const float *restrict imatrix, float *restrict scale);          \
    void lb__quantize_iq4_fit16_##build(const float *x, const float *w, const float *id, float *sumqx, float *sumq2);
LB__DECLARE_IQ4_EXTRAS(scalar)
LB__DECLARE_IQ4_EXTRAS(avx2)
LB__DECLARE_IQ4_EXTRAS(avx512)

/* ggml's quantize_iq4_nl / quantize_iq4_xs: nb blocks (32 / 256 values)
 * of finite src; imatrix, when not NULL, holds one importance weight per
 * element of src (the caller repeats a row's weights for each row). */
void lb__quantize_iq4_nl(const float *restrict src, size_t nb, const float *restrict imatrix, void *restrict dst);
void lb__quantize_iq4_xs(const float *restrict src, size_t nb, const float *restrict imatrix, void *restrict dst);

/* The fp32 scale at which ggml's IQ4 quantizer above took each block's
 * codes (nearest grid points of x / scale, lb__iq4_nearest32): IQ4_NL's
 * unrounded block scale (xs 0: one per 32 values), IQ4_XS's unrounded
 * super-block scale times each sub-block's 6-bit scale (xs 1: eight per
 * 256). The blocks store these rounded (fp16), so the codes are not
 * always the nearest for the stored scale: GPTQ's grid
 * (algo/gptq_grid_ggml.c) needs the scale itself to take the same codes.
 * The scalar build's search (the AVX2 one gives the same bits). */
void lb__iq4_code_scales(int xs, const float *restrict src, size_t nb, const float *restrict imatrix,
                         float *restrict scale);

/* ggml's fp16 store for block scales (GGML_FP32_TO_FP16): round to
 * nearest even, overflow to inf; a NaN becomes the quiet NaN 0x7E00 with
 * its sign (lb__fp16_from_f32 keeps payload bits instead). */
static inline void lb__store_ggml_fp16(uint8_t *p, float x)
{
    uint32_t u = lb__bits_from_f32(x);
    uint16_t h = (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)((u >> 16 & 0x8000u) | 0x7E00u) : lb__fp16_from_f32(x);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

#endif

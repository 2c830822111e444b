/* Decode attention's two products read straight from a KV cache's codes
 * (model/kvcache.h lays them out; this file only reads):
 *
 *   scores  S[r][p] = sum over d in order of Q[r][d] * K[p][d]
 *   mix     O[r][d] = sum over p in order of P[r][p] * V[p][d]
 *
 * where a cached value is its code's exact value times the position's
 * scale, one fp32 rounding (no scale for bf16 and fp16): the same value the
 * cache decodes (lb__kv_decode). Each sum starts from 0 and adds in order,
 * fused (x86 vector sets) or product then add (scalar and NEON), exactly as
 * the fp32 matrix products (matmul.h) do on the decoded values, so either
 * way of reading the cache gives the same bits. The gain: the cache's bytes
 * are read once, as codes, instead of being decoded into an fp32 copy that
 * the products then read again. An fp32 cache's values are their own
 * codes: the same products read its panels. Up to LB__KV_ROWS query heads
 * that share a KV head read it once, as the rows of one product. */
#ifndef LB_KERNEL_KVATTN_H
#define LB_KERNEL_KVATTN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernel/matmul.h"
#include "lowbit.h"
#include "util/bits.h"

/* One KV head's codes as the products read them (fp32: its values).
 *   K (lb__kv_scores): panels of LB__MM_NR positions; panel i holds, for
 *     d = 0 .. head_dim-1, the codes of positions i*NR .. i*NR+NR-1 side by
 *     side (lb_format_bytes(format, NR) bytes a row; 4-bit: position 2j in
 *     the low nibble), and scales[p] is position p's scale.
 *   V (lb__kv_mix): one row of head_dim codes per position, `stride` bytes
 *     apart (4-bit: value 2j in the low nibble), scales[p] likewise. */
typedef struct lb__kv_view {
    lb_format format;     /* fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, int8, int4 */
    const uint8_t *codes;
    const float *scales;  /* per position; NULL for fp32, bf16 and fp16 */
    size_t head_dim;
    size_t stride;        /* V: bytes from one position's row to the next */
    /* V of an fp32 cache: values NR at a time in panels over all
     * positions (kvcache.h), so a row is the runs of NR values of each
     * panel, this many bytes apart (`stride` is then NR floats); 0 where
     * a row is contiguous. */
    size_t panel_stride;
    uint32_t nan_bits;    /* fp8_e4m3: the positive NaN its NaN codes read as */
} lb__kv_view;

/* S[r * lds + p] for rows r < mr (Q row r at q + r * ldq) and positions
 * p < len (all of the panels' lanes are computed; the last panel's lanes
 * past len are not stored). */
void lb__kv_scores(const lb__kv_view *k, const float *q, size_t ldq, size_t mr, size_t len, float *s, size_t lds,
                   lb_isa isa);

/* O[r * ldo + d] for rows r < mr (P row r at p + r * ldp) over positions
 * p < len, d < head_dim. */
void lb__kv_mix(const lb__kv_view *v, const float *p, size_t ldp, size_t mr, size_t len, float *o, size_t ldo,
                lb_isa isa);

/* Bits of a cache format's code and whether it has a scale, as constants
 * the vector kernels fold (lb_format_get(f)->bits is a table read). */
static inline unsigned lb__kv_code_bits(lb_format f)
{
    return f == LB_FMT_INT4 ? 4 : f == LB_FMT_FP32 ? 32 : f == LB_FMT_BF16 || f == LB_FMT_FP16 ? 16 : 8;
}
static inline int lb__kv_has_scale(lb_format f) { return f != LB_FMT_FP32 && f != LB_FMT_BF16 && f != LB_FMT_FP16; }

/* The vector sets (kvattn_avx512.c, kvattn_avx2.c); .scores NULL where
 * not compiled. lb__kv_scores and lb__kv_mix call them with at most
 * LB__KV_ROWS rows at a time (the sums they keep in registers). */
#define LB__KV_ROWS 4
typedef struct lb__kv_kernels {
    void (*scores)(const lb__kv_view *k, const float *q, size_t ldq, size_t mr, size_t len, float *s, size_t lds);
    void (*mix)(const lb__kv_view *v, const float *p, size_t ldp, size_t mr, size_t len, float *o, size_t ldo);
} lb__kv_kernels;
extern const lb__kv_kernels lb__kv_avx512;
extern const lb__kv_kernels lb__kv_avx2;

/* ---- each code's exact value (the reference the cache and the scalar
 * products apply). None rounds, so neither the rounding mode nor FTZ/DAZ
 * can change a value (a subnormal is an exact integer times a power of
 * two whose product is a normal fp32 number, or +0). Each is branch-free
 * so that gcc and clang vectorize the loops that call them. ---- */

/* fp32: the code is the value (one load: lets the row loops vectorize). */
static inline float lb__kv_f32_value(const uint8_t *src, size_t j)
{
    float x;
    memcpy(&x, src + 4 * j, 4);
    return x;
}

/* bf16: the code is the high half of an fp32. */
static inline float lb__kv_bf16_value(uint32_t h) { return lb__f32_from_bits(h << 16); }

/* cond ? a : b by masks: a and b both computed, so gcc keeps a floating-
 * point operation for a in the loop body rather than sinking it under the
 * condition, where it would not if-convert (speculate) it, and the loop
 * would stay scalar. */
static inline uint32_t lb__kv_pick(int cond, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - (uint32_t)cond;
    return (a & m) | (b & ~m);
}

/* binary16 to binary32: the exponent rebiased by 112; infinity and NaN
 * (exponent 31) rebiased by 112 more, keeping the mantissa; subnormals
 * (exponent 0) are m x 2^-24. */
static inline float lb__kv_half_value(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, o = (h & 0x7FFFu) << 13, e = o & 0x0F800000u;
    o += (e == 0x0F800000u ? 224u : 112u) << 23;
    uint32_t sub = lb__f32_bits((float)(int32_t)(h & 0x3FFu) * 0x1p-24f);
    return lb__f32_from_bits(lb__kv_pick(e == 0, sub, o) | sign);
}

/* fp8_e5m2 is the top byte of a binary16 (same exponent, 2 of its 10
 * mantissa bits). */
static inline float lb__kv_e5m2_value(uint32_t c) { return lb__kv_half_value(c << 8); }

/* fp8_e4m3 (bias 7, no infinities, S.1111.111 NaN): the exponent rebiased
 * by 120; subnormals m x 2^-9; NaN as nan_bits (the codec's positive NaN)
 * with the code's sign. (The cache itself never stores a NaN code -- a
 * vector with NaN gets zero codes and a NaN scale -- but the decode stays
 * exact for every code.) */
static inline float lb__kv_e4m3_value(uint32_t c, uint32_t nan_bits)
{
    uint32_t mag = c & 0x7Fu, sign = (c & 0x80u) << 24;
    uint32_t u = (mag << 20) + (120u << 23), sub = lb__f32_bits((float)(int32_t)mag * 0x1p-9f);
    return lb__f32_from_bits(lb__kv_pick(mag == 0x7F, nan_bits, lb__kv_pick(mag < 8, sub, u)) | sign);
}

/* Two's complement integers of 8 and 4 bits. */
static inline float lb__kv_int8_value(uint32_t c) { return (float)((int32_t)(c ^ 0x80u) - 0x80); }
static inline float lb__kv_int4_value(uint32_t c) { return (float)((int32_t)(c ^ 0x8u) - 0x8); }

/* Code j of a run of codes (little-endian 16-bit, as lb__store_code writes
 * them; 4-bit: code 2i in the low nibble of byte i). */
static inline uint32_t lb__kv_code16(const uint8_t *src, size_t j)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t h;
    memcpy(&h, src + 2 * j, 2); /* one load: lets the row loops vectorize */
    return h;
#else
    return (uint32_t)src[2 * j] | (uint32_t)src[2 * j + 1] << 8;
#endif
}
static inline uint32_t lb__kv_nibble(const uint8_t *src, size_t j) { return (src[j / 2] >> (j % 2 * 4)) & 0x0Fu; }

/* Value j of a run of codes of a cache format, times s where the format
 * has a scale (ignored by fp32, bf16 and fp16); NaN for a format no cache
 * holds. */
float lb__kv_value(lb_format f, const uint8_t *codes, size_t j, float s, uint32_t nan_bits);

/* The same for n values at once, in loops the compiler vectorizes (the
 * cache's decode and the scalar products): value j times s, or times sc[j]
 * when sc is not NULL (a K panel row: n = LB__MM_NR, its positions'
 * scales); 4-bit runs start on a byte. */
void lb__kv_decode_run(lb_format f, const uint8_t *codes, size_t n, float s, const float *sc, uint32_t nan_bits,
                       float *out);

#endif

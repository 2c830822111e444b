/* The KV cache in one element format (see kvcache.h). */
#include "model/kvcache.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/convert.h"
#include "util/bits.h"
#include "util/checked.h"
#include "util/error.h"

#define ALLOWED "fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, int8, int4"

static int scaled(lb_format f)
{
    return f == LB_FMT_FP8_E4M3 || f == LB_FMT_FP8_E5M2 || f == LB_FMT_INT8 || f == LB_FMT_INT4;
}

lb_status lb__kv_format_check(lb_format f)
{
    if (f == LB_FMT_FP32 || f == LB_FMT_BF16 || f == LB_FMT_FP16 || scaled(f)) return LB_OK;
    const lb_format_info *fi = lb_format_get(f);
    if (!fi) return lb__fail(LB_ERR_FORMAT, "KV cache format id %d is unknown (allowed: " ALLOWED ")", (int)f);
    return lb__fail(LB_ERR_FORMAT, "KV cache format %s is not supported (allowed: " ALLOWED ")", fi->name);
}

/* The midpoint between the largest finite value and the next one the
 * format would have: round-to-nearest goes past max from there on. */
static float sat_limit(lb_format f)
{
    if (f == LB_FMT_FP16) return 65520.0f;
    if (f == LB_FMT_BF16) return 0x1.ffp127f;
    if (f == LB_FMT_FP8_E4M3) return 464.0f;
    if (f == LB_FMT_FP8_E5M2) return 61440.0f;
    if (f == LB_FMT_INT8) return 127.5f;
    if (f == LB_FMT_INT4) return 7.5f;
    return INFINITY; /* fp32: nothing saturates */
}

static uint64_t count_beyond(const float *x, size_t n, float limit)
{
    uint64_t k = 0;
    for (size_t d = 0; d < n; d++) k += fabsf(x[d]) >= limit && fabsf(x[d]) <= FLT_MAX; /* finite: inf stays inf */
    return k;
}

lb_status lb__kv_init(lb__kvcache *c, lb_format f, size_t layers, size_t ctx, size_t kv_heads, size_t head_dim)
{
    memset(c, 0, sizeof *c);
    lb_status st = lb__kv_format_check(f);
    if (st != LB_OK) return st;
    c->format = f;
    c->sat_limit = sat_limit(f);
    c->layers = layers, c->ctx = ctx, c->kv_heads = kv_heads, c->head_dim = head_dim;
    c->row_bytes = lb_format_bytes(f, head_dim);
    size_t rows = layers * ctx * kv_heads;
    if ((layers && ctx && kv_heads && rows / layers / ctx != kv_heads) || (head_dim && !c->row_bytes) ||
        (c->row_bytes && rows > SIZE_MAX / 2 / (c->row_bytes + sizeof(float))))
        return lb__fail(LB_ERR_ARG, "KV cache of %zu layers x %zu positions x %zu x %zu values overflows", layers, ctx,
                        kv_heads, head_dim);
    size_t bytes = rows * c->row_bytes;
    if (f == LB_FMT_FP32) { /* panels (kvcache.h): positions and V's values rounded up to whole panels */
        uint64_t nr = LB__MM_NR, per[2], all;
        int ok = lb__mul_u64_checked((ctx + nr - 1) / nr * nr, head_dim, &per[LB__KV_K]) &&
                 lb__mul_u64_checked((head_dim + nr - 1) / nr * nr, ctx, &per[LB__KV_V]);
        for (int w = 0; w < 2 && ok; w++)
            ok = lb__mul_u64_checked(per[w], (uint64_t)layers * kv_heads, &all) && all < SIZE_MAX / 2 / sizeof(float);
        if (!ok)
            return lb__fail(LB_ERR_ARG, "KV cache of %zu layers x %zu positions x %zu x %zu values overflows", layers,
                            ctx, kv_heads, head_dim);
        for (int w = 0; w < 2; w++) {
            c->panel_floats[w] = (size_t)per[w];
            if (!(c->codes[w] = calloc(layers * kv_heads * c->panel_floats[w] + 1, sizeof(float)))) goto nomem;
        }
        return LB_OK; /* calloc: the padding reads as 0; pages no sequence reaches stay untouched */
    }
    for (int w = 0; w < 2; w++) {
        c->codes[w] = malloc(bytes ? bytes : 1); /* never a zero-byte malloc */
        if (!c->codes[w]) goto nomem;
        if (scaled(f) && !(c->scales[w] = malloc((rows ? rows : 1) * sizeof(float)))) goto nomem;
    }
    if (scaled(f)) {
        const lb_format_info *fi = lb_format_get(f);
        c->max = (float)fi->max_finite;
        /* every code's exact value, read by index (the codecs decode exactly) */
        for (uint32_t code = 0; code < (1u << fi->bits); code++) lb_decode_value(f, code, &c->lut[code]);
    }
    return LB_OK;
nomem:
    lb__kv_free(c);
    return lb__fail(LB_ERR_NOMEM, "cannot allocate a %s KV cache of %zu layers x %zu positions x %zu x %zu values",
                    lb_format_get(f)->name, layers, ctx, kv_heads, head_dim);
}

lb_status lb__kv_set_static(lb__kvcache *c, size_t layer, float k_scale, float v_scale)
{
    if (!c->scales[0]) return lb__fail(LB_ERR_ARG, "KV cache: static scales need a scaled format");
    if (layer >= c->layers) return lb__fail(LB_ERR_ARG, "KV cache: layer %zu of %zu", layer, c->layers);
    if (!(k_scale > 0) || !(v_scale > 0) || isinf(k_scale) || isinf(v_scale))
        return lb__fail(LB_ERR_ARG, "KV cache: layer %zu static scales k %g, v %g are not positive and finite", layer,
                        (double)k_scale, (double)v_scale);
    if (!c->fixed && !(c->fixed = calloc(2 * c->layers, sizeof *c->fixed)))
        return lb__fail(LB_ERR_NOMEM, "cannot allocate static KV scales of %zu layers", c->layers);
    c->fixed[2 * layer] = k_scale;
    c->fixed[2 * layer + 1] = v_scale;
    return LB_OK;
}

void lb__kv_free(lb__kvcache *c)
{
    free(c->fixed);
    c->fixed = NULL;
    for (int w = 0; w < 2; w++) {
        free(c->codes[w]);
        free(c->scales[w]);
        c->codes[w] = NULL;
        c->scales[w] = NULL;
    }
}

size_t lb__kv_bytes(const lb__kvcache *c)
{
    if (c->format == LB_FMT_FP32)
        return c->layers * c->kv_heads * (c->panel_floats[LB__KV_K] + c->panel_floats[LB__KV_V]) * sizeof(float);
    size_t rows = c->layers * c->ctx * c->kv_heads;
    return 2 * rows * (c->row_bytes + (c->scales[0] ? sizeof(float) : 0));
}

/* The row index of (layer, pos, head) in codes and scales. */
static size_t row_index(const lb__kvcache *c, size_t layer, size_t pos, size_t head)
{
    return (layer * c->ctx + pos) * c->kv_heads + head;
}

/* bf16 / fp16: round each value saturating, then put infinities back (the
 * saturating kernels clamp them to +-max). */
static void store_plain(lb__kvcache *c, lb__encode_fn enc, const float *x, uint8_t *dst)
{
    const lb_format_info *f = lb_format_get(c->format);
    c->saturated += count_beyond(x, c->head_dim, c->sat_limit);
    enc(f, LB_SATURATE, x, c->head_dim, dst);
    uint32_t inf = c->format == LB_FMT_BF16 ? 0x7F80 : 0x7C00;
    for (size_t d = 0; d < c->head_dim; d++)
        if (isinf(x[d])) lb__store_code(f, dst, d, signbit(x[d]) ? inf | 0x8000 : inf);
}

/* Values converted per call of the encoder: even, so 4-bit pieces start
 * on a byte. */
#define PIECE 256

/* Scaled formats: absmax / M, then x / scale encoded saturating, PIECE
 * values at a time. */
static void store_scaled(lb__kvcache *c, lb__encode_fn enc, const float *x, uint8_t *dst, float *scale, float fixed)
{
    const lb_format_info *f = lb_format_get(c->format);
    float amax = 0.0f;
    int finite = 1;
    for (size_t d = 0; d < c->head_dim; d++) {
        float a = fabsf(x[d]);
        if (!(a <= FLT_MAX)) finite = 0; /* NaN or infinity */
        else if (a > amax) amax = a;
    }
    if (!finite) {
        *scale = NAN;
        memset(dst, 0, c->row_bytes);
        return;
    }
    float s = fixed > 0 ? fixed : amax / c->max, tmp[PIECE];
    if (s == 0.0f) s = 1.0f; /* zero vector, or underflow: every value rounds to 0 */
    *scale = s;
    for (size_t d0 = 0; d0 < c->head_dim; d0 += PIECE) {
        size_t len = c->head_dim - d0 < PIECE ? c->head_dim - d0 : PIECE;
        for (size_t d = 0; d < len; d++) tmp[d] = x[d0 + d] / s;
        c->saturated += count_beyond(tmp, len, c->sat_limit);
        enc(f, LB_SATURATE, tmp, len, dst + lb_format_bytes(c->format, d0)); /* finite: cannot fail */
    }
}

void lb__kv_store(lb__kvcache *c, size_t layer, size_t pos, size_t n, const float *k, const float *v)
{
    size_t hd = c->head_dim, kv_dim = c->kv_heads * hd;
    const float *src[2] = {k, v};
    if (c->format == LB_FMT_FP32) { /* each value to its place in the panels */
        for (size_t t = 0; t < n; t++)
            for (size_t h = 0; h < c->kv_heads; h++)
                for (int w = 0; w < 2; w++) {
                    const float *x = src[w] + t * kv_dim + h * hd;
                    float *panels = (float *)lb__kv_panels(c, w, layer, h); /* the cache's own, const to readers */
                    for (size_t d = 0; d < hd; d++) panels[lb__kv_panel_index(w, hd, c->ctx, pos + t, d)] = x[d];
                }
        return;
    }
    c->values += 2 * (uint64_t)n * kv_dim;
    lb__encode_fn enc = lb__encode_kernel(lb_isa_active());
    /* the encoders round with the FPU in places: the default environment
     * makes the codes independent of the caller's rounding mode or FTZ */
    lb__fenv_guard g;
    lb__fenv_begin(&g);
    for (size_t t = 0; t < n; t++)
        for (size_t h = 0; h < c->kv_heads; h++) {
            size_t r = row_index(c, layer, pos + t, h);
            for (int w = 0; w < 2; w++) {
                const float *x = src[w] + t * kv_dim + h * hd;
                uint8_t *dst = c->codes[w] + r * c->row_bytes;
                float fixed = c->fixed ? c->fixed[2 * layer + w] : 0.0f;
                if (c->scales[w]) store_scaled(c, enc, x, dst, &c->scales[w][r], fixed);
                else store_plain(c, enc, x, dst);
            }
        }
    lb__fenv_end(&g);
}

/* Code d of a 16-bit row (little-endian, as lb__store_code writes it). */
static inline uint32_t load16(const uint8_t *src, size_t d)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t h;
    memcpy(&h, src + 2 * d, 2); /* one load: lets the row loops vectorize */
    return h;
#else
    return (uint32_t)src[2 * d] | (uint32_t)src[2 * d + 1] << 8;
#endif
}

/* Each code's exact value, element by element: the reference the row
 * loops below apply. None rounds, so neither the rounding mode nor
 * FTZ/DAZ can change a value (a subnormal is an exact integer times a
 * power of two whose product is a normal fp32 number, or +0). Each is
 * branch-free so that gcc and clang vectorize the loops. */

/* bf16: the code is the high half of an fp32. */
static inline float bf16_value(uint32_t h) { return lb__f32_from_bits(h << 16); }

/* cond ? a : b by masks: a and b both computed, so gcc keeps a floating-
 * point operation for a in the loop body rather than sinking it under the
 * condition, where it would not if-convert (speculate) it, and the loop
 * would stay scalar. */
static inline uint32_t pick(int cond, uint32_t a, uint32_t b)
{
    uint32_t m = 0u - (uint32_t)cond;
    return (a & m) | (b & ~m);
}

/* binary16 to binary32: the exponent rebiased by 112; infinity and NaN
 * (exponent 31) rebiased by 112 more, keeping the mantissa; subnormals
 * (exponent 0) are m x 2^-24. */
static inline float half_value(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, o = (h & 0x7FFFu) << 13, e = o & 0x0F800000u;
    o += (e == 0x0F800000u ? 224u : 112u) << 23;
    uint32_t sub = lb__f32_bits((float)(int32_t)(h & 0x3FFu) * 0x1p-24f);
    return lb__f32_from_bits(pick(e == 0, sub, o) | sign);
}

/* fp8_e5m2 is the top byte of a binary16 (same exponent, 2 of its 10
 * mantissa bits). */
static inline float e5m2_value(uint32_t c) { return half_value(c << 8); }

/* fp8_e4m3 (bias 7, no infinities, S.1111.111 NaN): the exponent rebiased
 * by 120; subnormals m x 2^-9; NaN as nan_bits (the codec's positive NaN,
 * from lut) with the code's sign. (The cache itself never stores a NaN
 * code -- a vector with NaN gets zero codes and a NaN scale -- but the
 * decode stays exact for every code.) */
static inline float e4m3_value(uint32_t c, uint32_t nan_bits)
{
    uint32_t mag = c & 0x7Fu, sign = (c & 0x80u) << 24;
    uint32_t u = (mag << 20) + (120u << 23), sub = lb__f32_bits((float)(int32_t)mag * 0x1p-9f);
    return lb__f32_from_bits(pick(mag == 0x7F, nan_bits, pick(mag < 8, sub, u)) | sign);
}

/* Two's complement integers of 8 and 4 bits. */
static inline float int8_value(uint32_t c) { return (float)((int32_t)(c ^ 0x80u) - 0x80); }
static inline float int4_value(uint32_t c) { return (float)((int32_t)(c ^ 0x8u) - 0x8); }

/* Code d of a row. */
static inline uint32_t nibble(const uint8_t *src, size_t d) { return (src[d / 2] >> (d % 2 * 4)) & 0x0Fu; }

/* Values per block of the row loops. gcc -O2 vectorizes only loops of a
 * constant trip count that no aliasing check guards ("very cheap" cost
 * model): hence inner loops of BLOCK values over restrict pointers, and
 * the rest of a row element by element with the same function. */
#define BLOCK 16

/* ROW(value of code j): buf[0..hd), BLOCK values at a time, then the rest. */
#define ROW(VALUE)                                                   \
    do {                                                             \
        size_t d = 0;                                                \
        for (; d + BLOCK <= hd; d += BLOCK)                          \
            for (size_t j = d; j < d + BLOCK; j++) buf[j] = (VALUE); \
        for (size_t j = d; j < hd; j++) buf[j] = (VALUE);            \
    } while (0)

static void row_bf16(const uint8_t *restrict src, size_t hd, float *restrict buf) { ROW(bf16_value(load16(src, j))); }
static void row_fp16(const uint8_t *restrict src, size_t hd, float *restrict buf) { ROW(half_value(load16(src, j))); }

/* The scaled formats: value x s, one fp32 rounding (a NaN scale makes
 * every value NaN). */
static void row_e4m3(const uint8_t *restrict src, size_t hd, float s, uint32_t nan_bits, float *restrict buf)
{
    ROW(e4m3_value(src[j], nan_bits) * s);
}
static void row_e5m2(const uint8_t *restrict src, size_t hd, float s, float *restrict buf)
{
    ROW(e5m2_value(src[j]) * s);
}
static void row_int8(const uint8_t *restrict src, size_t hd, float s, float *restrict buf)
{
    ROW(int8_value(src[j]) * s);
}
static void row_int4(const uint8_t *restrict src, size_t hd, float s, float *restrict buf)
{
    size_t d = 0;
    for (; d + 2 * BLOCK <= hd; d += 2 * BLOCK) {
        /* the nibbles spread to bytes first: two plain loops that vectorize,
         * where one that converts nibble by nibble does not */
        uint8_t t[2 * BLOCK];
        for (size_t b = 0; b < BLOCK; b++) {
            t[2 * b] = src[d / 2 + b] & 0x0Fu;
            t[2 * b + 1] = src[d / 2 + b] >> 4;
        }
        for (size_t j = 0; j < 2 * BLOCK; j++) buf[d + j] = int4_value(t[j]) * s;
    }
    for (size_t j = d; j < hd; j++) buf[j] = int4_value(nibble(src, j)) * s;
}

const float *lb__kv_decode(const lb__kvcache *c, int which, size_t layer, size_t pos, size_t head, float *buf)
{
    size_t hd = c->head_dim;
    if (c->format == LB_FMT_FP32) {
        const float *panels = lb__kv_panels(c, which, layer, head);
        for (size_t d = 0; d < hd; d++) buf[d] = panels[lb__kv_panel_index(which, hd, c->ctx, pos, d)];
        return buf;
    }
    size_t r = row_index(c, layer, pos, head);
    const uint8_t *src = c->codes[which] + r * c->row_bytes;
    float s = c->scales[which] ? c->scales[which][r] : 1.0f; /* read by the scaled formats only */
    switch (c->format) {
    case LB_FMT_BF16: row_bf16(src, hd, buf); break;
    case LB_FMT_FP16: row_fp16(src, hd, buf); break;
    case LB_FMT_FP8_E4M3: row_e4m3(src, hd, s, lb__f32_bits(c->lut[0x7F]), buf); break;
    case LB_FMT_FP8_E5M2: row_e5m2(src, hd, s, buf); break;
    case LB_FMT_INT8: row_int8(src, hd, s, buf); break;
    case LB_FMT_INT4: row_int4(src, hd, s, buf); break;
    case LB_FMT_FP32: break; /* gathered above */
    /* lb__kv_format_check refuses the rest before a cache exists; NaN, never another format's values */
    case LB_FMT_FP8_E4M3FNUZ: case LB_FMT_FP8_E5M2FNUZ: case LB_FMT_FP6_E2M3: case LB_FMT_FP6_E3M2:
    case LB_FMT_FP4_E2M1: case LB_FMT_E8M0: case LB_FMT_UE4M3: case LB_FMT_UINT8: case LB_FMT_UINT4:
    case LB_FMT_COUNT:
        for (size_t j = 0; j < hd; j++) buf[j] = NAN;
        break;
    }
    return buf;
}

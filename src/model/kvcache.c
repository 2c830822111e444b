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
    /* per (layer, kv head): K in panels of NR positions, V row by row, each
     * scale array over ctx rounded up to whole panels (the products load a
     * panel's NR scales at once); zero-filled, so positions no sequence has
     * stored read as zeros (ctx near SIZE_MAX would wrap the rounding up) */
    size_t nr = LB__MM_NR, heads = layers * kv_heads;
    uint64_t ctxp = ((uint64_t)ctx + nr - 1) / nr * nr, kbytes, all;
    int ok = ctx <= SIZE_MAX - nr && lb__mul_u64_checked(ctxp / nr * lb_format_bytes(f, nr), head_dim, &kbytes) &&
             lb__mul_u64_checked(kbytes + bytes / (heads ? heads : 1), heads, &all) && all < SIZE_MAX / 2 &&
             lb__mul_u64_checked(ctxp, (uint64_t)heads * sizeof(float), &all) && all < SIZE_MAX / 2;
    if (!ok)
        return lb__fail(LB_ERR_ARG, "KV cache of %zu layers x %zu positions x %zu x %zu values overflows", layers, ctx,
                        kv_heads, head_dim);
    c->head_bytes[LB__KV_K] = (size_t)kbytes;
    c->head_bytes[LB__KV_V] = ctx * c->row_bytes;
    c->scale_stride = (size_t)ctxp;
    for (int w = 0; w < 2; w++) {
        if (!(c->codes[w] = calloc(heads * c->head_bytes[w] + 1, 1))) goto nomem; /* + 1: never a zero-byte calloc */
        if (scaled(f) && !(c->scales[w] = calloc(heads * c->scale_stride + 1, sizeof(float)))) goto nomem;
    }
    if (!(c->row = malloc(c->row_bytes + 1))) goto nomem;
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
    free(c->row);
    c->fixed = NULL;
    c->row = NULL;
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
    size_t heads = c->layers * c->kv_heads, scales = c->scales[0] ? 2 * c->scale_stride * sizeof(float) : 0;
    return heads * (c->head_bytes[LB__KV_K] + c->head_bytes[LB__KV_V] + scales);
}

/* Where (layer, head)'s scales start in scales[w], and its codes in codes[w]. */
static size_t scale_base(const lb__kvcache *c, size_t layer, size_t head)
{
    return (layer * c->kv_heads + head) * c->scale_stride;
}
static uint8_t *head_codes(const lb__kvcache *c, int which, size_t layer, size_t head)
{
    return c->codes[which] + (layer * c->kv_heads + head) * c->head_bytes[which];
}

/* K: a position's row of codes (as encoded, row_bytes) into its lane of
 * the panels: code d to row d of its panel, lane pos % NR. */
static void scatter_k(const lb__kvcache *c, const uint8_t *row, uint8_t *panels, size_t pos)
{
    size_t nr = LB__MM_NR, hd = c->head_dim, pr = lb_format_bytes(c->format, nr), lane = pos % nr;
    uint8_t *dst = panels + pos / nr * hd * pr;
    switch (lb_format_get(c->format)->bits) {
    case 4:
        for (size_t d = 0; d < hd; d++) {
            uint8_t *b = dst + d * pr + lane / 2;
            unsigned shift = lane % 2 * 4;
            *b = (uint8_t)((*b & ~(0x0Fu << shift)) | ((row[d / 2] >> (d % 2 * 4)) & 0x0Fu) << shift);
        }
        break;
    case 8:
        for (size_t d = 0; d < hd; d++) dst[d * pr + lane] = row[d];
        break;
    default: /* 16 */
        for (size_t d = 0; d < hd; d++) memcpy(dst + d * pr + 2 * lane, row + 2 * d, 2);
        break;
    }
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
            size_t r = scale_base(c, layer, h) + pos + t;
            for (int w = 0; w < 2; w++) {
                const float *x = src[w] + t * kv_dim + h * hd;
                uint8_t *codes = head_codes(c, w, layer, h);
                /* V: straight into its row; K: a row first, then into the panels */
                uint8_t *dst = w == LB__KV_V ? codes + (pos + t) * c->row_bytes : c->row;
                float fixed = c->fixed ? c->fixed[2 * layer + w] : 0.0f;
                if (c->scales[w]) store_scaled(c, enc, x, dst, &c->scales[w][r], fixed);
                else store_plain(c, enc, x, dst);
                if (w == LB__KV_K) scatter_k(c, dst, codes, pos + t);
            }
        }
    lb__fenv_end(&g);
}

const float *lb__kv_decode(const lb__kvcache *c, int which, size_t layer, size_t pos, size_t head, float *buf)
{
    size_t hd = c->head_dim;
    if (c->format == LB_FMT_FP32) {
        const float *panels = lb__kv_panels(c, which, layer, head);
        for (size_t d = 0; d < hd; d++) buf[d] = panels[lb__kv_panel_index(which, hd, c->ctx, pos, d)];
        return buf;
    }
    float s = c->scales[which] ? c->scales[which][scale_base(c, layer, head) + pos] : 1.0f;
    const uint8_t *codes = head_codes(c, which, layer, head);
    if (which == LB__KV_V) {
        lb__kv_decode_run(c->format, codes + pos * c->row_bytes, hd, s, NULL, lb__f32_bits(c->lut[0x7F]), buf);
        return buf;
    }
    /* K: the position's lane of each panel row */
    size_t nr = LB__MM_NR, pr = lb_format_bytes(c->format, nr);
    const uint8_t *panel = codes + pos / nr * hd * pr;
    uint32_t nan_bits = lb__f32_bits(c->lut[0x7F]);
    for (size_t d = 0; d < hd; d++) buf[d] = lb__kv_value(c->format, panel + d * pr, pos % nr, s, nan_bits);
    return buf;
}

void lb__kv_decode_k_panel(const lb__kvcache *c, size_t layer, size_t head, size_t panel, float *dst)
{
    size_t nr = LB__MM_NR, hd = c->head_dim, pr = lb_format_bytes(c->format, nr);
    const uint8_t *src = head_codes(c, LB__KV_K, layer, head) + panel * hd * pr;
    /* bf16, fp16: no scale, so a row's decoder */
    const float *sc = c->scales[LB__KV_K] ? c->scales[LB__KV_K] + scale_base(c, layer, head) + panel * nr : NULL;
    uint32_t nan_bits = lb__f32_bits(c->lut[0x7F]);
    for (size_t d = 0; d < hd; d++) lb__kv_decode_run(c->format, src + d * pr, nr, 1.0f, sc, nan_bits, dst + d * nr);
}

lb__kv_view lb__kv_head_view(const lb__kvcache *c, int which, size_t layer, size_t head)
{
    if (c->format == LB_FMT_FP32) { /* the panels: K's as the quantized formats' codes, V's in runs of NR */
        const size_t nr = LB__MM_NR;
        lb__kv_view v = {.format = LB_FMT_FP32, .codes = (const uint8_t *)lb__kv_panels(c, which, layer, head),
                         .head_dim = c->head_dim};
        if (which == LB__KV_V) v.stride = nr * sizeof(float), v.panel_stride = c->ctx * nr * sizeof(float);
        return v;
    }
    lb__kv_view v = {.format = c->format, .codes = head_codes(c, which, layer, head), .head_dim = c->head_dim,
                     .stride = c->row_bytes, .nan_bits = lb__f32_bits(c->lut[0x7F])};
    if (c->scales[which]) v.scales = c->scales[which] + scale_base(c, layer, head);
    return v;
}

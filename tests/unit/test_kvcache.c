/* The KV cache (src/model/kvcache.h) and attention over it.
 *
 * Store/read round trips for every format against the documented rule
 * computed here (scale = absmax / M in fp32, x / scale encoded by the
 * binary64 reference codec lb_encode_value, read back as code value x
 * scale), for every instruction set's encoder; every code of every format
 * read back exactly; zero vectors, underflowing scales, extremes, ties,
 * NaN and infinity; int4 packing with odd head_dim; sizes; refused formats.
 * Attention over a quantized cache equals attention computed here on the
 * dequantized values in the kernels' order (bit-identical), for any thread
 * count, and a prefill equals a token-by-token decode. Then stories260K
 * through the public API with each format: decode = prefill, thread counts
 * equal, and the logits' distance from fp32 bounded and ordered by the
 * formats' precision. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lowbit.h"
#include "model/attention.h"
#include "kernel/kvattn.h"
#include "kernel/matmul.h"
#include "kernel/softmax.h"
#include "model/kvcache.h"

static const lb_format formats[] = {LB_FMT_FP32,     LB_FMT_BF16, LB_FMT_FP16, LB_FMT_FP8_E4M3,
                                    LB_FMT_FP8_E5M2, LB_FMT_INT8, LB_FMT_INT4};
#define NFORMATS (sizeof formats / sizeof formats[0])

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void) /* [0, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}
static float gauss(void)
{
    double u = uniform() + 0x1p-60, v = uniform();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* The documented M of each scaled format; 0 for the others. */
static float fmt_max(lb_format f)
{
    switch (f) {
    case LB_FMT_FP8_E4M3: return 448.0f;
    case LB_FMT_FP8_E5M2: return 57344.0f;
    case LB_FMT_INT8: return 127.0f;
    case LB_FMT_INT4: return 7.0f;
    case LB_FMT_FP32: case LB_FMT_FP16: case LB_FMT_BF16: case LB_FMT_FP8_E4M3FNUZ: case LB_FMT_FP8_E5M2FNUZ:
    case LB_FMT_FP6_E2M3: case LB_FMT_FP6_E3M2: case LB_FMT_FP4_E2M1: case LB_FMT_E8M0: case LB_FMT_UE4M3:
    case LB_FMT_UINT8: case LB_FMT_UINT4: case LB_FMT_COUNT: return 0.0f;
    }
    return 0.0f;
}

/* The rule of kvcache.h for one head vector: codes, the values they read
 * back as, and the scale (1 for unscaled formats). Non-finite input: NaN
 * values (their codes are not checked). */
static void reference_row(lb_format f, const float *x, size_t hd, uint32_t *codes, float *vals, float *scale)
{
    *scale = 1.0f;
    if (f == LB_FMT_FP32) {
        for (size_t d = 0; d < hd; d++) codes[d] = bits(x[d]), vals[d] = x[d];
        return;
    }
    float m = fmt_max(f);
    if (m == 0.0f) { /* bf16, fp16: saturating, infinities kept */
        for (size_t d = 0; d < hd; d++) {
            lb_encode_value(f, x[d], isinf(x[d]) ? LB_IEEE : LB_SATURATE, &codes[d]);
            lb_decode_value(f, codes[d], &vals[d]);
        }
        return;
    }
    float amax = 0.0f;
    int finite = 1;
    for (size_t d = 0; d < hd; d++) {
        if (!isfinite(x[d])) finite = 0;
        else if (fabsf(x[d]) > amax) amax = fabsf(x[d]);
    }
    if (!finite) {
        *scale = NAN;
        for (size_t d = 0; d < hd; d++) codes[d] = 0, vals[d] = NAN;
        return;
    }
    float s = amax / m;
    if (s == 0.0f) s = 1.0f;
    *scale = s;
    for (size_t d = 0; d < hd; d++) {
        float y = x[d] / s, v;
        lb_encode_value(f, y, LB_SATURATE, &codes[d]);
        lb_decode_value(f, codes[d], &v);
        vals[d] = v * s;
        if (f == LB_FMT_INT8 || f == LB_FMT_INT4) {
            /* the rule again without the codec: nearest even integer, clamped */
            float lo = f == LB_FMT_INT8 ? -128.0f : -8.0f, hi = f == LB_FMT_INT8 ? 127.0f : 7.0f;
            float q = nearbyintf(y);
            q = q < lo ? lo : q > hi ? hi : q;
            uint32_t mask = f == LB_FMT_INT8 ? 0xFF : 0x0F;
            CHECK(codes[d] == ((uint32_t)(int32_t)q & mask), "%s: %a / %a -> code 0x%X, nearest even %g",
                  lb_format_get(f)->name, (double)x[d], (double)s, codes[d], (double)q);
        }
    }
}

/* Code j of a run of codes of the format's width. */
static uint32_t run_code(const lb__kvcache *c, const uint8_t *run, size_t j)
{
    switch (lb_format_get(c->format)->bits) {
    case 4: return (run[j / 2] >> (j % 2 * 4)) & 0x0F;
    case 8: return run[j];
    case 16: return (uint32_t)run[2 * j] | (uint32_t)run[2 * j + 1] << 8;
    default: return (uint32_t)run[4 * j] | (uint32_t)run[4 * j + 1] << 8 | (uint32_t)run[4 * j + 2] << 16 |
                    (uint32_t)run[4 * j + 3] << 24;
    }
}

/* The quantized formats' layout of kvcache.h, written out here rather
 * than through the cache's own code: per (layer, kv head), V rows of
 * head_dim codes, K panels of NR positions (a row of NR codes per d),
 * scales over ctx rounded up to whole panels. */
static size_t ctx_padded(const lb__kvcache *c) { return (c->ctx + LB__MM_NR - 1) / LB__MM_NR * LB__MM_NR; }
static size_t k_head_bytes(const lb__kvcache *c)
{
    return ctx_padded(c) * c->head_dim * lb_format_get(c->format)->bits / 8;
}
static const uint8_t *v_row(const lb__kvcache *c, size_t l, size_t h, size_t p)
{
    return c->codes[LB__KV_V] + ((l * c->kv_heads + h) * c->ctx + p) * c->row_bytes;
}
static uint32_t k_code(const lb__kvcache *c, size_t l, size_t h, size_t p, size_t d)
{
    size_t nr = LB__MM_NR, pr = nr * lb_format_get(c->format)->bits / 8;
    const uint8_t *panel = c->codes[LB__KV_K] + (l * c->kv_heads + h) * k_head_bytes(c) + p / nr * c->head_dim * pr;
    return run_code(c, panel + d * pr, p % nr);
}
static float stored_scale(const lb__kvcache *c, int w, size_t l, size_t h, size_t p)
{
    return c->scales[w][(l * c->kv_heads + h) * ctx_padded(c) + p];
}

/* fp32: value d of position p as kvcache.h places it (K: panels of NR
 * positions; V: panels of NR values over ctx positions), written out here
 * from the documented layout rather than through the cache's own code. */
static float fp32_panel_value(const lb__kvcache *c, int w, size_t l, size_t h, size_t p, size_t d)
{
    size_t nr = LB__MM_NR, hd = c->head_dim, ctx = c->ctx;
    size_t per = w == LB__KV_K ? (ctx + nr - 1) / nr * nr * hd : (hd + nr - 1) / nr * nr * ctx;
    const float *panels = (const float *)(const void *)c->codes[w] + (l * c->kv_heads + h) * per;
    return w == LB__KV_K ? panels[(p / nr) * hd * nr + d * nr + p % nr] : panels[(d / nr) * ctx * nr + p * nr + d % nr];
}

/* Head vector number `kind` of a test pattern: ordinary, outliers, zeros,
 * extremes, underflow, ties, beyond the 16-bit ranges. */
static void fill_row(float *x, size_t hd, unsigned kind, lb_format f)
{
    float mag = (float)pow(10.0, uniform() * 6 - 3);
    for (size_t d = 0; d < hd; d++) {
        switch (kind % 8) {
        case 0: x[d] = gauss() * mag; break;
        case 1: x[d] = gauss() * (d == hd / 2 ? 100.0f * mag : mag); break;
        case 2: x[d] = 0.0f; break;
        case 3: x[d] = d % 2 ? -0.0f : 0.0f; break;
        case 4: x[d] = d % 3 == 0 ? FLT_MAX : d % 3 == 1 ? -FLT_MAX : gauss() * 1e30f; break;
        case 5: x[d] = d % 2 ? 0x1p-149f : -0x1p-148f * (float)(d % 3); break; /* the scale underflows */
        case 6: /* x / scale lands exactly on ties k + 1/2 (absmax 3M: scale 3, and
                 * x * (1/3) instead of x / 3 would miss them) */
            x[d] = 3.0f * (d == 0 ? (fmt_max(f) > 0 ? fmt_max(f) : 3.0f) : ((float)(d % 13) - 6.0f) + 0.5f);
            break;
        default: /* around and beyond fp16's range, and fp16's rounding boundary */
            x[d] = d % 4 == 0 ? 65519.0f : d % 4 == 1 ? -65520.0f : d % 4 == 2 ? 1e30f : gauss() * 7e4f;
            break;
        }
    }
}

/* Stores layers x ctx tokens of patterned rows (layer 0 one token at a
 * time in reverse order, so a row written past its end would clobber a
 * row already checked; the others in one call), then reads every row. */
static void check_roundtrip(lb_format f, size_t layers, size_t ctx, size_t heads, size_t hd)
{
    const char *name = lb_format_get(f)->name;
    lb__kvcache c;
    lb_status st = lb__kv_init(&c, f, layers, ctx, heads, hd);
    CHECK(st == LB_OK, "init %s: %s", name, lb_last_error());
    if (st != LB_OK) return;
    size_t kv_dim = heads * hd, per_layer = ctx * kv_dim;
    float *k = malloc(layers * per_layer * sizeof *k), *v = malloc(layers * per_layer * sizeof *v);
    float *vals = malloc(hd * sizeof *vals), *got = malloc(hd * sizeof *got);
    uint32_t *codes = malloc(hd * sizeof *codes);
    for (size_t i = 0; i < layers * ctx * heads; i++) { /* every pattern in K and in V */
        fill_row(k + i * hd, hd, (unsigned)i, f);
        fill_row(v + i * hd, hd, (unsigned)i + 3, f);
    }
    for (size_t p = ctx; p-- > 0;) lb__kv_store(&c, 0, p, 1, k + p * kv_dim, v + p * kv_dim);
    for (size_t l = 1; l < layers; l++) lb__kv_store(&c, l, 0, ctx, k + l * per_layer, v + l * per_layer);
    size_t bad_codes = 0, bad_vals = 0, bad_scales = 0, bad_pad = 0;
    for (size_t l = 0; l < layers; l++)
        for (size_t p = 0; p < ctx; p++)
            for (size_t h = 0; h < heads; h++)
                for (int w = 0; w < 2; w++) {
                    const float *x = (w ? v : k) + l * per_layer + p * kv_dim + h * hd;
                    float s;
                    reference_row(f, x, hd, codes, vals, &s);
                    const uint8_t *row = f == LB_FMT_FP32 ? NULL : v_row(&c, l, h, p);
                    if (c.scales[w] ? bits(stored_scale(&c, w, l, h, p)) != bits(s) : s != 1.0f) bad_scales++;
                    const float *dec = lb__kv_decode(&c, w, l, p, h, got);
                    if (w == LB__KV_V && f == LB_FMT_INT4 && hd % 2 && (row[hd / 2] >> 4)) bad_pad++;
                    for (size_t d = 0; d < hd; d++) {
                        int nan_in = isnan(x[d]) || (fmt_max(f) > 0 && isnan(s));
                        /* fp32: the value where attention reads it, in the panels of kvcache.h */
                        uint32_t code = f == LB_FMT_FP32 ? bits(fp32_panel_value(&c, w, l, h, p, d))
                                        : w == LB__KV_K ? k_code(&c, l, h, p, d) : run_code(&c, row, d);
                        if (!nan_in && code != codes[d]) {
                            if (!bad_codes++)
                                fprintf(stderr, "  %s hd %zu [%zu,%zu,%zu,%d][%zu]: %a -> 0x%X, want 0x%X\n", name,
                                        hd, l, p, h, w, d, (double)x[d], code, codes[d]);
                        }
                        int same = nan_in ? isnan(dec[d]) : bits(dec[d]) == bits(vals[d]);
                        if (!same && !bad_vals++)
                            fprintf(stderr, "  %s hd %zu [%zu,%zu,%zu,%d][%zu]: %a reads %a, want %a\n", name, hd,
                                    l, p, h, w, d, (double)x[d], (double)dec[d], (double)vals[d]);
                    }
                }
    CHECK(bad_codes == 0, "%s hd %zu isa %s: %zu codes differ from the rule", name, hd, lb_isa_name(lb_isa_active()),
          bad_codes);
    CHECK(bad_vals == 0, "%s hd %zu isa %s: %zu values read back differ", name, hd, lb_isa_name(lb_isa_active()),
          bad_vals);
    CHECK(bad_scales == 0, "%s hd %zu: %zu scales differ", name, hd, bad_scales);
    CHECK(bad_pad == 0, "%s hd %zu: %zu odd rows with a nonzero last high nibble", name, hd, bad_pad);
    size_t row_bytes = f == LB_FMT_FP32 ? 4 * hd : f == LB_FMT_BF16 || f == LB_FMT_FP16 ? 2 * hd
                       : f == LB_FMT_INT4 ? (hd + 1) / 2 : hd;
    /* V: ctx rows; K: ctx rounded up to whole panels of NR positions, as the scales */
    size_t ctxp = (ctx + LB__MM_NR - 1) / LB__MM_NR * LB__MM_NR;
    size_t want = layers * heads * (ctx * row_bytes + ctxp * hd * lb_format_get(f)->bits / 8 +
                                    (fmt_max(f) > 0 ? 2 * 4 * ctxp : 0));
    if (f == LB_FMT_FP32) { /* K padded to whole panels of NR positions, V to whole panels of NR values */
        size_t nr = LB__MM_NR;
        want = layers * heads * 4 * ((ctx + nr - 1) / nr * nr * hd + (hd + nr - 1) / nr * nr * ctx);
    }
    CHECK(lb__kv_bytes(&c) == want, "%s: %zu bytes, want %zu", name, lb__kv_bytes(&c), want);
    lb__kv_free(&c);
    free(k), free(v), free(vals), free(got), free(codes);
}

/* Every code of a format, stored as its value, reads back as that value:
 * the 16-bit formats code by code (NaNs too, as NaN), the scaled ones in a
 * vector that also holds M (so the scale is exactly 1). Codes the rule
 * never produces are stored as 0 instead: e5m2's infinities and NaNs,
 * e4m3's NaNs, and int8's -128 and int4's -8 (|x / scale| <= M). */
static void check_all_codes(lb_format f)
{
    const lb_format_info *fi = lb_format_get(f);
    uint32_t ncodes = 1u << fi->bits;
    int scaled = fmt_max(f) > 0;
    size_t hd = scaled ? ncodes + 1 : 1;
    lb__kvcache c;
    if (lb__kv_init(&c, f, 1, scaled ? 1 : ncodes, 1, hd) != LB_OK) {
        CHECK(0, "init %s", fi->name);
        return;
    }
    float *x = malloc(hd * sizeof *x), *got = malloc(hd * sizeof *got);
    size_t bad = 0;
    if (scaled) {
        x[0] = fmt_max(f);
        for (uint32_t code = 0; code < ncodes; code++) {
            lb_decode_value(f, code, &x[code + 1]);
            if (!(fabsf(x[code + 1]) <= fmt_max(f))) x[code + 1] = 0.0f;
        }
        lb__kv_store(&c, 0, 0, 1, x, x);
        CHECK(c.scales[0][0] == 1.0f, "%s scale %g", fi->name, (double)c.scales[0][0]);
        const float *r = lb__kv_decode(&c, LB__KV_V, 0, 0, 0, got);
        for (size_t d = 0; d < hd; d++)
            if (bits(r[d]) != bits(x[d]) && !(f == LB_FMT_INT8 || f == LB_FMT_INT4 ? r[d] == x[d] : 0)) bad++; /* ints: no -0 */
    } else {
        for (uint32_t code = 0; code < ncodes; code++) {
            float val;
            lb_decode_value(f, code, &val);
            lb__kv_store(&c, 0, code, 1, &val, &val);
        }
        for (uint32_t code = 0; code < ncodes; code++) {
            float val;
            lb_decode_value(f, code, &val);
            const float *r = lb__kv_decode(&c, LB__KV_K, 0, code, 0, got);
            if (isnan(val) ? !isnan(r[0]) : bits(r[0]) != bits(val)) {
                if (!bad++) fprintf(stderr, "  %s code 0x%X: %a, want %a\n", fi->name, code, (double)r[0], (double)val);
            }
        }
    }
    CHECK(bad == 0, "%s: %zu codes read back wrong", fi->name, bad);
    lb__kv_free(&c);
    free(x), free(got);
}

/* NaN and infinity are never turned into numbers. */
static void check_nonfinite(void)
{
    float x[5] = {1.0f, NAN, -2.0f, 0.0f, 3.0f}, y[5] = {1.0f, -INFINITY, 2.0f, INFINITY, 0.5f}, got[5];
    for (size_t i = 0; i < NFORMATS; i++) {
        lb_format f = formats[i];
        lb__kvcache c;
        if (lb__kv_init(&c, f, 1, 1, 1, 5) != LB_OK) continue;
        lb__kv_store(&c, 0, 0, 1, x, y);
        const float *k = lb__kv_decode(&c, LB__KV_K, 0, 0, 0, got);
        int ok = fmt_max(f) > 0 ? isnan(k[0]) && isnan(k[2]) && isnan(k[4]) : isnan(k[1]) && k[2] == -2.0f;
        CHECK(ok, "%s: a NaN in a K vector reads back as %g %g %g %g %g", lb_format_get(f)->name, (double)k[0],
              (double)k[1], (double)k[2], (double)k[3], (double)k[4]);
        const float *v = lb__kv_decode(&c, LB__KV_V, 0, 0, 0, got);
        ok = fmt_max(f) > 0 ? isnan(v[0]) && isnan(v[1]) && isnan(v[4])
                            : v[1] == -INFINITY && v[3] == INFINITY && v[0] == 1.0f;
        CHECK(ok, "%s: infinities in a V vector read back as %g %g %g %g %g", lb_format_get(f)->name, (double)v[0],
              (double)v[1], (double)v[2], (double)v[3], (double)v[4]);
        lb__kv_free(&c);
    }
    /* saturation of finite values in the 16-bit formats */
    float big[3] = {1e6f, -FLT_MAX, 65520.0f}, out[3];
    lb__kvcache c;
    if (lb__kv_init(&c, LB_FMT_FP16, 1, 1, 1, 3) == LB_OK) {
        lb__kv_store(&c, 0, 0, 1, big, big);
        lb__kv_decode(&c, LB__KV_K, 0, 0, 0, out);
        CHECK(out[0] == 65504.0f && out[1] == -65504.0f && out[2] == 65504.0f, "fp16 saturates: %g %g %g",
              (double)out[0], (double)out[1], (double)out[2]);
        /* all three (K and V) are at or past 65520, where rounding would go beyond 65504 */
        CHECK(c.saturated == 6 && c.values == 6, "fp16 counts %llu saturated of %llu", (unsigned long long)c.saturated,
              (unsigned long long)c.values);
        float fine[3] = {65519.0f, -65504.0f, INFINITY}; /* rounds to max, max, stays infinite: none saturates */
        lb__kv_store(&c, 0, 0, 1, fine, fine);
        CHECK(c.saturated == 6 && c.values == 12, "fp16 counts %llu of %llu after in-range values",
              (unsigned long long)c.saturated, (unsigned long long)c.values);
        lb__kv_free(&c);
    }
    if (lb__kv_init(&c, LB_FMT_BF16, 1, 1, 1, 3) == LB_OK) {
        lb__kv_store(&c, 0, 0, 1, big, big);
        lb__kv_decode(&c, LB__KV_K, 0, 0, 0, out);
        CHECK(out[1] == -0x1.fep127f && out[2] == 65536.0f, "bf16: -FLT_MAX saturates to %a, 65520 rounds to %a",
              (double)out[1], (double)out[2]);
        CHECK(c.saturated == 2 && c.values == 6, "bf16 counts %llu saturated (FLT_MAX, K and V)",
              (unsigned long long)c.saturated);
        lb__kv_free(&c);
    }
    /* scaled formats: absmax / M keeps every value in range */
    static const lb_format scaled[] = {LB_FMT_FP8_E4M3, LB_FMT_FP8_E5M2, LB_FMT_INT8, LB_FMT_INT4};
    for (size_t i = 0; i < sizeof scaled / sizeof scaled[0]; i++)
        if (lb__kv_init(&c, scaled[i], 1, 1, 1, 3) == LB_OK) {
            lb__kv_store(&c, 0, 0, 1, big, big);
            CHECK(c.saturated == 0 && c.values == 6, "%s counts %llu saturated", lb_format_get(scaled[i])->name,
                  (unsigned long long)c.saturated);
            lb__kv_free(&c);
        }
}

/* Hand-computed codes: the rule, spelled out for a few vectors. */
static void check_examples(void)
{
    lb__kvcache c;
    /* int8: absmax 127 -> scale 1; ties to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0 */
    float a[6] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -126.5f};
    if (lb__kv_init(&c, LB_FMT_INT8, 1, 1, 1, 6) == LB_OK) {
        lb__kv_store(&c, 0, 0, 1, a, a);
        const uint8_t *q = c.codes[LB__KV_V], *kp = c.codes[LB__KV_K]; /* K: position 0's lane, NR bytes a d */
        for (int d = 0; d < 6; d++)
            CHECK(kp[d * LB__MM_NR] == q[d] && kp[d * LB__MM_NR + 1] == 0, "int8 K panel row %d: 0x%02X, 0x%02X", d,
                  kp[d * LB__MM_NR], kp[d * LB__MM_NR + 1]);
        CHECK(c.scales[0][0] == 1.0f && q[0] == 127 && q[1] == 0 && q[2] == 2 && q[3] == 2 && q[4] == 0 &&
                  q[5] == (uint8_t)-126,
              "int8 codes %d %d %d %d %d %d", q[0], q[1], q[2], q[3], q[4], (int8_t)q[5]);
        lb__kv_free(&c);
    }
    /* int4, head_dim 3: absmax 14 -> scale 2; 14/2 = 7, -3/2 = -1.5 -> -2, 5/2 = 2.5 -> 2;
     * bytes: (0xE << 4) | 0x7 = 0xE7, then 0x02 (high nibble 0) */
    float b[3] = {14.0f, -3.0f, 5.0f};
    if (lb__kv_init(&c, LB_FMT_INT4, 1, 1, 1, 3) == LB_OK) {
        lb__kv_store(&c, 0, 0, 1, b, b);
        CHECK(c.row_bytes == 2 && c.codes[1][0] == 0xE7 && c.codes[1][1] == 0x02 && c.scales[1][0] == 2.0f,
              "int4 bytes 0x%02X 0x%02X scale %g", c.codes[1][0], c.codes[1][1], (double)c.scales[1][0]);
        float got[3];
        lb__kv_decode(&c, LB__KV_V, 0, 0, 0, got);
        CHECK(got[0] == 14.0f && got[1] == -4.0f && got[2] == 4.0f, "int4 reads %g %g %g", (double)got[0],
              (double)got[1], (double)got[2]);
        lb__kv_free(&c);
    }
    /* fp8_e4m3: absmax 896 -> scale 2; 896/2 = 448 = 0x7E; 3/2 = 1.5 = 0x3C; -1/2 = -0.5 = 0xB0 */
    float e[3] = {896.0f, 3.0f, -1.0f};
    if (lb__kv_init(&c, LB_FMT_FP8_E4M3, 1, 1, 1, 3) == LB_OK) {
        lb__kv_store(&c, 0, 0, 1, e, e);
        const uint8_t *q = c.codes[LB__KV_V];
        CHECK(q[0] == 0x7E && q[1] == 0x3C && q[2] == 0xB0 && c.scales[0][0] == 2.0f, "e4m3 codes 0x%02X 0x%02X 0x%02X",
              q[0], q[1], q[2]);
        lb__kv_free(&c);
    }
}

static void check_formats_refused(void)
{
    for (int f = 0; f < LB_FMT_COUNT + 2; f++) {
        int allowed = 0;
        for (size_t i = 0; i < NFORMATS; i++) allowed |= (int)formats[i] == f;
        lb_status st = lb__kv_format_check((lb_format)f);
        if (allowed) CHECK(st == LB_OK, "format %d allowed", f);
        else
            CHECK(st == LB_ERR_FORMAT && strstr(lb_last_error(), "fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, int8, int4"),
                  "format %d refused naming the allowed ones: %s", f, lb_last_error());
    }
    lb__kvcache c;
    CHECK(lb__kv_init(&c, LB_FMT_UINT4, 1, 1, 1, 4) == LB_ERR_FORMAT && strstr(lb_last_error(), "uint4"),
          "init refuses uint4: %s", lb_last_error());
    lb__kv_free(&c);
    CHECK(lb__kv_init(&c, LB_FMT_INT8, SIZE_MAX / 2, 4, 1, 4) == LB_ERR_ARG, "overflow: %s", lb_last_error());
    lb__kv_free(&c);
    /* ctx rounded up to whole panels would wrap to 0 (head_dim 0 skips the row check) */
    CHECK(lb__kv_init(&c, LB_FMT_INT8, 1, SIZE_MAX - 5, 1, 0) == LB_ERR_ARG, "ctx wraps: %s", lb_last_error());
    lb__kv_free(&c);
}

/* ---- the decode kernels' conversions (kernel/kvattn.h), every code ---- */

/* Every code of a format through the products of each instruction set, as
 * the only term of its sum: V as one row holding every code (P = [1]), K
 * as panels whose lanes hold every code (head_dim 1, Q = [1]). The sum
 * starts from +0, so each result is +0 + the code's value times the scale,
 * fused or not: that of lb__kv_value, NaN codes included (which a cache
 * never stores, so only this reaches e4m3's NaN branch). */
static void check_kernel_codes(lb_format f, float s)
{
    const char *name = lb_format_get(f)->name;
    unsigned b = lb_format_get(f)->bits;
    size_t n = (size_t)1 << b, nr = LB__MM_NR, panels = (n + nr - 1) / nr;
    uint8_t *row = calloc(n * b / 8 + 1, 1), *kp = calloc(panels * nr * b / 8 + 1, 1);
    float *out = malloc((n + nr) * sizeof *out), *sc = malloc(panels * nr * sizeof *sc), one = 1.0f;
    for (size_t c = 0; c < n; c++) { /* code c at value c of the row and at position c of the panels */
        for (unsigned k = 0; k < b; k++)
            if (c >> k & 1) {
                row[(c * b + k) / 8] |= (uint8_t)(1u << ((c * b + k) % 8));
                kp[(c * b + k) / 8] |= (uint8_t)(1u << ((c * b + k) % 8)); /* head_dim 1: one panel row each */
            }
    }
    for (size_t p = 0; p < panels * nr; p++) sc[p] = s;
    uint32_t nan_bits = 0x7FC00000u;
    lb__kv_view v = {.format = f, .codes = row, .scales = b == 16 ? NULL : sc, .head_dim = n,
                     .stride = n * b / 8, .nan_bits = nan_bits};
    lb__kv_view k = {.format = f, .codes = kp, .scales = b == 16 ? NULL : sc, .head_dim = 1, .nan_bits = nan_bits};
    for (int isa = 0; isa <= (int)lb_isa_detected(); isa++) {
        size_t bad_v = 0, bad_k = 0;
        lb__kv_mix(&v, &one, 1, 1, 1, out, n, (lb_isa)isa);
        for (size_t c = 0; c < n; c++) bad_v += bits(out[c]) != bits(0.0f + lb__kv_value(f, row, c, s, nan_bits));
        lb__kv_scores(&k, &one, 1, 1, n, out, n, (lb_isa)isa);
        for (size_t c = 0; c < n; c++) bad_k += bits(out[c]) != bits(0.0f + lb__kv_value(f, row, c, s, nan_bits));
        CHECK(bad_v == 0 && bad_k == 0, "%s scale %g isa %s: %zu V and %zu K codes read otherwise than lb__kv_value",
              name, (double)s, lb_isa_name((lb_isa)isa), bad_v, bad_k);
    }
    free(row), free(kp), free(out), free(sc);
}

/* ---- attention ---- */

/* Causal GQA attention in the order lb__attention's kernels use: each score
 * a sum over d in order from 0 (fused multiply-adds in the vector matmul
 * kernels, product then add in the scalar one), times 1/sqrt(hd), the
 * softmax in order, each output a sum over positions in order. K and V:
 * [pos][kv_heads * hd] dequantized values. */
static void ref_attention(int fused, const float *q, const float *k, const float *v, size_t pos0, size_t n,
                          size_t heads, size_t kv_heads, size_t hd, float *out)
{
    float scale = 1.0f / sqrtf((float)hd), *p = malloc((pos0 + n) * sizeof *p);
    size_t group = heads / kv_heads;
    for (size_t t = 0; t < n; t++)
        for (size_t h = 0; h < heads; h++) {
            const float *qh = q + (t * heads + h) * hd;
            size_t kvh = h / group, valid = pos0 + t + 1;
            float max = -INFINITY, lane[16] = {0};
            for (size_t j = 0; j < valid; j++) {
                const float *kr = k + (j * kv_heads + kvh) * hd;
                float s = 0.0f;
                for (size_t d = 0; d < hd; d++) s = fused ? fmaf(qh[d], kr[d], s) : s + qh[d] * kr[d];
                p[j] = s * scale;
                if (p[j] > max) max = p[j];
            }
            /* softmax.h: lb__exp (test_softmax checks it against exp), the
             * sum in 16 lanes, then lane i + i+8, i + i+4, i + i+2, i + i+1 */
            for (size_t j = 0; j < valid; j++) {
                p[j] = lb__exp(p[j] - max);
                lane[j % 16] += p[j];
            }
            for (size_t w = 8; w > 0; w /= 2)
                for (size_t i = 0; i < w; i++) lane[i] = lane[i] + lane[i + w];
            float inv = 1.0f / lane[0];
            for (size_t j = 0; j < valid; j++) p[j] *= inv;
            for (size_t d = 0; d < hd; d++) {
                float o = 0.0f;
                for (size_t j = 0; j < valid; j++) {
                    float vv = v[(j * kv_heads + kvh) * hd + d];
                    o = fused ? fmaf(p[j], vv, o) : o + p[j] * vv;
                }
                out[(t * heads + h) * hd + d] = o;
            }
        }
    free(p);
}

/* K and V rows (rows of hd values) as the cache's rule dequantizes them. */
static void dequantize_rows(lb_format f, const float *k, const float *v, size_t rows, size_t hd, float *kd, float *vd)
{
    uint32_t *codes = malloc(hd * sizeof *codes);
    for (size_t r = 0; r < rows; r++) {
        float s;
        reference_row(f, k + r * hd, hd, codes, kd + r * hd, &s);
        reference_row(f, v + r * hd, hd, codes, vd + r * hd, &s);
    }
    free(codes);
}

/* Whether the active set's products fuse (the x86 vector matmul kernels do). */
static int fused_products(void)
{
#if defined(__x86_64__)
    return lb_isa_active() >= LB_ISA_AVX2;
#else
    return 0;
#endif
}

static lb_status run_attention(const lb__kvcache *c, const float *q, size_t pos0, size_t n, size_t heads, float *out,
                               int threads)
{
    lb__attn_job j = {.q = q, .kv = c, .layer = 1, .pos0 = pos0, .n = n, .n_heads = heads,
                      .n_kv_heads = c->kv_heads, .head_dim = c->head_dim, .out = out};
    return lb__attention(&j, threads);
}

static void check_attention(lb_format f, size_t P, size_t heads, size_t kv_heads, size_t hd)
{
    const char *name = lb_format_get(f)->name;
    size_t kv_dim = kv_heads * hd, q_dim = heads * hd;
    float *q = malloc(P * q_dim * sizeof *q), *k = malloc(P * kv_dim * sizeof *k), *v = malloc(P * kv_dim * sizeof *v);
    float *kd = malloc(P * kv_dim * sizeof *kd), *vd = malloc(P * kv_dim * sizeof *vd);
    float *ref = malloc(P * q_dim * sizeof *ref), *got = malloc(P * q_dim * sizeof *got);
    float *dec = malloc(P * q_dim * sizeof *dec);
    for (size_t i = 0; i < P * q_dim; i++) q[i] = gauss();
    for (size_t i = 0; i < P * kv_dim; i++) k[i] = gauss() * (i % 17 == 3 ? 8.0f : 1.0f), v[i] = gauss();
    /* the dequantized values by the rule (the round trips check the cache gives them) */
    dequantize_rows(f, k, v, P * kv_heads, hd, kd, vd);
    lb__kvcache c, c32;
    /* layer 1 of 2, so that the layer offset is exercised */
    if (lb__kv_init(&c, f, 2, P, kv_heads, hd) != LB_OK || lb__kv_init(&c32, LB_FMT_FP32, 2, P, kv_heads, hd) != LB_OK) {
        CHECK(0, "init");
        return;
    }
    lb__kv_store(&c, 1, 0, P, k, v);
    lb__kv_store(&c32, 1, 0, P, kd, vd);
    int fused = fused_products();
    ref_attention(fused, q, kd, vd, 0, P, heads, kv_heads, hd, ref);
    const char *isa = lb_isa_name(lb_isa_active());
    for (int threads = 1; threads <= 3; threads++) {
        CHECK(run_attention(&c, q, 0, P, heads, got, threads) == LB_OK, "attention");
        CHECK(memcmp(got, ref, P * q_dim * sizeof *got) == 0,
              "%s %zu/%zu heads hd %zu isa %s threads %d: prefill attention differs from the reference on the "
              "dequantized values",
              name, heads, kv_heads, hd, isa, threads);
    }
    CHECK(run_attention(&c32, q, 0, P, heads, dec, 2) == LB_OK && memcmp(dec, ref, P * q_dim * sizeof *dec) == 0,
          "%s: fp32 cache of the dequantized values gives the same bits", name);
    /* decode: a fresh cache filled one token at a time, attention after each;
     * then chunks of 3 */
    for (int step = 1; step <= 3; step += 2) {
        lb__kvcache d;
        if (lb__kv_init(&d, f, 2, P, kv_heads, hd) != LB_OK) break;
        int ok = 1;
        for (size_t t = 0; t < P && ok; t += (size_t)step) {
            size_t n = P - t < (size_t)step ? P - t : (size_t)step;
            lb__kv_store(&d, 1, t, n, k + t * kv_dim, v + t * kv_dim);
            ok = run_attention(&d, q + t * q_dim, t, n, heads, dec + t * q_dim, 2) == LB_OK;
        }
        CHECK(ok && memcmp(dec, ref, P * q_dim * sizeof *dec) == 0, "%s isa %s: %d-token steps equal the prefill",
              name, isa, step);
        lb__kv_free(&d);
    }
    lb__kv_free(&c);
    lb__kv_free(&c32);
    free(q), free(k), free(v), free(kd), free(vd), free(ref), free(got), free(dec);
}

/* A non-finite K or V value at a position a query does not see yet must
 * not reach that query: a prefill computes a chunk's products over the
 * positions its last query sees, the others' weights there exact zeros,
 * and 0 x inf is NaN. The queries before the bad position must get the
 * bits the reference gives (it reads only the positions each query sees);
 * the queries from it on are not finite (every format carries a
 * non-finite value into its vector: kept, or NaN through the scale). */
static void check_masked_nonfinite(lb_format f, size_t P, size_t bad, size_t pos0, size_t heads, size_t kv_heads,
                                   size_t hd)
{
    const char *name = lb_format_get(f)->name;
    size_t kv_dim = kv_heads * hd, q_dim = heads * hd;
    float *q = malloc(P * q_dim * sizeof *q), *k = malloc(P * kv_dim * sizeof *k), *v = malloc(P * kv_dim * sizeof *v);
    float *kd = malloc(P * kv_dim * sizeof *kd), *vd = malloc(P * kv_dim * sizeof *vd);
    float *ref = malloc(P * q_dim * sizeof *ref), *got = malloc(P * q_dim * sizeof *got);
    for (size_t i = 0; i < P * q_dim; i++) q[i] = gauss();
    for (size_t i = 0; i < P * kv_dim; i++) k[i] = gauss(), v[i] = gauss();
    v[bad * kv_dim + 1] = INFINITY; /* kv head 0 */
    v[bad * kv_dim + kv_dim - 1] = -INFINITY; /* the last kv head */
    k[bad * kv_dim + 2] = NAN;
    dequantize_rows(f, k, v, P * kv_heads, hd, kd, vd);
    int fused = fused_products();
    ref_attention(fused, q, kd, vd, 0, P, heads, kv_heads, hd, ref);
    lb__kvcache c;
    if (lb__kv_init(&c, f, 2, P, kv_heads, hd) != LB_OK) {
        CHECK(0, "init");
        return;
    }
    /* positions < pos0 earlier (one store), then a prefill of the rest */
    lb__kv_store(&c, 1, 0, P, k, v);
    if (pos0) CHECK(run_attention(&c, q, 0, pos0, heads, got, 2) == LB_OK, "attention");
    CHECK(run_attention(&c, q + pos0 * q_dim, pos0, P - pos0, heads, got + pos0 * q_dim, 2) == LB_OK, "attention");
    CHECK(memcmp(got, ref, bad * q_dim * sizeof *got) == 0,
          "%s isa %s, pos0 %zu: a non-finite K/V value at position %zu reaches the queries before it",
          name, lb_isa_name(lb_isa_active()), pos0, bad);
    size_t finite = 0;
    for (size_t t = bad; t < P; t++) finite += isfinite(got[t * q_dim + 1]) && isfinite(got[t * q_dim + q_dim - 1]);
    CHECK(finite == 0, "%s: %zu queries from position %zu on read its non-finite values as finite", name, finite, bad);
    lb__kv_free(&c);
    free(q), free(k), free(v), free(kd), free(vd), free(ref), free(got);
}

/* ---- the runner on stories260K ---- */

/* max over positions of max |a - b| / (max - min of b) at that position */
static double logit_error(const float *a, const float *b, size_t positions, size_t vocab)
{
    double worst = 0;
    for (size_t t = 0; t < positions; t++) {
        const float *x = a + t * vocab, *y = b + t * vocab;
        float lo = y[0], hi = y[0];
        double e = 0;
        for (size_t i = 0; i < vocab; i++) {
            lo = fminf(lo, y[i]), hi = fmaxf(hi, y[i]);
            e = fmax(e, fabs((double)x[i] - y[i]));
        }
        worst = fmax(worst, e / (hi - lo));
    }
    return worst;
}

static size_t argmax(const float *x, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void check_runner(void)
{
    lb_model *m;
    if (lb_model_open("models/stories260K.bin", &m) != LB_OK) {
        CHECK(0, "open models/stories260K.bin (run from the repository root): %s", lb_last_error());
        return;
    }
    enum { STEPS = 128 };
    lb_runner_options o = {.threads = 2};
    lb_runner *r;
    if (lb_runner_new(m, &o, &r) != LB_OK) {
        CHECK(0, "runner: %s", lb_last_error());
        lb_model_close(m);
        return;
    }
    size_t V = lb_runner_vocab_size(r);
    int32_t toks[STEPS] = {1};
    float *ref = malloc(V * STEPS * sizeof *ref), *pre = malloc(V * STEPS * sizeof *pre);
    float *dec = malloc(V * STEPS * sizeof *dec);
    /* the fp32 model's greedy story, then its logits at every position */
    for (size_t s = 0; s + 1 < STEPS; s++) {
        lb_runner_forward(r, &toks[s], 1, dec, 1);
        toks[s + 1] = (int32_t)argmax(dec, V);
    }
    lb_runner_reset(r);
    CHECK(lb_runner_forward(r, toks, STEPS, ref, 0) == LB_OK, "fp32 prefill");
    lb_runner_free(r);

    double err[NFORMATS];
    for (size_t i = 0; i < NFORMATS; i++) {
        lb_format f = formats[i];
        const char *name = lb_format_get(f)->name;
        lb_runner_options of = {.threads = 2, .kv = f};
        err[i] = INFINITY;
        if (lb_runner_new(m, &of, &r) != LB_OK) {
            CHECK(0, "%s runner: %s", name, lb_last_error());
            continue;
        }
        CHECK(lb_runner_forward(r, toks, STEPS, pre, 0) == LB_OK, "%s prefill", name);
        lb_runner_reset(r);
        for (size_t s = 0; s < STEPS; s++) lb_runner_forward(r, &toks[s], 1, dec + s * V, 0);
        CHECK(memcmp(pre, dec, V * STEPS * sizeof *pre) == 0, "%s: token-by-token decode equals the prefill", name);
        lb_runner_free(r);
        of.threads = 3;
        if (lb_runner_new(m, &of, &r) == LB_OK) {
            lb_runner_forward(r, toks, STEPS, dec, 0);
            CHECK(memcmp(pre, dec, V * STEPS * sizeof *pre) == 0, "%s: 3 threads equal 2", name);
            lb_runner_free(r);
        }
        err[i] = logit_error(pre, ref, STEPS, V);
        size_t agree = 0;
        for (size_t s = 0; s < STEPS; s++) agree += argmax(pre + s * V, V) == argmax(ref + s * V, V);
        printf("kv %-9s logits vs fp32: max |diff| / range %.3g, top-1 agreement %zu/%d\n", name, err[i], agree,
               STEPS);
    }
    CHECK(err[0] == 0, "kv fp32 is today's cache: identical logits (%g)", err[0]);
    /* Bound. Each cached value's rounding error is at most u times its
     * vector's absmax, u the format's relative half step: 2^-8 bf16, 2^-11
     * fp16, 2^-4 e4m3, 2^-3 e5m2 (floats: relative to the value itself,
     * which is no larger), 0.5/127 int8, 0.5/7 int4. To first order the
     * logits move in proportion to u; the factor (how 5 layers and 128
     * positions amplify the perturbation) is not derivable by hand, so it
     * is measured: on this model max |diff| / range is 0.97u (e4m3) to 1.6u
     * (fp16) for the float formats and 7.4u (int8), 8.8u (int4) for the
     * integer ones (values far below the absmax keep an absolute, not
     * relative, error). The bound is 16u: about twice the worst measured
     * factor, and far below what a cache that stores anything but the
     * rule's values gives (a scale off by 2 saturates half the range).
     * Ordering: more precision, closer logits, as the u order says
     * (fp16 < bf16 < int8 < e4m3 < e5m2 < int4), and every quantized
     * format moves them (the option is applied). */
    static const double u[NFORMATS] = {0, 0x1p-8, 0x1p-11, 0x1p-4, 0x1p-3, 0.5 / 127, 0.5 / 7};
    for (size_t i = 1; i < NFORMATS; i++)
        CHECK(err[i] > 0 && err[i] <= 16 * u[i], "kv %s: logit error %g of the range, bound 16u = %g",
              lb_format_get(formats[i])->name, err[i], 16 * u[i]);
    static const int order[] = {2, 1, 5, 3, 4, 6}; /* fp16, bf16, int8, e4m3, e5m2, int4 */
    for (size_t i = 0; i + 1 < sizeof order / sizeof order[0]; i++)
        CHECK(err[order[i]] < err[order[i + 1]], "kv %s (%g) closer to fp32 than %s (%g)",
              lb_format_get(formats[order[i]])->name, err[order[i]], lb_format_get(formats[order[i + 1]])->name,
              err[order[i + 1]]);
    lb_runner_options bad = {.threads = 1, .kv = LB_FMT_FP4_E2M1};
    CHECK(lb_runner_new(m, &bad, &r) == LB_ERR_FORMAT && strstr(lb_last_error(), "fp4_e2m1"),
          "runner refuses a fp4 KV cache: %s", lb_last_error());
    free(ref), free(pre), free(dec);
    lb_model_close(m);
}

int main(void)
{
    check_formats_refused();
    check_examples();
    check_nonfinite();
    for (size_t i = 1; i < NFORMATS; i++) check_all_codes(formats[i]); /* fp32 (the copy) by the round trips */
    static const size_t dims[] = {1, 2, 7, 8, 64, 301};
    for (int isa = 0; isa <= (int)lb_isa_detected(); isa++) {
        lb_isa_set((lb_isa)isa);
        for (size_t i = 0; i < NFORMATS; i++)
            for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) check_roundtrip(formats[i], 2, 9, 3, dims[d]);
        for (size_t i = 0; i < NFORMATS; i++) {
            check_attention(formats[i], 140, 4, 2, 16);
            check_attention(formats[i], 37, 3, 3, 40);
            /* SmolLM2's shape (3 query heads a KV head, head_dim 64); more
             * query heads a KV head (5) than the decode kernels keep rows
             * (LB__KV_ROWS); head_dim past whole vectors (7: odd, 4-bit's
             * last high nibble; 71: a partial fifth vector) */
            check_attention(formats[i], 70, 9, 3, 64);
            check_attention(formats[i], 45, 10, 2, 7);
            check_attention(formats[i], 33, 2, 1, 71);
            check_masked_nonfinite(formats[i], 40, 37, 0, 4, 2, 16);
            check_masked_nonfinite(formats[i], 300, 250, 140, 3, 1, 64); /* bad in a second call's prefill */
            check_masked_nonfinite(formats[i], 40, 20, 0, 2, 1, 71);     /* a partial last V panel */
        }
    }
    lb_isa_set(lb_isa_detected());
    for (size_t i = 1; i < NFORMATS; i++) {
        check_kernel_codes(formats[i], 1.0f);
        check_kernel_codes(formats[i], 0.3f); /* a scale that rounds the products */
    }
    check_runner();
    return check_summary();
}

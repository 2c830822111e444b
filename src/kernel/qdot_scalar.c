/* The decode kernels' reference (qdot.h's canonical order, literally), the
 * helpers every instruction set shares (qdot_internal.h), and the choice of
 * kernel. */
#include <math.h>
#include <string.h>

#include "format/convert.h"
#include "kernel/qdot_internal.h"
#include "quant/qkernels.h"
#include "util/error.h"

#if !defined(__aarch64__)
const lb__qdot_fn lb__qdot_neon_fn = NULL; /* qdot_neon.c defines it on aarch64 */
#endif

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t chunk_of(const lb__qmat *m)
{
    return !m->plain && lb_format_get(m->element)->bits == 4 ? 32 : 16;
}

static size_t xstride_of(const lb__qmat *m)
{
    size_t c = chunk_of(m);
    return (m->cols + c - 1) / c * c;
}

static size_t blocks_of(const lb__qmat *m) { return m->plain ? 1 : (m->blocks ? m->blocks : 1); }

/* The sections, in order: xs, mul, zp, lut, wrow; each 64-byte aligned. */
size_t lb__qdot_scratch_bytes(const lb__qmat *m)
{
    size_t xs = xstride_of(m), nb = blocks_of(m);
    return align64(LB__QDOT_MAX_NX * xs * sizeof(float)) + 2 * align64(LB__QDOT_STAGE_ROWS * nb * sizeof(float)) +
           align64(256 * sizeof(float)) + align64(xs * sizeof(float));
}

/* How the kernels decode an element format; -1 for one they cannot (the
 * scale-only formats): lb__qdot_check refuses those before any kernel
 * runs. Every format is listed: a new one is a compile error here. */
static int kind_of(lb_format f)
{
    switch (f) {
    case LB_FMT_FP32: return LB__QK_F32;
    case LB_FMT_BF16: return LB__QK_BF16;
    case LB_FMT_FP16: return LB__QK_F16;
    case LB_FMT_FP8_E4M3: return LB__QK_E4M3;
    case LB_FMT_FP8_E5M2: return LB__QK_E5M2;
    case LB_FMT_FP8_E4M3FNUZ:
    case LB_FMT_FP8_E5M2FNUZ: return LB__QK_LUT8;
    case LB_FMT_INT8: return LB__QK_I8;
    case LB_FMT_UINT8: return LB__QK_U8;
    case LB_FMT_FP4_E2M1:
    case LB_FMT_INT4:
    case LB_FMT_UINT4: return LB__QK_NIB;
    case LB_FMT_FP6_E2M3:
    case LB_FMT_FP6_E3M2: return LB__QK_SIX;
    case LB_FMT_E8M0:
    case LB_FMT_UE4M3:
    case LB_FMT_COUNT: return -1;
    }
    return -1;
}

/* 1 for the formats lb__qdot_scale_value (and the vector kernels' scale decoders)
 * read; each listed. */
static int is_scale_format(lb_format f)
{
    switch (f) {
    case LB_FMT_FP32:
    case LB_FMT_BF16:
    case LB_FMT_FP16:
    case LB_FMT_E8M0:
    case LB_FMT_UE4M3: return 1;
    case LB_FMT_FP8_E4M3:
    case LB_FMT_FP8_E5M2:
    case LB_FMT_FP8_E4M3FNUZ:
    case LB_FMT_FP8_E5M2FNUZ:
    case LB_FMT_FP6_E2M3:
    case LB_FMT_FP6_E3M2:
    case LB_FMT_FP4_E2M1:
    case LB_FMT_INT8:
    case LB_FMT_UINT8:
    case LB_FMT_INT4:
    case LB_FMT_UINT4:
    case LB_FMT_COUNT: return 0;
    }
    return 0;
}

lb_status lb__qdot_check(const lb__qmat *m)
{
    if (m->ggml_block) /* gdot.h's kernels read those */
        return lb__fail(LB_ERR_UNSUPPORTED, "the matrix kernels of qdot.h do not read ggml blocks");
    const lb_format_info *e = lb_format_get(m->element);
    if (!e || kind_of(m->element) < 0)
        return lb__fail(LB_ERR_UNSUPPORTED, "the matrix kernels cannot decode %s elements",
                        e ? e->name : "unknown-format");
    if (m->plain && m->element != LB_FMT_FP32 && m->element != LB_FMT_BF16 && m->element != LB_FMT_FP16)
        return lb__fail(LB_ERR_UNSUPPORTED, "a plain matrix holds fp32, bf16 or fp16 codes, not %s", e->name);
    if (!m->plain && !is_scale_format(m->scale_format)) {
        const lb_format_info *sf = lb_format_get(m->scale_format);
        return lb__fail(LB_ERR_UNSUPPORTED, "the matrix kernels cannot decode %s scales",
                        sf ? sf->name : "unknown-format");
    }
    return LB_OK;
}

/* p->six_unit and six_units from the 32 magnitudes in p->lut: the
 * smallest power of two u that makes every magnitude an integer multiple
 * of it, if those integers fit in int8 (e2m3: u = 1/8, up to 60; e3m2's
 * 28 / (1/16) = 448 does not). */
static void six_units(lb__qdot_plan *p)
{
    float u = 1.0f;
    for (int tries = 0; tries < 8; tries++, u *= 0.5f) {
        int ok = 1;
        for (int c = 0; c < 32 && ok; c++) {
            float k = p->lut[c] / u; /* exact: u is a power of two, the magnitudes are normal or 0 */
            ok = k == floorf(k) && k <= 127.0f;
        }
        if (!ok) continue;
        for (int c = 0; c < 64; c++) {
            int k = (int)(p->lut[c & 31] / u);
            p->six_units[c] = (int8_t)(c & 32 ? -k : k);
        }
        p->six_unit = u;
        return;
    }
    p->six_unit = 0.0f;
}

void lb__qdot_plan_init(const lb__qmat *m, void *scratch, lb__qdot_plan *p)
{
    const lb_format_info *e = lb_format_get(m->element);
    size_t xs = xstride_of(m), nb = blocks_of(m);
    memset(p, 0, sizeof *p);
    p->e = e;
    p->cols = m->cols, p->blocks = nb;
    p->kind = (lb__qkind)kind_of(m->element); /* lb__qdot_check has refused the formats with none */
    p->chunk = chunk_of(m);
    p->nch = xs / p->chunk;
    p->xstride = xs;
    p->chunk_bytes = e->bits == 6 ? 12 : lb_format_bytes(m->element, p->chunk);
    p->plain = m->plain;
    p->affine = !m->plain && m->zero_points != NULL;
    p->cpb = m->plain || nb == 1 ? p->nch : m->block / p->chunk;
    uint8_t *s = scratch;
    p->xs = (float *)s, s += align64(LB__QDOT_MAX_NX * xs * sizeof(float));
    p->mul = (float *)s, s += align64(LB__QDOT_STAGE_ROWS * nb * sizeof(float));
    p->zp = (float *)s, s += align64(LB__QDOT_STAGE_ROWS * nb * sizeof(float));
    p->lut = (float *)s, s += align64(256 * sizeof(float));
    p->wrow = (float *)s;
    /* the tables the vector kernels look values up in: the reference
     * decoder's values of every code (6-bit: the 32 magnitudes) */
    size_t ncodes = p->kind == LB__QK_LUT8 ? 256 : p->kind == LB__QK_NIB ? 16 : p->kind == LB__QK_SIX ? 32 : 0;
    for (size_t c = 0; c < ncodes; c++) {
        uint32_t b = e->decode(e, (uint32_t)c);
        memcpy(&p->lut[c], &b, sizeof b);
    }
    if (p->kind == LB__QK_SIX) six_units(p);
}

int lb__qdot_blocks_fit(const lb__qmat *m, const lb__qdot_plan *p)
{
    return m->plain || blocks_of(m) == 1 || m->block % p->chunk == 0;
}

void lb__qdot_stage_x(const lb__qdot_plan *p, const float *x, size_t nx, size_t ldx)
{
    size_t cols = p->cols;
    for (size_t t = 0; t < nx; t++) {
        const float *xt = x + t * ldx;
        float *d = p->xs + t * p->xstride;
        if (p->chunk == 16) {
            memcpy(d, xt, cols * sizeof(float));
            for (size_t k = cols; k < p->xstride; k++) d[k] = 0.0f;
            continue;
        }
        /* 4-bit: a chunk's 16 even elements, then its 16 odd ones, as a
         * byte's low and high nibbles give them */
        for (size_t c = 0; c < p->nch; c++)
            for (size_t l = 0; l < 32; l++) {
                size_t k = c * 32 + l;
                d[c * 32 + (l & 1) * 16 + l / 2] = k < cols ? xt[k] : 0.0f;
            }
    }
}

static int zero_point_at(const lb_format_info *e, const uint8_t *zrow, size_t b)
{
    uint32_t c = lb__load_code(e, zrow, b);
    if (e->sign_bits && (c >> (e->bits - 1))) return (int)c - (1 << e->bits);
    return (int)c;
}

/* One scale code's exact value: the same number the format layer's
 * decoders give (every scale format decodes exactly into fp32), formed
 * from the bits without the generic codec's arithmetic, which cost more
 * than the dot products for small blocks. NaN codes (never produced by
 * lb_quantize) give a NaN. */
float lb__qdot_scale_value(lb_format f, const uint8_t *codes, size_t i)
{
    uint32_t bits = 0x7FC00000u;
    switch (f) {
    case LB_FMT_FP32: memcpy(&bits, codes + 4 * i, 4); break;
    case LB_FMT_BF16: bits = (uint32_t)(codes[2 * i] | codes[2 * i + 1] << 8) << 16; break;
    case LB_FMT_FP16: {
        uint32_t h = (uint32_t)(codes[2 * i] | codes[2 * i + 1] << 8), sign = (h & 0x8000u) << 16;
        uint32_t e = (h >> 10) & 0x1F, man = h & 0x3FF;
        if (e == 0) { /* zero or subnormal: man * 2^-24, exact */
            float v = (float)man * 0x1p-24f;
            return sign ? -v : v;
        }
        bits = sign | (e == 31 ? 0x7F800000u | man << 13 : (e + 112) << 23 | man << 13);
        break;
    }
    case LB_FMT_E8M0: bits = codes[i] == 0xFF ? 0x7FC00000u : codes[i] ? (uint32_t)codes[i] << 23 : 0x00400000u; break;
    case LB_FMT_UE4M3: { /* E4M3 without the sign; 0x7F and every code with bit 7 set are NaN */
        uint32_t c = codes[i], e = c >> 3, man = c & 7;
        if (c >= 0x7F) bits = 0x7FC00000u;
        else if (e == 0) return (float)man * 0x1p-9f;
        else bits = (e + 120) << 23 | man << 20;
        break;
    }
    case LB_FMT_FP8_E4M3: /* not scale formats: lb__qdot_check refuses them; NaN, never a wrong number */
    case LB_FMT_FP8_E5M2:
    case LB_FMT_FP8_E4M3FNUZ:
    case LB_FMT_FP8_E5M2FNUZ:
    case LB_FMT_FP6_E2M3:
    case LB_FMT_FP6_E3M2:
    case LB_FMT_FP4_E2M1:
    case LB_FMT_INT8:
    case LB_FMT_UINT8:
    case LB_FMT_INT4:
    case LB_FMT_UINT4:
    case LB_FMT_COUNT: bits = 0x7FC00000u; break;
    }
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

void lb__qdot_stage_scales(const lb__qmat *m, const lb__qdot_plan *p, lb_isa isa, size_t r, size_t n, size_t at)
{
    if (m->plain) return;
    size_t nb = p->blocks;
    float *mul = p->mul + at * nb, *zp = p->zp + at * nb;
    /* lb__scale_divisors multiplies every decoded scale, by 1 too */
    float sm = m->scale_mul;
    if (m->one_scale) {
        mul[0] = lb__qdot_scale_value(m->scale_format, m->scales, 0) * sm;  /* a product by 1 is exact */
        for (size_t i = 1; i < n; i++) mul[i * nb] = mul[0];
    } else if (m->block_rows > 1) { /* 2-D blocks: each row's scales are its band's row */
        for (size_t i = 0; i < n; i++)
            for (size_t b = 0; b < nb; b++)
                mul[i * nb + b] = lb__qdot_scale_value(m->scale_format, m->scales, lb__qmat_scale_row(m, r + i) * nb + b) * sm;
    } else {
        const uint8_t *codes = m->scales + lb_format_bytes(m->scale_format, r * nb);
        /* whole vectors through the format layer's decoder of isa (the same
         * values), the rest one by one: its scalar tail is the slow part */
        size_t total = n * nb, vec = isa == LB_ISA_SCALAR ? 0 : total / 16 * 16;
        if (vec) lb__decode_kernel(isa)(lb_format_get(m->scale_format), codes, vec, mul);
        for (size_t i = vec; i < total; i++) mul[i] = lb__qdot_scale_value(m->scale_format, codes, i);
        for (size_t i = 0; i < total; i++) mul[i] *= sm;
    }
    if (!p->affine) return;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *zrow = m->zero_points + (m->one_scale ? 0 : r + i) * m->zp_row_bytes;
        for (size_t b = 0; b < nb; b++) zp[i * nb + b] = (float)zero_point_at(p->e, zrow, b);
    }
}

/* Bytes holding the first n elements of a packed row. */
static size_t bytes_for(const lb_format_info *e, size_t n)
{
    if (e->bits == 6) return (n * 6 + 7) / 8;
    return lb_format_bytes(e->id, n);
}

void lb__qdot_tail_chunk(const lb__qmat *m, const lb__qdot_plan *p, const uint8_t *row, size_t c, uint8_t *buf)
{
    memset(buf, 0, 64);
    size_t first = c * p->chunk, n = m->cols - first, start = c * p->chunk_bytes;
    if (n > p->chunk) n = p->chunk;
    size_t len = bytes_for(p->e, n);
    if (start + len > m->row_bytes) len = m->row_bytes - start; /* defensive: a short row */
    memcpy(buf, row + start, len);
    /* the rest of the last byte belongs to padding: code 0 */
    if (p->e->bits == 4 && (n & 1)) buf[n / 2] &= 0x0F;
    if (p->e->bits == 6 && (n * 6) % 8) buf[n * 6 / 8] &= (uint8_t)((1u << (n * 6 % 8)) - 1);
}

size_t lb__qdot_inplace_chunks(const lb__qmat *m, const lb__qdot_plan *p, size_t window)
{
    size_t whole = m->cols / p->chunk;
    if (m->row_bytes < window) return 0;
    size_t n = (m->row_bytes - window) / p->chunk_bytes + 1;
    return n < whole ? n : whole;
}

/* ----- the reference ----- */

/* Element k's code (k < cols). */
static uint32_t code_at(const lb_format_info *e, const uint8_t *row, size_t k)
{
    if (e->bits != 6) return lb__load_code(e, row, k);
    size_t bit = k * 6, byte = bit / 8, shift = bit % 8; /* as lb__unpack6 */
    uint32_t v = row[byte] >> shift;
    if (shift > 2) v |= (uint32_t)row[byte + 1] << (8 - shift);
    return v & 0x3F;
}

static float decode_code(const lb_format_info *f, uint32_t code)
{
    uint32_t b = f->decode(f, code);
    float v;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* Row r's values w[0 .. xstride): (v - zp) * mul with the block's decoded
 * scale and zero point, as lb_dequantize computes them; the padding past
 * cols is code 0 with the last block's scale and zero point. */
static void row_values(const lb__qmat *m, const lb__qdot_plan *p, size_t r, float *w)
{
    const lb_format_info *e = p->e, *sf = m->plain ? NULL : lb_format_get(m->scale_format);
    const uint8_t *row = m->data + r * m->row_bytes;
    size_t nb = p->blocks;
    if (!m->plain) {
        /* the scalar codecs, then the product by scale_mul (lb__scale_divisors) */
        for (size_t b = 0; b < nb; b++) {
            uint32_t c = lb__load_code(sf, m->scales, m->one_scale ? 0 : lb__qmat_scale_row(m, r) * nb + b);
            p->mul[b] = decode_code(sf, c) * m->scale_mul;
            p->zp[b] = 0.0f;
        }
        if (p->affine) {
            const uint8_t *zrow = m->zero_points + (m->one_scale ? 0 : r) * m->zp_row_bytes;
            for (size_t b = 0; b < nb; b++) p->zp[b] = (float)zero_point_at(e, zrow, b);
        }
    }
    for (size_t k = 0; k < p->xstride; k++) {
        float v = decode_code(e, k < m->cols ? code_at(e, row, k) : 0);
        if (m->plain) {
            w[k] = v;
            continue;
        }
        size_t b = nb == 1 ? 0 : k / m->block;
        if (b >= nb) b = nb - 1;
        w[k] = (v - p->zp[b]) * p->mul[b]; /* block_sub_mul's expression */
    }
}

void lb__qdot_scalar(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                     size_t ldy, void *scratch)
{
    lb__qdot_plan p;
    lb__qdot_plan_init(m, scratch, &p);
    for (size_t r = r0; r < r1; r++) {
        row_values(m, &p, r, p.wrow);
        const float *w = p.wrow;
        for (size_t t = 0; t < nx; t++) {
            const float *xt = x + t * ldx;
            float s[16] = {0};
            for (size_t e0 = 0; e0 < p.xstride; e0 += p.chunk) {
                if (p.chunk == 16) {
                    for (size_t l = 0; l < 16; l++) {
                        size_t k = e0 + l;
                        s[l] = fmaf(k < m->cols ? xt[k] : 0.0f, w[k], s[l]);
                    }
                } else {
                    for (size_t l = 0; l < 16; l++) {
                        size_t k = e0 + 2 * l;
                        s[l] = fmaf(k < m->cols ? xt[k] : 0.0f, w[k], s[l]);
                        s[l] = fmaf(k + 1 < m->cols ? xt[k + 1] : 0.0f, w[k + 1], s[l]);
                    }
                }
            }
            y[t * ldy + r] = lb__sum16f(s);
        }
    }
}

lb__qdot_fn lb__qdot_get(lb_isa isa)
{
    /* by name, not by >=: NEON (3) is no x86 level above AVX-512 (2) */
    if (isa == LB_ISA_NEON) return lb__qdot_neon_fn ? lb__qdot_neon_fn : lb__qdot_scalar;
    if (isa == LB_ISA_AVX512 && lb__qdot_avx512_fn) return lb__qdot_avx512_fn;
    if ((isa == LB_ISA_AVX512 || isa == LB_ISA_AVX2) && lb__qdot_avx2_fn) return lb__qdot_avx2_fn;
    return lb__qdot_scalar;
}

/* The int8-activation path on ggml's blocks read in place (Q4_K, Q5_K,
 * Q6_K, IQ4_XS, IQ4_NL, Q4_0 and Q5_0): which types,
 * the activations staged for them, and the scalar reference (qdot8.h's
 * definition read literally). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/ggml_blocks.h"
#include "kernel/qdot8.h"
#include "kernel/w8a8_kernels.h"
#include "quant/qkernels.h"
#include "util/error.h"

int lb__qdot8k_cols_ok(const lb__qmat *m)
{
    if (m->cols % 128 == 0) return 1;
    /* the kernels of blocks of 32 (IQ4_NL, Q4_0; Q5_0): a row's last group of four may end early */
    return lb__qdot8k_kernel(m->ggml) >= 4 && m->cols % 32 == 0;
}

/* Every type is listed: a new one is a compile error here. */
int lb__qdot8k_type(lb_dtype t)
{
    switch (t) {
    case LB_DT_Q4_K:
    case LB_DT_Q5_K: return LB__QDOT8K_MINS;
    case LB_DT_Q6_K: return LB__QDOT8K_OFFSET;
    case LB_DT_IQ4_NL:
    case LB_DT_IQ4_XS:
    case LB_DT_Q4_0:                          /* IQ4_NL's layout, values n - 8 */
    case LB_DT_Q5_0: return LB__QDOT8K_TABLE; /* and a fifth bit: n - 16 + 16 b */
    case LB_DT_F32:
    case LB_DT_F16:
    case LB_DT_BF16:
    case LB_DT_F64:
    case LB_DT_F8_E4M3:
    case LB_DT_F8_E5M2:
    case LB_DT_I8:
    case LB_DT_I16:
    case LB_DT_I32:
    case LB_DT_I64:
    case LB_DT_U8:
    case LB_DT_BOOL:
    case LB_DT_Q8_0: /* these two are lowbit formats: copied (qmat_repack.c) */
    case LB_DT_MXFP4:
    case LB_DT_Q4_1: /* not yet: a min per block of 32 */
    case LB_DT_Q5_1:
    case LB_DT_Q2_K: /* not yet: sub-blocks of 16 */
    case LB_DT_Q3_K:
    case LB_DT_NVFP4:
    case LB_DT_QUANTIZED:
    case LB_DT_COUNT: return 0;
    }
    return 0;
}

const int8_t *lb__qdot8k_values(lb_dtype t)
{
    static const int8_t q4_0[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
    static const int8_t q5_0[16] = {-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1};
    return t == LB_DT_Q4_0 ? q4_0 : t == LB_DT_Q5_0 ? q5_0 : lb__kvalues_iq4nl;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

lb_status lb__qdot8k_stage(const lb__qmat *m, const float *x, size_t n, const lb__qdot8_set *set, lb__act8 *a)
{
    const size_t cols = m->cols, nblk = cols / LB__ACT8_BLOCK;
    const int kind = lb__qdot8k_type(m->ggml), sums = kind != LB__QDOT8K_MINS;
    /* what each lane's sum starts at, times -S4: Q6_K's offset, or the set's for signed bytes (the IQ4 values) */
    const int32_t off = kind == LB__QDOT8K_OFFSET ? 32 : set->offset(LB_FMT_INT8);
    memset(a, 0, sizeof *a);
    a->n = n;
    a->groups = (cols + 127) / 128; /* the last ends early only in rows of blocks of 32 (lb__qdot8k_cols_ok) */
    a->stride = a->groups * 128;
    a->lanes = kind == LB__QDOT8K_TABLE ? a->groups * 16 : cols / 4; /* a table lane: 4 bytes, both nibbles */
    size_t qb = align64(n * a->stride), lb = align64(n * a->lanes * sizeof(float));
    size_t eb = align64(n * (sums ? a->lanes : nblk) * sizeof(float));
    a->buf = aligned_alloc(64, qb + lb + eb + 64);
    if (!a->buf) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu staged activations", n * a->stride);
    if (a->stride != cols) memset(a->buf, 0, qb + lb + eb); /* past the row: codes, scales and sums 0 */
    uint8_t *p = a->buf;
    a->q = (int8_t *)p, p += qb;
    a->d = (float *)p, p += lb;
    if (sums) a->cxs = (int32_t *)p;
    else a->e = (float *)p;
    for (size_t t = 0; t < n; t++)
        for (size_t j = 0; j < nblk; j++) {
            int8_t c[LB__ACT8_BLOCK];
            float d = set->quant->quant_i8(x + t * cols + j * LB__ACT8_BLOCK, LB__ACT8_BLOCK, 0.0f, c);
            int8_t *q = a->q + t * a->stride;
            float *dl = a->d + t * a->lanes;
            int32_t *cx = sums ? a->cxs + t * a->lanes : NULL;
            const size_t g = j / 4, k = j % 4;
            switch (kind) {
            case LB__QDOT8K_MINS: { /* block j is chunk k / 2, nibble k % 2 of group g */
                int32_t sum = 0;
                for (size_t i = 0; i < LB__ACT8_BLOCK; i++) sum += c[i];
                memcpy(q + g * 128 + (k % 2) * 64 + (k / 2) * 32, c, LB__ACT8_BLOCK);
                for (size_t l = 0; l < 8; l++) dl[(2 * g + k % 2) * 16 + 8 * (k / 2) + l] = d;
                a->e[t * nblk + j] = d * (float)sum;
                break;
            }
            case LB__QDOT8K_OFFSET: /* in order */
                memcpy(q + j * LB__ACT8_BLOCK, c, LB__ACT8_BLOCK);
                for (size_t l = 0; l < 8; l++) {
                    dl[8 * j + l] = d;
                    cx[8 * j + l] = -off * (c[4 * l] + c[4 * l + 1] + c[4 * l + 2] + c[4 * l + 3]);
                }
                break;
            case LB__QDOT8K_TABLE: /* elements 16 nb .. of block k at 64 nb + 16 k of group g */
                memcpy(q + g * 128 + 16 * k, c, 16);
                memcpy(q + g * 128 + 64 + 16 * k, c + 16, 16);
                for (size_t l = 0; l < 4; l++) { /* bytes 4l .. 4l + 3: elements 4l .. and 16 + 4l .. */
                    const int8_t *c4 = c + 4 * l, *h4 = c + 16 + 4 * l;
                    dl[g * 16 + 4 * k + l] = d;
                    cx[g * 16 + 4 * k + l] = -off * (c4[0] + c4[1] + c4[2] + c4[3] + h4[0] + h4[1] + h4[2] + h4[3]);
                }
                break;
            }
        }
    return LB_OK;
}

/* Code u of element k (0 .. 255) of super-block b. */
static int k_code(lb_dtype t, const uint8_t *b, size_t k)
{
    size_t c = k / 64, n = k / 32 % 2, l = k % 32;
    if (t == LB_DT_Q4_K) {
        const lb__block_q4_k *x = (const lb__block_q4_k *)b;
        return (x->qs[32 * c + l] >> (4 * n)) & 15;
    }
    const lb__block_q5_k *x = (const lb__block_q5_k *)b;
    return ((x->qs[32 * c + l] >> (4 * n)) & 15) | ((x->qh[l] >> (2 * c + n)) & 1) << 4;
}

/* Q6_K: code u (0 .. 63) of element e of super-block b. */
static int q6_code(const uint8_t *b, size_t e)
{
    const lb__block_q6_k *x = (const lb__block_q6_k *)b;
    size_t h = e / 128, r = e % 128;
    return ((x->ql[64 * h + r % 64] >> (4 * (r / 64))) & 15) | ((x->qh[32 * h + r % 32] >> (2 * (r / 32))) & 3) << 4;
}

static void rows_scalar_q6_k(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                             size_t ldy)
{
    const size_t nsb = m->cols / 256;
    for (size_t r = r0; r < r1; r++)
        for (size_t t = 0; t < nx; t++) {
            const int8_t *q = a->q + (t0 + t) * a->stride;
            const float *dl = a->d + (t0 + t) * a->lanes;
            float p[16] = {0};
            for (size_t s = 0; s < nsb; s++) {
                const uint8_t *b = m->data + r * m->row_bytes + s * m->ggml_block_bytes;
                const lb__block_q6_k *x = (const lb__block_q6_k *)b;
                const float d = lb__fp16_to_f32(lb__le16(x->d));
                for (size_t h = 0; h < 2; h++)
                    for (size_t n = 0; n < 2; n++)
                        for (size_t l = 0; l < 16; l++) {
                            size_t e = 128 * h + 64 * n + 4 * l; /* the lane's first element */
                            int32_t sum = 0;
                            for (size_t i = 0; i < 4; i++) sum += q[256 * s + e + i] * (q6_code(b, e + i) - 32);
                            float dj = dl[(256 * s + e) / 4];
                            p[l] = fmaf((float)sum, dj * (d * (float)x->scales[e / 16]), p[l]);
                        }
            }
            y[t * ldy + r] = lb__sum16f(p);
        }
}

/* IQ4_XS / IQ4_NL / Q4_0 / Q5_0: block j's scale, its 16 code bytes
 * (row r) and its fifth bits (Q5_0's qh; else 0). */
static float iq4_block(const lb__qmat *m, size_t r, size_t j, const uint8_t **qs, uint32_t *qh)
{
    const uint8_t *row = m->data + r * m->row_bytes;
    *qh = 0;
    if (m->ggml == LB_DT_Q5_0) {
        const lb__block_q5_0 *b = (const lb__block_q5_0 *)row + j;
        *qs = b->qs;
        *qh = lb__le32(b->qh);
        return lb__fp16_to_f32(lb__le16(b->d));
    }
    if (m->ggml != LB_DT_IQ4_XS) { /* IQ4_NL and Q4_0: the same block layout */
        const lb__block_iq4_nl *b = (const lb__block_iq4_nl *)row + j;
        *qs = b->qs;
        return lb__fp16_to_f32(lb__le16(b->d));
    }
    const lb__block_iq4_xs *b = (const lb__block_iq4_xs *)row + j / 8;
    *qs = b->qs + 16 * (j % 8);
    return lb__fp16_to_f32(lb__le16(b->d)) * (float)(lb__iq4_xs_scale_code(b, (int)(j % 8)) - 32);
}

static void rows_scalar_iq4(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                            size_t ldy)
{
    const int8_t *values = lb__qdot8k_values(m->ggml);
    for (size_t r = r0; r < r1; r++)
        for (size_t t = 0; t < nx; t++) {
            const int8_t *q = a->q + (t0 + t) * a->stride;
            const float *dl = a->d + (t0 + t) * a->lanes;
            float p[16] = {0};
            for (size_t g = 0; g < a->groups; g++) {
                const uint8_t *qs4[4];
                float sc4[4];
                uint32_t qh4[4];
                const size_t nk = m->cols / 32 - 4 * g < 4 ? m->cols / 32 - 4 * g : 4; /* blocks in the group */
                for (size_t k = 0; k < nk; k++) sc4[k] = iq4_block(m, r, 4 * g + k, &qs4[k], &qh4[k]);
                for (size_t l = 0; l < 4 * nk; l++) { /* lanes past the row would add fma(0, 0, p) = p */
                    /* block 4g + l / 4; bytes 4 (l % 4) .. of its 16, both nibbles */
                    const uint8_t *qs = qs4[l / 4];
                    const float sc = sc4[l / 4];
                    int32_t sum = 0;
                    for (size_t n = 0; n < 2; n++)
                        for (size_t i = 0; i < 4; i++) {
                            size_t e = 16 * n + 4 * (l % 4) + i; /* element of block j */
                            int v = values[(qs[e % 16] >> (4 * n)) & 15] + 16 * (int)((qh4[l / 4] >> e) & 1);
                            sum += q[g * 128 + 64 * n + 16 * (l / 4) + 4 * (l % 4) + i] * v;
                        }
                    p[l] = fmaf((float)sum, dl[g * 16 + l] * sc, p[l]);
                }
            }
            y[t * ldy + r] = lb__sum16f(p);
        }
}

void lb__qdot8k_rows_scalar(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                            size_t ldy, void *scratch)
{
    (void)scratch;
    if (lb__qdot8k_type(m->ggml) == LB__QDOT8K_OFFSET) {
        rows_scalar_q6_k(m, a, t0, nx, r0, r1, y, ldy);
        return;
    }
    if (lb__qdot8k_type(m->ggml) == LB__QDOT8K_TABLE) {
        rows_scalar_iq4(m, a, t0, nx, r0, r1, y, ldy);
        return;
    }
    const size_t nsb = m->cols / 256, nblk = m->cols / LB__ACT8_BLOCK;
    for (size_t r = r0; r < r1; r++)
        for (size_t t = 0; t < nx; t++) {
            const int8_t *q = a->q + (t0 + t) * a->stride;
            const float *dl = a->d + (t0 + t) * a->lanes, *e = a->e + (t0 + t) * nblk;
            float p[16] = {0}, mp[8] = {0};
            for (size_t s = 0; s < nsb; s++) {
                const uint8_t *b = m->data + r * m->row_bytes + s * m->ggml_block_bytes;
                const float d = lb__fp16_to_f32(lb__le16(b)), dmin = lb__fp16_to_f32(lb__le16(b + 2));
                uint64_t sc, mn;
                lb__qdot8k_scale_min(b + 4, &sc, &mn);
                for (size_t h = 0; h < 2; h++)
                    for (size_t n = 0; n < 2; n++)
                        for (size_t l = 0; l < 16; l++) {
                            size_t ch = 2 * h + l / 8, j = 2 * ch + n; /* chunk, sub-block */
                            int32_t sum = 0;
                            for (size_t i = 0; i < 4; i++) {
                                size_t k = 64 * ch + 32 * n + (4 * l + i) % 32; /* byte 4l + i of the half, nibble n */
                                size_t g = s * 2 + h;
                                sum += q[g * 128 + n * 64 + (ch % 2) * 32 + (4 * l + i) % 32] *
                                       k_code(m->ggml, b, k);
                            }
                            float dj = dl[(2 * (s * 2 + h) + n) * 16 + l];
                            p[l] = fmaf((float)sum, dj * (d * (float)((sc >> (8 * j)) & 63)), p[l]);
                        }
                for (size_t j = 0; j < 8; j++) mp[j] = fmaf(e[8 * s + j], dmin * (float)((mn >> (8 * j)) & 63), mp[j]);
            }
            y[t * ldy + r] = lb__sum16f(p) - lb__qdot8k_sum8(mp);
        }
}

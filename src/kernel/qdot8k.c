/* The int8-activation path on ggml's K-quants with mins (Q4_K, Q5_K), read
 * in place: which types, the activations staged for them, and the scalar
 * reference (qdot8.h's definition read literally). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/ggml_blocks.h"
#include "kernel/qdot8.h"
#include "kernel/w8a8_kernels.h"
#include "quant/qkernels.h"
#include "util/error.h"

/* Every type is listed: a new one is a compile error here. */
int lb__qdot8k_type(lb_dtype t)
{
    switch (t) {
    case LB_DT_Q4_K:
    case LB_DT_Q5_K: return LB__QDOT8K_MINS;
    case LB_DT_Q6_K: return LB__QDOT8K_OFFSET;
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
    case LB_DT_Q4_0: /* these four are lowbit formats: copied (qmat_repack.c) */
    case LB_DT_Q8_0:
    case LB_DT_Q5_0:
    case LB_DT_MXFP4:
    case LB_DT_Q4_1: /* not yet: a min per block of 32 */
    case LB_DT_Q5_1:
    case LB_DT_Q2_K: /* not yet: sub-blocks of 16 */
    case LB_DT_Q3_K:
    case LB_DT_NVFP4:
    case LB_DT_IQ4_NL: /* not yet: a signed table of 16 values */
    case LB_DT_IQ4_XS:
    case LB_DT_QUANTIZED:
    case LB_DT_COUNT: return 0;
    }
    return 0;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

lb_status lb__qdot8k_stage(const lb__qmat *m, const float *x, size_t n, const lb__qdot8_set *set, lb__act8 *a)
{
    const size_t cols = m->cols, nblk = cols / LB__ACT8_BLOCK;
    memset(a, 0, sizeof *a);
    a->n = n;
    a->groups = cols / 128;
    a->stride = cols;
    a->lanes = cols / 4;
    const int offset = lb__qdot8k_type(m->ggml) == LB__QDOT8K_OFFSET;
    size_t qb = align64(n * cols), lb = align64(n * a->lanes * sizeof(float));
    size_t eb = align64(n * (offset ? a->lanes : nblk) * sizeof(float));
    a->buf = aligned_alloc(64, qb + lb + eb + 64);
    if (!a->buf) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu staged activations", n * cols);
    uint8_t *p = a->buf;
    a->q = (int8_t *)p, p += qb;
    a->d = (float *)p, p += lb;
    a->e = (float *)p;
    if (offset) { /* no e: the lanes' -32 * S4 instead */
        a->cxs = (int32_t *)a->e;
        a->e = NULL;
    }
    for (size_t t = 0; t < n; t++)
        for (size_t j = 0; j < nblk; j++) {
            int8_t c[LB__ACT8_BLOCK];
            float d = set->quant->quant_i8(x + t * cols + j * LB__ACT8_BLOCK, LB__ACT8_BLOCK, 0.0f, c);
            int32_t sum = 0;
            for (size_t k = 0; k < LB__ACT8_BLOCK; k++) sum += c[k];
            if (a->cxs) { /* Q6_K: in order */
                memcpy(a->q + t * cols + j * LB__ACT8_BLOCK, c, LB__ACT8_BLOCK);
                for (size_t l = 0; l < 8; l++) {
                    a->d[t * a->lanes + 8 * j + l] = d;
                    a->cxs[t * a->lanes + 8 * j + l] = -32 * (c[4 * l] + c[4 * l + 1] + c[4 * l + 2] + c[4 * l + 3]);
                }
                continue;
            }
            /* block j is chunk c = j / 2 % 2, nibble h = j % 2 of group g = j / 4 */
            size_t g = j / 4, ch = j / 2 % 2, nb = j % 2;
            memcpy(a->q + t * cols + g * 128 + nb * 64 + ch * 32, c, LB__ACT8_BLOCK);
            float *dl = a->d + t * a->lanes + (2 * g + nb) * 16 + 8 * ch;
            for (size_t l = 0; l < 8; l++) dl[l] = d;
            a->e[t * nblk + j] = d * (float)sum;
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

void lb__qdot8k_rows_scalar(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                            size_t ldy, void *scratch)
{
    (void)scratch;
    if (lb__qdot8k_type(m->ggml) == LB__QDOT8K_OFFSET) {
        rows_scalar_q6_k(m, a, t0, nx, r0, r1, y, ldy);
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

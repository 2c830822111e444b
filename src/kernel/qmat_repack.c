/* ggml blocks whose values are lowbit formats exactly, copied into
 * lowbit's layout so the int8-activation kernels (qdot8.h) take them:
 *   Q8_0  q * d                  -> int8:g32, fp16 scale
 *   MXFP4 kvalues[n] * 2^(e-128) -> fp4_e2m1 with e8m0 scale (kvalues[n] / 2
 *                                   is E2M1 code n's value; 2^(e-127) is e8m0's)
 * ggml stores a block's scale beside its codes and elements j and j + 16
 * in one byte's low and high nibbles; lowbit keeps the scales apart and
 * elements 2i, 2i + 1 in a byte. Same bytes (34, 17 per 32 weights), same
 * values to the bit. Q4_K, Q5_K, Q6_K, IQ4, Q4_0 and Q5_0 are read in
 * place (qdot8k.c): the runner copies only what those refuse. */
#include <stdlib.h>
#include <string.h>

#include "io/ggml_blocks.h"
#include "kernel/qmat.h"
#include "util/error.h"

/* The lowbit spec the type's values are, or NULL. Every type is listed
 * (a new one is a compile error here). */
static const char *spec_of(lb_dtype t)
{
    switch (t) {
    case LB_DT_Q8_0: return "int8:g32:scale=fp16";
    case LB_DT_MXFP4: return "mxfp4";
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
    case LB_DT_Q6_K: /* read in place (qdot8k.c): its copy took 10 bits a weight instead of 6.56 */
    case LB_DT_Q4_0: /* read in place (qdot8k.c), as IQ4_NL */
    case LB_DT_Q5_0: /* read in place too (its int8 copy took 8.5 bits a weight instead of 5.5) */
    case LB_DT_Q4_1: /* a min beside the scale: not a zero point in codes */
    case LB_DT_Q5_1:
    case LB_DT_Q2_K:
    case LB_DT_Q3_K:
    case LB_DT_Q4_K:
    case LB_DT_Q5_K:
    case LB_DT_NVFP4:
    case LB_DT_IQ4_NL:
    case LB_DT_IQ4_XS:
    case LB_DT_QUANTIZED:
    case LB_DT_COUNT: return NULL;
    }
    return NULL;
}

lb_status lb__qmat_repack_ggml(const lb__qmat *g, lb__qmat *out)
{
    memset(out, 0, sizeof *out);
    const char *spec = g->ggml_block ? spec_of(g->ggml) : NULL;
    if (!spec) return LB_ERR_UNSUPPORTED;
    if (g->ggml_block != 32) return LB_ERR_UNSUPPORTED;
    const int nib = g->ggml == LB_DT_MXFP4, sbytes = g->ggml == LB_DT_MXFP4 ? 1 : 2;
    const size_t nb = g->cols / 32, row_bytes = nib ? g->cols / 2 : g->cols;
    const size_t data = g->rows * row_bytes, scales = g->rows * nb * (size_t)sbytes;
    uint8_t *buf = malloc(data + scales + 1);
    if (!buf) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu bytes to repack a %zu x %zu matrix", data + scales,
                              g->rows, g->cols);
    uint8_t *codes = buf, *sc = buf + data;
    for (size_t r = 0; r < g->rows; r++)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = g->data + r * g->row_bytes + b * g->ggml_block_bytes;
            uint8_t *dst = codes + r * row_bytes + b * (nib ? 16 : 32);
            if (g->ggml == LB_DT_MXFP4 && blk[0] == 0xFF) { /* a NaN scale: ggml and e8m0 read it differently */
                free(buf);
                return LB_ERR_UNSUPPORTED;
            }
            memcpy(sc + (r * nb + b) * (size_t)sbytes, blk, (size_t)sbytes);
            const uint8_t *qs = blk + sbytes;
            if (!nib) {
                memcpy(dst, qs, 32);
                continue;
            }
            for (size_t i = 0; i < 16; i++) {
                size_t k0 = 2 * i, k1 = 2 * i + 1; /* element k: low nibble of qs[k] below 16, else high of qs[k - 16] */
                uint8_t lo = (uint8_t)(k0 < 16 ? qs[k0] & 15 : qs[k0 - 16] >> 4);
                uint8_t hi = (uint8_t)(k1 < 16 ? qs[k1] & 15 : qs[k1 - 16] >> 4);
                dst[i] = (uint8_t)(lo | hi << 4);
            }
        }
    lb_qspec s;
    lb_qspec_parse(spec, &s);
    out->rows = g->rows, out->cols = g->cols;
    out->element = s.element, out->spec = s;
    out->block = 32, out->blocks = nb, out->block_rows = 1;
    out->data = codes, out->row_bytes = row_bytes;
    out->scale_format = s.scale_format, out->scales = sc;
    out->scale_mul = 1.0f;
    out->bytes = data + scales;
    out->owned_buf = buf;
    return LB_OK;
}

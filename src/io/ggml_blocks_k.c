/* The K-quants (256-element super-blocks): dequantize loops for Q2_K,
 * Q3_K, Q4_K, Q5_K and Q6_K. Layouts in ggml_blocks.h. Each super-block's
 * sub-block scales are computed once (fp16 scale times the small integer
 * scale, in fp32, as gguf does) before the element loops. */
#include "io/ggml_blocks.h"

void lb__dequantize_q2_k(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_q2_k *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK_K) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d)), dmin = lb__fp16_to_f32(lb__le16(x[i].dmin));
        float dl[16], ml[16];
        for (int k = 0; k < 16; k++) {
            dl[k] = d * (float)(x[i].scales[k] & 0x0F);
            ml[k] = dmin * (float)(x[i].scales[k] >> 4);
        }
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 4; s++) {
                const uint8_t *qs = x[i].qs + 32 * h;
                float *y = dst + 128 * h + 32 * s;
                const int sub = 8 * h + 2 * s; /* y[0..15] and y[16..31] are two sub-blocks */
                for (int l = 0; l < 16; l++) y[l] = dl[sub] * (float)((qs[l] >> (2 * s)) & 3) - ml[sub];
                for (int l = 16; l < 32; l++) y[l] = dl[sub + 1] * (float)((qs[l] >> (2 * s)) & 3) - ml[sub + 1];
            }
    }
}

void lb__dequantize_q3_k(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_q3_k *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK_K) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d));
        int sc[16];
        float dl[16];
        lb__q3_k_scales(x[i].scales, sc);
        for (int k = 0; k < 16; k++) dl[k] = d * (float)sc[k];
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 4; s++) {
                const uint8_t *qs = x[i].qs + 32 * h, *hm = x[i].hmask;
                const int b = 4 * h + s, sub = 8 * h + 2 * s;
                float *y = dst + 128 * h + 32 * s;
                for (int half = 0; half < 2; half++) { /* 16 elements share a scale */
                    const float dh = dl[sub + half];
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        int low = (qs[l] >> (2 * s)) & 3;
                        int off = (((hm[l] >> b) & 1) ^ 1) << 2; /* 4 when the hmask bit is clear */
                        y[l] = dh * (float)(low - off);
                    }
                }
            }
    }
}

/* Q4_K/Q5_K's eight 6-bit scales and mins from their 12 packed bytes. */
static void k_scale_min(const uint8_t *s, int sc[8], int mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | (s[j] >> 6) << 4;
        mn[j + 4] = (s[j + 8] >> 4) | (s[j + 4] >> 6) << 4;
    }
}

void lb__dequantize_q4_k(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_q4_k *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK_K) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d)), dmin = lb__fp16_to_f32(lb__le16(x[i].dmin));
        int sc[8], mn[8];
        k_scale_min(x[i].scales, sc, mn);
        for (int c = 0; c < 4; c++) {
            const uint8_t *qs = x[i].qs + 32 * c;
            const float d0 = d * (float)sc[2 * c], m0 = dmin * (float)mn[2 * c];
            const float d1 = d * (float)sc[2 * c + 1], m1 = dmin * (float)mn[2 * c + 1];
            float *y = dst + 64 * c;
            for (int l = 0; l < 32; l++) {
                y[l] = d0 * (float)(qs[l] & 0x0F) - m0;
                y[l + 32] = d1 * (float)(qs[l] >> 4) - m1;
            }
        }
    }
}

void lb__dequantize_q5_k(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_q5_k *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK_K) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d)), dmin = lb__fp16_to_f32(lb__le16(x[i].dmin));
        int sc[8], mn[8];
        k_scale_min(x[i].scales, sc, mn);
        const uint8_t *qh = x[i].qh;
        for (int c = 0; c < 4; c++) {
            const uint8_t *qs = x[i].qs + 32 * c;
            const int j0 = 2 * c, j1 = 2 * c + 1;
            const float d0 = d * (float)sc[j0], m0 = dmin * (float)mn[j0];
            const float d1 = d * (float)sc[j1], m1 = dmin * (float)mn[j1];
            float *y = dst + 64 * c;
            for (int l = 0; l < 32; l++) {
                int q0 = (qs[l] & 0x0F) | ((qh[l] >> j0) & 1) << 4;
                int q1 = (qs[l] >> 4) | ((qh[l] >> j1) & 1) << 4;
                y[l] = d0 * (float)q0 - m0;
                y[l + 32] = d1 * (float)q1 - m1;
            }
        }
    }
}

void lb__dequantize_q6_k(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_q6_k *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK_K) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d));
        float ds[16];
        for (int k = 0; k < 16; k++) ds[k] = d * (float)x[i].scales[k];
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            float *y = dst + 128 * h;
            const float *dh = ds + 8 * h;
            /* r = l, l + 32, l + 64, l + 96: low nibbles of ql[l], ql[l + 32],
             * then their high nibbles; qh[l] bits 0-1, 2-3, 4-5, 6-7 */
            for (int half = 0; half < 2; half++) { /* 16 elements share a scale */
                const float s0 = dh[half], s1 = dh[2 + half], s2 = dh[4 + half], s3 = dh[6 + half];
                for (int l = 16 * half; l < 16 * half + 16; l++) {
                    int q0 = ((ql[l] & 0x0F) | ((qh[l] >> 0) & 3) << 4) - 32;
                    int q1 = ((ql[l + 32] & 0x0F) | ((qh[l] >> 2) & 3) << 4) - 32;
                    int q2 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                    int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                    y[l] = s0 * (float)q0;
                    y[l + 32] = s1 * (float)q1;
                    y[l + 64] = s2 * (float)q2;
                    y[l + 96] = s3 * (float)q3;
                }
            }
        }
    }
}

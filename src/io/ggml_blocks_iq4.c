/* ggml's non-linear 4-bit types, IQ4_NL (blocks of 32) and IQ4_XS
 * (super-blocks of 256 with a 6-bit scale per 32): the dequantize loops
 * (the gguf package's arithmetic) and ggml's quantizer (quantize_iq4_nl /
 * quantize_iq4_xs and the search they share), with and without an
 * importance matrix. Layouts: ggml_blocks.h.
 *
 * The quantizer is a scale search: each 32-element sub-block starts from
 * the scale that maps its largest magnitude onto the grid's end (-127),
 * then tries 15 nearby scales and keeps the one of least weighted squared
 * error (the weighted least-squares scale for each set of codes). Every
 * sum runs in element order in fp32, as ggml's, so the chosen codes and
 * scales are the same bits. */
#include <math.h>

#include "io/ggml_blocks.h"
#include "util/cpu.h"

const int8_t lb__kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};


/* ===== Dequantize ===== */

void lb__dequantize_iq4_nl(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_iq4_nl *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d));
        for (int j = 0; j < LB__QK / 2; j++) {
            dst[j] = d * (float)lb__kvalues_iq4nl[x[i].qs[j] & 0x0F];
            dst[j + LB__QK / 2] = d * (float)lb__kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void lb__dequantize_iq4_xs(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_iq4_xs *x = src;
    for (size_t i = 0; i < nb; i++) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d));
        for (int ib = 0; ib < LB__QK_K / 32; ib++, dst += 32) {
            const float dl = d * (float)(lb__iq4_xs_scale_code(&x[i], ib) - 32);
            const uint8_t *qs = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)lb__kvalues_iq4nl[qs[j] & 0x0F];
                dst[j + 16] = dl * (float)lb__kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* ===== Quantize: the scalar build of ggml_blocks_iq4_quant.h, or the AVX2 one ===== */

#define LB__QNAME(type) lb__quantize_##type##_scalar
#include "io/ggml_blocks_iq4_quant.h"

static int use_avx2(void) { return lb__isa_x86(lb_isa_active()) >= LB_ISA_AVX2 && lb__ggml_blocks_avx2_built(); }
static int use_avx512(void)
{
    return lb__isa_x86(lb_isa_active()) >= LB_ISA_AVX512 && lb__ggml_blocks_iq4_avx512_built();
}

/* fn's widest build this CPU runs (and lb_isa_active allows) */
#define IQ4_BUILD(fn, ...)                                                            \
    (use_avx512() ? lb__quantize_##fn##_avx512(__VA_ARGS__)                           \
                  : use_avx2() ? lb__quantize_##fn##_avx2(__VA_ARGS__) : lb__quantize_##fn##_scalar(__VA_ARGS__))

void lb__quantize_iq4_nl(const float *restrict src, size_t nb, const float *restrict imatrix, void *restrict dst)
{
    IQ4_BUILD(iq4_nl, src, nb, imatrix, dst);
}

void lb__quantize_iq4_xs(const float *restrict src, size_t nb, const float *restrict imatrix, void *restrict dst)
{
    IQ4_BUILD(iq4_xs, src, nb, imatrix, dst);
}

void lb__iq4_code_scales(int xs, const float *restrict src, size_t nb, const float *restrict imatrix,
                         float *restrict scale)
{
    IQ4_BUILD(iq4_code_scales, xs, src, nb, imatrix, scale);
}

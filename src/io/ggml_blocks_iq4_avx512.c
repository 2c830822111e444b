/* The AVX-512 build of the IQ4 quantizers (ggml_blocks_iq4_quant.h): the
 * same C as the scalar build in ggml_blocks_iq4.c, compiled with the
 * Makefile's flags for *_avx512.c (-ffp-contract=off keeps every multiply
 * and add separate), but for the search's 16 fits, which the header writes
 * in intrinsics for this build: one 16-wide vector. */
#include "io/ggml_blocks.h"

#if defined(__x86_64__) && defined(__AVX512F__)

#define LB__QNAME(type) lb__quantize_##type##_avx512
#include "io/ggml_blocks_iq4_quant.h"

int lb__ggml_blocks_iq4_avx512_built(void) { return 1; }

#else /* no AVX-512 build here: the names exist, the AVX2 build runs */

void lb__quantize_iq4_nl_avx512(const float *restrict src, size_t nb, const float *restrict imatrix, void *restrict dst)
{
    lb__quantize_iq4_nl_avx2(src, nb, imatrix, dst);
}

void lb__quantize_iq4_xs_avx512(const float *restrict src, size_t nb, const float *restrict imatrix, void *restrict dst)
{
    lb__quantize_iq4_xs_avx2(src, nb, imatrix, dst);
}

void lb__quantize_iq4_code_scales_avx512(int xs, const float *restrict src, size_t nb, const float *restrict imatrix,
                                float *restrict scale)
{
    lb__quantize_iq4_code_scales_avx2(xs, src, nb, imatrix, scale);
}

int lb__ggml_blocks_iq4_avx512_built(void) { return 0; }

#endif

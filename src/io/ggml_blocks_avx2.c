/* The AVX2 build of the classic quantizers (ggml_blocks_quant.h): the same
 * C as the scalar build in ggml_blocks.c, compiled with -mavx2 -mfma -mf16c
 * (the Makefile's rule for *_avx2.c; -ffp-contract=off keeps every multiply
 * and add separate, so the 8-wide lanes do the scalar code's operations). */
#include "io/ggml_blocks.h"

#if defined(__x86_64__) && defined(__AVX2__)

#define LB__QNAME(type) lb__quantize_##type##_avx2
#include "io/ggml_blocks_quant.h"

int lb__ggml_blocks_avx2_built(void) { return 1; }

#else /* no AVX2 build here: the names exist, the scalar build runs */

#define FORWARD(type)                                                                      \
    void lb__quantize_##type##_avx2(const float *restrict src, size_t nb, void *restrict dst) \
    {                                                                                      \
        lb__quantize_##type##_scalar(src, nb, dst);                                        \
    }
LB__CLASSIC_QUANTIZERS(FORWARD)

int lb__ggml_blocks_avx2_built(void) { return 0; }

#endif

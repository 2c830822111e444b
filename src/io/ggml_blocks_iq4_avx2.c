/* The AVX2 build of the IQ4 quantizers (ggml_blocks_iq4_quant.h): the same
 * C as the scalar build in ggml_blocks_iq4.c, compiled with -mavx2 -mfma
 * -mf16c (the Makefile's rule for *_avx2.c; -ffp-contract=off keeps every
 * multiply and add separate), but for the search's 16 fits, which the
 * header writes in intrinsics for this build: two 8-wide halves. */
#include "io/ggml_blocks.h"

#if defined(__x86_64__) && defined(__AVX2__)

#define LB__QNAME(type) lb__quantize_##type##_avx2
#define LB__IQ4_AVX2 1
#include "io/ggml_blocks_iq4_quant.h"

#else /* no AVX2 build here (lb__ggml_blocks_avx2_built() is 0): the names exist, the scalar build runs */

LB__IQ4_FORWARD(avx2, scalar)

#endif

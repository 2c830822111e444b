/* The AVX-512 build of the IQ4 quantizers (ggml_blocks_iq4_quant.h): the
 * same C as the scalar build in ggml_blocks_iq4.c, compiled with the
 * Makefile's flags for *_avx512.c (-ffp-contract=off keeps every multiply
 * and add separate), but for the search's 16 fits, which the header writes
 * in intrinsics for this build: one 16-wide vector. */
#include "io/ggml_blocks.h"

#if defined(__x86_64__) && defined(__AVX512F__)

#define LB__QNAME(type) lb__quantize_##type##_avx512
#define LB__IQ4_AVX512 1
#include "io/ggml_blocks_iq4_quant.h"

int lb__ggml_blocks_iq4_avx512_built(void) { return 1; }

#else /* no AVX-512 build here: the names exist, the AVX2 build runs */

LB__IQ4_FORWARD(avx512, avx2)

int lb__ggml_blocks_iq4_avx512_built(void) { return 0; }

#endif

/* AVX2 int8-activation kernels on ggml's Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL, Q4_0
 * and Q5_0, read in place: qdot8.h's K-quant sums, bit for bit the scalar
 * reference.
 *
 * A ymm is one 32-byte chunk c of a super-block's codes: its low nibbles
 * are sub-block 2c, its high ones 2c + 1, one scale for all 8 lanes.
 * vpmaddubsw takes the unsigned codes (at most 31) against the signed
 * activations (|x| <= 127): a pair is at most 7874, never saturating;
 * vpmaddwd by 1 gives the int32 lanes of 4 products. Lanes 0-7 of the
 * definition are chunk 2h, lanes 8-15 chunk 2h + 1. */
#include "kernel/qdot8.h"

#if defined(__x86_64__)

#define LB__QDOT8_AVX_VNNI 0
#include "kernel/qdot8k_avx2_run.h"

LB__QDOT8K_ROWS_FN(lb__qdot8k_rows_avx2)

#endif

/* AVX2 int8-activation decode kernels: qdot8.h's sums, bit for bit the
 * scalar reference.
 *
 * A group's 64 bytes are two ymm halves, lanes 0-7 and 8-15. vpmaddubsw
 * multiplies unsigned bytes by signed ones and adds pairs into int16 with
 * saturation, so the operands are kept small enough never to saturate:
 *   4-bit: u + c from a vpshufb table (int4 + 8, uint4, fp4 2v + 12: at
 *          most 24), x codes at most 127 in magnitude: a pair is at most
 *          2 * 24 * 127, the low and high nibbles' pairs added at most
 *          12192; vpmaddwd by 1 gives the int32 lanes, then plus the
 *          staged -c * (lane sum of x).
 *   int8:  |w| and x with w's sign (vpsignb), c = 0: a pair is at most
 *          2 * 128 * 127 = 32512 < 2^15.
 * The row loop is qdot8_avx2_run.h's (rows from separate streams). */
#include "kernel/qdot8.h"
#include "kernel/qdot8_instances.h"
#include "kernel/w8a8_kernels.h"

#if defined(__x86_64__)

#define LB__QDOT8_AVX_VNNI 0
#include "kernel/qdot8_avx2_run.h"

LB__QDOT8_ROWS_FN(rows_avx2)

/* int8 stays signed (vpsignb): only 4-bit values take an offset */
const lb__qdot8_set lb__qdot8_avx2_set = {"avx2", lb__qdot8_nibble_offset, rows_avx2, lb__qdot8k_rows_avx2, &lb__w8a8_avx2_ops, 0, 0,
                                         lb__qdot8_stage_token_avx2};

#else
const lb__qdot8_set lb__qdot8_avx2_set = {"avx2", lb__qdot8_no_offset, NULL, lb__qdot8k_rows_scalar, &lb__w8a8_avx2_ops, 0, 0, NULL};
#endif

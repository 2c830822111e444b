/* AVX-VNNI int8-activation decode kernels (the VEX-encoded, 256-bit
 * vpdpbusd of Alder Lake, Sierra Forest and later, where AVX-512 may be
 * absent): the AVX2 set's row loop and operands (qdot8_avx2_run.h) with
 * each lane's four byte products summed by one vpdpbusd instead of
 * vpmaddubsw, vpmaddwd and two adds. The same staging and offsets as the
 * AVX2 set, the same int32 sums, so the same bits; the K-quant kernels
 * likewise (qdot8k_avx2_run.h). */
#include "kernel/qdot8.h"
#include "kernel/qdot8_instances.h"
#include "kernel/w8a8_kernels.h"

#if defined(__x86_64__) && defined(__AVXVNNI__)

#define LB__QDOT8_AVX_VNNI 1
#include "kernel/qdot8_avx2_run.h"
#include "kernel/qdot8k_avx2_run.h"

LB__QDOT8_ROWS_FN(rows_avxvnni)
LB__QDOT8K_ROWS_FN(lb__qdot8k_rows_avxvnni)

const lb__qdot8_set lb__qdot8_avxvnni_set = {"avx2-vnni", lb__qdot8_nibble_offset, rows_avxvnni, lb__qdot8k_rows_avxvnni,
                                             &lb__w8a8_avx2_ops, 0, 0, lb__qdot8_stage_token_avx2};

#else
const lb__qdot8_set lb__qdot8_avxvnni_set = {"avx2-vnni", lb__qdot8_no_offset, NULL, lb__qdot8k_rows_scalar,
                                             &lb__w8a8_avx2_ops, 0, 0, NULL};
#endif

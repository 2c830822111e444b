/* The base-logits file of lowbit kld --save-base / --base (LBKLD001):
 *
 *   "LBKLD001" | u32 vocab | u32 ctx | u64 chunks | u64 FNV-1a of the
 *   windows' token ids | per scored position: f32 lo, f32 step,
 *   u16[vocab] with log p = lo + code * step (little-endian)
 *
 * 16 bits over each position's range of finite log-probabilities keep the
 * error below range / 131070 (~3e-4 nats for a range of 40). The reader
 * trusts nothing in the file: the header must match the run, and every
 * position's range must be one of log-probabilities (see
 * lb__kld_base_unpack). */
#ifndef LB_EVAL_KLD_BASE_H
#define LB_EVAL_KLD_BASE_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

#define LB__KLD_HEADER_BYTES 32

/* Bytes of one scored position. */
static inline uint64_t lb__kld_position_bytes(uint64_t vocab) { return 8 + 2 * vocab; }

/* The header for a run of vocab, ctx, chunks windows hashed to hash. */
void lb__kld_base_header(uint8_t out[LB__KLD_HEADER_BYTES], uint32_t vocab, uint32_t ctx, uint64_t chunks,
                         uint64_t hash);
/* LB_OK when data (size bytes, from path) is a base file for exactly this
 * run: magic, vocab, ctx, windows, token hash and total size. */
lb_status lb__kld_base_check(const uint8_t *data, size_t size, const char *path, uint32_t vocab, uint32_t ctx,
                             uint64_t chunks, uint64_t hash);

/* One position's log-probabilities (vocab of them, -inf allowed) into
 * lb__kld_position_bytes(vocab) bytes. */
void lb__kld_base_pack(const double *lp, size_t vocab, uint8_t *out);
/* And back, renormalized (the max subtracted before exp, so no stored
 * value can overflow the sum): every lp[i] finite and <= 0. LB_ERR_PARSE
 * naming path and position when the stored range is not one of
 * log-probabilities: lo or step not finite, step <= 0, or the largest
 * stored value above 0 or below -log(vocab) beyond the rounding the
 * packing allows. */
lb_status lb__kld_base_unpack(const uint8_t *in, size_t vocab, double *lp, const char *path, uint64_t position);

#endif

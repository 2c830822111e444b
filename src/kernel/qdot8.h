/* Int8-activation decode kernels ("--decode-act int8"): packed weights
 * times activations quantized to int8 per block of 32, once per call and
 * reused by every row, the integer products summed exactly.
 *
 * This changes the arithmetic of qdot.h (the activations are rounded), so
 * it is a mode the caller names; qdot.h's exact path stays the default.
 *
 * Weights: 4-bit (int4, uint4, fp4 e2m1), fp6 e2m3 or int8 elements, any scale
 * (block, channel, tensor, 2-D, two-level), affine or not, where the scale
 * block is the whole row or a multiple of the lane width E (below) that
 * divides or is divided by the group G; others are refused (the caller
 * falls back to the exact kernels). Each element has an integer value u:
 * int4/uint4/int8 the code, fp4 twice the E2M1 value (-12 .. 12, so the
 * weight scale is halved), fp6 eight times the E2M3 value (-60 .. 60, the
 * scale times 1/8; not affine). fp6 only where the set unpacks 6-bit
 * codes (lb__qdot8_set.six: the scalar reference and AVX-512 VBMI; the
 * others refuse it, and the exact kernels run those matrices). fp8 e4m3
 * and e5m2 (not the fnuz variants, not affine) only where the set has
 * bf16 pair products (lb__qdot8_set.fp8: the scalar reference and the
 * AVX-512 BF16 set), with a scale block that is a multiple of 16 or the
 * whole row; their sums are defined apart, below.
 *
 * The result, which every instruction set computes bit for bit:
 *   - Activation blocks of 32 along the row: d_j = absmax_j / 127 (fp32
 *     division; 1 where absmax is 0), q_k = round-half-even(x_k / d_j)
 *     clamped to [-127, 127] (lb__w8a8_i8_code). Columns past the row are
 *     q = 0 and a block wholly past it has d = 0.
 *   - Lanes: E = 8 elements for 4-bit weights, 4 for int8 and fp6;
 *     groups of G = 16 E (64 bytes of codes; 48 for fp6, whose code k is
 *     bits 6k .. 6k + 5 of the row, little-endian). Lane l of group g covers elements [gG + lE, gG + lE + E):
 *     one activation block j and one weight block b.
 *   - P(g,l) = sum over the lane of q_k * (u_k - zp_b), exact in int32.
 *   - mw_b = (scale_b * scale_mul) * f, f = 1/2 for fp4, 1/8 for fp6, else 1 (fp32
 *     products in that order; blocks past the row's last take the last's),
 *     s(g,l) = d_j * mw_b (fp32).
 *   - 16 partial sums p[l] start at +0; for g in increasing order:
 *     p[l] = fma((float)P(g,l), s(g,l), p[l]). The dot is lb__sum16f(p).
 * fp8 values are no small integers, but each value v and each code q is
 * exact in bf16 and so is their product (at most 11 significant bits), so
 * a lane sums products in fp32 the way AVX-512 BF16's vdpbf16ps does
 * (E = 4, G = 64; the codes staged as bf16 words, lb__qdot8_bf16_pos):
 *   - lane l of group g takes run L = l / 4 (elements gG + 16L .. + 15)
 *     and pair i = l % 4: elements a = gG + 16L + 2i, a + 1, b = a + 8,
 *     b + 1 (so a lane lies in one activation block and one weight block);
 *   - P(g,l) = fma(v_b, q_b, fma(v_b+1, q_b+1, fma(v_a, q_a, fma(v_a+1,
 *     q_a+1, +0)))) in fp32, each step rounded (v = 0 past the row);
 *   - p[l] = fma(P(g,l), s(g,l), p[l]) as above (f = 1).
 *   Nothing is subnormal (products are 0 or multiples of 2^-16 of at least
 *   that size), so the instruction's flushing of subnormals never applies.
 * A token with a NaN or infinite activation cannot be quantized: callers
 * (lb__qmat_matmul_act8) run such calls on the exact kernels instead.
 *
 * ggml's K-quants with mins, Q4_K and Q5_K, are read in place (a copy in
 * lowbit's layout would need a float min per block: 6 bits a weight
 * instead of 4.5). A row is super-blocks of 256 (io/ggml_blocks.h): d,
 * dmin (fp16), eight 6-bit sc_j and m_j, and unsigned codes u (4 bits; Q5_K
 * a fifth from qh), w = (d * sc_j) u - dmin * m_j on sub-block j of 32,
 * which is activation block 8s + j of super-block s. So with the exact
 * int32 sums P = sum q u and S_j = sum q over activation block j:
 *   - e_j = d_j * (float)S_j (fp32);
 *   - 16 partials p start at +0; for s, then h = 0, 1 (qs bytes 64h ..
 *     64h + 63), then n = 0, 1 (low, high nibbles): lane l's P sums the 4
 *     products of bytes 64h + 4l .. 64h + 4l + 3, nibble n, all in sub-block
 *     j = 4h + 2 (l >= 8) + n: p[l] = fma((float)P, d_{8s+j} * (d * sc_j), p[l])
 *     (d * sc_j is exact in fp32);
 *   - 8 partials mp start at +0; for s: mp[j] = fma(e_{8s+j}, dmin * m_j, mp[j]);
 *   - the dot is lb__sum16f(p) - lb__qdot8k_sum8(mp).
 * Q6_K is read in place too (its copy as int8:g16 took 10 bits a weight
 * instead of 6.56): codes u = 0 .. 63, w = (d * sc_k) (u - 32) on
 * sub-block k of 16 (sc_k int8). Element 128h + 64n + b of a super-block
 * is nibble n of ql[64h + b], so with the staged lane sums S4 of 4 codes:
 *   - 16 partials p start at +0; for s, then h = 0, 1, then n = 0, 1: lane
 *     l covers elements e = 128h + 64n + 4l .. + 3, P = sum q (u - 32)
 *     exact, p[l] = fma((float)P, d_J * (d * sc_k), p[l]) with J = e / 32
 *     its activation block and k = e / 16 its sub-block (d * sc_k exact);
 *   - the dot is lb__sum16f(p).
 * IQ4_XS and IQ4_NL are read in place with values v =
 * kvalues_iq4nl[nibble] (-127 .. 113) and one scale per block j of 32:
 * IQ4_XS d * (s_j - 32) (exact), IQ4_NL its d. So is Q4_0, whose blocks
 * are IQ4_NL's with values v = nibble - 8, and Q5_0, whose blocks add 4
 * bytes qh (d, qh, qs: 22 bytes) and values v = nibble - 16 + 16 b with
 * b bit e of qh for element e (bit i for byte i's low nibble, 16 + i for
 * its high). IQ4_NL, Q4_0 and Q5_0 rows may end in
 * a group of 1-3 blocks (SmolLM2's 576): lanes past the row are skipped
 * (the kernels add fma(0, 0, p) there, which leaves p: p is never -0). Group g is blocks
 * 4g .. 4g + 3 (an IQ4_XS half super-block); block j's byte i holds its
 * elements i (low nibble) and 16 + i (high), both in block j, so a lane
 * takes both nibbles of its bytes:
 *   - 16 partials p start at +0; for g: lane l covers bytes 4(l % 4) ..
 *     + 3 of block j = 4g + l / 4, both nibbles (8 elements); P = sum q v
 *     exact, p[l] = fma((float)P, d_j * sc_j, p[l]);
 *   - the dot is lb__sum16f(p). */
#ifndef LB_KERNEL_QDOT8_H
#define LB_KERNEL_QDOT8_H

#include <stddef.h>
#include <stdint.h>

#include "kernel/qdot.h"
#include "kernel/qmat.h"

#define LB__ACT8_BLOCK 32 /* activation elements per int8 scale */
#define LB__QDOT8_LANES 16

/* 1 if the int8-activation kernels of the active instruction set take m
 * (a refusal is routine: the caller runs the exact kernels), else 0. */
int lb__qdot8_supported(const lb__qmat *m);
/* The weight of one unit of an element's integer value u: 1/2 for fp4,
 * 1/8 for fp6 e2m3, else 1 (the f of mw_b above). */
float lb__qdot8_unit(lb_format element);

/* The quantized activations of one call, staged for one matrix's
 * geometry (a token's codes in the order its weight bytes unpack).
 *   q    [t * stride + ...]: codes; 4-bit: per group the 64 even
 *        elements, then the 64 odd ones (low, high nibbles); int8: natural.
 *   cxs  [t * lanes + g * 16 + l]: -off * (sum of the lane's codes), where
 *        off is the offset the kernel set adds to its unsigned weight
 *        operand (lb__qdot8_set.offset): a lane's sum starts there, so
 *        it ends without the offset; xs: the plain sums (affine only).
 *   d    [t * lanes + g * 16 + l]: the lane's activation scale d_j. */
typedef struct lb__act8 {
    size_t n, groups, stride, lanes;
    int8_t *q;
    int32_t *cxs, *xs;
    float *d;
    float *e; /* K-quants: [t * cols / 32 + j], e_j; NULL otherwise */
    void *buf;
} lb__act8;

/* The kernels of one instruction set. */
typedef void (*lb__qdot8_fn)(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1,
                             float *y, size_t ldy, void *scratch);
typedef struct lb__qdot8_set {
    const char *name;
    int (*offset)(lb_format element); /* the c of cxs for this set's weight operand */
    lb__qdot8_fn rows;                /* nx <= 4 tokens; NULL where the build lacks the set */
    lb__qdot8_fn krows;               /* the same for the K-quants (lb__qdot8k_rows_scalar where none) */
    /* whose quant_i8 quantizes an activation block (w8a8.h's per-token
     * int8 quantizer, static scale 0: every set gives the same codes) */
    const struct lb__w8a8_ops *quant;
    int six; /* 1 if rows takes fp6 e2m3 weights (the scalar reference and the VBMI sets) */
    int fp8; /* 1 if rows takes fp8 e4m3 / e5m2 weights (the scalar reference and the BF16 set) */
    /* Stages one token for lane widths 4 and 8 in vectors, the same
     * bytes as the reference staging (lb__qdot8_stage's block loop, which runs
     * where this is NULL and for fp8): x's cols values into q, cxs, xs
     * (NULL unless affine) and d at their token's start, groups of them. */
    void (*stage_token)(const float *x, size_t cols, size_t groups, size_t lane_elems, int off, int8_t *q,
                        int32_t *cxs, int32_t *xs, float *d);
} lb__qdot8_set;

extern const lb__qdot8_set lb__qdot8_scalar_set, lb__qdot8_avx2_set, lb__qdot8_avxvnni_set, lb__qdot8_vnni_set,
    lb__qdot8_vbmi_set, lb__qdot8_bf16_set, lb__qdot8_neon_set;

/* The AVX-512 VNNI and AVX2 stage_token (qdot8_stage_vnni.c, qdot8_stage_avx2.c). */
void lb__qdot8_stage_token_vnni(const float *x, size_t cols, size_t groups, size_t lane_elems, int off, int8_t *q,
                                int32_t *cxs, int32_t *xs, float *d);
void lb__qdot8_stage_token_avx2(const float *x, size_t cols, size_t groups, size_t lane_elems, int off, int8_t *q,
                                int32_t *cxs, int32_t *xs, float *d);

/* 1 if this CPU's vdpbf16ps computes what the fp8 definition above says
 * (two fp32 fmas per lane in round-to-nearest-even, the odd element's
 * first; probed once on inputs where another order or a single rounding
 * would differ): lb__qdot8_get hands out the BF16 set only then. 0 where
 * the build or the CPU lacks the instruction. */
int lb__qdot8_bf16_rounds_as_defined(void);
/* 1 if m's elements are fp8 (summed in bf16 pairs, above), else 0. */
int lb__qdot8_bf16_pairs(const lb__qmat *m);
/* Word of element e (< 64) of a group in fp8's staged bf16 activations. */
size_t lb__qdot8_bf16_pos(size_t e);

/* lb__qdot8_supported for a given set. */
int lb__qdot8_takes(const lb__qmat *m, const struct lb__qdot8_set *set);

/* The best set for isa on this CPU (VNNI needs AVX512-VNNI, and its VBMI
 * variant VBMI too; AVX2, or AVX-512 without its VNNI, takes AVX-VNNI's
 * where the CPU has that, else AVX2's); scalar where nothing else runs. */
const lb__qdot8_set *lb__qdot8_get(lb_isa isa);

/* Y[n][rows] = X[n][cols] . W^T with X quantized as above, on the kernels
 * of isa (clamped to the CPU). LB_ERR_UNSUPPORTED (no message) for a
 * matrix lb__qdot8_supported refuses; calls with a non-finite activation
 * run lb__qmat_matmul_isa's exact kernels. Threads split the rows: any
 * count gives the same bits. */
lb_status lb__qmat_matmul_act8(const lb__qmat *m, const float *x, size_t n, float *y, int threads, lb_isa isa);
/* Matrices that take the same staged activations (same columns, lane
 * width, element format and zero-point presence): 1, else 0. */
int lb__qdot8_shares_input(const lb__qmat *a, const lb__qmat *b);
/* ys[i] = x . ms[i]^T for k matrices that share their input (q/k/v,
 * gate/up): the activations staged once and all rows split over the
 * threads in one parallel section; each matrix's bits are those of its
 * own call. LB_ERR_UNSUPPORTED (no message) unless every pair shares. */
lb_status lb__qmat_matmul_act8_multi(const lb__qmat *const *ms, size_t k, const float *x, size_t n, float *const *ys,
                                     int threads, const lb__qdot8_set *set);
/* Run by each thread on the rows it computed in a paired call, rows
 * r0 .. r1-1 of both matrices for every token. */
typedef void (*lb__qdot8_epilogue)(void *ctx, size_t r0, size_t r1);
/* ya = x . a^T and yb = x . b^T for two matrices of as many rows that
 * share their input (gate and up), each thread taking the same rows of
 * both and then running epilogue on them inside the parallel section
 * (silu(gate) * up where the threads are, not on one after). The same
 * bits as two calls; LB_ERR_UNSUPPORTED (no message) where the multi
 * call refuses or the rows differ. */
lb_status lb__qmat_matmul_act8_pair(const lb__qmat *a, const lb__qmat *b, const float *x, size_t n, float *ya,
                                    float *yb, int threads, const lb__qdot8_set *set, lb__qdot8_epilogue epilogue,
                                    void *ctx);
/* The same with a named set (tests compare the sets with each other). */
lb_status lb__qmat_matmul_act8_set(const lb__qmat *m, const float *x, size_t n, float *y, int threads,
                                   const lb__qdot8_set *set);

/* ---- shared by the sets (qdot8*.c) ---- */

/* Lane width E and group G of m's element format. */
size_t lb__qdot8_lane_elems(const lb__qmat *m);
/* Rows whose scales are staged at once (a multiple of every set's rows in flight). */
#define LB__QDOT8_STAGE_ROWS 32
/* Floats (and int32s) per staged row: blocks + LB__QDOT8_LANES rounded up
 * to a multiple of 16 (rows start on cache lines), so a
 * kernel may load 16 from any group's first block; the scales' 16 past
 * the last block repeat it (a finite scale times a lane sum of 0 adds 0),
 * the zero points' is not staged (it multiplies codes and sums of 0). */
size_t lb__qdot8_stage_stride(const lb__qmat *m);
size_t lb__qdot8_scratch_bytes(const lb__qmat *m);
/* mw and zp of rows r .. r+n-1 (n <= LB__QDOT8_STAGE_ROWS) into
 * mw[i * ms + b] and zp[i * stride + b] (zp: affine only); returns ms,
 * the stride, or for block scales without zero points nb: the rows back
 * to back with 16 zeros after, where a set's scale function is given and
 * every scale is finite (the per-row staging of 18 or 36 scales cost as
 * much as the dot products on SmolLM2's 576-wide rows). scale:
 * w[i] = (w[i] * a) * b for i < n, in a set's vectors (NULL: scalar, rows
 * one by one; the loop took as long as the dot products on blocks of 32). */
typedef void (*lb__qdot8_scale_fn)(float *w, size_t n, float a, float b);
/* A set's decoder for the rows back to back: scale codes 0 .. n-1 of format
 * f into out as (s * a) * b, the values the format layer's decoder and
 * scale give; 1 if all are finite, 0 if not, -1 if it does not take f
 * (then those two run). NULL: always those two. */
typedef int (*lb__qdot8_decode_fn)(lb_format f, const uint8_t *codes, size_t n, float a, float b, float *out);
size_t lb__qdot8_stage_rows(const lb__qmat *m, lb_isa isa, lb__qdot8_scale_fn scale, lb__qdot8_decode_fn decode,
                            size_t r, size_t n, float *mw, int32_t *zp);
/* Only the zero points (affine m), as lb__qdot8_stage_rows stages them. */
void lb__qdot8_stage_zero_points(const lb__qmat *m, size_t r, size_t n, int32_t *zp);
/* The first block of group g, and lane l's block relative to it:
 * first + lane_block[l] (the same for every group). */
size_t lb__qdot8_group_block(const lb__qmat *m, size_t g);
void lb__qdot8_lane_blocks(const lb__qmat *m, int32_t lane_block[LB__QDOT8_LANES]);
/* Where a kernel finds things in its matrix (every set computes them alike):
 * group g's first block is g * gmul / gdiv (one of them 1; 0 for a single
 * block); the first `whole` groups of a row lie inside it, the one after
 * (if any) ends early. */
typedef struct lb__qdot8_geom {
    size_t gmul, gdiv, whole;
} lb__qdot8_geom;
static inline lb__qdot8_geom lb__qdot8_geometry(const lb__qmat *m, size_t groups, size_t G)
{
    lb__qdot8_geom g;
    const int one = m->blocks <= 1 || m->one_scale;
    g.gmul = one ? 0 : m->block < G ? G / m->block : 1;
    g.gdiv = one || m->block < G ? 1 : m->block / G;
    const size_t gb = G * lb_format_get(m->element)->bits / 8; /* bytes per group: 64, or 48 for fp6 */
    g.whole = m->row_bytes / gb < groups ? m->row_bytes / gb : groups;
    return g;
}

/* Row i (< R) of the row group at r with n real rows: its codes, staged
 * scales and zero points (rows past n repeat the last; their sums are
 * dropped). first: the staged batch's first row; st and ms the zero points'
 * and the scales' strides. */
static inline void lb__qdot8_row_ptrs(const lb__qmat *m, size_t r, size_t n, size_t R, size_t first, size_t st,
                                      size_t ms, const float *mw, const int32_t *zp, const uint8_t **row,
                                      const float **mwp, const int32_t **zpp)
{
    for (size_t i = 0; i < R; i++) {
        size_t k = i < n ? i : n - 1;
        row[i] = m->data + (r + k) * m->row_bytes;
        mwp[i] = mw + (r - first + k) * ms; /* ms: lb__qdot8_stage_rows's stride */
        zpp[i] = zp + (r - first + k) * st;
    }
}

/* Offsets (lb__qdot8_set.offset): none; or the one that makes a 4-bit
 * value u + off unsigned for a byte multiply of unsigned by signed (int4
 * 8, fp4 12, else 0). */
int lb__qdot8_no_offset(lb_format element);
int lb__qdot8_nibble_offset(lb_format element);

/* The 16 values u + off of the 4-bit codes (lb__qdot8_set.offset); the
 * n values of codes 0 .. n-1 of any element the path takes. */
void lb__qdot8_nibble_table(lb_format element, int off, uint8_t lut[16]);
void lb__qdot8_code_table(lb_format element, int off, uint8_t *lut, size_t n);
/* fp8 (e4m3 or e5m2): the bf16 bits of the values of codes 0 .. 127 (the
 * magnitudes), low bytes at [0 .. 127], high bytes at [128 .. 255]: the
 * process's copy once built, else local filled. */
const uint8_t *lb__qdot8_bf16_tables(lb_format element, uint8_t local[256]);

/* ---- the K-quants (Q4_K, Q5_K) ---- */

/* The kernel of a K-quant set that takes t: 0 Q4_K, 1 Q5_K, 2 Q6_K,
 * 3 IQ4_XS, 4 IQ4_NL and Q4_0, 5 Q5_0 (qdot8_instances.h); kernels 4 and
 * 5 read blocks of 32, the others super-blocks of 256. */
static inline int lb__qdot8k_kernel(lb_dtype t)
{
    if (t == LB_DT_IQ4_NL || t == LB_DT_Q4_0) return 4;
    return t == LB_DT_Q5_K ? 1 : t == LB_DT_Q6_K ? 2 : t == LB_DT_IQ4_XS ? 3 : t == LB_DT_Q5_0 ? 5 : 0;
}
/* The 16 values of a 4-bit code of a LB__QDOT8K_TABLE type: IQ4's grid
 * (lb__kvalues_iq4nl), Q4_0's n - 8, or Q5_0's n - 16 (its fifth bit
 * adds 16). */
const int8_t *lb__qdot8k_values(lb_dtype t);

/* Staged for Q4_K/Q5_K: q in groups of 128 with the low-nibble elements
 * of its two 64-element chunks first (e = 64c + 32n + k at 64n + 32c + k:
 * a 64-byte load of qs meets its codes); d per lane, [t * lanes + (2 g +
 * n) * 16 + l] for group g (cols / 4 lanes); e. For Q6_K: q in order, d
 * per lane of 4 ([t * lanes + e / 4]) and cxs = -32 * S4 there. For IQ4,
 * Q4_0 and Q5_0: element 16n + i of block k of group g at g * 128 + 64n + 16k
 * + i, d and cxs = -c * S8 per lane (g * 16 + 4k + i / 4; cols / 8 lanes),
 * S8 the sum of the lane's 8 codes (both nibbles), c the set's offset for
 * int8 (lb__qdot8_set.offset). */
lb_status lb__qdot8k_stage(const lb__qmat *m, const float *x, size_t n, const lb__qdot8_set *set, lb__act8 *a);
/* x's n tokens staged for m (non-K-quant; finite x) with set's staging
 * (stage_token where it has one), as a call stages them; freed by
 * lb__qdot8_act8_free. LB_ERR_NOMEM only. */
lb_status lb__qdot8_stage(const lb__qmat *m, const float *x, size_t n, const lb__qdot8_set *set, lb__act8 *a);
void lb__qdot8_act8_free(lb__act8 *a);
void lb__qdot8k_rows_scalar(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                            size_t ldy, void *scratch);
/* The VNNI set's offset and rows (qdot8_vnni.c: the VBMI set runs all
 * but fp4 on them; defined where the build has the set). */
int lb__qdot8_vnni_offset(lb_format element);
void lb__qdot8_rows_vnni(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                         size_t ldy, void *scratch);
/* The sets' (qdot8k_{vnni,avx2,neon}.c, qdot8_avxvnni.c; defined where the build has the set). */
void lb__qdot8k_rows_vnni(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                          size_t ldy, void *scratch);
void lb__qdot8k_rows_avx2(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                          size_t ldy, void *scratch);
void lb__qdot8k_rows_avxvnni(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1,
                             float *y, size_t ldy, void *scratch);
void lb__qdot8k_rows_neon(const lb__qmat *m, const lb__act8 *a, size_t t0, size_t nx, size_t r0, size_t r1, float *y,
                          size_t ldy, void *scratch);
/* LB__QDOT8K_MINS for Q4_K and Q5_K, LB__QDOT8K_OFFSET for Q6_K,
 * LB__QDOT8K_TABLE for IQ4_XS, IQ4_NL, Q4_0 and Q5_0, else 0
 * (matrices of one kind share their staged activations). */
#define LB__QDOT8K_MINS 1
#define LB__QDOT8K_OFFSET 2
#define LB__QDOT8K_TABLE 3
int lb__qdot8k_type(lb_dtype t);
/* 1 if m's rows suit its kind: whole groups of 128 (the K-quants and
 * IQ4_XS are whole 256-blocks anyway), or for IQ4_NL, Q4_0 and Q5_0 any whole
 * number of blocks of 32 (the last group ends early: its staged codes,
 * scales and sums past the row are 0). */
int lb__qdot8k_cols_ok(const lb__qmat *m);

/* The R rows a K-quant kernel runs from row r, rn of them real (the rest
 * repeat the last; their sums are dropped). */
static inline void lb__qdot8k_row_ptrs(const lb__qmat *m, size_t r, size_t rn, size_t R, const uint8_t **row)
{
    for (size_t i = 0; i < R; i++) row[i] = m->data + (r + (i < rn ? i : rn - 1)) * m->row_bytes;
}

static inline float lb__qdot8k_sum8(const float s[8])
{
    float t[4];
    for (int i = 0; i < 4; i++) t[i] = s[i] + s[i + 4];
    return (t[0] + t[2]) + (t[1] + t[3]);
}

/* The eight 6-bit scales and mins of 12 packed bytes (io/ggml_blocks.h),
 * as the bytes of two little-endian words: sc_j is byte j of *sc. */
static inline void lb__qdot8k_scale_min(const uint8_t s[12], uint64_t *sc, uint64_t *mn)
{
    uint32_t a0 = (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
    uint32_t a1 = (uint32_t)s[4] | (uint32_t)s[5] << 8 | (uint32_t)s[6] << 16 | (uint32_t)s[7] << 24;
    uint32_t a2 = (uint32_t)s[8] | (uint32_t)s[9] << 8 | (uint32_t)s[10] << 16 | (uint32_t)s[11] << 24;
    /* j >= 4: the low nibble from byte j + 4, bits 4-5 from bits 6-7 of byte j - 4 (sc) or j (m) */
    uint32_t sc_hi = (a2 & 0x0F0F0F0Fu) | ((a0 >> 2) & 0x30303030u);
    uint32_t mn_hi = ((a2 >> 4) & 0x0F0F0F0Fu) | ((a1 >> 2) & 0x30303030u);
    *sc = (uint64_t)(a0 & 0x3F3F3F3Fu) | (uint64_t)sc_hi << 32;
    *mn = (uint64_t)(a1 & 0x3F3F3F3Fu) | (uint64_t)mn_hi << 32;
}

#endif

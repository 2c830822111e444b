/* The runner's KV cache: layers x positions x kv heads x head_dim values
 * for K and for V, in one element format.
 *
 *   fp32            the values as computed (the default), held in the
 *                   layout of the attention's matrix products (matmul.h's
 *                   panels of LB__MM_NR) so that attention reads them in
 *                   place: per (layer, kv head), K as panels of NR
 *                   positions (position p, value d at
 *                   (p / NR) * head_dim * NR + d * NR + p % NR) and V as
 *                   panels of NR values over all ctx positions (at
 *                   (d / NR) * ctx * NR + p * NR + d % NR), ctx and
 *                   head_dim rounded up to whole panels (a head_dim of 64
 *                   or 128 pads nothing; stories260K's 8 makes V 4x its
 *                   values, 0.8 MiB of cache at ctx 256 for 0.3). A token's
 *                   store writes its values there (head_dim scattered
 *                   floats each); before, every decode step repacked
 *                   every position of every layer into that layout
 *                   (SmolLM2, int4:g32: 11% of decoding 128 tokens after
 *                   a 16-token prompt, 19% of decoding 256).
 *   bf16, fp16      each value rounded to nearest, ties to even; finite
 *                   values beyond the range saturate to +-max, infinities
 *                   and NaN stay what they are; no scale
 *   fp8_e4m3, fp8_e5m2, int8, int4
 *                   one fp32 scale per (position, head), for K and V
 *                   apart: s = absmax(the head's vector) / M with M = 448,
 *                   57344, 127, 7; s = 1 when that is 0 (an all-zero
 *                   vector, or one so small that the division underflows:
 *                   its values then all round to 0). Each value x is
 *                   stored as x / s (fp32 division) rounded to nearest,
 *                   ties to even, saturated to the format's range. A
 *                   vector holding NaN or infinity gets a NaN scale and
 *                   zero codes, so every value of it reads back as NaN:
 *                   the cache never turns them into numbers. int4 packs two
 *                   codes per byte, element 2i in the low nibble.
 *
 *                   Layout, per (layer, kv head), for decode attention to
 *                   read the codes in place (kernel/kvattn.h): V one row
 *                   of head_dim codes per position (row_bytes each; odd
 *                   head_dim: the last high nibble is 0); K in panels of
 *                   NR positions, like the fp32 cache's, panel i holding
 *                   for each d the codes of positions i*NR .. i*NR+NR-1
 *                   side by side (lb_format_bytes(format, NR) bytes; int4:
 *                   position 2j in the low nibble); the K and V scales
 *                   one per position, ctx rounded up to whole panels.
 *                   Positions no sequence has stored hold zero codes and
 *                   scales (after a reset, past the new sequence's end,
 *                   the earlier one's: lanes the products compute and no
 *                   output reads).
 *
 * Saturations are counted (saturated, of values stored, both 0 for fp32):
 * a finite value (after the scale) at or beyond the midpoint between the
 * format's largest finite value and the next one it lacks -- 65520 for
 * fp16, 0x1.ffp127 for bf16, 464 for fp8_e4m3, 61440 for fp8_e5m2, 127.5
 * for int8, 7.5 for int4 -- is clamped to +-max instead of rounding past
 * it. Absmax scales keep the scaled formats below that, so in practice only
 * fp16 (and bf16 near FLT_MAX) saturate; the count says whether they did.
 *
 * A stored value reads back as the exact value of its code times the
 * scale: one fp32 rounding (none without a scale). Storing and reading do
 * not depend on how many tokens are stored at once, so a prefill and a
 * token-by-token decode hold the same bytes. */
#ifndef LB_MODEL_KVCACHE_H
#define LB_MODEL_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kernel/kvattn.h"
#include "kernel/matmul.h"
#include "lowbit.h"

enum { LB__KV_K = 0, LB__KV_V = 1 };

typedef struct lb__kvcache {
    lb_format format;
    size_t layers, ctx, kv_heads, head_dim;
    size_t row_bytes;     /* bytes of one head's codes */
    uint8_t *codes[2];    /* K, V: [layer][kv_heads][head_bytes] laid out as above; fp32: the panels above */
    size_t panel_floats[2]; /* fp32: floats of one (layer, kv head)'s K and V panels */
    size_t head_bytes[2]; /* the other formats: bytes of one (layer, kv head)'s K and V codes */
    float *scales[2];     /* [layer][kv_heads][scale_stride]; NULL for fp32, bf16, fp16 */
    size_t scale_stride;  /* ctx rounded up to whole panels of NR */
    uint8_t *row;         /* room for one K row's codes before they go to their panel lane */
    float max;            /* M above, 0 without a scale */
    float lut[256];       /* 8- and 4-bit formats: the exact value of each code */
    float sat_limit;      /* magnitudes from here on saturate (see above); +inf for fp32 */
    uint64_t saturated, values; /* since lb__kv_init: values clamped, of values stored (not fp32) */
    float *fixed;         /* [layer][K, V] static scales (lb__kv_set_static), 0: per (position, head); or NULL */
} lb__kvcache;

/* Static per-tensor scales for one layer (vLLM's k_scale / v_scale =
 * calibrated amax / 448): every (position, head) row of that layer is then
 * stored as x / scale instead of under its own absmax scale, so values
 * beyond the calibrated range saturate (and are counted). The per-row
 * scale array still holds the scale, so reading is unchanged. Scaled
 * formats only; scales positive and finite. */
lb_status lb__kv_set_static(lb__kvcache *c, size_t layer, float k_scale, float v_scale);

/* LB_OK for the formats above; LB_ERR_FORMAT naming the allowed ones
 * otherwise. */
lb_status lb__kv_format_check(lb_format f);

/* Allocates an empty cache (contents undefined until stored).
 * LB_ERR_FORMAT, LB_ERR_ARG (a size that overflows) or LB_ERR_NOMEM;
 * on failure *c is left freeable. */
lb_status lb__kv_init(lb__kvcache *c, lb_format f, size_t layers, size_t ctx, size_t kv_heads, size_t head_dim);
void lb__kv_free(lb__kvcache *c);

/* Stores n tokens' K and V rows (each kv_heads * head_dim floats, token
 * after token) at positions pos .. pos + n - 1 of a layer. */
void lb__kv_store(lb__kvcache *c, size_t layer, size_t pos, size_t n, const float *k, const float *v);

/* One head's K (which = LB__KV_K) or V row at a position decoded to fp32
 * into buf (head_dim floats); returns buf. Any format, fp32 included. */
const float *lb__kv_decode(const lb__kvcache *c, int which, size_t layer, size_t pos, size_t head, float *buf);

/* Quantized formats: K panel `panel` of (layer, kv head) decoded into dst
 * in the fp32 panel layout (head_dim x NR floats: value d of position
 * panel*NR + j at d*NR + j), each value as lb__kv_decode gives it (lanes
 * never stored: 0, or an earlier sequence's values). */
void lb__kv_decode_k_panel(const lb__kvcache *c, size_t layer, size_t head, size_t panel, float *dst);

/* (layer, kv head)'s K (which = LB__KV_K) or V codes as the decode
 * attention kernels read them in place (fp32: its panels). */
lb__kv_view lb__kv_head_view(const lb__kvcache *c, int which, size_t layer, size_t head);

/* Where value d of position p lies in one (layer, kv head)'s K panels
 * (which = LB__KV_K) or V panels (LB__KV_V) holding `positions` positions
 * of head_dim values: the fp32 cache's layout (positions = ctx), into
 * which attention also decodes the other formats (positions = those
 * stored). */
static inline size_t lb__kv_panel_index(int which, size_t head_dim, size_t positions, size_t p, size_t d)
{
    const size_t nr = LB__MM_NR;
    if (which == LB__KV_K) return (p / nr) * head_dim * nr + d * nr + p % nr;
    return (d / nr) * positions * nr + p * nr + d % nr;
}

/* fp32 only: the panels of one (layer, kv head), K (which = LB__KV_K: a
 * matmul weight of positions x head_dim, read with as many positions as
 * are stored) or V (LB__KV_V: ceil(head_dim / NR) panels of ctx * NR
 * floats each, panel i holding values i * NR .. i * NR + NR - 1). Panels
 * past the positions stored hold zeros or an earlier sequence's values:
 * products whose outputs are not read. */
static inline const float *lb__kv_panels(const lb__kvcache *c, int which, size_t layer, size_t head)
{
    /* calloc'd whole floats: aligned */
    return (const float *)(const void *)c->codes[which] + (layer * c->kv_heads + head) * c->panel_floats[which];
}

/* Bytes the cache holds, codes and scales of K and V. */
size_t lb__kv_bytes(const lb__kvcache *c);

#endif

/* Bulk fp32 <-> format kernels: one set per instruction set. */
#ifndef LB_FORMAT_CONVERT_H
#define LB_FORMAT_CONVERT_H

#include <fenv.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lowbit.h"

/* Returned by an encode kernel when every element was encodable. */
#define LB_ENCODE_OK SIZE_MAX

/* Encodes src[0..n) into dst (bulk layout, starting at element 0).
 * Returns LB_ENCODE_OK, or the index of the first NaN that the format
 * cannot hold (dst is then partly written). */
typedef size_t (*lb__encode_fn)(const lb_format_info *f, lb_overflow mode, const float *src,
                                size_t n, void *dst);
/* Decodes n codes of the bulk layout starting at element 0. */
typedef void (*lb__decode_fn)(const lb_format_info *f, const void *src, size_t n, float *dst);

size_t lb__encode_scalar(const lb_format_info *f, lb_overflow mode, const float *src, size_t n, void *dst);
void lb__decode_scalar(const lb_format_info *f, const void *src, size_t n, float *dst);
size_t lb__encode_avx2(const lb_format_info *f, lb_overflow mode, const float *src, size_t n, void *dst);
void lb__decode_avx2(const lb_format_info *f, const void *src, size_t n, float *dst);
size_t lb__encode_avx512(const lb_format_info *f, lb_overflow mode, const float *src, size_t n, void *dst);
void lb__decode_avx512(const lb_format_info *f, const void *src, size_t n, float *dst);

/* The kernels of an instruction set, for callers that convert many short
 * runs (tensor quantization) and have set the FP environment themselves. */
lb__encode_fn lb__encode_kernel(lb_isa isa);
lb__decode_fn lb__decode_kernel(lb_isa isa);

/* A row to be scaled before encoding: value i of block b (blocks of
 * `block` values) becomes min(max(x / div[b] + add[b], lo), hi); add NULL
 * means no offset (x / div[b] alone: what adding -0 gives, one instruction
 * fewer). */
typedef struct lb__prescale {
    const float *div, *add;
    size_t block;
    float lo, hi;
    /* The row stride, when the four rows after this one are to be
     * prefetched meanwhile, so that memory streams in under this row's
     * arithmetic: a quarter of each, a line per 16 values read (row r+k
     * its quarter 4-k), so every row arrives whole after four rows, read
     * as four streams from far-apart memory, which keep more reads in
     * flight than one (one thread, nvfp4 of a 1 GiB tensor on an Intel
     * Xeon, this change alone: the call 228-229 -> 207-212 ms); 0: no
     * prefetch. */
    size_t ahead;
} lb__prescale;

/* Scales and encodes (saturating) in one pass, where an instruction set
 * has such a kernel: returns it and its vector width (blocks must be a
 * multiple of it, or the row one block), or NULL. Finite input only;
 * returns LB_ENCODE_OK. */
typedef size_t (*lb__encode_prescaled_fn)(const lb_format_info *f, const float *src, size_t n, const lb__prescale *ps,
                                        void *dst);
lb__encode_prescaled_fn lb__encode_prescaled_kernel(lb_isa isa, size_t *width);
size_t lb__encode_prescaled_avx512(const lb_format_info *f, const float *src, size_t n, const lb__prescale *ps, void *dst);

/* Runs in the default floating-point environment (round to nearest, no
 * FTZ/DAZ) between begin and end, restoring the caller's. */
typedef struct lb__fenv_guard { fenv_t saved; } lb__fenv_guard;
void lb__fenv_begin(lb__fenv_guard *g);
void lb__fenv_end(lb__fenv_guard *g);

/* One code in and out of the bulk layout (the scalar loops and the SIMD
 * tails use these). */
static inline void lb__store_code(const lb_format_info *f, void *dst, size_t i, uint32_t code)
{
    uint8_t *d = dst;
    switch (f->bits) {
    case 4:
        /* an even element starts its byte afresh (so an odd count leaves the
         * last high nibble 0); the odd one that follows fills the top */
        d[i / 2] = (uint8_t)((i & 1) ? (d[i / 2] & 0x0F) | (code << 4) : code);
        break;
    case 6: case 8: d[i] = (uint8_t)code; break;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    case 16: { uint16_t h = (uint16_t)code; memcpy(d + 2 * i, &h, 2); break; } /* one store, not two */
    default: memcpy(d + 4 * i, &code, 4);
#else
    case 16: d[2 * i] = (uint8_t)code; d[2 * i + 1] = (uint8_t)(code >> 8); break;
    default:
        for (int b = 0; b < 4; b++) d[4 * i + b] = (uint8_t)(code >> (8 * b));
#endif
    }
}

static inline uint32_t lb__load_code(const lb_format_info *f, const void *src, size_t i)
{
    const uint8_t *s = src;
    switch (f->bits) {
    case 4: return (s[i / 2] >> ((i & 1) * 4)) & 0x0F;
    case 6: return s[i] & 0x3F;
    case 8: return s[i];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    case 16: { uint16_t h; memcpy(&h, s + 2 * i, 2); return h; }
    default: { uint32_t w; memcpy(&w, s + 4 * i, 4); return w; }
#else
    case 16: return (uint32_t)s[2 * i] | ((uint32_t)s[2 * i + 1] << 8);
    default:
        return (uint32_t)s[4 * i] | ((uint32_t)s[4 * i + 1] << 8) | ((uint32_t)s[4 * i + 2] << 16) |
               ((uint32_t)s[4 * i + 3] << 24);
#endif
    }
}

#endif

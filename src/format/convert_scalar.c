/* The scalar reference loops for bulk conversion. */
#include <string.h>

#include "format/codec.h"
#include "format/convert.h"

size_t lb__encode_scalar(const lb_format_info *f, lb_overflow mode, const float *src, size_t n, void *dst)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t code, bits;
        memcpy(&bits, &src[i], sizeof bits);
        if (src[i] != src[i] && f->kind == LB_KIND_FLOAT && f->specials != LB_SPECIALS_NONE)
            code = lb__nan_code(f, bits); /* from the float's own bits: a trip through
                                             double would quiet a signalling NaN */
        else if (f->encode(f, (double)src[i], mode, &code) != LB_OK)
            return i;
        lb__store_code(f, dst, i, code);
    }
    return LB_ENCODE_OK;
}

void lb__decode_scalar(const lb_format_info *f, const void *src, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t b = f->decode(f, lb__load_code(f, src, i));
        memcpy(&dst[i], &b, sizeof b);
    }
}

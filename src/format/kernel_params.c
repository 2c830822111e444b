#include "format/kernel_params.h"

#include <math.h>
#include <string.h>

#include "format/codec.h"

static lb__codec_kind codec_kind(const lb_format_info *f)
{
    if (f->kind == LB_KIND_INT) return LB_CODEC_INT;
    if (f->id == LB_FMT_FP32) return LB_CODEC_FP32;
    if (f->specials == LB_SPECIALS_E8M0) return LB_CODEC_E8M0;
    return LB_CODEC_MINIFLOAT;
}

void lb__enc_params_init(const lb_format_info *f, lb_overflow mode, lb__enc_params *p)
{
    memset(p, 0, sizeof *p);
    p->kind = codec_kind(f);
    p->saturate = mode == LB_SATURATE;
    p->code_mask = f->bits == 32 ? 0xFFFFFFFFu : (1u << f->bits) - 1;
    p->int_lo = (float)f->min_finite;
    p->int_hi = (float)f->max_finite;
    if (p->kind != LB_CODEC_MINIFLOAT) return;

    /* The special codes come from the scalar codec itself, so the two
     * paths cannot disagree on what NaN or overflow becomes. */
    f->encode(f, INFINITY, mode, &p->ovf_pos);
    f->encode(f, f->sign_bits ? -INFINITY : INFINITY, mode, &p->ovf_neg);
    p->nan_ok = f->specials != LB_SPECIALS_NONE;
    if (p->nan_ok) {
        p->nan_pos = lb__nan_code(f, 0x7FC00000);
        p->nan_neg = lb__nan_code(f, 0xFFC00000);
    }
    p->man_bits = f->man_bits;
    p->emin = 1 - f->bias;
    p->max_mag = lb__max_magnitude_code(f);
    p->sign_bit = f->sign_bits ? 1u << (f->exp_bits + f->man_bits) : 0;
    p->nan_fp16_payload = f->id == LB_FMT_FP16;
    p->zero_drops_sign = f->specials == LB_SPECIALS_FNUZ;
    p->is_unsigned_float = !f->sign_bits;
    if (p->is_unsigned_float) f->encode(f, -1.0, mode, &p->below_code);
    int emin = 1 - f->bias;
    p->min_normal_bits = emin <= -126 ? 0 : (uint32_t)(emin + 127) << 23;
    p->round_half = (1u << (22 - f->man_bits)) - 1;
    p->rebias = (uint32_t)(127 - f->bias) << f->man_bits;
    p->magic = emin <= -126 ? 0.0f : (float)ldexp(1.0, emin - f->man_bits + 23);
}

void lb__dec_params_init(const lb_format_info *f, lb__dec_params *p)
{
    memset(p, 0, sizeof *p);
    p->kind = codec_kind(f);
    p->man_bits = f->man_bits;
    p->exp_bits = f->exp_bits;
    p->bias = f->bias;
    p->specials = f->specials;
    p->int_shift = 32 - f->bits;
    p->int_signed = f->sign_bits;
    if (p->kind != LB_CODEC_MINIFLOAT) return;
    p->sign_bit = f->sign_bits ? 1u << (f->exp_bits + f->man_bits) : 0;
    p->mag_mask = (1u << (f->exp_bits + f->man_bits)) - 1;
    p->sub_scale = (float)ldexp(1.0, 1 - f->bias - f->man_bits);
    p->is_bf16 = f->id == LB_FMT_BF16;
    p->is_unsigned_float = !f->sign_bits;
}

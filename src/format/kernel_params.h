/* Constants the SIMD kernels need, derived once per call from a format
 * row and an overflow mode. The scalar codec does not use them: it
 * derives the same behaviour independently, and the tests compare. */
#ifndef LB_FORMAT_KERNEL_PARAMS_H
#define LB_FORMAT_KERNEL_PARAMS_H

#include <stdint.h>

#include "lowbit.h"

typedef enum lb__codec_kind {
    LB_CODEC_MINIFLOAT, /* sign/exponent/mantissa with subnormals */
    LB_CODEC_E8M0,      /* exponent only */
    LB_CODEC_INT,       /* integers */
    LB_CODEC_FP32       /* the identity (saturate clamps inf) */
} lb__codec_kind;

typedef struct lb__enc_params {
    lb__codec_kind kind;
    int man_bits;          /* m */
    int emin;              /* exponent of the smallest normal, 1 - bias */
    uint32_t max_mag;      /* magnitude bits of the largest finite code */
    uint32_t sign_bit;     /* the code's sign bit, 0 for unsigned formats */
    uint32_t ovf_pos, ovf_neg; /* code for overflow and +-inf */
    uint32_t nan_pos, nan_neg; /* code for NaN by input sign */
    int nan_ok;            /* the format holds NaN */
    int nan_fp16_payload;  /* fp16 keeps payload >> 13 (numpy) */
    int zero_drops_sign;   /* fnuz: -0 does not exist */
    int is_unsigned_float; /* ue4m3: negatives lie below the range */
    uint32_t below_code;   /* what a negative becomes in ue4m3/e8m0 */
    int saturate;
    float int_lo, int_hi;  /* integer formats: the clamp range */
    uint32_t code_mask;    /* (1 << bits) - 1 */
    /* The fast minifloat rounding (see convert_avx512.c): */
    uint32_t min_normal_bits; /* fp32 bits of 2^emin; 0 when every fp32 is "normal" here (bf16) */
    uint32_t round_half;      /* 2^(22-m) - 1: added before the shift, plus the kept LSB */
    uint32_t rebias;          /* (127 - bias) << m: fp32 exponent -> the format's */
    float magic;              /* 2^(emin - m + 23): its fp32 ulp is the format's subnormal step */
} lb__enc_params;

typedef struct lb__dec_params {
    lb__codec_kind kind;
    int man_bits, exp_bits, bias;
    lb_specials specials;
    uint32_t sign_bit;     /* 0 for unsigned formats */
    uint32_t mag_mask;
    float sub_scale;       /* 2^(1 - bias - m): a normal fp32 for every minifloat but bf16 */
    int is_bf16;           /* decoded by a shift: its subnormal scale is itself subnormal */
    int is_unsigned_float;
    int int_shift;         /* integers: 32 - bits, for sign extension */
    int int_signed;
} lb__dec_params;

void lb__enc_params_init(const lb_format_info *f, lb_overflow mode, lb__enc_params *p);
void lb__dec_params_init(const lb_format_info *f, lb__dec_params *p);

#endif

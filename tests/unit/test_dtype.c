/* C unit tests for the tensor storage types (lb_dtype_*): the table's
 * self-consistency, one hand-computed block per ggml type (the arithmetic
 * in the comment next to each expected value), hand-computed quantized
 * blocks, the fp16 helpers against the format layer, argument errors and
 * lb_dtype_bytes overflow. The gguf-package oracle sweep is in
 * tests/oracle/test_dtype.py. */
#undef NDEBUG
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "lowbit.h"
#include "io/ggml_blocks.h" /* internal: block structs and fp16 helpers */

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }

/* Dequantizes one block of t from raw bytes into out (block elements). */
static void dequant(lb_dtype t, const void *raw, float *out)
{
    lb_status s = lb_dtype_to_f32(t, raw, lb_dtype_get(t)->block, out);
    CHECK(s == LB_OK, "%s: %s", lb_dtype_get(t)->name, lb_last_error());
}

/* ===== The table ===== */

static void test_table(void)
{
    static const size_t struct_size[LB_DT_COUNT] = {
        [LB_DT_Q4_0] = sizeof(lb__block_q4_0), [LB_DT_Q4_1] = sizeof(lb__block_q4_1),
        [LB_DT_Q5_0] = sizeof(lb__block_q5_0), [LB_DT_Q5_1] = sizeof(lb__block_q5_1),
        [LB_DT_Q8_0] = sizeof(lb__block_q8_0), [LB_DT_Q2_K] = sizeof(lb__block_q2_k),
        [LB_DT_Q3_K] = sizeof(lb__block_q3_k), [LB_DT_Q4_K] = sizeof(lb__block_q4_k),
        [LB_DT_Q5_K] = sizeof(lb__block_q5_k), [LB_DT_Q6_K] = sizeof(lb__block_q6_k),
        [LB_DT_MXFP4] = sizeof(lb__block_mxfp4), [LB_DT_NVFP4] = sizeof(lb__block_nvfp4),
        [LB_DT_IQ4_NL] = sizeof(lb__block_iq4_nl), [LB_DT_IQ4_XS] = sizeof(lb__block_iq4_xs),
    };
    CHECK(lb_dtype_get(LB_DT_COUNT) == NULL && lb_dtype_get((lb_dtype)-1) == NULL, "out-of-range ids");
    for (int i = 0; i < LB_DT_COUNT; i++) {
        const lb_dtype_info *d = lb_dtype_get((lb_dtype)i);
        CHECK(d && d->id == (lb_dtype)i, "row %d has id %d", i, d ? (int)d->id : -1);
        if (!d) continue;
        for (const char *c = d->name; *c; c++) CHECK(*c < 'A' || *c > 'Z', "%s: lowbit names are lower case", d->name);
        if (i == LB_DT_QUANTIZED) { /* a logical tensor of several file tensors: no bytes of its own, no file name */
            uint64_t b = 7;
            CHECK(d->block_bytes == 0 && !d->st_name && d->ggml_type < 0 && d->can_read && !d->can_write, "quantized row");
            CHECK(lb_dtype_bytes(LB_DT_QUANTIZED, 1, &b) == LB_ERR_ARG && b == 7, "quantized has no byte size");
            continue;
        }
        CHECK(d->block >= 1 && d->block_bytes >= 1, "%s geometry", d->name);
        CHECK((d->block > 1) == (d->st_name == NULL), "%s: safetensors has exactly the plain types", d->name);
        if (d->block > 1) {
            CHECK(struct_size[i] == d->block_bytes, "%s: struct %zu bytes, table %u", d->name, struct_size[i],
                  d->block_bytes);
            CHECK(d->block == 32 || d->block == 64 || d->block == 256, "%s block %u", d->name, d->block);
        }
        CHECK(d->can_read == 1, "%s readable", d->name);
        lb_dtype back = LB_DT_COUNT;
        CHECK(lb_dtype_by_name(d->name, &back) == LB_OK && back == (lb_dtype)i, "by_name(%s)", d->name);
        if (d->st_name)
            CHECK(lb_dtype_by_name(d->st_name, &back) == LB_OK && back == (lb_dtype)i, "by_name(%s)", d->st_name);
        if (d->ggml_type >= 0)
            CHECK(lb_dtype_from_ggml(d->ggml_type, &back) == LB_OK && back == (lb_dtype)i, "from_ggml(%d)",
                  d->ggml_type);
        for (int j = 0; j < i; j++) {
            const lb_dtype_info *e = lb_dtype_get((lb_dtype)j);
            CHECK(strcasecmp(d->name, e->name) != 0, "duplicate name %s", d->name);
            CHECK(d->ggml_type < 0 || d->ggml_type != e->ggml_type, "duplicate ggml id %d", d->ggml_type);
        }
        /* can_write says exactly whether lb_dtype_from_f32 works */
        float x[256] = {0};
        uint8_t out[256 * 8];
        lb_status s = lb_dtype_from_f32((lb_dtype)i, x, d->block, out);
        CHECK(d->can_write ? s == LB_OK : s == LB_ERR_UNSUPPORTED, "%s: can_write %d but status %d", d->name,
              d->can_write, (int)s);
        if (!d->can_write) CHECK(strstr(lb_last_error(), d->name) != NULL, "message names %s: %s", d->name,
                                 lb_last_error());
    }
    lb_dtype out;
    CHECK(lb_dtype_by_name("Q4_K", &out) == LB_OK && out == LB_DT_Q4_K, "case-insensitive");
    CHECK(lb_dtype_by_name("q4", &out) == LB_ERR_FORMAT, "unknown name");
    CHECK(lb_dtype_from_ggml(9, &out) == LB_ERR_PARSE, "Q8_1 is not read");
}

static void test_bytes(void)
{
    uint64_t b = 7;
    CHECK(lb_dtype_bytes(LB_DT_Q4_0, 64, &b) == LB_OK && b == 36, "2 q4_0 blocks = 36 bytes, got %llu",
          (unsigned long long)b);
    CHECK(lb_dtype_bytes(LB_DT_Q6_K, 512, &b) == LB_OK && b == 420, "2 q6_k blocks = 420 bytes");
    CHECK(lb_dtype_bytes(LB_DT_F32, 3, &b) == LB_OK && b == 12, "3 f32 = 12 bytes");
    b = 7;
    CHECK(lb_dtype_bytes(LB_DT_Q4_0, 33, &b) == LB_ERR_ARG && b == 7, "partial block refused, bytes untouched");
    /* the largest whole-block count whose size fits in 64 bits, and one
     * block more (q8_0 spends 34 bytes on 32 values, so its size can
     * overflow; q4_0's cannot) */
    uint64_t top = UINT64_MAX / 34 * 32;
    CHECK(lb_dtype_bytes(LB_DT_Q8_0, top, &b) == LB_OK && b == UINT64_MAX / 34 * 34, "q8_0 at the limit");
    b = 7;
    CHECK(lb_dtype_bytes(LB_DT_Q8_0, top + 32, &b) == LB_ERR_ARG && b == 7, "q8_0 past the limit");
    CHECK(strstr(lb_last_error(), "overflow") != NULL, "message: %s", lb_last_error());
    CHECK(lb_dtype_bytes(LB_DT_F64, UINT64_MAX / 8, &b) == LB_OK, "f64 at the limit");
    CHECK(lb_dtype_bytes(LB_DT_F64, UINT64_MAX / 8 + 1, &b) == LB_ERR_ARG, "f64 past the limit");
    CHECK(lb_dtype_bytes(LB_DT_BOOL, UINT64_MAX, &b) == LB_OK && b == UINT64_MAX, "one byte each never overflows");
    CHECK(lb_dtype_bytes(LB_DT_COUNT, 1, &b) == LB_ERR_ARG, "unknown dtype");
}

/* ===== Hand-computed blocks ===== */

static void test_dequant_blocks(void)
{
    float y[256];

    /* Q4_0, d = 0.5 (fp16 0x3800). qs[0] = 0x0F: element 0 is the low
     * nibble 15 -> (15 - 8) * 0.5 = 3.5, element 16 the high nibble 0 ->
     * (0 - 8) * 0.5 = -4. qs[1] = 0x80: element 1 -> -4, element 17 ->
     * (8 - 8) * 0.5 = 0. */
    lb__block_q4_0 q40;
    memset(&q40, 0x88, sizeof q40);
    put16(q40.d, 0x3800);
    q40.qs[0] = 0x0F, q40.qs[1] = 0x80;
    dequant(LB_DT_Q4_0, &q40, y);
    CHECK(y[0] == 3.5f && y[16] == -4.0f && y[1] == -4.0f && y[17] == 0.0f && y[5] == 0.0f, "q4_0: %g %g %g %g",
          y[0], y[16], y[1], y[17]);

    /* Q4_1, d = 0.25 (0x3400), m = -1 (0xBC00), qs[0] = 0x5A: element 0 =
     * 0.25 * 10 - 1 = 1.5, element 16 = 0.25 * 5 - 1 = 0.25. */
    lb__block_q4_1 q41;
    memset(&q41, 0, sizeof q41);
    put16(q41.d, 0x3400), put16(q41.m, 0xBC00);
    q41.qs[0] = 0x5A;
    dequant(LB_DT_Q4_1, &q41, y);
    CHECK(y[0] == 1.5f && y[16] == 0.25f && y[1] == -1.0f, "q4_1: %g %g %g", y[0], y[16], y[1]);

    /* Q5_0, d = 1. qh = bits 0 and 17: element 0 = (3 | 16) - 16 = 3,
     * element 17 = (0xC | 16) - 16 = 12, element 16 = 0xC - 16 = -4
     * (qs[0] = 0xC3, qs[1] = 0xC0). */
    lb__block_q5_0 q50;
    memset(&q50, 0, sizeof q50);
    put16(q50.d, 0x3C00);
    q50.qh[0] = 0x01, q50.qh[2] = 0x02;
    q50.qs[0] = 0xC3, q50.qs[1] = 0xC0;
    dequant(LB_DT_Q5_0, &q50, y);
    CHECK(y[0] == 3.0f && y[16] == -4.0f && y[17] == 12.0f && y[1] == -16.0f, "q5_0: %g %g %g %g", y[0], y[16],
          y[17], y[1]);

    /* Q5_1, d = 2, m = 0.5, qh bit 31 and qs[15] = 0xF0: element 31 =
     * 2 * (15 | 16) + 0.5 = 62.5, element 15 = 2 * 0 + 0.5 = 0.5. */
    lb__block_q5_1 q51;
    memset(&q51, 0, sizeof q51);
    put16(q51.d, 0x4000), put16(q51.m, 0x3800);
    q51.qh[3] = 0x80, q51.qs[15] = 0xF0;
    dequant(LB_DT_Q5_1, &q51, y);
    CHECK(y[31] == 62.5f && y[15] == 0.5f, "q5_1: %g %g", y[31], y[15]);

    /* Q8_0, d = 2 (0x4000), qs[3] = -3 -> -6, qs[31] = 127 -> 254. */
    lb__block_q8_0 q80;
    memset(&q80, 0, sizeof q80);
    put16(q80.d, 0x4000);
    q80.qs[3] = -3, q80.qs[31] = 127;
    dequant(LB_DT_Q8_0, &q80, y);
    CHECK(y[3] == -6.0f && y[31] == 254.0f && y[0] == 0.0f, "q8_0: %g %g", y[3], y[31]);

    /* Q2_K, d = 1, dmin = 1, scales[0] = 0x21 (scale 1, min 2): element 0
     * with qs[0] bits 0-1 = 3 -> 1 * 3 - 2 = 1. Element 32 takes bits 2-3
     * of qs[0] (= 2) in sub-block 2, scales[2] = 0x14: 4 * 2 - 1 = 7. */
    lb__block_q2_k q2;
    memset(&q2, 0, sizeof q2);
    put16(q2.d, 0x3C00), put16(q2.dmin, 0x3C00);
    q2.scales[0] = 0x21, q2.scales[2] = 0x14, q2.qs[0] = 0x0B;
    dequant(LB_DT_Q2_K, &q2, y);
    CHECK(y[0] == 1.0f && y[32] == 7.0f && y[1] == -2.0f, "q2_k: %g %g %g", y[0], y[32], y[1]);

    /* Q3_K, d = 0.5. Scale 0 = (scales[0] & 15 = 1) | (scales[8] & 3 = 2)
     * << 4 = 33, minus 32 = 1. Element 0: qs[0] bits 0-1 = 3, hmask[0]
     * bit 0 set -> q = 3 -> 0.5 * 1 * 3 = 1.5. Element 1: qs[1] = 3 too,
     * hmask bit clear -> q = 3 - 4 = -1 -> -0.5. Element 16 (sub-block 1,
     * scales[1] = 0 | scales[8] bits 2-3 = 0 -> 0 - 32 = -32): qs[16] = 1,
     * hmask[16] = 0 -> q = -3 -> 0.5 * -32 * -3 = 48. */
    lb__block_q3_k q3;
    memset(&q3, 0, sizeof q3);
    put16(q3.d, 0x3800);
    q3.scales[0] = 0x01, q3.scales[8] = 0x02;
    q3.qs[0] = 3, q3.qs[1] = 3, q3.qs[16] = 1, q3.hmask[0] = 0x01;
    dequant(LB_DT_Q3_K, &q3, y);
    CHECK(y[0] == 1.5f && y[1] == -0.5f && y[16] == 48.0f, "q3_k: %g %g %g", y[0], y[1], y[16]);

    /* Q4_K, d = 1, dmin = 0.5. Sub-block 0: sc = scales[0] & 63 = 3,
     * m = scales[4] & 63 = 2; qs[0] = 0x97: element 0 = 1 * 3 * 7 - 0.5 * 2
     * = 20. Element 32 is the high nibble 9 in sub-block 1 (sc = scales[1]
     * = 1, m = scales[5] = 0): 9. Sub-block 4 (elements 128..): sc =
     * (scales[8] & 15 = 5) | (scales[0] >> 6 = 1) << 4 = 21, m =
     * (scales[8] >> 4 = 0) | (scales[4] >> 6 = 0) = 0; qs[64] = 2 -> 42. */
    lb__block_q4_k q4;
    memset(&q4, 0, sizeof q4);
    put16(q4.d, 0x3C00), put16(q4.dmin, 0x3800);
    q4.scales[0] = 0x43, q4.scales[4] = 0x02, q4.scales[1] = 0x01, q4.scales[8] = 0x05;
    q4.qs[0] = 0x97, q4.qs[64] = 0x02;
    dequant(LB_DT_Q4_K, &q4, y);
    CHECK(y[0] == 20.0f && y[32] == 9.0f && y[128] == 42.0f && y[1] == -1.0f, "q4_k: %g %g %g %g", y[0], y[32],
          y[128], y[1]);

    /* Q5_K: the Q4_K block above plus qh[0] = 0x03: element 0 gets bit 0
     * -> q = 7 | 16 = 23 -> 3 * 23 - 1 = 68; element 32 bit 1 -> q = 9 | 16
     * = 25 -> 25. */
    lb__block_q5_k q5;
    memset(&q5, 0, sizeof q5);
    memcpy(q5.d, q4.d, 2), memcpy(q5.dmin, q4.dmin, 2), memcpy(q5.scales, q4.scales, 12);
    q5.qs[0] = 0x97, q5.qh[0] = 0x03;
    dequant(LB_DT_Q5_K, &q5, y);
    CHECK(y[0] == 68.0f && y[32] == 25.0f, "q5_k: %g %g", y[0], y[32]);

    /* Q6_K, d = 1, scales[0] = 2, scales[4] = -1. ql[0] = 0x21, qh[0] =
     * 0x01: element 0 = 2 * ((1 | 1 << 4) - 32) = -30; element 64 (high
     * nibble 2, qh bits 4-5 = 0, sub-block 4) = -1 * (2 - 32) = 30. */
    lb__block_q6_k q6;
    memset(&q6, 0, sizeof q6);
    put16(q6.d, 0x3C00);
    q6.scales[0] = 2, q6.scales[4] = -1;
    q6.ql[0] = 0x21, q6.qh[0] = 0x01;
    dequant(LB_DT_Q6_K, &q6, y);
    CHECK(y[0] == -30.0f && y[64] == 30.0f && y[1] == -64.0f, "q6_k: %g %g %g", y[0], y[64], y[1]);

    /* MXFP4, e = 128: 2^(128 - 127) = 2 times the E2M1 value, i.e. 1.0
     * times gguf's doubled kvalue. qs[0] = 0x79: element 0 code 9 (-0.5)
     * -> -1, element 16 code 7 (6.0) -> 12. e = 0 gives 2^-128 * kvalue. */
    lb__block_mxfp4 mx;
    memset(&mx, 0, sizeof mx);
    mx.e = 128, mx.qs[0] = 0x79;
    dequant(LB_DT_MXFP4, &mx, y);
    CHECK(y[0] == -1.0f && y[16] == 12.0f && y[1] == 0.0f, "mxfp4: %g %g", y[0], y[16]);
    mx.e = 0, mx.qs[0] = 0x01;
    dequant(LB_DT_MXFP4, &mx, y);
    CHECK(y[0] == 0x1p-128f, "mxfp4 e=0: %a", (double)y[0]);

    /* NVFP4: sub-block 0 scale 0x38 (UE4M3 exp 7, man 0 -> 1.0; halved
     * 0.5 for the doubled kvalues). qs[0] = 0xF2: element 0 code 2 ->
     * 0.5 * 2 = 1.0, element 8 code 15 -> 0.5 * -12 = -6. Sub-block 1 scale
     * 0x7F (E4M3's NaN) reads as zero; sub-block 2 scale 0x01 (subnormal
     * 2^-9, halved) with code 7: 2^-10 * 12. */
    lb__block_nvfp4 nv;
    memset(&nv, 0, sizeof nv);
    nv.d[0] = 0x38, nv.d[1] = 0x7F, nv.d[2] = 0x01;
    nv.qs[0] = 0xF2, nv.qs[8] = 0x77, nv.qs[16] = 0x07;
    dequant(LB_DT_NVFP4, &nv, y);
    CHECK(y[0] == 1.0f && y[8] == -6.0f && y[16] == 0.0f && y[32] == 12.0f * 0x1p-10f, "nvfp4: %g %g %g %g", y[0],
          y[8], y[16], y[32]);
}

static void test_quant_blocks(void)
{
    float x[32] = {0}, y[32];
    uint8_t out[96 * 4]; /* room for the 96-value runs below */

    /* Q8_0: amax 127 -> d = 127 / 127 = 1 (fp16 0x3C00), id = 1; 2.5 rounds
     * half away from zero to 3, -2.5 to -3, 0.49 to 0. */
    x[0] = 127.0f, x[1] = 2.5f, x[2] = -2.5f, x[3] = 0.49f;
    CHECK(lb_dtype_from_f32(LB_DT_Q8_0, x, 32, out) == LB_OK, "%s", lb_last_error());
    CHECK(out[0] == 0x00 && out[1] == 0x3C && (int8_t)out[2] == 127 && (int8_t)out[3] == 3 &&
              (int8_t)out[4] == -3 && out[5] == 0,
          "q8_0 bytes %02x %02x %d %d %d %d", out[0], out[1], (int8_t)out[2], (int8_t)out[3], (int8_t)out[4],
          (int8_t)out[5]);

    /* Q4_0: the largest magnitude is -8, so d = -8 / -8 = 1 and id = 1.
     * q = trunc(x + 8.5): -8 -> 0, 0.5 -> 9, -0.5 -> 8, 7.6 -> 16, clipped
     * to 15. Elements 0 and 16 share byte 0 (low, high nibble). */
    memset(x, 0, sizeof x);
    x[0] = -8.0f, x[1] = 0.5f, x[2] = -0.5f, x[16] = 7.6f;
    CHECK(lb_dtype_from_f32(LB_DT_Q4_0, x, 32, out) == LB_OK, "%s", lb_last_error());
    CHECK(out[0] == 0x00 && out[1] == 0x3C, "q4_0 d = 1: %02x %02x", out[0], out[1]);
    CHECK(out[2] == (0x0 | 0xF << 4) && out[3] == (9 | 8 << 4) && out[4] == (8 | 8 << 4), "q4_0 qs %02x %02x %02x",
          out[2], out[3], out[4]);
    /* a block of zeros, whatever their signs: ggml's max starts at +0 and
     * only takes a strictly larger magnitude, so d = +0 / -8 = -0 (the gguf
     * package would write +0 here: lowbit writes ggml's bytes) */
    for (int i = 0; i < 32; i++) x[i] = -0.0f;
    lb_dtype_from_f32(LB_DT_Q4_0, x, 32, out);
    CHECK(out[0] == 0x00 && out[1] == 0x80 && out[2] == 0x88, "q4_0 of -0: %02x%02x %02x", out[1], out[0], out[2]);
    memset(x, 0, sizeof x);
    lb_dtype_from_f32(LB_DT_Q4_0, x, 32, out);
    CHECK(out[0] == 0x00 && out[1] == 0x80, "q4_0 of +0: d bits %02x%02x", out[1], out[0]);

    /* MXFP4: amax 4 -> e = floor(log2 4) - 2 + 127 = 127, d = 2^-1 = 0.5;
     * d * kvalues is the E2M1 grid. 0.75 is a tie of 0.5 (code 1) and 1.0
     * (code 2): the first, code 1, wins. -5 ties -4 (code 14, kvalue -8)
     * and -6 (code 15, kvalue -12): code 14. 4 -> code 6 (kvalue 8);
     * -0.25 ties 0 (code 0) and -0.5 (code 9): code 0. */
    memset(x, 0, sizeof x);
    x[0] = 4.0f, x[1] = 0.75f, x[2] = -5.0f, x[17] = -0.25f;
    CHECK(lb_dtype_from_f32(LB_DT_MXFP4, x, 32, out) == LB_OK, "%s", lb_last_error());
    CHECK(out[0] == 127 && out[1] == 6 && out[2] == (1 | 0 << 4) && out[3] == 14, "mxfp4 %d %02x %02x %02x", out[0],
          out[1], out[2], out[3]);
    CHECK(lb_dtype_to_f32(LB_DT_MXFP4, out, 32, y) == LB_OK && y[0] == 4.0f && y[1] == 0.5f && y[2] == -4.0f,
          "mxfp4 back %g %g %g", y[0], y[1], y[2]);

    /* NaN and inf are refused with the element index */
    float big[96];
    for (int i = 0; i < 96; i++) big[i] = 1.0f;
    big[70] = NAN;
    CHECK(lb_dtype_from_f32(LB_DT_Q8_0, big, 96, out) == LB_ERR_NAN, "NaN refused");
    CHECK(strstr(lb_last_error(), "element 70") != NULL, "message: %s", lb_last_error());
    big[70] = -INFINITY;
    CHECK(lb_dtype_from_f32(LB_DT_MXFP4, big, 96, out) == LB_ERR_NAN, "inf refused");
    /* ... but plain types carry them */
    CHECK(lb_dtype_from_f32(LB_DT_BF16, big, 96, out) == LB_OK, "bf16 carries inf");
}

/* ===== fp16 helpers against the format layer ===== */

static void test_fp16_helpers(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float want;
        lb_decode_value(LB_FMT_FP16, h, &want);
        if (bits_of(lb__fp16_to_f32(h)) != bits_of(want) && bad++ < 5)
            CHECK(0, "fp16 0x%04X -> 0x%08X, format layer 0x%08X", h, bits_of(lb__fp16_to_f32(h)), bits_of(want));
    }
    CHECK(bad == 0, "%d fp16 decodes differ", bad);
    /* encode: every sign/exponent/top-10-mantissa pattern with the low 13
     * bits at the rounding boundaries (and a pseudo-random filler) */
    static const uint32_t lows[] = {0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x0800, 0x17FF};
    bad = 0;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (uint32_t top = 0; top < (1u << 19); top++)
        for (size_t k = 0; k <= sizeof lows / sizeof lows[0]; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            uint32_t u = top << 13 | (k < sizeof lows / sizeof lows[0] ? lows[k] : (uint32_t)s & 0x1FFF);
            float x;
            memcpy(&x, &u, 4);
            uint32_t want = 0;
            lb_encode_value(LB_FMT_FP16, (double)x, LB_IEEE, &want);
            if (isnan(x)) { /* numpy's NaN rule: top payload bits, never inf */
                want = (u >> 16 & 0x8000) | 0x7C00 | (u & 0x7FFFFF) >> 13;
                if ((want & 0x3FF) == 0) want |= 1;
            }
            if (lb__fp16_from_f32(x) != want && bad++ < 5)
                CHECK(0, "fp32 0x%08X -> fp16 0x%04X, want 0x%04X", u, lb__fp16_from_f32(x), want);
        }
    CHECK(bad == 0, "%d fp16 encodes differ", bad);
}

/* ===== Plain types and arguments ===== */

static void test_plain(void)
{
    float y[8];
    const uint8_t i16[] = {0x00, 0x80, 0xFF, 0x7F, 0xFE, 0xFF}; /* -32768, 32767, -2 little-endian */
    CHECK(lb_dtype_to_f32(LB_DT_I16, i16, 3, y) == LB_OK && y[0] == -32768.0f && y[1] == 32767.0f && y[2] == -2.0f,
          "i16 %g %g %g", y[0], y[1], y[2]);
    const uint8_t i64[] = {0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00}; /* 2^24 + 1 rounds to even 2^24 */
    CHECK(lb_dtype_to_f32(LB_DT_I64, i64, 1, y) == LB_OK && y[0] == 16777216.0f, "i64 %.1f", y[0]);
    const uint8_t bools[] = {0, 1, 2, 0xFF};
    CHECK(lb_dtype_to_f32(LB_DT_BOOL, bools, 4, y) == LB_OK && y[0] == 0 && y[1] == 1 && y[2] == 1 && y[3] == 1,
          "bool");
    const double f64[] = {0.1, 1e300};
    CHECK(lb_dtype_to_f32(LB_DT_F64, f64, 2, y) == LB_OK && y[0] == 0.1f && isinf(y[1]), "f64 %g %g", y[0], y[1]);
    const uint8_t e4m3[] = {0x7E, 0x38}; /* 448 and 1 */
    CHECK(lb_dtype_to_f32(LB_DT_F8_E4M3, e4m3, 2, y) == LB_OK && y[0] == 448.0f && y[1] == 1.0f, "f8_e4m3");
    /* bf16 writes: 1 + 2^-8 is a tie and rounds to even 1.0; NaN payload kept and quieted */
    const float xs[] = {1.00390625f, 1.01171875f};
    uint16_t b[2];
    CHECK(lb_dtype_from_f32(LB_DT_BF16, xs, 2, b) == LB_OK && b[0] == 0x3F80 && b[1] == 0x3F82, "bf16 %04x %04x",
          b[0], b[1]);
    uint32_t snan = 0x7F812345u;
    float fnan;
    memcpy(&fnan, &snan, 4);
    CHECK(lb_dtype_from_f32(LB_DT_BF16, &fnan, 1, b) == LB_OK && b[0] == 0x7FC1, "bf16 NaN %04x", b[0]);
}

static void test_arguments(void)
{
    float x[64] = {0};
    uint8_t buf[64 * 8];
    CHECK(lb_dtype_to_f32(LB_DT_Q4_0, NULL, 32, x) == LB_ERR_ARG, "NULL src");
    CHECK(strstr(lb_last_error(), "NULL") != NULL, "message: %s", lb_last_error());
    CHECK(lb_dtype_to_f32(LB_DT_Q4_0, buf, 32, NULL) == LB_ERR_ARG, "NULL dst");
    CHECK(lb_dtype_from_f32(LB_DT_Q8_0, NULL, 32, buf) == LB_ERR_ARG, "NULL src");
    CHECK(lb_dtype_to_f32(LB_DT_Q4_K, buf, 255, x) == LB_ERR_ARG, "partial super-block");
    CHECK(strstr(lb_last_error(), "255") && strstr(lb_last_error(), "q4_k") && strstr(lb_last_error(), "256"),
          "message: %s", lb_last_error());
    CHECK(lb_dtype_from_f32(LB_DT_MXFP4, x, 48, buf) == LB_ERR_ARG, "partial block");
    CHECK(lb_dtype_to_f32(LB_DT_COUNT, buf, 1, x) == LB_ERR_ARG, "unknown dtype");
    CHECK(lb_dtype_from_f32((lb_dtype)-3, x, 1, buf) == LB_ERR_ARG, "negative dtype");
    CHECK(lb_dtype_from_f32(LB_DT_I16, x, 64, buf) == LB_ERR_UNSUPPORTED, "i16 is not written");
    CHECK(strstr(lb_last_error(), "i16") != NULL, "message: %s", lb_last_error());
    /* lengths: every whole-block count up to 5 blocks round-trips q8_0 of zeros */
    for (size_t nb = 0; nb <= 5; nb++) {
        float z[160] = {0}, back[160];
        uint8_t q[5 * 34];
        CHECK(lb_dtype_from_f32(LB_DT_Q8_0, z, nb * 32, q) == LB_OK, "q8_0 %zu blocks", nb);
        CHECK(lb_dtype_to_f32(LB_DT_Q8_0, q, nb * 32, back) == LB_OK, "q8_0 %zu blocks back", nb);
    }
}

int main(void)
{
    test_table();
    test_bytes();
    test_dequant_blocks();
    test_quant_blocks();
    test_fp16_helpers();
    test_plain();
    test_arguments();
    return check_summary();
}

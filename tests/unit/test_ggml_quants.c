/* C unit tests for lb__ggml_quantize_rows (src/io/ggml_quants.c): the
 * refusals (NaN/inf naming row and column, partial blocks, types lowbit
 * does not write), the importance matrix ignored where ggml ignores it,
 * and hand-computed blocks of the new quantizers (the arithmetic in the
 * comment beside each expected byte). The byte-for-byte sweep against
 * libggml is tests/llamacpp/test_ggml_quants_classic.py. */
#undef NDEBUG
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "io/ggml_blocks.h"
#include "io/ggml_quants.h"
#include "lowbit.h"
#include "util/cpu.h"

static const lb_dtype writable[] = {LB_DT_F32,  LB_DT_F16,   LB_DT_BF16,  LB_DT_Q8_0,   LB_DT_Q4_0,  LB_DT_Q4_1,
                                    LB_DT_Q5_0, LB_DT_Q5_1,  LB_DT_MXFP4, LB_DT_NVFP4,  LB_DT_IQ4_NL, LB_DT_IQ4_XS};
#define N_WRITABLE (sizeof writable / sizeof writable[0])

static float x[4 * 512], im[512];
static uint8_t out[4 * 512 * 4], out2[4 * 512 * 4];

static void test_refusals(void)
{
    for (size_t k = 0; k < N_WRITABLE; k++) {
        const lb_dtype t = writable[k];
        const char *name = lb_dtype_get(t)->name;
        const float bad[3] = {NAN, INFINITY, -INFINITY};
        for (int b = 0; b < 3; b++) {
            for (int i = 0; i < 3 * 512; i++) x[i] = 1.0f;
            x[512 + 5] = bad[b];
            CHECK(lb__ggml_quantize_rows(t, x, 3, 512, NULL, out) == LB_ERR_NAN, "%s refuses non-finite", name);
            CHECK(strstr(lb_last_error(), "row 1, column 5") && strstr(lb_last_error(), name), "%s: %s", name,
                  lb_last_error());
        }
        const unsigned block = lb_dtype_get(t)->block;
        if (block > 1) {
            CHECK(lb__ggml_quantize_rows(t, x, 2, block + block / 2, NULL, out) == LB_ERR_ARG, "%s partial block",
                  name);
            CHECK(strstr(lb_last_error(), "block") != NULL, "%s: %s", name, lb_last_error());
        }
        CHECK(lb__ggml_quantize_rows(t, x, 0, 512, NULL, out) == LB_OK, "%s: no rows is no work", name);
        CHECK(lb__ggml_quantize_rows(t, NULL, 1, 512, NULL, out) == LB_ERR_ARG, "%s: NULL src", name);
    }
    /* not ggml types, or no bytes of their own */
    const lb_dtype never[] = {LB_DT_F8_E4M3, LB_DT_U8, LB_DT_BOOL, LB_DT_QUANTIZED};
    for (size_t k = 0; k < sizeof never / sizeof never[0]; k++)
        CHECK(lb__ggml_quantize_rows(never[k], x, 1, 256, NULL, out) == LB_ERR_UNSUPPORTED, "%s",
              lb_dtype_get(never[k])->name);
    /* ggml types lowbit does not quantize to */
    const lb_dtype plain[] = {LB_DT_F64, LB_DT_I8, LB_DT_I32};
    for (size_t k = 0; k < sizeof plain / sizeof plain[0]; k++)
        CHECK(lb__ggml_quantize_rows(plain[k], x, 1, 256, NULL, out) == LB_ERR_UNSUPPORTED, "%s",
              lb_dtype_get(plain[k])->name);
    CHECK(lb__ggml_quantize_rows(LB_DT_COUNT, x, 1, 256, NULL, out) == LB_ERR_ARG, "unknown id");
}

/* q8_0, mxfp4, nvfp4 and the plain types: ggml ignores the importance matrix */
static void test_imatrix_ignored(void)
{
    for (int i = 0; i < 4 * 512; i++) x[i] = sinf((float)i * 0.37f) * (float)(1 + i % 7);
    for (int i = 0; i < 512; i++) im[i] = 0.001f + (float)(i % 13);
    const lb_dtype t[] = {LB_DT_F16, LB_DT_BF16, LB_DT_Q8_0, LB_DT_MXFP4, LB_DT_NVFP4};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        CHECK(lb__ggml_quantize_rows(t[k], x, 4, 512, NULL, out) == LB_OK, "%s", lb_last_error());
        CHECK(lb__ggml_quantize_rows(t[k], x, 4, 512, im, out2) == LB_OK, "%s", lb_last_error());
        uint64_t n;
        lb_dtype_bytes(t[k], 4 * 512, &n);
        CHECK(memcmp(out, out2, n) == 0, "%s ignores the imatrix", lb_dtype_get(t[k])->name);
    }
    /* the iq4 types use it: some block must change */
    for (int i = 0; i < 512; i++) im[i] = (i % 3 == 0) ? 100.0f : 0.01f;
    CHECK(lb__ggml_quantize_rows(LB_DT_IQ4_XS, x, 4, 512, NULL, out) == LB_OK, "%s", lb_last_error());
    CHECK(lb__ggml_quantize_rows(LB_DT_IQ4_XS, x, 4, 512, im, out2) == LB_OK, "%s", lb_last_error());
    CHECK(memcmp(out, out2, 4 * 2 * 136) != 0, "iq4_xs uses the imatrix");
}

static void test_hand_blocks(void)
{
    /* Q5_1 of 0..31: min 0, d = 31 / 31 = 1, q = trunc(j + 0.5) = j; the
     * fifth bits are those of 16..31: qh = 0xFFFF0000 */
    for (int j = 0; j < 32; j++) x[j] = (float)j;
    CHECK(lb__ggml_quantize_rows(LB_DT_Q5_1, x, 1, 32, NULL, out) == LB_OK, "%s", lb_last_error());
    const lb__block_q5_1 *q51 = (const lb__block_q5_1 *)out;
    CHECK(lb__le16(q51->d) == 0x3C00 && lb__le16(q51->m) == 0x0000, "q5_1 d %04x m %04x", lb__le16(q51->d),
          lb__le16(q51->m));
    CHECK(lb__le32(q51->qh) == 0xFFFF0000u && q51->qs[0] == 0x00 && q51->qs[15] == 0xFF && q51->qs[3] == 0x33,
          "q5_1 qh %08x qs %02x %02x", lb__le32(q51->qh), q51->qs[0], q51->qs[15]);

    /* Q5_0: largest magnitude -16, d = -16 / -16 = 1; q = trunc(x + 16.5):
     * -16 -> 0, 0 -> 16 (fifth bit only), 15 -> 31, 14.9 -> 31 */
    memset(x, 0, 32 * sizeof *x);
    x[0] = -16.0f, x[1] = 15.0f, x[17] = 14.9f;
    CHECK(lb__ggml_quantize_rows(LB_DT_Q5_0, x, 1, 32, NULL, out) == LB_OK, "%s", lb_last_error());
    const lb__block_q5_0 *q50 = (const lb__block_q5_0 *)out;
    CHECK(lb__le16(q50->d) == 0x3C00, "q5_0 d %04x", lb__le16(q50->d));
    CHECK(q50->qs[0] == 0x00 && q50->qs[1] == 0xFF && q50->qs[2] == 0x00, "q5_0 qs %02x %02x", q50->qs[0],
          q50->qs[1]);
    CHECK(lb__le32(q50->qh) == 0xFFFFFFFEu, "q5_0 qh %08x (all but element 0)", lb__le32(q50->qh));

    /* Q4_1 of -1, 2 and zeros: min -1, d = 3 / 15 = 0.2f (just above 0.2),
     * whose reciprocal 4.99999993 rounds to 5.0f; 0 -> trunc(1 * 5 + 0.5) =
     * 5, 2 -> trunc(3 * 5 + 0.5) = 15 */
    memset(x, 0, 32 * sizeof *x);
    x[0] = -1.0f, x[16] = 2.0f;
    CHECK(lb__ggml_quantize_rows(LB_DT_Q4_1, x, 1, 32, NULL, out) == LB_OK, "%s", lb_last_error());
    const lb__block_q4_1 *q41 = (const lb__block_q4_1 *)out;
    CHECK(lb__le16(q41->m) == 0xBC00, "q4_1 m = -1: %04x", lb__le16(q41->m));
    CHECK(q41->qs[0] == (0 | 15 << 4) && q41->qs[1] == (5 | 5 << 4), "q4_1 qs %02x %02x", q41->qs[0], q41->qs[1]);

    /* NVFP4, four sub-blocks:
     * 0: amax 6, 6 / 6 = 1 = 2^0: UE4M3 exponent 7, code 0x38, half-scale
     *    0.5; 6 -> kvalue 12 (code 7), -6 -> 15, 0.5 -> kvalue 1 (code 1),
     *    3 -> kvalue 6 (code 5), 0.75 ties 0.5 and 1: the first, code 1
     * 1: zeros: code 0, every element code 0
     * 2: amax 1e4: 1666 clamps to 448 = 1.75 * 2^8, exponent 15: 0x7E
     * 3: amax 6 * 2^-8: 2^-8 is subnormal in UE4M3: trunc(2^-8 * 512 +
     *    0.5) = trunc(2.5) = 2, code 0x02 */
    memset(x, 0, 64 * sizeof *x);
    x[0] = 6.0f, x[1] = -6.0f, x[2] = 0.5f, x[3] = 3.0f, x[8] = 0.75f;
    x[32] = 1e4f;
    x[48] = 6.0f * 0x1p-8f;
    CHECK(lb__ggml_quantize_rows(LB_DT_NVFP4, x, 1, 64, NULL, out) == LB_OK, "%s", lb_last_error());
    const lb__block_nvfp4 *nv = (const lb__block_nvfp4 *)out;
    CHECK(nv->d[0] == 0x38 && nv->d[1] == 0x00 && nv->d[2] == 0x7E && nv->d[3] == 0x02, "nvfp4 scales %02x %02x %02x %02x",
          nv->d[0], nv->d[1], nv->d[2], nv->d[3]);
    CHECK(nv->qs[0] == (7 | 1 << 4) && nv->qs[1] == 15 && nv->qs[2] == 1 && nv->qs[3] == 5, "nvfp4 qs %02x %02x %02x %02x",
          nv->qs[0], nv->qs[1], nv->qs[2], nv->qs[3]);
    CHECK(nv->qs[8] == 0 && nv->qs[15] == 0, "nvfp4 zero sub-block codes");

    /* IQ4: a block of zeros is scale 0 and the grid point nearest 0 (index
     * 8, value 1) everywhere; IQ4_XS stores d = -0 / 32 = -0 and each
     * sub-block scale code 0 + 32 (low nibble 0, high bits 2) */
    memset(x, 0, 256 * sizeof *x);
    CHECK(lb__ggml_quantize_rows(LB_DT_IQ4_NL, x, 1, 32, NULL, out) == LB_OK, "%s", lb_last_error());
    CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0x88 && out[17] == 0x88, "iq4_nl zeros");
    CHECK(lb__ggml_quantize_rows(LB_DT_IQ4_XS, x, 1, 256, NULL, out) == LB_OK, "%s", lb_last_error());
    const lb__block_iq4_xs *xs = (const lb__block_iq4_xs *)out;
    CHECK(lb__le16(xs->d) == 0x8000 && lb__le16(xs->scales_h) == 0xAAAA && xs->scales_l[0] == 0 && xs->qs[0] == 0x88,
          "iq4_xs zeros: d %04x h %04x", lb__le16(xs->d), lb__le16(xs->scales_h));

    /* IQ4_NL round trip of a smooth block stays close (the search picks a
     * least-squares scale): every element within 10% of the block's range */
    for (int j = 0; j < 32; j++) x[j] = sinf((float)j * 0.3f);
    CHECK(lb__ggml_quantize_rows(LB_DT_IQ4_NL, x, 1, 32, NULL, out) == LB_OK, "%s", lb_last_error());
    float y[32];
    CHECK(lb_dtype_to_f32(LB_DT_IQ4_NL, out, 32, y) == LB_OK, "%s", lb_last_error());
    for (int j = 0; j < 32; j++) CHECK(fabsf(y[j] - x[j]) < 0.2f, "iq4_nl element %d: %g vs %g", j, y[j], x[j]);
}

/* ggml's best_index_int8 as the bisection it is, to check the branch-free
 * lb__iq4_nearest32 against */
static int bisect_iq4(float v)
{
    const int8_t *g = lb__kvalues_iq4nl;
    if (v <= g[0]) return 0;
    if (v >= g[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < g[mid]) hi = mid;
        else lo = mid;
    }
    return v - g[hi - 1] < g[hi] - v ? hi - 1 : hi;
}

static uint32_t rng_state = 12345u;
static uint32_t next_u32(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 17, rng_state ^= rng_state << 5;
    return rng_state;
}

static void test_iq4_nearest(void)
{
    float v[32];
    uint8_t idx[32];
    float val[32];
    long bad = 0, n = 0;
    for (int round = 0; round < 40000; round++) {
        for (int j = 0; j < 32; j++) {
            const uint32_t r = next_u32();
            switch (round % 4) {
            case 0: v[j] = lb__f32_from_bits(next_u32()); break; /* any bits: NaN, inf, subnormal */
            case 1: { /* around a midpoint or a grid point, a few ulps off */
                const int k = (int)(r % 15);
                float m = (r >> 8 & 1) ? 0.5f * ((float)lb__kvalues_iq4nl[k] + (float)lb__kvalues_iq4nl[k + 1])
                                       : (float)lb__kvalues_iq4nl[k + (r >> 9 & 1)];
                v[j] = lb__f32_from_bits(lb__bits_from_f32(m) + (uint32_t)((int)(r >> 12 & 7) - 3));
                break;
            }
            case 2: v[j] = ((float)(int32_t)r / 2147483648.0f) * 140.0f; break; /* the grid's range */
            default: v[j] = (float)((int)(r % 300) - 150) * 0.5f; break;       /* halves: exact ties */
            }
        }
        v[0] = NAN, v[1] = -NAN, v[2] = INFINITY, v[3] = -INFINITY, v[4] = -0.0f;
        const float id = round % 8 == 7 ? 1.0f / 3.0f : 1.0f;
        lb__iq4_nearest32(v, id, idx, val);
        for (int j = 0; j < 32; j++, n++) {
            const int want = bisect_iq4(id * v[j]);
            if (idx[j] != want || val[j] != (float)lb__kvalues_iq4nl[want]) {
                if (bad++ < 5) CHECK(0, "v %a: index %d value %g, bisection %d", (double)v[j], idx[j], val[j], want);
            }
        }
    }
    CHECK(bad == 0, "%ld of %ld grid picks differ from the bisection", bad, n);
}

/* MXFP4's scale is floor(log2(amax)) - 2 + 127; lowbit reads it off the
 * exponent field unless amax is within 256 ulps below a power of two
 * (where log2 can round up). Every exponent, just outside and inside that
 * window, against the log2 itself. */
static void test_mxfp4_scale(void)
{
    long bad = 0, n = 0;
    memset(x, 0, 32 * sizeof *x);
    for (uint32_t e = 0; e < 255; e++)
        for (uint32_t m = 0x7FFE00u; m <= 0x800002u; m++) { /* the last three: the next power of two and up */
            const uint32_t bits = (e << 23) + m;
            if (bits >= 0x7F800000u) continue;
            x[7] = lb__f32_from_bits(bits);
            x[9] = -0.5f * x[7];
            lb__block_mxfp4 b;
            CHECK(lb__ggml_quantize_rows(LB_DT_MXFP4, x, 1, 32, NULL, &b) == LB_OK, "%s", lb_last_error());
            const float fl = floorf((float)log2((double)x[7])) - 2.0f + 127.0f;
            const uint8_t want = (uint8_t)(int32_t)fl; /* in range: fl >= -151 */
            n++;
            if (b.e != want && bad++ < 5) CHECK(0, "amax %a: e %u, log2 says %u", (double)x[7], b.e, want);
        }
    CHECK(bad == 0 && n > 130000, "%ld of %ld mxfp4 scales differ from floor(log2)", bad, n);
}

/* The AVX2 build of the classic quantizers against the scalar one
 * (ggml_blocks_quant.h): the same bytes on gaussian blocks and on the cases
 * that take the other paths (zero, constant, tiny blocks whose 1/d is
 * infinite, outliers, exact halves, values near powers of two for MXFP4's
 * exponent, huge values for NVFP4's scale clamp). */
static void test_avx2_twins(void)
{
    if (!lb__ggml_blocks_avx2_built() || lb__isa_x86(lb_isa_detected()) < LB_ISA_AVX2) {
        printf("no AVX2 build or CPU here: the twin check is skipped\n");
        return;
    }
    enum { NB = 64, N = NB * 64 };
    static float v[N];
    static uint8_t a[N * 2], b[N * 2];
    typedef void (*qfn)(const float *restrict, size_t, void *restrict);
    static const struct { const char *name; qfn scalar, avx2, avx512; } q[] = {
#define TWIN(type) {#type, lb__quantize_##type##_scalar, lb__quantize_##type##_avx2, lb__quantize_##type##_avx512},
        LB__CLASSIC_QUANTIZERS(TWIN)
#undef TWIN
    };
    const int classic512 = lb__ggml_blocks_avx512_built() && lb__isa_x86(lb_isa_detected()) >= LB_ISA_AVX512;
    if (!classic512) printf("no AVX-512 build or CPU here: the classic quantizers' AVX-512 twin check is skipped\n");
    for (int kind = 0; kind < 12; kind++) {
        for (size_t i = 0; i < N; i++) {
            float g = (float)((int32_t)next_u32()) / 2147483648.0f + (float)((int32_t)next_u32()) / 4294967296.0f;
            switch (kind) {
            case 0: v[i] = g; break;
            case 1: v[i] = (i / 32) % 3 == 0 ? 0.0f : g; break;                           /* zero blocks */
            case 2: v[i] = (i / 32) % 2 ? -1.5f : g * 1e-3f; break;                       /* constant blocks */
            case 3: v[i] = g * 1e-39f; break;                                             /* 1/d infinite */
            case 4: v[i] = i % 37 == 0 ? 300.0f * g : g; break;                           /* outliers */
            case 5: v[i] = (float)((int)(g * 16)) * 0.5f; break;                          /* exact halves */
            case 6: v[i] = (i % 32 == 0 ? 0.99999994f : 0.5f) * (g < 0 ? -1.0f : 1.0f); break; /* near 2^k */
            case 7: v[i] = g * 1e6f; break;                                               /* big scales */
            case 9: /* a block's largest magnitude twice, with both signs in either order (the first one's sign
                     * is Q4_0's and Q5_0's), and blocks of signed zeros */
                v[i] = (i / 32) % 4 == 3 ? ((i & 1) ? 0.0f : -0.0f)
                       : i % 32 == (i / 32) % 7 || i % 32 == 31 - (i / 32) % 5
                           ? (((i / 32) & 1) == (i % 32 < 16) ? -2.5f : 2.5f)
                           : g;
                break;
            case 10: v[i] = (i / 32) % 2 ? g * 1e-30f : g * 3e37f; break;                /* tiny and huge blocks */
            case 11: { /* blocks of one sign with zeros of both signs in them: a zero minimum (or maximum) takes
                        * the first zero's sign in ggml's scan (Q4_1, Q5_1) */
                const size_t blk = i / 32, j = i % 32;
                const float mag = g < 0 ? -g : g, sign = blk % 2 ? -1.0f : 1.0f;
                if (blk % 5 == 4) { /* all zeros, +0 first: max - min is -0 if either extreme has the wrong sign */
                    v[i] = j % 3 == 0 ? 0.0f : -0.0f;
                    break;
                }
                v[i] = j == blk % 29 + 1 ? ((blk / 2) % 2 ? -0.0f : 0.0f)
                       : j == blk % 13 + 17 ? ((blk / 2) % 2 ? 0.0f : -0.0f)
                                            : sign * (0.25f + mag);
                break;
            }
            default: { /* IQ4 fits on the grid: the first try's inverse scale is -1 (a block's first value
                        * -127), so its products land on every grid point, every midpoint (a tie), and
                        * either side of them by an ulp */
                const int8_t *grid = lb__kvalues_iq4nl;
                size_t j = i % 32, k = (j + i / 32) % 15;
                float mid = 0.5f * (float)(grid[k] + grid[k + 1]);
                float pick[4] = {(float)grid[k], mid, nextafterf(mid, -200.0f), nextafterf(mid, 200.0f)};
                v[i] = j == 0 ? -127.0f : -pick[(i / 32 + j) % 4];
                break;
            }
            }
        }
        for (size_t t = 0; t < sizeof q / sizeof q[0]; t++) {
            const lb_dtype_info *d = NULL;
            for (int k = 0; k < LB_DT_COUNT && !d; k++) {
                const lb_dtype_info *e = lb_dtype_get((lb_dtype)k);
                if (e && strcmp(e->name, q[t].name) == 0) d = e;
            }
            CHECK(d != NULL, "%s: no dtype of that name", q[t].name);
            /* every block, and a count that leaves the AVX-512 build's 16-block steps a partial one */
            for (int part = 0; part < 2 && d; part++) {
                size_t nb = (strcmp(q[t].name, "nvfp4") == 0 ? N / 64 : N / 32) - (size_t)(5 * part);
                size_t bytes = nb * d->block_bytes;
                memset(a, 0x5A, sizeof a), memset(b, 0xA5, sizeof b);
                q[t].scalar(v, nb, a);
                q[t].avx2(v, nb, b);
                CHECK(memcmp(a, b, bytes) == 0, "%s kind %d, %zu blocks: AVX2 bytes differ from scalar", q[t].name,
                      kind, nb);
                if (!classic512) continue;
                memset(b, 0xA5, sizeof b);
                q[t].avx512(v, nb, b);
                CHECK(memcmp(a, b, bytes) == 0, "%s kind %d, %zu blocks: AVX-512 bytes differ from scalar",
                      q[t].name, kind, nb);
            }
        }
        /* the IQ4 search, with and without an importance matrix; its
         * AVX-512 build too where this CPU runs it */
        typedef void (*ifn)(const float *restrict, size_t, const float *restrict, void *restrict);
        static const struct { const char *name; ifn scalar, avx2; size_t block, bytes; } iq[] = {
            {"iq4_nl", lb__quantize_iq4_nl_scalar, lb__quantize_iq4_nl_avx2, 32, 18},
            {"iq4_xs", lb__quantize_iq4_xs_scalar, lb__quantize_iq4_xs_avx2, 256, 136},
            {"iq4_nl avx512", lb__quantize_iq4_nl_scalar, lb__quantize_iq4_nl_avx512, 32, 18},
            {"iq4_xs avx512", lb__quantize_iq4_xs_scalar, lb__quantize_iq4_xs_avx512, 256, 136},
        };
        const int avx512 = lb__ggml_blocks_iq4_avx512_built() && lb__isa_x86(lb_isa_detected()) >= LB_ISA_AVX512;
        if (kind == 0 && !avx512) printf("no AVX-512 build or CPU here: its IQ4 twin check is skipped\n");
        static float wts[N];
        for (size_t i = 0; i < N; i++) wts[i] = i % 7 == 0 ? 0.0f : (float)(next_u32() % 1000) / 250.0f;
        for (size_t t = 0; t < (avx512 ? 4 : 2); t++)
            for (int with = 0; with <= 1; with++) {
                size_t nb = N / iq[t].block;
                memset(a, 0x5A, sizeof a), memset(b, 0xA5, sizeof b);
                iq[t].scalar(v, nb, with ? wts : NULL, a);
                iq[t].avx2(v, nb, with ? wts : NULL, b);
                CHECK(memcmp(a, b, nb * iq[t].bytes) == 0, "%s kind %d imatrix %d: vector bytes differ from scalar",
                      iq[t].name, kind, with);
            }
        /* the scales the codes were taken at (GPTQ's IQ4 grid), every build */
        typedef void (*sfn)(int, const float *restrict, size_t, const float *restrict, float *restrict);
        const sfn builds[3] = {lb__quantize_iq4_code_scales_scalar, lb__quantize_iq4_code_scales_avx2,
                               lb__quantize_iq4_code_scales_avx512};
        static float sa[N / 32], sb[N / 32];
        for (int xs = 0; xs <= 1; xs++)
            for (int with = 0; with <= 1; with++) {
                size_t nb = N / (xs ? 256 : 32);
                builds[0](xs, v, nb, with ? wts : NULL, sa);
                for (int b2 = 1; b2 < (avx512 ? 3 : 2); b2++) {
                    memset(sb, 0x5A, sizeof sb);
                    builds[b2](xs, v, nb, with ? wts : NULL, sb);
                    CHECK(memcmp(sa, sb, N / 32 * sizeof *sa) == 0, "iq4 code scales (xs %d) kind %d imatrix %d: build %d "
                          "differs from scalar", xs, kind, with, b2);
                }
            }
    }
}

/* The search's fits lane by lane: with x = w = (1, 0, 0, ...) a fit's sums
 * are q and q^2 for q the grid point its inverse scale picks for 1, so
 * each lane shows one choice. Every build against the scalar one, bit for
 * bit, for inverse scales on every grid point, midpoint (a tie), an ulp or
 * a few either side, signed zeros, subnormals, huge values, infinities and
 * NaN; then random fits of whole sub-blocks. */
static void test_iq4_fit_lanes(void)
{
    typedef void (*ffn)(const float *, const float *, const float *, float *, float *);
    const int avx512 = lb__ggml_blocks_iq4_avx512_built() && lb__isa_x86(lb_isa_detected()) >= LB_ISA_AVX512;
    const int avx2 = lb__ggml_blocks_avx2_built() && lb__isa_x86(lb_isa_detected()) >= LB_ISA_AVX2;
    const ffn builds[2] = {lb__quantize_iq4_fit16_avx2, lb__quantize_iq4_fit16_avx512};
    const int have[2] = {avx2, avx512};
    enum { N = 1024 };
    static float ids[N];
    size_t n = 0;
    const int8_t *g = lb__kvalues_iq4nl;
    for (int k = 0; k < 16; k++) {
        float pts[2] = {(float)g[k], k < 15 ? 0.5f * (float)(g[k] + g[k + 1]) : 200.0f};
        for (int p = 0; p < 2; p++) {
            float a = pts[p], b = pts[p];
            ids[n++] = a;
            for (int u = 0; u < 3; u++) a = nextafterf(a, -INFINITY), b = nextafterf(b, INFINITY), ids[n++] = a, ids[n++] = b;
        }
    }
    static const float special[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-38f, 1e30f, -1e30f, INFINITY, -INFINITY,
                                    NAN, -NAN, 127.0f, -127.0f, 113.0f, -128.0f, 114.0f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) ids[n++] = special[i];
    while (n % 16) ids[n++] = 0.5f;
    float e0[32] = {1.0f}, w[32] = {1.0f};
    int bad[2] = {0, 0};
    for (size_t i = 0; i < n; i += 16) {
        float ra[16], rb[16], sa[16], sb[16];
        lb__quantize_iq4_fit16_scalar(e0, w, ids + i, ra, rb);
        for (int b2 = 0; b2 < 2; b2++) {
            if (!have[b2]) continue;
            builds[b2](e0, w, ids + i, sa, sb);
            bad[b2] += memcmp(ra, sa, sizeof ra) != 0 || memcmp(rb, sb, sizeof rb) != 0;
        }
    }
    /* random whole sub-blocks: x gaussian, w positive, inverse scales around the search's */
    for (int r = 0; r < 2000; r++) {
        float xx[32], ww[32], id[16], ra[16], rb[16], sa[16], sb[16];
        for (int j = 0; j < 32; j++) {
            xx[j] = (float)((int32_t)next_u32()) / 2147483648.0f;
            ww[j] = (float)(next_u32() % 1000) / 100.0f;
        }
        for (int t = 0; t < 16; t++) id[t] = (float)((int32_t)next_u32()) / 16777216.0f;
        lb__quantize_iq4_fit16_scalar(xx, ww, id, ra, rb);
        for (int b2 = 0; b2 < 2; b2++) {
            if (!have[b2]) continue;
            builds[b2](xx, ww, id, sa, sb);
            bad[b2] += memcmp(ra, sa, sizeof ra) != 0 || memcmp(rb, sb, sizeof rb) != 0;
        }
    }
    CHECK(bad[0] == 0, "iq4 fits: %d groups of 16 lanes differ between the AVX2 build and the scalar one", bad[0]);
    CHECK(bad[1] == 0, "iq4 fits: %d groups of 16 lanes differ between the AVX-512 build and the scalar one", bad[1]);
    if (!avx2 || !avx512) printf("iq4 fits: a vector build this CPU lacks is skipped\n");
}

int main(void)
{
    test_iq4_fit_lanes();
    test_avx2_twins();
    test_iq4_nearest();
    test_mxfp4_scale();
    test_refusals();
    test_imatrix_ignored();
    test_hand_blocks();
    return check_summary();
}

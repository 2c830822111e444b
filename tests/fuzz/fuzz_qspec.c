/* Fuzz harness for the spec parser (the one parser of untrusted text in
 * the library so far). Every input must either be refused with a message
 * or parse to a spec that (1) prints canonically and parses back to the
 * same spec and (2) quantizes and dequantizes a small tensor.
 *
 * Built with -DLB_LIBFUZZER and clang -fsanitize=fuzzer,address (`make fuzz`)
 * it is a libFuzzer target; built plainly (`make test`) its main() runs a
 * deterministic mutation loop over a seed corpus, so CI exercises it too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lowbit.h"

static int same_spec(const lb_qspec *a, const lb_qspec *b)
{
    return a->element == b->element && a->granularity == b->granularity && a->group == b->group &&
           a->scale_format == b->scale_format && a->affine == b->affine && a->two_level == b->two_level &&
           a->search == b->search && a->mx_rounding == b->mx_rounding && a->int_frac_bits == b->int_frac_bits && a->range == b->range &&
           a->group_rows == b->group_rows;
}

static void fail(const char *what, const char *input)
{
    fprintf(stderr, "fuzz_qspec: %s for input '%s'\n", what, input);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[300];
    if (size >= sizeof text) size = sizeof text - 1;
    memcpy(text, data, size);
    text[size] = '\0';
    lb_qspec q, back;
    if (lb_qspec_parse(text, &q) != LB_OK) {
        if (lb_last_error()[0] == '\0') fail("refused without a message", text);
        return 0;
    }
    char canon[256];
    lb_qspec_format(&q, canon, sizeof canon);
    if (lb_qspec_parse(canon, &back) != LB_OK || !same_spec(&q, &back)) fail("canonical text does not parse back", text);
    if (q.granularity == LB_GRAN_GROUP && q.group > 1000) return 0; /* valid, but the tensor below is small */
    float x[2 * 37], y[2 * 37];
    for (int i = 0; i < 2 * 37; i++) x[i] = (float)((i * 7919) % 61 - 30) / 8.0f;
    lb_qtensor *t;
    if (lb_quantize(&q, x, 2, 37, 1, &t) != LB_OK) fail("a parsed spec failed to quantize", text);
    if (lb_dequantize(t, y, 1) != LB_OK) fail("dequantize failed", text);
    lb_qtensor_free(t);
    return 0;
}

#ifndef LB_LIBFUZZER
static const char *const seeds[] = {
    "int8:tensor", "int8:channel", "int4:g128:affine", "uint4:g32:affine", "fp8_e4m3:channel", "mxfp4", "nvfp4",
    "mxint8", "mxfp6_e3m2:round=rceil", "fp4_e2m1:g16:scale=ue4m3:twolevel", "int8:g16:scale=fp16:clip=mse",
    "bf16:token", "fp6_e2m3:g7:scale=bf16", "int8:g0", "int8::g32", ":", "mxfp8_e5m2:round=even",
    "mxint8:b1", "int4:g744:tensor", /* found by libFuzzer: their canonical text did not parse back */
    "int4:g32:range=restricted", "int8:channel:scale=ue4m3:twolevel:range=full", "fp8_e4m3:tensor:range=restricted",
    "fp8_e4m3:b128x128", "int8:b3x5:scale=bf16", "fp4_e2m1:b16x16:scale=e8m0", "fp8_e4m3:block4x4:g8",
    "mxint8:b2x32", "int4:b1x32:range=restricted",
};

int main(void)
{
    uint64_t s = 0x2545F4914F6CDD1Dull;
    const char alphabet[] = "abcdefgimnortuxyz0123456789:=_";
    long runs = 0;
    for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++, runs++)
        LLVMFuzzerTestOneInput((const uint8_t *)seeds[k], strlen(seeds[k]));
    for (int it = 0; it < 200000; it++, runs++) {
        char buf[300];
        strcpy(buf, seeds[it % (sizeof seeds / sizeof seeds[0])]);
        for (int m = 0; m < 1 + it % 4; m++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            size_t len = strlen(buf), pos = len ? (size_t)(s >> 8) % (len + 1) : 0;
            char c = (s >> 40) % 5 == 0 ? (char)((s >> 48) & 0xFF) : alphabet[(s >> 32) % (sizeof alphabet - 1)];
            switch ((s >> 20) % 3) {
            case 0: if (len < sizeof buf - 2) memmove(buf + pos + 1, buf + pos, len - pos + 1), buf[pos] = c; break;
            case 1: if (pos < len) memmove(buf + pos, buf + pos + 1, len - pos); break;
            default: if (pos < len && c) buf[pos] = c;
            }
        }
        LLVMFuzzerTestOneInput((const uint8_t *)buf, strlen(buf));
    }
    printf("fuzz_qspec: %ld inputs\n%ld passed, 0 failed\n", runs, runs);
    return 0;
}
#endif

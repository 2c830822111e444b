/* Fuzz harness for the reader of lowbit kld's base-logits file
 * (src/eval/kld_base.h): every input must be refused with a message or
 * read as positions whose log-probabilities are finite, <= 0, and sum to
 * 1. The header is checked against a fixed run (vocab 8, ctx 8, 2
 * windows), as lb_kld checks it against its own.
 *
 * With -DLB_LIBFUZZER (`make fuzz`) it is a libFuzzer target; otherwise its
 * main() mutates a small built-in file (`make test`). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/kld_base.h"

#define VOCAB 8
#define CTX 8
#define CHUNKS 2
#define HASH 0x1234567890abcdefull
#define POSITIONS (CHUNKS * (CTX - 1 - CTX / 2))

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_kldbase: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (lb__kld_base_check(data, size, "fuzz", VOCAB, CTX, CHUNKS, HASH) != LB_OK) {
        if (lb_last_error()[0] == '\0') fail("header refused without a message");
        return 0;
    }
    double lp[VOCAB];
    for (uint64_t p = 0; p < POSITIONS; p++) {
        const uint8_t *at = data + LB__KLD_HEADER_BYTES + p * lb__kld_position_bytes(VOCAB);
        if (lb__kld_base_unpack(at, VOCAB, lp, "fuzz", p) != LB_OK) {
            if (lb_last_error()[0] == '\0') fail("position refused without a message");
            continue;
        }
        double sum = 0;
        for (int i = 0; i < VOCAB; i++) {
            if (!isfinite(lp[i]) || lp[i] > 1e-12) fail("a log-probability is not finite or above 0");
            sum += exp(lp[i]);
        }
        if (fabs(sum - 1) > 1e-9) fail("the probabilities do not sum to 1");
    }
    return 0;
}

#ifndef LB_LIBFUZZER
/* A valid file: each position a softmax of a few logits, packed. */
static uint8_t *make_file(size_t *len)
{
    *len = LB__KLD_HEADER_BYTES + POSITIONS * lb__kld_position_bytes(VOCAB);
    uint8_t *b = calloc(*len, 1);
    lb__kld_base_header(b, VOCAB, CTX, CHUNKS, HASH);
    for (int p = 0; p < POSITIONS; p++) {
        double lp[VOCAB], mx = -INFINITY, sum = 0;
        for (int i = 0; i < VOCAB; i++) lp[i] = sin(p * 7.0 + i) * (1 + p), mx = lp[i] > mx ? lp[i] : mx;
        for (int i = 0; i < VOCAB; i++) sum += exp(lp[i] - mx);
        for (int i = 0; i < VOCAB; i++) lp[i] -= mx + log(sum);
        if (p == 1) lp[3] = -INFINITY; /* a probability of exactly 0 */
        lb__kld_base_pack(lp, VOCAB, b + LB__KLD_HEADER_BYTES + (size_t)p * lb__kld_position_bytes(VOCAB));
    }
    return b;
}

int main(void)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    long runs = 0;
    size_t len0;
    uint8_t *seed = make_file(&len0);
    double lp[VOCAB];
    if (lb__kld_base_check(seed, len0, "seed", VOCAB, CTX, CHUNKS, HASH) != LB_OK) fail("the seed's header must read");
    for (uint64_t p = 0; p < POSITIONS; p++)
        if (lb__kld_base_unpack(seed + LB__KLD_HEADER_BYTES + p * lb__kld_position_bytes(VOCAB), VOCAB, lp, "seed", p) != LB_OK)
            fail("every seed position must read");
    uint8_t *buf = malloc(len0 + 64);
    for (int it = 0; it < 30000; it++, runs++) {
        size_t len = len0;
        memcpy(buf, seed, len);
        for (int mu = 0; mu < 1 + it % 4; mu++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            /* mostly the positions' ranges (8 bytes at the start of each) */
            size_t pos = it % 3 ? LB__KLD_HEADER_BYTES + (size_t)(s >> 8) % POSITIONS * lb__kld_position_bytes(VOCAB) +
                                      (size_t)(s >> 20) % 8
                                : len ? (size_t)(s >> 8) % len : 0;
            if (pos >= len) continue;
            switch ((s >> 40) % 5) {
            case 0: buf[pos] ^= (uint8_t)(1u << ((s >> 50) % 8)); break;
            case 1: buf[pos] = (uint8_t)(s >> 56); break;
            case 2: len = pos; break;                               /* truncate */
            case 3: if (len + 8 <= len0 + 64) len += (s >> 50) % 8; /* grow with garbage */ break;
            default: { /* a float at a range's start: huge, tiny, negative, NaN, infinity */
                static const float odd[] = {3e38f, -3e38f, 1e-45f, -0.0f, 65535.0f, -1e30f, 1e30f, NAN, INFINITY};
                float f = odd[(s >> 50) % (sizeof odd / sizeof odd[0])];
                if (pos + 4 <= len) memcpy(buf + pos, &f, 4);
            }
            }
        }
        LLVMFuzzerTestOneInput(buf, len);
    }
    free(buf), free(seed);
    printf("fuzz_kldbase: %ld inputs\n%ld passed, 0 failed\n", runs, runs);
    return 0;
}
#endif

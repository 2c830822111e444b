/* Fuzz harness for the llama2.c readers: the checkpoint parser and the
 * tokenizer parser. Every input must be refused with a message or give
 * tensors that lie inside the input with sizes that add up.
 *
 * With -DLB_LIBFUZZER (`make fuzz`) it is a libFuzzer target; otherwise its
 * main() mutates small built-in checkpoints (`make test`). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/llama2c.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_llama2c: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lb__l2c_model m;
    if (lb__l2c_parse(data, size, "fuzz", &m) == LB_OK) {
        uint64_t sum = 0;
        for (size_t i = 0; i < m.n_tensors; i++) {
            const lb_tensor *t = &m.tensors[i];
            const uint8_t *p = t->data;
            if (p < data + 28 || (size_t)(p - data) > size || t->n_bytes > size - (size_t)(p - data))
                fail("a tensor lies outside the input");
            if (t->n_bytes != 4 * t->n_elements) fail("bytes != 4 x elements");
            volatile float probe = ((const float *)(const void *)t->data)[0]; /* touch both ends */
            volatile uint8_t last = p[t->n_bytes - 1];
            (void)probe, (void)last;
            sum += t->n_bytes;
        }
        if (sum > size) fail("tensors add up to more than the input");
        lb__l2c_free(&m);
    } else if (lb_last_error()[0] == '\0') fail("refused without a message");
    /* the same bytes as a tokenizer of a few sizes */
    for (uint32_t n = 1; n <= 64; n *= 4) {
        lb__l2c_vocab v;
        if (lb__l2c_vocab_parse(data, size, n, "fuzz", &v) == LB_OK) {
            for (uint32_t i = 0; i < v.n; i++)
                if (strlen(v.tokens[i]) > v.lengths[i] || v.lengths[i] > v.max_token_length) fail("bad token");
            lb__l2c_vocab_free(&v);
        } else if (lb_last_error()[0] == '\0') fail("tokenizer refused without a message");
    }
    return 0;
}

#ifndef LB_LIBFUZZER
/* A valid checkpoint: dim 8, hidden 12, 2 layers, 2 heads, 1 kv head,
 * vocab vocab (negative: separate classifier), seq_len 4. */
static uint8_t *make_model(int32_t vocab, size_t *len)
{
    int32_t h[7] = {8, 12, 2, 2, 1, vocab, 4};
    int32_t v = vocab < 0 ? -vocab : vocab;
    size_t floats = (size_t)v * 8 + 2 * 8 + 2 * 8 * 8 + 2 * 2 * 8 * 4 + 2 * 8 * 8 + 2 * 8 + 3 * 2 * 12 * 8 + 8 + 2 * 4 * 2;
    if (vocab < 0) floats += (size_t)v * 8;
    *len = 28 + floats * 4;
    uint8_t *b = calloc(*len, 1);
    memcpy(b, h, sizeof h);
    for (size_t i = 0; i < floats; i++) {
        float f = (float)i / 7.0f;
        memcpy(b + 28 + 4 * i, &f, 4);
    }
    return b;
}

int main(void)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    long runs = 0;
    size_t lens[2];
    uint8_t *seeds[2] = {make_model(16, &lens[0]), make_model(-16, &lens[1])};
    lb__l2c_model m;
    if (lb__l2c_parse(seeds[0], lens[0], "seed", &m) != LB_OK || m.n_tensors != 2 + 9 * 2) fail("seed 0 must parse");
    lb__l2c_free(&m);
    if (lb__l2c_parse(seeds[1], lens[1], "seed", &m) != LB_OK || m.n_tensors != 3 + 9 * 2) fail("seed 1 must parse");
    lb__l2c_free(&m);
    uint8_t *buf = malloc(lens[1] + 64);
    for (int it = 0; it < 30000; it++, runs++) {
        size_t k = (size_t)it % 2, len = lens[k];
        memcpy(buf, seeds[k], len);
        for (int mu = 0; mu < 1 + it % 3; mu++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            size_t span = it % 4 ? 28 : len, pos = span ? (size_t)(s >> 8) % span : 0; /* mostly the header */
            if (pos >= len) continue;
            switch ((s >> 40) % 4) {
            case 0: buf[pos] ^= (uint8_t)(1u << ((s >> 50) % 8)); break;
            case 1: buf[pos] = (uint8_t)(s >> 56); break;
            case 2: len = pos; break;                                     /* truncate */
            default: if (len + 8 <= lens[1] + 64) len += (s >> 50) % 8; /* grow with garbage */
            }
        }
        LLVMFuzzerTestOneInput(buf, len);
    }
    free(buf), free(seeds[0]), free(seeds[1]);
    printf("fuzz_llama2c: %ld inputs\n%ld passed, 0 failed\n", runs, runs);
    return 0;
}
#endif

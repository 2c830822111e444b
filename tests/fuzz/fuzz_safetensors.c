/* Fuzz harness for the safetensors reader. Every input must either be
 * refused with a message (and the output left zeroed) or parse to a file
 * whose every promise holds: tensors sorted by unique non-empty name and
 * found by lb__st_find; shape, element count and byte range consistent;
 * ranges inside the data section and tiling it exactly (no overlap, no gap,
 * no trailing byte); metadata sorted. Every byte of every tensor is read, so
 * AddressSanitizer sees any range that escapes the input.
 *
 * Built with -DLB_LIBFUZZER and clang -fsanitize=fuzzer,address (`make fuzz`)
 * it is a libFuzzer target; built plainly (`make test`) its main() runs a
 * deterministic mutation loop over valid files built in code, so CI
 * exercises it too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "lowbit.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_safetensors: %s (last error: '%s')\n", what, lb_last_error());
    abort();
}

static int by_begin(const void *a, const void *b)
{
    const lb__st_tensor *x = *(const lb__st_tensor *const *)a, *y = *(const lb__st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static void check_file(const lb__st_file *f, const uint8_t *data, size_t size)
{
    if (size < 8 || f->data < data + 8 || f->data > data + size) fail("data section outside the input");
    if ((uint64_t)(f->data - data) + f->data_size != size) fail("data section does not end the input");
    volatile unsigned sum = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const lb__st_tensor *t = &f->tensors[i];
        if (!t->name || !t->name[0]) fail("empty name");
        if (i && strcmp(f->tensors[i - 1].name, t->name) >= 0) fail("names not strictly sorted");
        if (lb__st_find(f, t->name) != t) fail("lb__st_find misses a tensor");
        if (t->n_dims < 0 || t->n_dims > LB_MAX_DIMS) fail("n_dims out of range");
        uint64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) n *= t->shape[d]; /* no overflow: the reader checked */
        if (n != t->n_elements) fail("n_elements is not the shape's product");
        const lb_dtype_info *di = lb_dtype_get(t->dtype);
        if (!di || !di->st_name) fail("dtype without a safetensors name");
        uint64_t bytes;
        if (lb_dtype_bytes(t->dtype, n, &bytes) != LB_OK || t->end - t->begin != bytes) fail("size mismatch");
        if (t->begin > t->end || t->end > f->data_size) fail("range outside the data");
        if (t->data != f->data + t->begin) fail("data pointer");
        for (uint64_t k = 0; k < bytes; k++) sum += t->data[k];
    }
    if (f->n_tensors) {
        const lb__st_tensor **order = malloc(f->n_tensors * sizeof *order);
        if (!order) fail("out of memory");
        for (size_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
        qsort(order, f->n_tensors, sizeof *order, by_begin);
        uint64_t at = 0;
        for (size_t i = 0; i < f->n_tensors; i++) {
            if (order[i]->begin != at) fail("ranges overlap or leave a gap");
            at = order[i]->end;
        }
        free(order);
        if (at != f->data_size) fail("trailing bytes accepted");
    } else if (f->data_size != 0) {
        fail("data without tensors accepted");
    }
    for (size_t i = 0; i < f->n_meta; i++) {
        if (!f->meta_keys[i] || !f->meta_values[i]) fail("NULL metadata");
        if (i && strcmp(f->meta_keys[i - 1], f->meta_keys[i]) >= 0) fail("metadata keys not strictly sorted");
        sum += (unsigned)strlen(f->meta_values[i]);
    }
    (void)sum;
}

static long accepted; /* inputs that parsed (the deterministic run reports it) */

/* lb__st_parse reads the header member by member and falls back to the
 * whole JSON tree on any failure: it must accept exactly what the tree
 * reading accepts, with the same tensors and metadata. */
static void check_same_as_tree(const lb__st_file *f, const uint8_t *data, size_t size)
{
    lb__st_file t;
    if (lb__st_parse_tree(data, size, "fuzz", &t) != LB_OK) fail("accepted member by member, refused as a tree");
    if (t.n_tensors != f->n_tensors || t.n_meta != f->n_meta || t.data != f->data || t.data_size != f->data_size)
        fail("the two readings disagree on the counts");
    for (size_t i = 0; i < f->n_tensors; i++) {
        const lb__st_tensor *a = &f->tensors[i], *b = &t.tensors[i];
        if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->n_dims != b->n_dims || a->begin != b->begin ||
            a->end != b->end || a->n_elements != b->n_elements || a->data != b->data)
            fail("the two readings disagree on a tensor");
        for (int d = 0; d < a->n_dims; d++)
            if (a->shape[d] != b->shape[d]) fail("the two readings disagree on a shape");
    }
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], t.meta_keys[i]) || strcmp(f->meta_values[i], t.meta_values[i]))
            fail("the two readings disagree on the metadata");
    lb__st_close(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lb__st_file f;
    if (lb__st_parse(data, size, "fuzz", &f) != LB_OK) {
        if (lb_last_error()[0] == '\0') fail("refused without a message");
        if (f.n_tensors || f.tensors || f.priv || f.data || f.n_meta) fail("refused but the output is not zeroed");
        lb__st_file t;
        if (lb__st_parse_tree(data, size, "fuzz", &t) == LB_OK) fail("refused, but the tree reading accepts it");
        return 0;
    }
    check_file(&f, data, size);
    check_same_as_tree(&f, data, size);
    lb__st_close(&f);
    accepted++;
    return 0;
}

#ifndef LB_LIBFUZZER
/* Valid files as header + data size; the length field is computed. */
static const struct seed {
    const char *header;
    size_t data;
} seeds[] = {
    {"{}", 0},
    {"{\"__metadata__\":{\"format\":\"pt\",\"a\":\"\\u00e9\"}}    ", 0},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24},
    {"{\"__metadata__\":{\"k\":\"v\"},\"b\":{\"dtype\":\"I16\",\"shape\":[],\"data_offsets\":[24,26]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
     "\"e\":{\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[26,26]}}  ", 26},
    {"{\"x\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1,2,1,1,1,1,3],\"data_offsets\":[8,14]},"
     "\"y\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
     "\"z\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[14,16]}}", 16},
    {"{\"t\":{\"dtype\":\"U8\",\"shape\":[1e1],\"data_offsets\":[0,10]},"
     "\"\\u00e9\\n\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[10,10]}}", 10},
};

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* Bytes that tend to matter in a header: digits, JSON punctuation, a
 * minus, an exponent, quotes, high bytes. */
static uint8_t interesting(void)
{
    static const char pick[] = "0123456789{}[]\",:-e. \\u\x00\xff\x80\xc3\x01";
    return (uint8_t)pick[next() % (sizeof pick - 1)];
}

static size_t build(const struct seed *s, uint8_t *buf, size_t cap)
{
    size_t hl = strlen(s->header), len = 8 + hl + s->data;
    if (len > cap) return 0;
    for (int k = 0; k < 8; k++) buf[k] = (uint8_t)((uint64_t)hl >> (8 * k));
    memcpy(buf + 8, s->header, hl);
    for (size_t i = 0; i < s->data; i++) buf[8 + hl + i] = (uint8_t)(i * 37);
    return len;
}

static void set_len(uint8_t *buf, uint64_t n)
{
    for (int k = 0; k < 8; k++) buf[k] = (uint8_t)(n >> (8 * k));
}

static uint64_t get_len(const uint8_t *buf)
{
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) n = n << 8 | buf[k];
    return n;
}

/* One random edit of buf[0..*len) (capacity cap). */
static void mutate(uint8_t *buf, size_t *len, size_t cap)
{
    size_t n = *len, pos = n ? (size_t)(next() % n) : 0;
    switch (next() % 9) {
    case 0: if (n) buf[pos] ^= (uint8_t)(1u << (next() % 8)); break;          /* bit flip */
    case 1: if (n) buf[pos] = interesting(); break;                           /* byte set */
    case 2: if (n < cap) memmove(buf + pos + 1, buf + pos, n - pos), buf[pos] = interesting(), (*len)++; break;
    case 3: if (n) memmove(buf + pos, buf + pos + 1, n - pos - 1), (*len)--; break; /* delete */
    case 4: *len = n ? (size_t)(next() % n) : 0; break;                       /* truncate */
    case 5: {                                                                 /* header length edit */
        if (n < 8) break;
        static const int64_t deltas[] = {-8, -2, -1, 1, 2, 8};
        uint64_t v = get_len(buf);
        switch (next() % 4) {
        case 0: v += (uint64_t)deltas[next() % 6]; break;
        case 1: v = (uint64_t)n - 8 - next() % 4; break;
        case 2: v = next() % 3 == 0 ? UINT64_MAX - next() % 16 : 100000000 + next() % 3 - 1; break;
        default: v = next() % 64;
        }
        set_len(buf, v);
        break;
    }
    case 6: { /* append data bytes, keeping the length field */
        size_t k = 1 + next() % 8;
        while (k-- && *len < cap) buf[(*len)++] = (uint8_t)next();
        break;
    }
    case 7: /* a digit edited (offsets, shapes) */
        for (size_t tries = 0; tries < 16 && n > 8; tries++) {
            size_t p = 8 + (size_t)(next() % (n - 8));
            if (buf[p] >= '0' && buf[p] <= '9') {
                buf[p] = (uint8_t)('0' + next() % 10);
                break;
            }
        }
        break;
    default: /* a block copied over another spot (swaps fields, repeats keys) */
        if (n > 16) {
            size_t from = (size_t)(next() % n), to = (size_t)(next() % n), k = 1 + (size_t)(next() % 24);
            if (from + k <= n && to + k <= n) memmove(buf + to, buf + from, k);
        }
    }
}

int main(void)
{
    enum { CAP = 1024, ITERATIONS = 30000 };
    const size_t n_seeds = sizeof seeds / sizeof seeds[0];
    uint8_t tmp[CAP];
    long runs = 0;
    for (size_t k = 0; k < n_seeds; k++) {
        size_t len = build(&seeds[k], tmp, CAP);
        lb__st_file f;
        if (lb__st_parse(tmp, len, "seed", &f) != LB_OK) {
            fprintf(stderr, "fuzz_safetensors: seed %zu refused: %s\n", k, lb_last_error());
            return 1;
        }
        lb__st_close(&f);
    }
    for (int it = 0; it < ITERATIONS; it++, runs++) {
        size_t len = build(&seeds[(size_t)it % n_seeds], tmp, CAP);
        int edits = 1 + (int)(next() % 4);
        for (int m = 0; m < edits; m++) mutate(tmp, &len, CAP);
        /* Exactly len bytes on the heap, so ASan sees any over-read. */
        uint8_t *in = malloc(len ? len : 1);
        memcpy(in, tmp, len);
        LLVMFuzzerTestOneInput(in, len);
        free(in);
    }
    printf("fuzz_safetensors: %ld inputs, %ld accepted\n%ld passed, 0 failed\n", runs, accepted, runs);
    return 0;
}
#endif

/* Fuzz harness for the GGUF reader. Every input must either be refused
 * with a message that names the input, or parse to a file whose every
 * part is consistent: each KV is found by its key and reads through every
 * accessor, string and array bytes lie inside the input, each tensor lies
 * inside the data section at an aligned offset with a shape that matches
 * its counts, and the writer accepts a copy of every KV and tensor (the
 * writer refuses what the reader refuses, so what one accepts the other
 * must too).
 *
 * Built with -DLB_LIBFUZZER and clang -fsanitize=fuzzer,address (`make fuzz`)
 * it is a libFuzzer target; built plainly (`make test`) its main() runs a
 * deterministic mutation loop over built-in seeds, so CI exercises it too.
 * The same seeds are in tests/fuzz/seeds/fuzz_gguf/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "lowbit.h"

/* Array elements read per KV: enough to walk a real vocabulary prefix,
 * small enough to keep an iteration fast. */
#define MAX_ELEMS 4096

static long n_accepted; /* inputs that parsed, for the summary line */

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_gguf: %s (last error: '%s')\n", what, lb_last_error());
    abort();
}

static int inside(const void *p, uint64_t n, const uint8_t *buf, size_t len)
{
    const uint8_t *q = p;
    return q >= buf && q <= buf + len && n <= (uint64_t)(buf + len - q);
}

static void check_kv(const lb__gguf_file *f, const lb__gguf_kv *kv, lb__gguf_writer *w, const uint8_t *buf,
                     size_t len)
{
    if (lb__gguf_find(f, kv->key) != kv) fail("a key does not find its own KV");
    uint64_t u, slen;
    int64_t i;
    double d;
    int b;
    const char *s;
    int as_u = lb__gguf_get_u64(f, kv->key, &u), as_i = lb__gguf_get_i64(f, kv->key, &i);
    int as_f = lb__gguf_get_f64(f, kv->key, &d), as_b = lb__gguf_get_bool(f, kv->key, &b);
    int as_s = lb__gguf_get_str(f, kv->key, &s, &slen);
    if (as_u && as_i && (int64_t)u != i) fail("u64 and i64 views disagree");
    if (as_b != (kv->type == LB_GGUF_BOOL) || as_s != (kv->type == LB_GGUF_STRING)) fail("typed access by type");
    if (as_s && !inside(s, slen, buf, len)) fail("a string lies outside the input");
    if ((as_u || as_i) && !as_f) fail("an integer has no f64 view");
    if (kv->type == LB_GGUF_ARRAY) {
        if (kv->arr_type == LB_GGUF_ARRAY || kv->arr_type < 0 || kv->arr_type >= LB_GGUF_TYPE_COUNT)
            fail("bad array element type accepted");
        uint64_t n = kv->n < MAX_ELEMS ? kv->n : MAX_ELEMS;
        size_t size = lb__gguf_type_size(kv->arr_type);
        if (size && !inside(kv->arr, kv->n * size, buf, len)) fail("array elements lie outside the input");
        for (uint64_t j = 0; j < n; j++) {
            if (kv->arr_type == LB_GGUF_STRING) {
                if (!lb__gguf_arr_str(kv, j, &s, &slen)) fail("a string element is unreadable");
                if (!inside(s, slen, buf, len)) fail("a string element lies outside the input");
            } else if (!lb__gguf_arr_f64(kv, j, &d)) fail("a numeric element has no f64 view");
            lb__gguf_arr_i64(kv, j, &i);
        }
        if (lb__gguf_arr_str(kv, kv->n, &s, &slen) || lb__gguf_arr_f64(kv, kv->n, &d) || lb__gguf_arr_i64(kv, kv->n, &i))
            fail("an element past the end was read");
    }
    if (lb__gguf_copy_kv(w, kv) != LB_OK) fail("the writer refused a KV the reader accepted");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lb__gguf_file f;
    if (lb__gguf_parse(data, size, "fuzz.gguf", &f) != LB_OK) {
        if (strncmp(lb_last_error(), "fuzz.gguf: ", 11) != 0) fail("refused without a message naming the input");
        if (f.kv || f.tensors || f.priv) fail("a refused parse left allocations");
        return 0;
    }
    lb__gguf_writer *w;
    if (lb__gguf_writer_new(&w) != LB_OK) fail("writer_new");
    for (size_t k = 0; k < f.n_kv; k++) check_kv(&f, &f.kv[k], w, data, size);
    if (f.alignment == 0 || (f.alignment & (f.alignment - 1)) || f.alignment > LB_GGUF_MAX_ALIGNMENT)
        fail("bad alignment accepted");
    for (size_t k = 0; k < f.n_tensors; k++) {
        const lb__gguf_tensor *t = &f.tensors[k];
        if (lb__gguf_find_tensor(&f, t->name) != t) fail("a name does not find its own tensor");
        if (t->offset % f.alignment) fail("unaligned tensor accepted");
        if (t->offset > f.data_size || t->n_bytes > f.data_size - t->offset || t->data != f.data + t->offset ||
            !inside(t->data, t->n_bytes, data, size))
            fail("a tensor lies outside the data section");
        if (t->n_dims < 1 || t->n_dims > 4) fail("bad n_dims accepted");
        uint64_t count = 1;
        for (int j = 0; j < 4; j++) count *= t->ne[j];
        uint64_t bytes;
        if (count != t->n_elements || lb_dtype_bytes(t->dtype, count, &bytes) != LB_OK || bytes != t->n_bytes)
            fail("tensor counts disagree with the shape");
        if (lb__gguf_add_tensor(w, t->name, t->dtype, t->n_dims, t->ne) != LB_OK)
            fail("the writer refused a tensor the reader accepted");
    }
    lb__gguf_writer_free(w);
    lb__gguf_close(&f);
    n_accepted++;
    return 0;
}

#ifndef LB_LIBFUZZER
/* ===== Seeds and a deterministic mutation loop ===== */

typedef struct buf {
    uint8_t p[4096];
    size_t n;
} buf;

static void put(buf *b, const void *s, size_t n)
{
    if (b->n + n <= sizeof b->p) memcpy(b->p + b->n, s, n), b->n += n;
}
static void le(buf *b, uint64_t v, int size)
{
    uint8_t x[8];
    for (int k = 0; k < size; k++) x[k] = (uint8_t)(v >> (8 * k));
    put(b, x, (size_t)size);
}
static void str(buf *b, const char *s) { le(b, strlen(s), 8), put(b, s, strlen(s)); }
static void pad(buf *b, size_t a) { while (b->n % a) le(b, 0, 1); }
static void header(buf *b, uint64_t n_tensors, uint64_t n_kv) { b->n = 0, put(b, "GGUF", 4), le(b, 3, 4), le(b, n_tensors, 8), le(b, n_kv, 8); }
static void tinfo(buf *b, const char *name, int n_dims, const uint64_t *ne, uint32_t type, uint64_t off)
{
    str(b, name), le(b, (uint64_t)n_dims, 4);
    for (int j = 0; j < n_dims; j++) le(b, ne[j], 8);
    le(b, type, 4), le(b, off, 8);
}

#define N_SEEDS 3
static buf seeds[N_SEEDS];

static void make_seeds(void)
{
    buf *b = &seeds[0]; /* a little model: KVs, f32 and q8_0 tensors */
    header(b, 2, 3);
    str(b, "general.architecture"), le(b, LB_GGUF_STRING, 4), str(b, "llama");
    str(b, "llama.block_count"), le(b, LB_GGUF_U32, 4), le(b, 1, 4);
    str(b, "tokenizer.ggml.tokens"), le(b, LB_GGUF_ARRAY, 4), le(b, LB_GGUF_STRING, 4), le(b, 3, 8);
    str(b, "<s>"), str(b, ""), str(b, "hi");
    uint64_t ne_a[2] = {8, 2}, ne_b[1] = {32};
    tinfo(b, "token_embd.weight", 2, ne_a, 0, 0);
    tinfo(b, "blk.0.ffn.weight", 1, ne_b, 8, 64);
    pad(b, 32);
    for (int k = 0; k < 98; k++) le(b, (uint64_t)k, 1);

    b = &seeds[1]; /* every value type, alignment 64, three tensors */
    header(b, 3, 15);
    str(b, "general.alignment"), le(b, LB_GGUF_U32, 4), le(b, 64, 4);
    for (int t = 0; t <= LB_GGUF_F64; t++) {
        if (t == LB_GGUF_ARRAY || t == LB_GGUF_STRING) continue;
        char key[16];
        snprintf(key, sizeof key, "v.%s", lb__gguf_type_name(t));
        str(b, key), le(b, (uint64_t)t, 4), le(b, t == LB_GGUF_BOOL ? 1 : 0x8000000000000001ull, (int)lb__gguf_type_size(t));
    }
    str(b, "v.str"), le(b, LB_GGUF_STRING, 4), str(b, "text");
    str(b, "v.f32s"), le(b, LB_GGUF_ARRAY, 4), le(b, LB_GGUF_F32, 4), le(b, 2, 8), le(b, 0x3F800000, 4), le(b, 0xBF000000, 4);
    str(b, "v.bools"), le(b, LB_GGUF_ARRAY, 4), le(b, LB_GGUF_BOOL, 4), le(b, 2, 8), le(b, 1, 1), le(b, 0, 1);
    uint64_t ne_q4[2] = {32, 2}, ne_z[3] = {32, 0, 3}, ne_f16[4] = {2, 2, 1, 2};
    tinfo(b, "q4", 2, ne_q4, 2, 0);
    tinfo(b, "empty", 3, ne_z, 8, 64);
    tinfo(b, "f16", 4, ne_f16, 1, 64);
    pad(b, 64);
    for (int k = 0; k < 80; k++) le(b, (uint64_t)(k * 7), 1);

    b = &seeds[2]; /* header only */
    header(b, 0, 0);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) { return rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; }

static void mutate(buf *b)
{
    static const uint64_t interesting[] = {0, 1, 2, 3, 4, 5, 8, 9, 12, 13, 31, 32, 33, 63, 64, 65, 0x7F, 0xFF,
                                           0xFFFF, 0x80000000u, 0xFFFFFFFFu, 1ull << 62, 1ull << 63,
                                           0x7FFFFFFFFFFFFFFFull, UINT64_MAX, UINT64_MAX - 31};
    uint64_t r = next();
    size_t pos = b->n ? (size_t)(r >> 16) % b->n : 0;
    switch (r % 6) {
    case 0: if (b->n) b->p[pos] ^= (uint8_t)(1u << ((r >> 8) % 8)); break;
    case 1: if (b->n) b->p[pos] = (uint8_t)(r >> 40); break;
    case 2: { /* an interesting u32/u64 at a 4-aligned spot */
        uint64_t v = interesting[(r >> 8) % (sizeof interesting / sizeof *interesting)];
        int size = (r >> 12) & 1 ? 8 : 4;
        pos &= ~(size_t)3;
        for (int k = 0; k < size && pos + (size_t)k < b->n; k++) b->p[pos + (size_t)k] = (uint8_t)(v >> (8 * k));
        break;
    }
    case 3: b->n = pos; break; /* truncate */
    case 4: if (b->n < sizeof b->p) memmove(b->p + pos + 1, b->p + pos, b->n - pos), b->p[pos] = (uint8_t)(r >> 48), b->n++; break;
    default: if (b->n) memmove(b->p + pos, b->p + pos + 1, b->n - pos - 1), b->n--;
    }
}

static void run(const buf *b)
{
    /* An exact-size heap copy, so AddressSanitizer sees any read past the end. */
    uint8_t *copy = malloc(b->n ? b->n : 1);
    if (!copy) fail("malloc");
    memcpy(copy, b->p, b->n);
    LLVMFuzzerTestOneInput(copy, b->n);
    free(copy);
}

int main(int argc, char **argv)
{
    make_seeds();
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) { /* regenerates tests/fuzz/seeds/fuzz_gguf */
        for (int k = 0; k < N_SEEDS; k++) {
            char path[512];
            snprintf(path, sizeof path, "%s/seed%d.gguf", argv[2], k);
            FILE *fp = fopen(path, "wb");
            if (!fp || fwrite(seeds[k].p, 1, seeds[k].n, fp) != seeds[k].n) fail("writing a seed");
            fclose(fp);
        }
        return 0;
    }
    long runs = 0;
    for (int k = 0; k < N_SEEDS; k++, runs++) {
        lb__gguf_file f;
        if (lb__gguf_parse(seeds[k].p, seeds[k].n, "seed", &f) != LB_OK) fail("a seed does not parse");
        lb__gguf_close(&f);
        run(&seeds[k]);
    }
    static buf b;
    for (int it = 0; it < 30000; it++, runs++) {
        b = seeds[it % N_SEEDS];
        for (int m = 0; m < 1 + it % 4; m++) mutate(&b);
        run(&b);
    }
    printf("fuzz_gguf: %ld inputs (%ld parsed)\n%ld passed, 0 failed\n", runs, n_accepted, runs);
    return 0;
}
#endif

/* C unit tests for the GGUF reader and writer: a small in-test builder
 * makes byte buffers, one per rejection rule (status, message substring,
 * the input's name in the message), every prefix of a valid file, the
 * valid edge cases (zero-size tensors, 63-byte names, custom alignment,
 * unpadded headers), the typed accessors, and the writer: round trips,
 * byte-identical rewrites, refusals, and a failed fill leaving no file.
 * The gguf Python package cross-checks live in tests/oracle/test_gguf.py. */
#undef NDEBUG
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/gguf.h"
#include "lowbit.h"

/* ===== A GGUF byte builder ===== */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void raw(buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void le(buf *b, uint64_t v, int size)
{
    uint8_t x[8];
    for (int k = 0; k < size; k++) x[k] = (uint8_t)(v >> (8 * k));
    raw(b, x, (size_t)size);
}

static void u32(buf *b, uint32_t v) { le(b, v, 4); }
static void u64(buf *b, uint64_t v) { le(b, v, 8); }
static void str(buf *b, const char *s)
{
    u64(b, strlen(s));
    raw(b, s, strlen(s));
}

static void header(buf *b, uint64_t n_tensors, uint64_t n_kv)
{
    b->n = 0;
    raw(b, "GGUF", 4);
    u32(b, 3);
    u64(b, n_tensors);
    u64(b, n_kv);
}

static void kv_u32(buf *b, const char *key, uint32_t v)
{
    str(b, key);
    u32(b, LB_GGUF_U32);
    u32(b, v);
}

static void tensor(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset)
{
    str(b, name);
    u32(b, n_dims);
    for (uint32_t j = 0; j < n_dims && j < 8; j++) u64(b, ne[j]); /* an absurd n_dims gets 8 */
    u32(b, type);
    u64(b, offset);
}

static void pad(buf *b, size_t align)
{
    while (b->n % align) le(b, 0, 1);
}

static void zeros(buf *b, size_t n)
{
    for (size_t k = 0; k < n; k++) le(b, 0x5A, 1);
}

/* A valid file with one KV and two f32 tensors, the last one unpadded. */
static void valid_file(buf *b)
{
    header(b, 2, 1);
    kv_u32(b, "general.quantization_version", 2);
    uint64_t ne_a[2] = {4, 2}, ne_b[1] = {3};
    tensor(b, "a", 2, ne_a, 0, 0);
    tensor(b, "b", 1, ne_b, 0, 32);
    pad(b, 32);
    zeros(b, 32 + 12);
}

/* ===== Expectations ===== */

static void expect_fail_at(const buf *b, const char *sub, int line)
{
    lb__gguf_file f;
    memset(&f, 0xAB, sizeof f);
    lb_status st = lb__gguf_parse(b->p, b->n, "t.gguf", &f);
    const char *msg = lb_last_error();
    CHECK(st == LB_ERR_PARSE && strstr(msg, sub) && strncmp(msg, "t.gguf: ", 8) == 0,
          "line %d: status %d, message '%s', wanted '%s'", line, (int)st, msg, sub);
    CHECK(f.kv == NULL && f.tensors == NULL && f.priv == NULL && f.n_kv == 0, "line %d: output not zeroed", line);
    lb__gguf_close(&f);
}
#define FAILS(b, sub) expect_fail_at(&(b), sub, __LINE__)

static int parse_ok_at(const buf *b, lb__gguf_file *f, int line)
{
    lb_status st = lb__gguf_parse(b->p, b->n, "t.gguf", f);
    CHECK(st == LB_OK, "line %d: %s", line, lb_last_error());
    return st == LB_OK;
}
#define PARSES(b, f) parse_ok_at(&(b), f, __LINE__)

/* ===== Header ===== */

static void test_header(void)
{
    buf b = {0};
    lb__gguf_file f;
    CHECK(lb__gguf_parse(NULL, 0, "t.gguf", &f) == LB_ERR_PARSE && strstr(lb_last_error(), "shorter than the 24-byte"),
          "%s", lb_last_error());
    header(&b, 0, 0);
    buf s = b;
    for (s.n = 0; s.n < 24; s.n++) FAILS(s, "shorter than the 24-byte");
    b.p[3] = 'G';
    FAILS(b, "bad magic 'GGUG'");
    b.p[3] = 'F';
    uint32_t bad_versions[] = {0, 1, 2, 4, 0xFFFFFFFFu};
    for (size_t k = 0; k < sizeof bad_versions / sizeof *bad_versions; k++) {
        char want[64];
        snprintf(want, sizeof want, "GGUF version %u is not supported", bad_versions[k]);
        b.n = 4, u32(&b, bad_versions[k]), u64(&b, 0), u64(&b, 0);
        FAILS(b, want);
    }
    b.n = 4, u32(&b, 0x03000000u), u64(&b, 0), u64(&b, 0);
    FAILS(b, "big-endian GGUF is not supported");
    b.n = 4, u32(&b, 0x00020000u), u64(&b, 0), u64(&b, 0);
    FAILS(b, "big-endian");

    /* Absurd counts: refused before any allocation, at any size. */
    uint64_t huge[] = {UINT64_MAX, 1ull << 63, 1ull << 40, 2};
    for (size_t k = 0; k < 4; k++) {
        header(&b, 0, huge[k]);
        FAILS(b, "KV count");
        header(&b, huge[k], 0);
        FAILS(b, "tensor count");
    }
    /* Exactly at the bound: 14 bytes after the header could hold one KV. */
    header(&b, 0, 1);
    zeros(&b, 13);
    FAILS(b, "KV count 1 is absurd");
    header(&b, 0, 1);
    str(&b, "k"), u32(&b, LB_GGUF_U8), le(&b, 7, 1);
    if (PARSES(b, &f)) {
        CHECK(f.n_kv == 1 && f.kv[0].v.u == 7 && f.alignment == 32 && f.data_size == 0, "one-byte KV");
        lb__gguf_close(&f);
    }
    /* KVs and tensors together must fit. */
    header(&b, 1, 1);
    str(&b, "k"), u32(&b, LB_GGUF_U8), le(&b, 7, 1);
    zeros(&b, 20);
    FAILS(b, "tensor count 1 is absurd");
    free(b.p);
}

/* ===== KVs ===== */

static void test_kv_rules(void)
{
    buf b = {0};
    /* String lengths that would wrap or allocate the world. */
    uint64_t lens[] = {UINT64_MAX, 1ull << 63, UINT64_MAX - 7, 100};
    for (size_t k = 0; k < 4; k++) {
        header(&b, 0, 1);
        u64(&b, lens[k]);
        zeros(&b, 16);
        FAILS(b, "key length");
        FAILS(b, "runs past the end of the file");
        header(&b, 0, 1);
        str(&b, "name"), u32(&b, LB_GGUF_STRING), u64(&b, lens[k]);
        zeros(&b, 8);
        FAILS(b, "string value length");
    }
    header(&b, 0, 1);
    str(&b, ""), u32(&b, LB_GGUF_U32), u32(&b, 1);
    FAILS(b, "KV 0 at byte 24: the key is empty");
    header(&b, 0, 1);
    u64(&b, 3), raw(&b, "a\0b", 3), u32(&b, LB_GGUF_U32), u32(&b, 1);
    FAILS(b, "NUL byte");
    header(&b, 0, 3);
    kv_u32(&b, "x.y", 1), kv_u32(&b, "z", 1), kv_u32(&b, "x.y", 2);
    FAILS(b, "duplicate key 'x.y': KV 2");
    uint32_t bad_types[] = {13, 99, 0xFFFFFFFFu};
    for (size_t k = 0; k < 3; k++) {
        header(&b, 0, 1);
        str(&b, "k"), u32(&b, bad_types[k]), u64(&b, 0);
        FAILS(b, "unknown value type");
        FAILS(b, "KV 0 ('k')");
        header(&b, 0, 1);
        str(&b, "k"), u32(&b, LB_GGUF_ARRAY), u32(&b, bad_types[k]), u64(&b, 0);
        FAILS(b, "unknown array element type");
    }
    header(&b, 0, 1);
    str(&b, "k"), u32(&b, LB_GGUF_ARRAY), u32(&b, LB_GGUF_ARRAY), u64(&b, 1), u32(&b, LB_GGUF_U8), u64(&b, 0);
    FAILS(b, "arrays of arrays are not supported");
    uint64_t counts[] = {UINT64_MAX, 1ull << 62, 1ull << 61, 5};
    for (size_t k = 0; k < 4; k++) {
        header(&b, 0, 1);
        str(&b, "k"), u32(&b, LB_GGUF_ARRAY), u32(&b, LB_GGUF_U32), u64(&b, counts[k]);
        zeros(&b, 16);
        FAILS(b, "array count");
        header(&b, 0, 1);
        str(&b, "k"), u32(&b, LB_GGUF_ARRAY), u32(&b, LB_GGUF_STRING), u64(&b, counts[k]);
        zeros(&b, 32);
        FAILS(b, "array count");
    }
    header(&b, 0, 1);
    str(&b, "k"), u32(&b, LB_GGUF_ARRAY), u32(&b, LB_GGUF_STRING), u64(&b, 2), str(&b, "ok"), u64(&b, 1ull << 63);
    FAILS(b, "array string length 9223372036854775808 runs past");
    header(&b, 0, 1);
    str(&b, "flag"), u32(&b, LB_GGUF_BOOL), le(&b, 2, 1);
    FAILS(b, "bool value 2 is neither 0 nor 1");
    header(&b, 0, 1);
    str(&b, "flags"), u32(&b, LB_GGUF_ARRAY), u32(&b, LB_GGUF_BOOL), u64(&b, 3), le(&b, 1, 1), le(&b, 0, 1),
        le(&b, 7, 1);
    FAILS(b, "bool value 7");
    header(&b, 0, 1);
    str(&b, "k"), u32(&b, LB_GGUF_U64), u32(&b, 1);
    FAILS(b, "the u64 needs 8 bytes but the file ends 4 bytes later");

    /* general.alignment */
    header(&b, 0, 1);
    str(&b, "general.alignment"), u32(&b, LB_GGUF_U64), u64(&b, 32);
    FAILS(b, "not a u32");
    header(&b, 0, 1);
    str(&b, "general.alignment"), u32(&b, LB_GGUF_I32), u32(&b, 32);
    FAILS(b, "not a u32");
    uint32_t aligns[] = {0, 3, 48, 1u << 21, 0x80000000u};
    for (size_t k = 0; k < 5; k++) {
        header(&b, 0, 1);
        kv_u32(&b, "general.alignment", aligns[k]);
        FAILS(b, aligns[k] && !(aligns[k] & (aligns[k] - 1)) ? "larger than lowbit's cap" : "is not a power of two");
    }
    free(b.p);
}

/* ===== Tensor infos and data ===== */

static void one_tensor(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                       size_t data)
{
    header(b, 1, 0);
    tensor(b, name, n_dims, ne, type, offset);
    pad(b, 32);
    zeros(b, data);
}

static void test_tensor_rules(void)
{
    buf b = {0};
    uint64_t ne1[8] = {32, 1, 1, 1, 1, 1, 1, 1};
    one_tensor(&b, "", 1, ne1, 0, 0, 128);
    FAILS(b, "tensor 0 at byte 24: the name is empty");
    char name64[65];
    memset(name64, 'n', 64), name64[64] = '\0';
    one_tensor(&b, name64, 1, ne1, 0, 0, 128);
    FAILS(b, "the name is 64 bytes, too long (ggml's limit is 63)");
    header(&b, 1, 0);
    u64(&b, 2), raw(&b, "x\0", 2), u32(&b, 1), u64(&b, 32), u32(&b, 0), u64(&b, 0);
    FAILS(b, "NUL byte");
    header(&b, 1, 0);
    u64(&b, UINT64_MAX);
    zeros(&b, 40);
    FAILS(b, "name length 18446744073709551615 runs past");
    uint32_t dims[] = {0, 5, 0xFFFFFFFFu};
    for (size_t k = 0; k < 3; k++) {
        one_tensor(&b, "t", dims[k], ne1, 0, 0, 128);
        FAILS(b, "is not in 1..4");
    }
    uint64_t neg[2] = {1ull << 63, 1};
    one_tensor(&b, "t", 2, neg, 0, 0, 128);
    FAILS(b, "dimension 0 is 9223372036854775808, beyond int64");
    uint64_t over[4] = {INT64_MAX, 2, 1, 1};
    one_tensor(&b, "big", 4, over, 0, 0, 128);
    FAILS(b, "tensor 0 ('big')");
    FAILS(b, "product of the dimensions overflows int64");
    uint64_t over2[3] = {1ull << 32, 1ull << 31, 1};
    one_tensor(&b, "big", 3, over2, 0, 0, 128);
    FAILS(b, "overflows int64");
    uint32_t retired[] = {4, 5, 31, 36};
    for (size_t k = 0; k < 4; k++) {
        one_tensor(&b, "t", 1, ne1, retired[k], 0, 128);
        FAILS(b, "was retired from ggml");
    }
    uint32_t unknown[] = {42, 99, 0xFFFFFFFFu, 0x80000000u};
    for (size_t k = 0; k < 4; k++) {
        one_tensor(&b, "t", 1, ne1, unknown[k], 0, 128);
        FAILS(b, "unknown ggml tensor type");
    }
    one_tensor(&b, "t", 1, ne1, 16, 0, 128);
    FAILS(b, "ggml type 16 (iq2_xxs) is not one lowbit reads");
    uint64_t ne33[1] = {33};
    one_tensor(&b, "q", 1, ne33, 8, 0, 128);
    FAILS(b, "a row of 33 elements is not whole q8_0 blocks of 32");
    uint64_t f64big[2] = {1ull << 62, 1};
    one_tensor(&b, "d", 2, f64big, 28, 0, 128);
    FAILS(b, "overflow a 64-bit byte count");
    one_tensor(&b, "t", 1, ne1, 0, 16, 256);
    FAILS(b, "data offset 16 is not a multiple of the alignment 32");
    one_tensor(&b, "t", 1, ne1, 0, 0, 127);
    FAILS(b, "its 128 bytes at data offset 0 run past the end of the file");
    one_tensor(&b, "t", 1, ne1, 0, UINT64_MAX - 31, 128);
    FAILS(b, "run past the end of the file");
    one_tensor(&b, "t", 1, ne1, 0, 1ull << 63, 128);
    FAILS(b, "run past the end");

    /* Two tensors. */
    uint64_t ne8[1] = {8};
    header(&b, 2, 0);
    tensor(&b, "a", 1, ne1, 0, 0), tensor(&b, "b", 1, ne8, 0, 96);
    pad(&b, 32), zeros(&b, 160);
    FAILS(b, "tensors 'a' (data bytes 0..128) and 'b' (data bytes 96..128) overlap");
    header(&b, 2, 0);
    tensor(&b, "a", 1, ne8, 0, 64), tensor(&b, "b", 1, ne1, 0, 0);
    pad(&b, 32), zeros(&b, 160);
    FAILS(b, "overlap");
    header(&b, 2, 0);
    tensor(&b, "same", 1, ne8, 0, 0), tensor(&b, "same", 1, ne8, 0, 32);
    pad(&b, 32), zeros(&b, 64);
    FAILS(b, "duplicate tensor name 'same': tensor 1");
    free(b.p);
}

/* Every strict prefix of a valid file is refused with a message. */
static void test_prefixes(void)
{
    buf b = {0};
    valid_file(&b);
    lb__gguf_file f;
    if (PARSES(b, &f)) lb__gguf_close(&f);
    buf s = b;
    int all = 1;
    for (s.n = 0; s.n < b.n; s.n++) {
        lb_status st = lb__gguf_parse(s.p, s.n, "t.gguf", &f);
        if (st != LB_ERR_PARSE || strncmp(lb_last_error(), "t.gguf: ", 8) != 0) {
            all = 0;
            CHECK(0, "prefix %zu: status %d '%s'", s.n, (int)st, lb_last_error());
            lb__gguf_close(&f);
        }
    }
    CHECK(all, "every prefix refused");
    free(b.p);
}

/* ===== Valid files and accessors ===== */

static void test_valid_edges(void)
{
    buf b = {0};
    lb__gguf_file f;
    header(&b, 0, 0);
    if (PARSES(b, &f)) {
        CHECK(f.version == 3 && f.alignment == 32 && f.n_kv == 0 && f.n_tensors == 0 && f.data_size == 0, "empty");
        CHECK(lb__gguf_find(&f, "x") == NULL && lb__gguf_find_tensor(&f, "x") == NULL, "lookups on empty");
        lb__gguf_close(&f);
    }
    lb__gguf_close(&f); /* twice is harmless */

    /* Zero-size tensors, a 63-byte name, offsets out of order, alignment 64. */
    char name63[64];
    memset(name63, 'm', 63), name63[63] = '\0';
    uint64_t ne_zero[3] = {32, 0, 5}, ne_q4[2] = {64, 3}, ne_q8[1] = {32};
    header(&b, 4, 1);
    kv_u32(&b, "general.alignment", 64);
    tensor(&b, "empty", 3, ne_zero, 8, 0);
    tensor(&b, name63, 2, ne_q4, 2, 128);
    tensor(&b, "q8", 1, ne_q8, 8, 0);
    tensor(&b, "empty2", 3, ne_zero, 0, 64);
    pad(&b, 64);
    size_t data_at = b.n;
    zeros(&b, 128 + 6 * 18);
    if (PARSES(b, &f)) {
        CHECK(f.alignment == 64 && f.data_offset == data_at && f.data == b.p + data_at, "alignment 64");
        const lb__gguf_tensor *t = lb__gguf_find_tensor(&f, name63);
        CHECK(t && t == &f.tensors[1] && t->dtype == LB_DT_Q4_0 && t->n_bytes == 6 * 18 && t->n_elements == 192 &&
              t->ne[0] == 64 && t->ne[1] == 3 && t->ne[2] == 1 && t->n_dims == 2 && t->data == b.p + data_at + 128,
              "q4_0 tensor");
        t = lb__gguf_find_tensor(&f, "empty");
        CHECK(t && t->n_elements == 0 && t->n_bytes == 0 && t->ne[1] == 0 && t->ne[2] == 5 && t->ne[3] == 1, "empty");
        t = lb__gguf_find_tensor(&f, "q8");
        CHECK(t && t->n_bytes == 34 && t->ggml_type == 8 && t->dtype == LB_DT_Q8_0, "q8_0");
        CHECK(lb__gguf_find_tensor(&f, "q9") == NULL && lb__gguf_find_tensor(&f, "") == NULL, "absent");
        lb__gguf_close(&f);
    }
    /* A header whose padding the file leaves out, with no tensor data. */
    header(&b, 0, 1);
    kv_u32(&b, "a", 1);
    if (PARSES(b, &f)) {
        CHECK(f.data_size == 0 && f.data_offset == 64 && f.data == b.p + b.n, "unpadded end");
        lb__gguf_close(&f);
    }
    free(b.p);
}

static void test_accessors(void)
{
    buf b = {0};
    header(&b, 0, 14);
    str(&b, "u8"), u32(&b, LB_GGUF_U8), le(&b, 200, 1);
    str(&b, "i8"), u32(&b, LB_GGUF_I8), le(&b, 0x80, 1);
    str(&b, "u16"), u32(&b, LB_GGUF_U16), le(&b, 65535, 2);
    str(&b, "i16"), u32(&b, LB_GGUF_I16), le(&b, 0xFFFE, 2);
    str(&b, "i32"), u32(&b, LB_GGUF_I32), u32(&b, 0xFFFFFFFFu);
    str(&b, "f32"), u32(&b, LB_GGUF_F32), u32(&b, 0x3FC00000u); /* 1.5 */
    str(&b, "u64"), u32(&b, LB_GGUF_U64), u64(&b, UINT64_MAX);
    str(&b, "i64"), u32(&b, LB_GGUF_I64), u64(&b, (uint64_t)INT64_MIN);
    str(&b, "f64"), u32(&b, LB_GGUF_F64), u64(&b, 0xC004000000000000ull); /* -2.5 */
    str(&b, "yes"), u32(&b, LB_GGUF_BOOL), le(&b, 1, 1);
    str(&b, "s"), u32(&b, LB_GGUF_STRING), str(&b, "hello");
    str(&b, "ai"), u32(&b, LB_GGUF_ARRAY), u32(&b, LB_GGUF_I16), u64(&b, 3), le(&b, 5, 2), le(&b, 0xFFFF, 2),
        le(&b, 0x8000, 2);
    str(&b, "as"), u32(&b, LB_GGUF_ARRAY), u32(&b, LB_GGUF_STRING), u64(&b, 3), str(&b, "x"), str(&b, ""),
        str(&b, "yz");
    str(&b, "au"), u32(&b, LB_GGUF_ARRAY), u32(&b, LB_GGUF_U64), u64(&b, 2), u64(&b, 7), u64(&b, UINT64_MAX);
    lb__gguf_file f;
    if (!PARSES(b, &f)) return;
    uint64_t u;
    int64_t i;
    double d;
    int yes;
    const char *s;
    uint64_t len;
    CHECK(lb__gguf_get_u64(&f, "u8", &u) && u == 200, "u8");
    CHECK(!lb__gguf_get_u64(&f, "i8", &u) && lb__gguf_get_i64(&f, "i8", &i) && i == -128, "i8");
    CHECK(lb__gguf_get_u64(&f, "u16", &u) && u == 65535, "u16");
    CHECK(lb__gguf_get_i64(&f, "i16", &i) && i == -2 && lb__gguf_get_f64(&f, "i16", &d) && d == -2.0, "i16");
    CHECK(lb__gguf_get_i64(&f, "i32", &i) && i == -1, "i32");
    CHECK(lb__gguf_get_f64(&f, "f32", &d) && d == 1.5 && !lb__gguf_get_u64(&f, "f32", &u), "f32");
    CHECK(lb__gguf_get_u64(&f, "u64", &u) && u == UINT64_MAX && !lb__gguf_get_i64(&f, "u64", &i), "u64");
    CHECK(lb__gguf_get_i64(&f, "i64", &i) && i == INT64_MIN && !lb__gguf_get_u64(&f, "i64", &u), "i64");
    CHECK(lb__gguf_get_f64(&f, "f64", &d) && d == -2.5, "f64");
    CHECK(lb__gguf_get_bool(&f, "yes", &yes) && yes == 1 && !lb__gguf_get_u64(&f, "yes", &u) &&
          !lb__gguf_get_f64(&f, "yes", &d) && !lb__gguf_get_bool(&f, "u8", &yes), "bool");
    CHECK(lb__gguf_get_str(&f, "s", &s, &len) && len == 5 && memcmp(s, "hello", 5) == 0, "string");
    CHECK(!lb__gguf_get_str(&f, "u8", &s, &len) && !lb__gguf_get_u64(&f, "s", &u) && !lb__gguf_get_u64(&f, "no", &u),
          "wrong type / absent");
    const lb__gguf_kv *ai = lb__gguf_find(&f, "ai"), *as = lb__gguf_find(&f, "as"), *au = lb__gguf_find(&f, "au");
    CHECK(ai && ai->type == LB_GGUF_ARRAY && ai->arr_type == LB_GGUF_I16 && ai->n == 3, "ai");
    CHECK(lb__gguf_arr_i64(ai, 0, &i) && i == 5 && lb__gguf_arr_i64(ai, 1, &i) && i == -1 &&
          lb__gguf_arr_i64(ai, 2, &i) && i == -32768 && !lb__gguf_arr_i64(ai, 3, &i), "ai elements");
    CHECK(lb__gguf_arr_f64(ai, 2, &d) && d == -32768.0 && !lb__gguf_arr_str(ai, 0, &s, &len), "ai as f64");
    CHECK(as && as->n == 3 && lb__gguf_arr_str(as, 0, &s, &len) && len == 1 && s[0] == 'x' &&
          lb__gguf_arr_str(as, 1, &s, &len) && len == 0 && lb__gguf_arr_str(as, 2, &s, &len) && len == 2 &&
          memcmp(s, "yz", 2) == 0 && !lb__gguf_arr_str(as, 3, &s, &len) && !lb__gguf_arr_f64(as, 0, &d), "as");
    CHECK(lb__gguf_arr_i64(au, 0, &i) && i == 7 && !lb__gguf_arr_i64(au, 1, &i) && lb__gguf_arr_f64(au, 1, &d),
          "au range");
    CHECK(!lb__gguf_arr_i64(NULL, 0, &i) && !lb__gguf_arr_i64(lb__gguf_find(&f, "u8"), 0, &i), "not arrays");
    lb__gguf_close(&f);
    free(b.p);
}

/* ===== Writer ===== */

typedef struct fill_ctx {
    int fail_at; /* tensor index whose fill fails, or -1 */
    const lb__gguf_file *src; /* copy tensor bytes from here if set */
} fill_ctx;

static lb_status fill_pattern(void *ctx, size_t i, void *dst, uint64_t n)
{
    fill_ctx *c = ctx;
    if ((int)i == c->fail_at) return LB_ERR_IO;
    if (c->src) {
        memcpy(dst, c->src->tensors[i].data, (size_t)n);
        return LB_OK;
    }
    for (uint64_t k = 0; k < n; k++) ((uint8_t *)dst)[k] = (uint8_t)(i * 31 + k * 7);
    return LB_OK;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(*n ? *n : 1);
    if (fread(p, 1, *n, fp) != *n) *n = 0;
    fclose(fp);
    return p;
}

static lb__gguf_writer *sample_writer(uint32_t alignment)
{
    lb__gguf_writer *w;
    CHECK(lb__gguf_writer_new(&w) == LB_OK, "new");
    lb__gguf_set_str(w, "general.architecture", "llama", 5);
    if (alignment) CHECK(lb__gguf_set_u32(w, "general.alignment", alignment) == LB_OK, "%s", lb_last_error());
    lb__gguf_set_u32(w, "a.u32", 7);
    lb__gguf_set_i32(w, "a.i32", -7);
    lb__gguf_set_u64(w, "a.u64", 1ull << 40);
    lb__gguf_set_f32(w, "a.f32", 0.25f);
    lb__gguf_set_bool(w, "a.bool", 5);
    int16_t i16 = -300;
    lb__gguf_set_scalar(w, "a.i16", LB_GGUF_I16, &i16);
    const char *toks[] = {"<s>", "", "hello world"};
    lb__gguf_set_arr_str(w, "a.strs", toks, NULL, 3);
    float scores[4] = {0.5f, -1.0f, 3.0f, 1e-3f};
    lb__gguf_set_arr(w, "a.f32s", LB_GGUF_F32, scores, 4);
    lb__gguf_set_arr(w, "a.empty", LB_GGUF_I32, NULL, 0);
    uint64_t ne_f32[4] = {3, 2}, ne_q8[4] = {64, 2}, ne_q4[4] = {32}, ne_f16[4] = {2, 2, 2, 2};
    CHECK(lb__gguf_add_tensor(w, "t.f32", LB_DT_F32, 2, ne_f32) == LB_OK, "%s", lb_last_error());
    CHECK(lb__gguf_add_tensor(w, "t.q8", LB_DT_Q8_0, 2, ne_q8) == LB_OK, "%s", lb_last_error());
    CHECK(lb__gguf_add_tensor(w, "t.q4", LB_DT_Q4_0, 1, ne_q4) == LB_OK, "%s", lb_last_error());
    CHECK(lb__gguf_add_tensor(w, "t.f16", LB_DT_F16, 4, ne_f16) == LB_OK, "%s", lb_last_error());
    return w;
}

static void test_writer_round_trip(uint32_t alignment)
{
    char path[64], path2[64];
    snprintf(path, sizeof path, "/tmp/lb_test_gguf_%d_a.gguf", (int)getpid());
    snprintf(path2, sizeof path2, "/tmp/lb_test_gguf_%d_b.gguf", (int)getpid());
    lb__gguf_writer *w = sample_writer(alignment);
    fill_ctx c = {-1, NULL};
    CHECK(lb__gguf_write(w, path, fill_pattern, &c) == LB_OK, "%s", lb_last_error());
    lb__gguf_writer_free(w);
    lb__gguf_file f;
    CHECK(lb__gguf_open(path, &f) == LB_OK, "%s", lb_last_error());
    uint64_t a = alignment ? alignment : 32;
    CHECK(f.alignment == a && f.n_kv == (alignment ? 11u : 10u) && f.n_tensors == 4, "shape of the file");
    CHECK(f.map.size % a == 0 && f.data_offset % a == 0, "file padded to the alignment");
    const char *s;
    uint64_t len, u;
    int64_t i;
    double d;
    int yes;
    CHECK(lb__gguf_get_str(&f, "general.architecture", &s, &len) && len == 5 && !memcmp(s, "llama", 5), "str");
    CHECK(lb__gguf_get_u64(&f, "a.u32", &u) && u == 7 && lb__gguf_get_i64(&f, "a.i32", &i) && i == -7, "ints");
    CHECK(lb__gguf_get_u64(&f, "a.u64", &u) && u == 1ull << 40 && lb__gguf_get_i64(&f, "a.i16", &i) && i == -300, "i");
    CHECK(lb__gguf_get_f64(&f, "a.f32", &d) && d == 0.25 && lb__gguf_get_bool(&f, "a.bool", &yes) && yes, "f32 bool");
    const lb__gguf_kv *strs = lb__gguf_find(&f, "a.strs"), *f32s = lb__gguf_find(&f, "a.f32s");
    CHECK(strs && strs->n == 3 && lb__gguf_arr_str(strs, 2, &s, &len) && len == 11 && !memcmp(s, "hello world", 11),
          "strs");
    CHECK(f32s && f32s->n == 4 && lb__gguf_arr_f64(f32s, 1, &d) && d == -1.0, "f32s");
    CHECK(lb__gguf_find(&f, "a.empty") && lb__gguf_find(&f, "a.empty")->n == 0, "empty array");
    CHECK(strcmp(f.kv[0].key, "general.architecture") == 0, "KV order kept");
    for (size_t k = 0; k < f.n_tensors; k++) {
        const lb__gguf_tensor *t = &f.tensors[k];
        int ok = t->offset % a == 0;
        for (uint64_t j = 0; j < t->n_bytes; j++) ok &= t->data[j] == (uint8_t)(k * 31 + j * 7);
        CHECK(ok, "tensor %zu bytes and alignment", k);
    }
    CHECK(f.tensors[1].n_bytes == 2 * 2 * 34 && f.tensors[2].n_bytes == 18 && f.tensors[3].ne[3] == 2, "sizes");

    /* write -> parse -> copy everything -> write is byte-identical. */
    lb__gguf_writer *w2;
    lb__gguf_writer_new(&w2);
    for (size_t k = 0; k < f.n_kv; k++) CHECK(lb__gguf_copy_kv(w2, &f.kv[k]) == LB_OK, "%s", lb_last_error());
    for (size_t k = 0; k < f.n_tensors; k++)
        CHECK(lb__gguf_add_tensor(w2, f.tensors[k].name, f.tensors[k].dtype, f.tensors[k].n_dims, f.tensors[k].ne) ==
              LB_OK, "%s", lb_last_error());
    fill_ctx c2 = {-1, &f};
    CHECK(lb__gguf_write(w2, path2, fill_pattern, &c2) == LB_OK, "%s", lb_last_error());
    size_t n1, n2;
    uint8_t *b1 = slurp(path, &n1), *b2 = slurp(path2, &n2);
    CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0, "rewrite is byte-identical (%zu vs %zu bytes)", n1, n2);
    free(b1), free(b2);

    /* An existing file is not replaced unless that is allowed (--force). */
    fill_ctx c3 = {2, &f};
    lb_status st = lb__gguf_write(w2, path2, fill_pattern, &c3);
    CHECK(st == LB_ERR_ARG && strstr(lb_last_error(), "already exists"), "%d %s", (int)st, lb_last_error());
    /* A failing fill leaves nothing, not even over an existing file. */
    lb_output_allow_replace(1);
    st = lb__gguf_write(w2, path2, fill_pattern, &c3);
    lb_output_allow_replace(0);
    CHECK(st == LB_ERR_IO && strstr(lb_last_error(), "filling tensor 2 ('t.q4'"), "%d %s", (int)st, lb_last_error());
    b2 = slurp(path2, &n2);
    CHECK(b2 && n2 == n1, "the earlier file is untouched");
    free(b2);
    unlink(path2);
    st = lb__gguf_write(w2, path2, fill_pattern, &c3);
    CHECK(st != LB_OK && access(path2, F_OK) != 0, "no file after a failed write");
    lb__gguf_writer_free(w2);
    lb__gguf_close(&f);
    unlink(path);
}

static void test_writer_refusals(void)
{
    lb__gguf_writer *w;
    lb__gguf_writer_new(&w);
    CHECK(lb__gguf_set_u32(w, "k", 1) == LB_OK, "first");
    CHECK(lb__gguf_set_u64(w, "k", 1) == LB_ERR_ARG && strstr(lb_last_error(), "'k' is set twice"), "twice");
    CHECK(lb__gguf_set_u32(w, "", 1) == LB_ERR_ARG, "empty key");
    CHECK(lb__gguf_set_u64(w, "general.alignment", 32) == LB_ERR_ARG && strstr(lb_last_error(), "must be a u32"), "u64");
    CHECK(lb__gguf_set_u32(w, "general.alignment", 48) == LB_ERR_ARG, "48");
    CHECK(lb__gguf_set_u32(w, "general.alignment", 0) == LB_ERR_ARG, "0");
    CHECK(lb__gguf_set_u32(w, "general.alignment", 1u << 21) == LB_ERR_ARG, "2 MiB");
    uint8_t bools[2] = {1, 2};
    CHECK(lb__gguf_set_arr(w, "b", LB_GGUF_BOOL, bools, 2) == LB_ERR_ARG, "bool 2");
    CHECK(lb__gguf_set_arr(w, "b", LB_GGUF_STRING, bools, 2) == LB_ERR_ARG, "string via set_arr");
    CHECK(lb__gguf_set_arr(w, "b", LB_GGUF_ARRAY, bools, 2) == LB_ERR_ARG, "nested");
    CHECK(lb__gguf_set_scalar(w, "b", LB_GGUF_STRING, bools) == LB_ERR_ARG, "scalar string");
    char name64[65];
    memset(name64, 'n', 64), name64[64] = '\0';
    uint64_t ne[4] = {32, 1, 1, 1}, ne33[4] = {33}, over[4] = {INT64_MAX, 2, 1, 1};
    CHECK(lb__gguf_add_tensor(w, name64, LB_DT_F32, 1, ne) == LB_ERR_ARG, "long name");
    CHECK(lb__gguf_add_tensor(w, name64 + 1, LB_DT_F32, 1, ne) == LB_OK, "63-byte name");
    CHECK(lb__gguf_add_tensor(w, name64 + 1, LB_DT_F32, 1, ne) == LB_ERR_ARG, "duplicate name");
    CHECK(lb__gguf_add_tensor(w, "q", LB_DT_Q8_0, 1, ne33) == LB_ERR_ARG, "partial block");
    CHECK(lb__gguf_add_tensor(w, "o", LB_DT_F32, 4, over) == LB_ERR_ARG, "overflow");
    CHECK(lb__gguf_add_tensor(w, "z", LB_DT_F32, 0, ne) == LB_ERR_ARG && lb__gguf_add_tensor(w, "z", LB_DT_F32, 5, ne) ==
          LB_ERR_ARG, "n_dims");
    CHECK(lb__gguf_add_tensor(w, "e", LB_DT_F8_E4M3, 1, ne) == LB_ERR_ARG, "no ggml type");
    CHECK(lb__gguf_write(w, "/tmp/never.gguf", NULL, NULL) == LB_ERR_ARG, "tensors without fill");
    CHECK(lb__gguf_write(w, "/nonexistent-dir/x.gguf", fill_pattern, &(fill_ctx){-1, NULL}) == LB_ERR_IO, "bad dir");
    lb__gguf_writer_free(w);
    lb__gguf_writer_free(NULL);
}

int main(void)
{
    test_header();
    test_kv_rules();
    test_tensor_rules();
    test_prefixes();
    test_valid_edges();
    test_accessors();
    test_writer_round_trip(0);
    test_writer_round_trip(64);
    test_writer_round_trip(128);
    test_writer_refusals();
    return check_summary();
}

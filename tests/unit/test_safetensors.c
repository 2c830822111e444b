/* safetensors reader and writer: one hand-built file per rejection rule
 * (byte literals: a little-endian header length, the JSON header, data
 * bytes), checked for LB_ERR_PARSE and the words of its message; the legal
 * edge cases (empty and rank-0 tensors, no tensors, metadata); and the
 * writer's exact bytes, refusals and failure clean-up.
 *
 * Every input lives in a malloc'd buffer of exactly its length, so a read
 * past the end is caught under AddressSanitizer. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/safetensors.h"
#include "lowbit.h"
#include "util/error.h"

#define WHAT "t.safetensors"

/* The buffer behind the last successful parse (files point into it). */
static uint8_t *cur;

/* 8-byte length field, header bytes, then data_len data bytes (i mod 251). */
static uint8_t *make_file(uint64_t n_field, const char *hdr, size_t hdr_len, size_t data_len, size_t *len)
{
    *len = 8 + hdr_len + data_len;
    uint8_t *b = malloc(*len);
    for (int k = 0; k < 8; k++) b[k] = (uint8_t)(n_field >> (8 * k));
    memcpy(b + 8, hdr, hdr_len);
    for (size_t i = 0; i < data_len; i++) b[8 + hdr_len + i] = (uint8_t)(i % 251);
    return b;
}

static lb_status parse_raw(uint64_t n_field, const char *hdr, size_t hdr_len, size_t data_len, lb__st_file *f)
{
    size_t len;
    uint8_t *b = make_file(n_field, hdr, hdr_len, data_len, &len);
    lb_status st = lb__st_parse(b, len, WHAT, f);
    if (st == LB_OK) cur = b;
    else free(b);
    return st;
}

static lb_status parse_hdr(const char *hdr, size_t data_len, lb__st_file *f)
{
    return parse_raw(strlen(hdr), hdr, strlen(hdr), data_len, f);
}

static void done(lb__st_file *f)
{
    lb__st_close(f);
    free(cur);
    cur = NULL;
}

static int zeroed(const lb__st_file *f)
{
    return f->n_tensors == 0 && !f->tensors && f->n_meta == 0 && !f->meta_keys && !f->data && !f->priv &&
           f->data_size == 0;
}

/* A refusal: LB_ERR_PARSE, the file named, `want` in the message, out zeroed. */
static void refused_at(int line, lb_status st, const lb__st_file *f, const char *want)
{
    const char *msg = lb_last_error();
    int ok = st == LB_ERR_PARSE && strstr(msg, WHAT) && strstr(msg, want) && zeroed(f);
    CHECK(ok, "line %d: status %d, message '%s', wanted '%s'", line, (int)st, msg, want);
}

#define REFUSE(hdr, data_len, want)                                      \
    do {                                                                 \
        lb__st_file f_;                                                  \
        lb_status st_ = parse_hdr(hdr, data_len, &f_);                   \
        refused_at(__LINE__, st_, &f_, want);                            \
        if (st_ == LB_OK) done(&f_);                                     \
    } while (0)

#define T_F32_2 "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"

/* ===== Rules on the 8-byte length and the header's framing ===== */

static void test_framing(void)
{
    lb__st_file f;
    uint8_t seven[7] = {2, 0, 0, 0, 0, 0, 0};
    refused_at(__LINE__, lb__st_parse(NULL, 0, WHAT, &f), &f, "0 bytes, shorter than the 8-byte");
    uint8_t *b = malloc(7);
    memcpy(b, seven, 7);
    refused_at(__LINE__, lb__st_parse(b, 7, WHAT, &f), &f, "7 bytes, shorter than the 8-byte");
    free(b);
    /* Exactly 8 bytes: a length field and nothing else. */
    refused_at(__LINE__, parse_raw(0, "", 0, 0, &f), &f, "header (header length at bytes 0-7) is empty");
    refused_at(__LINE__, parse_raw(100000001, "{}", 2, 0, &f), &f, "header length 100000001 (bytes 0-7) is over");
    refused_at(__LINE__, parse_raw(UINT64_MAX, "{}", 2, 0, &f), &f, "18446744073709551615 (bytes 0-7) is over");
    /* 8 + N wraps around 2^64 for these: must still be caught. */
    refused_at(__LINE__, parse_raw(UINT64_MAX - 7, "{}", 2, 0, &f), &f, "is over the 100000000-byte limit");
    refused_at(__LINE__, parse_raw(100000000, "{}", 2, 0, &f), &f, "runs past the end of the file: 8 + 100000000 > 10");
    refused_at(__LINE__, parse_raw(3, "{}", 2, 0, &f), &f, "header length 3 (bytes 0-7) runs past");
    /* Leading whitespace: the spec's MUST (the reference reader allows it). */
    refused_at(__LINE__, parse_raw(4, "  {}", 4, 0, &f), &f, "must begin with '{' at byte 8, found byte 0x20 (leading");
    refused_at(__LINE__, parse_raw(3, "\n{}", 3, 0, &f), &f, "found byte 0x0a (leading whitespace)");
    refused_at(__LINE__, parse_raw(2, "[]", 2, 0, &f), &f, "must begin with '{' at byte 8, found byte 0x5b");
    /* Not JSON: the JSON reader's message, after ours. */
    REFUSE("{abc}", 0, "invalid JSON header (byte offsets from file byte 8): line 1, column 2");
    REFUSE("{\"a\":1,}", 0, "invalid JSON header");
    REFUSE("{} {}", 0, "invalid JSON header");
}

static void test_not_json_raw(void)
{
    lb__st_file f;
    /* A NUL after the object, and bytes that are not UTF-8. */
    refused_at(__LINE__, parse_raw(3, "{}\0", 3, 0, &f), &f, "invalid JSON header");
    refused_at(__LINE__, parse_raw(9, "{\"\xff\":{}} ", 9, 0, &f), &f, "invalid JSON header");
    refused_at(__LINE__, parse_raw(10, "{\"\xc0\xaf\":{}} ", 10, 0, &f), &f, "invalid JSON header");
}

/* Trailing spaces are allowed (the Python package pads with them). */
static void test_trailing_space(void)
{
    lb__st_file f;
    CHECK(parse_hdr("{}      ", 0, &f) == LB_OK, "%s", lb_last_error());
    CHECK(f.n_tensors == 0 && f.data_size == 0, "empty");
    done(&f);
    CHECK(parse_hdr("{}\n", 0, &f) == LB_OK, "%s", lb_last_error());
    done(&f);
}

/* ===== Keys, metadata, entries ===== */

static void test_keys_and_metadata(void)
{
    REFUSE("{\"a\":" T_F32_2 "[0,8]},\"a\":" T_F32_2 "[8,16]}}", 16, "invalid JSON header");
    REFUSE("{\"a\":" T_F32_2 "[0,8]},\"a\":" T_F32_2 "[8,16]}}", 16, "duplicate key \"a\" in one object");
    REFUSE("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate key \"k\" in one object");
    REFUSE("{\"__metadata__\":\"x\"}", 0, "__metadata__ (byte 24) is the string 'x', not an object of strings");
    REFUSE("{\"__metadata__\":[]}", 0, "__metadata__ (byte 24) is an array, not an object");
    REFUSE("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ 'k' (byte 29) is 1, not a string");
    REFUSE("{\"__metadata__\":{\"k\":null}}", 0, "__metadata__ 'k' (byte 29) is null, not a string");
    REFUSE("{\"__metadata__\":{\"k\":{}}}", 0, "is an object, not a string");
    REFUSE("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, "__metadata__ 'k' (byte 29) contains a NUL");
    REFUSE("{\"__metadata__\":{\"k\\u0000\":\"v\"}}", 0, "__metadata__ key 'k\\x00' (byte 35) contains a NUL");
    /* Names. */
    REFUSE("{\"\":" T_F32_2 "[0,8]}}", 8, "a tensor (byte 12) has an empty name");
    REFUSE("{\"a\\u0000b\":" T_F32_2 "[0,8]}}", 8, "tensor 'a\\x00b' (byte 20): the name contains a NUL");
    /* A control character in a name is shown escaped. */
    REFUSE("{\"a\\u001bb\":{\"dtype\":\"F99\",\"shape\":[],\"data_offsets\":[0,0]}}", 0, "tensor 'a\\x1bb'");
}

/* A hostile name is cut and escaped in messages, never allowed to crowd
 * out the rest (lb_last_error() holds 1 KiB). */
static void test_long_name(void)
{
    char hdr[3000];
    size_t o = (size_t)snprintf(hdr, sizeof hdr, "{\"");
    for (int k = 0; k < 2000; k++) hdr[o++] = (char)('a' + k % 26);
    snprintf(hdr + o, sizeof hdr - o, "\":{\"dtype\":\"F7\",\"shape\":[],\"data_offsets\":[0,0]}}");
    lb__st_file f;
    lb_status st = parse_hdr(hdr, 0, &f);
    const char *msg = lb_last_error();
    CHECK(st == LB_ERR_PARSE && strstr(msg, "tensor 'abcdefghij") &&
          strstr(msg, "...' (byte 2021): unknown dtype 'F7'") && strlen(msg) < 300, "%s", msg);
    /* Cut between characters, never inside a UTF-8 sequence: 99 ASCII
     * bytes, then a 2-byte character straddling the 100-byte limit. */
    o = (size_t)snprintf(hdr, sizeof hdr, "{\"");
    for (int k = 0; k < 99; k++) hdr[o++] = 'x';
    for (int k = 0; k < 10; k++) hdr[o++] = '\xc3', hdr[o++] = '\xa9';
    snprintf(hdr + o, sizeof hdr - o, "\":{\"dtype\":\"F7\",\"shape\":[],\"data_offsets\":[0,0]}}");
    st = parse_hdr(hdr, 0, &f);
    msg = lb_last_error();
    CHECK(st == LB_ERR_PARSE && strstr(msg, "xxx...' (byte"), "%s", msg);
}

static void test_entry_fields(void)
{
    REFUSE("{\"a\":[1]}", 0, "tensor 'a' (byte 13): entry is an array, not an object");
    REFUSE("{\"a\":\"F32\"}", 0, "tensor 'a' (byte 13): entry is the string 'F32', not an object");
    REFUSE("{\"a\":7}", 0, "entry is 7, not an object");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 0, "tensor 'a' (byte 13): missing field 'data_offsets'");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "missing field 'shape'");
    REFUSE("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "missing field 'dtype'");
    REFUSE("{\"a\":{}}", 0, "missing field 'dtype'");
    REFUSE("{\"a\":" T_F32_2 "[0,8],\"x\":1}}", 8, "tensor 'a' (byte 65): unexpected field 'x' (a tensor has only");
    REFUSE("{\"a\":" T_F32_2 "[0,8],\"Dtype\":\"F32\"}}", 8, "unexpected field 'Dtype'");
    /* Wrong JSON types. */
    REFUSE("{\"a\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
           "tensor 'a' (byte 22): dtype is 5, not a string");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8,
           "shape is the string '2', not an array");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "shape is 2, not an array");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{}}}", 8,
           "data_offsets is an object, not an array of two");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":null}}", 8, "data_offsets is null, not an array");
}

/* ===== dtype, shape, sizes ===== */

static void test_dtype_shape(void)
{
    REFUSE("{\"a\":{\"dtype\":\"F7\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1,
           "tensor 'a' (byte 22): unknown dtype 'F7'");
    REFUSE("{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
           "unknown dtype 'f32'"); /* case matters */
    REFUSE("{\"a\":{\"dtype\":\"q4_0\",\"shape\":[32],\"data_offsets\":[0,18]}}", 18,
           "unknown dtype 'q4_0'"); /* not safetensors */
    /* Legal safetensors dtypes lowbit has no type for: unsupported, not malformed. */
    const char *unread[] = {"F4", "F6_E2M3", "F6_E3M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
                            "U16", "U32", "U64", "C64"};
    for (size_t k = 0; k < sizeof unread / sizeof unread[0]; k++) {
        char h[128], want[96];
        snprintf(h, sizeof h, "{\"a\":{\"dtype\":\"%s\",\"shape\":[1],\"data_offsets\":[0,1]}}", unread[k]);
        snprintf(want, sizeof want, "tensor 'a' (byte 22): dtype '%s' is a safetensors dtype lowbit does not read",
                 unread[k]);
        lb__st_file f;
        lb_status st = parse_hdr(h, 1, &f);
        CHECK(st == LB_ERR_UNSUPPORTED && strstr(lb_last_error(), want) && zeroed(&f), "%s: %s", unread[k],
              lb_last_error());
        if (st == LB_OK) done(&f);
    }
    REFUSE("{\"a\":{\"dtype\":\"F32\\u0000\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype 'F32\\x00'");
    REFUSE("{\"a\":{\"dtype\":\"\",\"shape\":[],\"data_offsets\":[0,0]}}", 0, "unknown dtype ''");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0,
           "tensor 'a' (byte 37): shape[0] is -1, not a non-negative integer");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,0]}}", 0,
           "shape[1] is 1.5, not a non-negative");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, "shape[0] is the string '2'");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,8]}}", 8, "shape[0] is null");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8, "shape[0] is an array");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[18446744073709551616],\"data_offsets\":[0,8]}}", 8,
           "shape[0] is 18446744073709551616, not a non-negative integer that fits 64 bits");
    REFUSE("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
           "tensor 'a' (byte 35): shape has 9 dimensions, more than 8");
    /* The checklist's overflow: [2, 2^64 - 2] elements. */
    REFUSE("{\"a\":{\"dtype\":\"U8\",\"shape\":[2,18446744073709551614],\"data_offsets\":[0,4]}}", 4,
           "the element count of shape [2, 18446744073709551614] overflows 64 bits");
    /* Overflow before a later 0 still counts, as in the reference reader. */
    REFUSE("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}", 0,
           "overflows 64 bits");
    /* Elements fit, bytes do not: 2^62 F32 values. */
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0,
           "4611686018427387904 F32 elements (shape [4611686018427387904]) overflow a 64-bit byte count");
    REFUSE("{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}", 0,
           "overflow a 64-bit byte count");
}

/* ===== Offsets and how the tensors tile the data ===== */

static void test_offsets(void)
{
    REFUSE("{\"a\":" T_F32_2 "[0]}}", 8, "tensor 'a' (byte 55): data_offsets is an array of the wrong length");
    REFUSE("{\"a\":" T_F32_2 "[0,8,16]}}", 16, "data_offsets is an array of the wrong length");
    REFUSE("{\"a\":" T_F32_2 "[]}}", 0, "of the wrong length");
    REFUSE("{\"a\":" T_F32_2 "[0,\"8\"]}}", 8, "data_offsets[1] is the string '8', not a non-negative integer");
    REFUSE("{\"a\":" T_F32_2 "[-8,0]}}", 8, "data_offsets[0] is -8, not a non-negative");
    REFUSE("{\"a\":" T_F32_2 "[0,8.5]}}", 8, "data_offsets[1] is 8.5");
    REFUSE("{\"a\":" T_F32_2 "[0,18446744073709551616]}}", 8, "data_offsets[1] is 18446744073709551616");
    REFUSE("{\"a\":" T_F32_2 "[8,0]}}", 8, "tensor 'a' (byte 55): data_offsets [8, 0] end before they begin");
    REFUSE("{\"a\":" T_F32_2 "[0,4]}}", 4, "data_offsets [0, 4] hold 4 bytes, but shape [2] of F32 needs 8");
    REFUSE("{\"a\":" T_F32_2 "[0,12]}}", 12, "hold 12 bytes, but shape [2] of F32 needs 8");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}}", 0,
           "hold 0 bytes, but shape [] of F32 needs 4");
    REFUSE("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,4]}}", 4,
           "hold 4 bytes, but shape [0] of F32 needs 0");
    /* Past the end of the file (data section 4 bytes). */
    REFUSE("{\"a\":" T_F32_2 "[0,8]}}", 4, "tensor 'a' (byte 55): data_offsets [0, 8] reach past the end of the file "
                                          "(the data section holds 4 bytes)");
    REFUSE("{\"a\":" T_F32_2 "[18446744073709551607,18446744073709551615]}}", 8, "reach past the end of the file");
    /* Overlap: b starts inside a. */
    REFUSE("{\"a\":" T_F32_2 "[0,8]},\"b\":" T_F32_2 "[4,12]}}", 12, "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
    /* Identical ranges (the checklist's "ten tensors at [0,16]", shortened). */
    REFUSE("{\"a\":" T_F32_2 "[0,8]},\"b\":" T_F32_2 "[0,8]},\"c\":" T_F32_2 "[0,8]}}", 8,
           "tensors 'a' [0, 8] and 'b' [0, 8] overlap");
    /* An empty tensor inside another one is an overlap too. */
    REFUSE("{\"a\":" T_F32_2 "[0,8]},\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8,
           "tensors 'a' [0, 8] and 'e' [4, 4] overlap");
    /* Gaps: at the start, and between two tensors. */
    REFUSE("{\"a\":" T_F32_2 "[4,12]}}", 12, "data bytes [0, 4) before tensor 'a' belong to no tensor (a gap");
    REFUSE("{\"a\":" T_F32_2 "[0,8]},\"b\":" T_F32_2 "[12,20]}}", 20,
           "data bytes [8, 12) before tensor 'b' belong to no");
    /* Trailing bytes (polyglot): data larger than the tensors. */
    REFUSE("{\"a\":" T_F32_2 "[0,8]}}", 9,
           "1 trailing bytes after the last tensor: the tensors cover data bytes [0, 8) of 9 (file bytes 70 to 71");
    REFUSE("{}", 5, "5 trailing bytes after the last tensor");
    REFUSE("{\"__metadata__\":{}}", 3, "3 trailing bytes");
    REFUSE("{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 1, "1 trailing bytes");
}

/* ===== Legal files ===== */

static void test_valid(void)
{
    lb__st_file f;
    /* Three tensors given out of order, a scalar, an empty one (placed at
     * the end and at the start: both legal), metadata out of order. */
    const char *hdr =
        "{\"__metadata__\":{\"z\":\"last\",\"format\":\"pt\",\"\":\"empty key\"},"
        "\"w.b\":{\"dtype\":\"I16\",\"shape\":[],\"data_offsets\":[24,26]},"
        "\"w.a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"empty\":{\"dtype\":\"BF16\",\"shape\":[4,0,2],\"data_offsets\":[26,26]},"
        "\"e0\":{\"dtype\":\"F64\",\"shape\":[0],\"data_offsets\":[0,0]},"
        "\"\xc3\xa9t\xc3\xa9\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1,1,1,1,1,1,2],\"data_offsets\":[26,28]}}   ";
    CHECK(parse_hdr(hdr, 28, &f) == LB_OK, "%s", lb_last_error());
    CHECK(f.n_tensors == 5, "%zu tensors", f.n_tensors);
    const char *order[] = {"e0", "empty", "w.a", "w.b", "\xc3\xa9t\xc3\xa9"};
    for (size_t i = 0; i < 5 && i < f.n_tensors; i++)
        CHECK(strcmp(f.tensors[i].name, order[i]) == 0, "tensor %zu is '%s'", i, f.tensors[i].name);
    const lb__st_tensor *a = lb__st_find(&f, "w.a"), *s = lb__st_find(&f, "w.b"), *e = lb__st_find(&f, "empty");
    const lb__st_tensor *u = lb__st_find(&f, "\xc3\xa9t\xc3\xa9");
    CHECK(a && a->dtype == LB_DT_F32 && a->n_dims == 2 && a->shape[0] == 2 && a->shape[1] == 3 &&
          a->n_elements == 6 && a->begin == 0 && a->end == 24, "w.a");
    CHECK(s && s->dtype == LB_DT_I16 && s->n_dims == 0 && s->n_elements == 1 && s->begin == 24 && s->end == 26, "w.b");
    CHECK(e && e->dtype == LB_DT_BF16 && e->n_dims == 3 && e->n_elements == 0 && e->begin == 26 && e->end == 26,
          "empty");
    CHECK(u && u->dtype == LB_DT_F8_E4M3 && u->n_dims == 8 && u->n_elements == 2, "utf-8 name");
    CHECK(f.data_size == 28 && f.data == cur + 8 + strlen(hdr), "data section");
    CHECK(a && a->data == f.data && s && s->data == f.data + 24 && s->data[0] == 24 && s->data[1] == 25, "data");
    CHECK(!lb__st_find(&f, "w") && !lb__st_find(&f, "w.c") && !lb__st_find(&f, "") && !lb__st_find(&f, NULL),
          "absent names");
    for (size_t i = 0; i < f.n_tensors; i++) CHECK(lb__st_find(&f, f.tensors[i].name) == &f.tensors[i], "find %zu", i);
    CHECK(f.n_meta == 3, "%zu meta", f.n_meta);
    if (f.n_meta == 3) {
        CHECK(strcmp(f.meta_keys[0], "") == 0 && strcmp(f.meta_values[0], "empty key") == 0, "meta 0");
        CHECK(strcmp(f.meta_keys[1], "format") == 0 && strcmp(f.meta_values[1], "pt") == 0, "meta 1");
        CHECK(strcmp(f.meta_keys[2], "z") == 0 && strcmp(f.meta_values[2], "last") == 0, "meta 2");
    }
    done(&f);

    /* No tensors at all; metadata only. */
    CHECK(parse_hdr("{}", 0, &f) == LB_OK && f.n_tensors == 0 && f.n_meta == 0 && f.data_size == 0, "{}");
    CHECK(!lb__st_find(&f, "x"), "find in empty");
    done(&f);
    CHECK(parse_hdr("{\"__metadata__\":{}}", 0, &f) == LB_OK && f.n_meta == 0, "%s", lb_last_error());
    done(&f);
    CHECK(parse_hdr("{\"__metadata__\":{\"a\":\"\\u00e9\\n\"}}", 0, &f) == LB_OK && f.n_meta == 1 &&
          strcmp(f.meta_values[0], "\xc3\xa9\n") == 0, "%s", lb_last_error());
    done(&f);
    /* Empty tensors only; the offsets may sit anywhere inside [0, 0]. */
    CHECK(parse_hdr("{\"x\":{\"dtype\":\"BOOL\",\"shape\":[0,5],\"data_offsets\":[0,0]},"
                    "\"y\":{\"dtype\":\"I64\",\"shape\":[3,0],\"data_offsets\":[0,0]}}", 0, &f) == LB_OK &&
          f.n_tensors == 2, "%s", lb_last_error());
    done(&f);
    /* 1e1 is the integer 10 (the JSON reader reads integers exactly). */
    CHECK(parse_hdr("{\"x\":{\"dtype\":\"U8\",\"shape\":[1e1],\"data_offsets\":[0,10]}}", 10, &f) == LB_OK &&
          f.tensors[0].shape[0] == 10, "%s", lb_last_error());
    done(&f);
    /* Every dtype with a safetensors name, one element each, sizes right. */
    const struct { const char *name; lb_dtype id; unsigned size; } dts[] = {
        {"F64", LB_DT_F64, 8}, {"F32", LB_DT_F32, 4}, {"F16", LB_DT_F16, 2}, {"BF16", LB_DT_BF16, 2},
        {"F8_E4M3", LB_DT_F8_E4M3, 1}, {"F8_E5M2", LB_DT_F8_E5M2, 1}, {"I64", LB_DT_I64, 8}, {"I32", LB_DT_I32, 4},
        {"I16", LB_DT_I16, 2}, {"I8", LB_DT_I8, 1}, {"U8", LB_DT_U8, 1}, {"BOOL", LB_DT_BOOL, 1}};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        char h[160];
        snprintf(h, sizeof h, "{\"t\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%u]}}", dts[k].name,
                 3 * dts[k].size);
        lb_status st = parse_hdr(h, 3 * dts[k].size, &f);
        CHECK(st == LB_OK && f.tensors[0].dtype == dts[k].id, "%s: %s", dts[k].name, lb_last_error());
        if (st == LB_OK) done(&f);
    }
    /* NULL `what` still gives a message. */
    CHECK(lb__st_parse(NULL, 0, NULL, &f) == LB_ERR_PARSE && lb_last_error()[0], "NULL what");
    CHECK(lb__st_parse(NULL, 5, WHAT, &f) == LB_ERR_ARG, "NULL buffer with a length");
    CHECK(lb__st_parse(cur, 0, WHAT, NULL) == LB_ERR_ARG, "NULL out");
    lb__st_close(NULL);
    lb__st_file z;
    memset(&z, 0, sizeof z);
    lb__st_close(&z); /* harmless on a zeroed file */
}

/* ===== Writer ===== */

static char dir[64];

static char *in_dir(const char *name)
{
    static char p[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* Files in the test directory (temporaries included). */
static int count_files(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(b, 1, (size_t)n, fp);
    fclose(fp);
    return b;
}

typedef struct fill_ctx {
    int fail_at;  /* tensor index whose fill fails, or -1 */
    int calls;
    int seen[8];  /* times each index was filled */
} fill_ctx;

/* Tensor i's bytes: 16*i + k. */
static lb_status fill_pattern(void *ctx, size_t i, void *dst, uint64_t n_bytes)
{
    fill_ctx *c = ctx;
    c->calls++;
    if (i < 8) c->seen[i]++;
    if ((int)i == c->fail_at) return lb__fail(LB_ERR_IO, "source tensor %zu unreadable", i);
    for (uint64_t k = 0; k < n_bytes; k++) ((uint8_t *)dst)[k] = (uint8_t)(16 * i + k);
    return LB_OK;
}

static void test_write_exact(void)
{
    /* Out of order on purpose; names needing escapes; a scalar and an empty tensor. */
    lb__st_out_tensor t[4] = {
        {"w", LB_DT_F32, 1, {2}},
        {"b\"q\n\x01", LB_DT_I8, 0, {0}},
        {"a", LB_DT_BF16, 2, {0, 3}},
        {"\xc3\xa9", LB_DT_U8, 1, {3}},
    };
    const char *mk[] = {"z", "a\\"}, *mv[] = {"1", "\xe2\x82\xac\t"};
    fill_ctx c = {-1, 0, {0}};
    const char *p = in_dir("x.safetensors");
    CHECK(lb__st_write(p, t, 4, mk, mv, 2, fill_pattern, &c) == LB_OK, "%s", lb_last_error());
    CHECK(c.calls == 4 && c.seen[0] == 1 && c.seen[1] == 1 && c.seen[2] == 1 && c.seen[3] == 1, "fill once each");
    const char *want_hdr =
        "{\"__metadata__\":{\"a\\\\\":\"\xe2\x82\xac\\t\",\"z\":\"1\"},"
        "\"a\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
        "\"b\\\"q\\n\\u0001\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[0,1]},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]},"
        "\"\xc3\xa9\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[9,12]}}";
    size_t hl = strlen(want_hdr), padded = (hl + 7) / 8 * 8, len;
    uint8_t *b = slurp(p, &len);
    CHECK(b && len == 8 + padded + 12, "file is %zu bytes, want %zu", len, 8 + padded + 12);
    if (b && len == 8 + padded + 12) {
        uint64_t n = 0;
        for (int k = 7; k >= 0; k--) n = n << 8 | b[k];
        CHECK(n == padded, "header length %llu", (unsigned long long)n);
        CHECK(memcmp(b + 8, want_hdr, hl) == 0, "header:\n%.*s\nwant\n%s", (int)hl, (const char *)b + 8, want_hdr);
        int spaces = 1;
        for (size_t k = hl; k < padded; k++) spaces &= b[8 + k] == ' ';
        CHECK(spaces, "padding is spaces");
        const uint8_t data[12] = {16, 0, 1, 2, 3, 4, 5, 6, 7, 48, 49, 50};
        CHECK(memcmp(b + 8 + padded, data, 12) == 0, "data bytes");
    }
    /* Reads back with the reader; writing it again is byte-identical. */
    lb__st_file f;
    CHECK(lb__st_open(p, &f) == LB_OK, "%s", lb_last_error());
    CHECK(f.n_tensors == 4 && f.n_meta == 2 && f.map.data, "read back");
    lb__st_close(&f);
    fill_ctx c2 = {-1, 0, {0}};
    const char *p2 = in_dir("y.safetensors");
    CHECK(lb__st_write(p2, t, 4, mk, mv, 2, fill_pattern, &c2) == LB_OK, "%s", lb_last_error());
    size_t len2;
    uint8_t *b2 = slurp(p2, &len2);
    CHECK(b && b2 && len == len2 && memcmp(b, b2, len) == 0, "deterministic");
    free(b), free(b2);
    unlink(p), unlink(p2);

    /* Nothing at all: "{}" padded to 8. */
    CHECK(lb__st_write(p, NULL, 0, NULL, NULL, 0, NULL, NULL) == LB_OK, "%s", lb_last_error());
    b = slurp(p, &len);
    CHECK(b && len == 16 && b[0] == 8 && memcmp(b + 8, "{}      ", 8) == 0, "empty file");
    free(b);
    CHECK(lb__st_open(p, &f) == LB_OK && f.n_tensors == 0, "%s", lb_last_error());
    lb__st_close(&f);
    unlink(p);
    CHECK(count_files() == 0, "clean");
}

static void test_write_failures(void)
{
    const char *p = in_dir("out.safetensors");
    lb__st_out_tensor t[3] = {{"a", LB_DT_F32, 1, {4}}, {"b", LB_DT_F16, 2, {2, 2}}, {"c", LB_DT_U8, 1, {5}}};
    /* fill fails on the second tensor written: no file, no temporary. */
    fill_ctx c = {1, 0, {0}};
    lb_status st = lb__st_write(p, t, 3, NULL, NULL, 0, fill_pattern, &c);
    CHECK(st == LB_ERR_IO && strstr(lb_last_error(), "tensor 'b': source tensor 1 unreadable"), "%d %s", (int)st,
          lb_last_error());
    CHECK(count_files() == 0, "nothing left after a failed fill");
    /* An existing destination survives a failed write untouched. */
    FILE *fp = fopen(p, "wb");
    fputs("precious", fp);
    fclose(fp);
    c = (fill_ctx){2, 0, {0}};
    CHECK(lb__st_write(p, t, 3, NULL, NULL, 0, fill_pattern, &c) == LB_ERR_ARG && c.calls == 0 &&
          strstr(lb_last_error(), "already exists"), "refused without replacing allowed: %s", lb_last_error());
    lb_output_allow_replace(1);
    CHECK(lb__st_write(p, t, 3, NULL, NULL, 0, fill_pattern, &c) == LB_ERR_IO, "fails");
    lb_output_allow_replace(0);
    size_t len;
    uint8_t *b = slurp(p, &len);
    CHECK(b && len == 8 && memcmp(b, "precious", 8) == 0, "destination untouched");
    free(b);
    CHECK(count_files() == 1, "only the destination");
    /* Refusals before anything is created (the destination stays too). */
    struct { lb__st_out_tensor t; const char *want; } bad[] = {
        {{"", LB_DT_F32, 1, {1}}, "an empty name"},
        {{NULL, LB_DT_F32, 1, {1}}, "no name"},
        {{"__metadata__", LB_DT_F32, 1, {1}}, "reserved"},
        {{"x\xff", LB_DT_F32, 1, {1}}, "not valid UTF-8"},
        {{"x\xed\xa0\x80", LB_DT_F32, 1, {1}}, "not valid UTF-8"}, /* a surrogate */
        {{"x\xc0\x80", LB_DT_F32, 1, {1}}, "not valid UTF-8"},     /* overlong */
        {{"q", LB_DT_Q4_0, 1, {32}}, "dtype q4_0 has no safetensors name"},
        {{"q", LB_DT_COUNT, 1, {32}}, "has no safetensors name"},
        {{"q", LB_DT_F32, 9, {1}}, "9 dimensions"},
        {{"q", LB_DT_F32, -1, {1}}, "-1 dimensions"},
        {{"q", LB_DT_U8, 2, {2, 18446744073709551614ull}}, "element count overflows"},
        {{"q", LB_DT_F32, 1, {4611686018427387904ull}}, "byte count overflows"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        lb__st_out_tensor two[2] = {t[0], bad[k].t};
        c = (fill_ctx){-1, 0, {0}};
        st = lb__st_write(p, two, 2, NULL, NULL, 0, fill_pattern, &c);
        CHECK(st == LB_ERR_ARG && strstr(lb_last_error(), bad[k].want) && c.calls == 0, "bad %zu: %s", k,
              lb_last_error());
    }
    lb__st_out_tensor dup[3] = {t[0], t[1], t[0]};
    CHECK(lb__st_write(p, dup, 3, NULL, NULL, 0, fill_pattern, &c) == LB_ERR_ARG &&
          strstr(lb_last_error(), "tensor name 'a' appears twice"), "%s", lb_last_error());
    /* Total size past 2^64, each tensor fine on its own. */
    lb__st_out_tensor huge[2] = {{"h1", LB_DT_U8, 1, {1ull << 63}}, {"h2", LB_DT_U8, 1, {1ull << 63}}};
    CHECK(lb__st_write(p, huge, 2, NULL, NULL, 0, fill_pattern, &c) == LB_ERR_ARG &&
          strstr(lb_last_error(), "total size overflows"), "%s", lb_last_error());
    const char *mk[] = {"k", "k"}, *mv[] = {"1", "2"}, *mbad[] = {"1", "\xff"}, *mnull[] = {"1", NULL};
    CHECK(lb__st_write(p, t, 1, mk, mv, 2, fill_pattern, &c) == LB_ERR_ARG &&
          strstr(lb_last_error(), "metadata key 'k' appears twice"), "%s", lb_last_error());
    const char *mk2[] = {"k", "j"};
    CHECK(lb__st_write(p, t, 1, mk2, mbad, 2, fill_pattern, &c) == LB_ERR_ARG &&
          strstr(lb_last_error(), "metadata entry 1 is not valid UTF-8"), "%s", lb_last_error());
    CHECK(lb__st_write(p, t, 1, mk2, mnull, 2, fill_pattern, &c) == LB_ERR_ARG, "NULL value");
    CHECK(lb__st_write(p, t, 1, NULL, NULL, 1, fill_pattern, &c) == LB_ERR_ARG, "no meta arrays");
    CHECK(lb__st_write(p, t, 1, NULL, NULL, 0, NULL, NULL) == LB_ERR_ARG, "no fill");
    CHECK(lb__st_write(p, NULL, 1, NULL, NULL, 0, fill_pattern, &c) == LB_ERR_ARG, "no tensors");
    CHECK(lb__st_write(NULL, t, 1, NULL, NULL, 0, fill_pattern, &c) == LB_ERR_ARG, "no path");
    b = slurp(p, &len);
    CHECK(b && len == 8 && memcmp(b, "precious", 8) == 0 && count_files() == 1, "still untouched");
    free(b);
    /* A directory that does not exist: an I/O error naming the path. */
    CHECK(lb__st_write(in_dir("no/such/dir.safetensors"), t, 1, NULL, NULL, 0, fill_pattern, &c) == LB_ERR_IO &&
          strstr(lb_last_error(), "no/such/dir.safetensors"), "%s", lb_last_error());
    unlink(p);
    /* Reader side of open: missing file and a directory are I/O errors. */
    lb__st_file f;
    CHECK(lb__st_open(in_dir("missing.safetensors"), &f) == LB_ERR_IO && zeroed(&f), "missing");
    CHECK(lb__st_open(dir, &f) == LB_ERR_IO && zeroed(&f), "directory");
    /* A malformed file on disk: the message names the path. */
    fp = fopen(p, "wb");
    fwrite("\x02\0\0\0\0\0\0\0{}\x01", 1, 11, fp);
    fclose(fp);
    CHECK(lb__st_open(p, &f) == LB_ERR_PARSE && strstr(lb_last_error(), p) &&
          strstr(lb_last_error(), "1 trailing bytes") && zeroed(&f) && !f.map.data, "%s", lb_last_error());
    unlink(p);
    fp = fopen(p, "wb");
    fclose(fp);
    CHECK(lb__st_open(p, &f) == LB_ERR_PARSE && strstr(lb_last_error(), "0 bytes, shorter"), "%s", lb_last_error());
    unlink(p);
}

/* The streaming writer: tensors put in any order give lb__st_write's bytes
 * (the data-order check of test_write_exact above); a tensor put twice, of
 * the wrong size or never put is refused, and a refused or aborted stream
 * leaves no file. */
static void test_stream(void)
{
    lb__st_out_tensor t[4] = {
        {"w", LB_DT_F32, 1, {2}},
        {"b", LB_DT_I8, 0, {0}},
        {"a", LB_DT_BF16, 2, {0, 3}},
        {"c", LB_DT_U8, 1, {3}},
    };
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    fill_ctx c = {-1, 0, {0}};
    const char *p = in_dir("g.safetensors"), *q = in_dir("s.safetensors");
    CHECK(lb__st_write(p, t, 4, mk, mv, 1, fill_pattern, &c) == LB_OK, "%s", lb_last_error());
    uint8_t bytes[4][8];
    uint64_t sizes[4] = {8, 1, 0, 3};
    for (size_t i = 0; i < 4; i++) fill_pattern(&c, i, bytes[i], sizes[i]);
    lb__st_stream s;
    CHECK(lb__st_stream_open(q, t, 4, mk, mv, 1, &s) == LB_OK, "%s", lb_last_error());
    const size_t order[4] = {3, 0, 2, 1}; /* neither the caller's order nor the header's */
    for (size_t k = 0; k < 4; k++)
        CHECK(lb__st_stream_put(&s, order[k], bytes[order[k]], sizes[order[k]]) == LB_OK, "%s", lb_last_error());
    CHECK(lb__st_stream_put(&s, 0, bytes[0], 8) == LB_ERR_ARG && strstr(lb_last_error(), "twice"), "twice");
    CHECK(lb__st_stream_commit(&s) == LB_OK, "%s", lb_last_error());
    size_t la, lb;
    uint8_t *a = slurp(p, &la), *b = slurp(q, &lb);
    CHECK(a && b && la == lb && memcmp(a, b, la) == 0, "streamed out of order == lb__st_write");
    free(a), free(b);
    unlink(p), unlink(q);

    CHECK(lb__st_stream_open(q, t, 4, mk, mv, 1, &s) == LB_OK, "%s", lb_last_error());
    CHECK(lb__st_stream_put(&s, 0, bytes[0], 4) == LB_ERR_ARG && strstr(lb_last_error(), "header says"), "size");
    CHECK(lb__st_stream_put(&s, 4, bytes[0], 8) == LB_ERR_ARG, "no tensor 4");
    CHECK(lb__st_stream_put(&s, 0, bytes[0], 8) == LB_OK, "%s", lb_last_error());
    CHECK(lb__st_stream_commit(&s) == LB_ERR_ARG && strstr(lb_last_error(), "never written"), "missing tensor");
    CHECK(count_files() == 0, "a refused commit leaves nothing");
    CHECK(lb__st_stream_open(q, t, 4, mk, mv, 1, &s) == LB_OK, "%s", lb_last_error());
    CHECK(lb__st_stream_put(&s, 3, bytes[3], 3) == LB_OK, "%s", lb_last_error());
    lb__st_stream_abort(&s);
    lb__st_stream_abort(&s); /* harmless twice */
    CHECK(count_files() == 0, "an aborted stream leaves nothing");
    lb__st_out_tensor dup[2] = {{"x", LB_DT_U8, 1, {1}}, {"x", LB_DT_U8, 1, {1}}};
    CHECK(lb__st_stream_open(q, dup, 2, NULL, NULL, 0, &s) == LB_ERR_ARG && count_files() == 0, "refused first");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lb_test_st_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_framing();
    test_not_json_raw();
    test_trailing_space();
    test_keys_and_metadata();
    test_long_name();
    test_entry_fields();
    test_dtype_shape();
    test_offsets();
    test_valid();
    test_write_exact();
    test_write_failures();
    test_stream();
    rmdir(dir);
    return check_summary();
}

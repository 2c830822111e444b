/* GGUF v3 files (llama.cpp's model format): a hardened reader and a
 * byte-deterministic writer.
 *
 * Layout (all little-endian): "GGUF", u32 version (3), u64 tensor count,
 * u64 KV count; the KVs (u64-length key, u32 value type, value); the tensor
 * infos (u64-length name, u32 n_dims, n_dims u64 dimensions, u32 ggml type,
 * u64 offset into the data section); padding to the alignment (32, or the
 * U32 KV general.alignment); then the data section.
 *
 * The reader treats the file as hostile. Every count, length and offset is
 * checked against the bytes that remain before it is used or allocated
 * for, with overflow-safe arithmetic; each violation is LB_ERR_PARSE with a
 * message naming the input, the byte offset and the KV or tensor. Rules
 * beyond what the format's reference reader (the Python gguf package)
 * enforces, each as ggml does or stricter:
 *   - only version 3, little-endian (a byte-swapped version field says so);
 *   - keys and tensor names are non-empty and hold no NUL byte; tensor
 *     names are shorter than 64 bytes (ggml's GGML_MAX_NAME);
 *   - duplicate keys and duplicate tensor names are refused;
 *   - arrays of arrays are refused (ggml refuses them too);
 *   - BOOL values are 0 or 1;
 *   - general.alignment is a U32 power of two no larger than
 *     LB_GGUF_MAX_ALIGNMENT;
 *   - n_dims is 1..4, each dimension fits int64 (ggml stores int64), the
 *     element count and the byte count fit int64 / uint64 (a dimension of
 *     0 is allowed, as in ggml and the gguf package: an empty tensor);
 *   - the ggml type is one lowbit knows (retired ids 4 and 5 are named);
 *     a row (ne[0]) is whole blocks of that type;
 *   - every tensor offset is a multiple of the alignment, every tensor lies
 *     inside the file, and no two tensors' bytes overlap.
 * Left to the caller, as in ggml and the gguf package: the offsets need not
 * be the running padded sum ggml's loader demands (the gguf package does
 * not demand it either), bytes after the last tensor are allowed (writers
 * pad there), and strings are bytes (UTF-8 is not checked). What a KV means
 * (is block_count sane, do scores and tokens have equal lengths) is the
 * model loader's question; the typed accessors below at least never read a
 * value as a type it is not.
 *
 * Memory: the reader allocates a fixed record per KV and per tensor the
 * header claims (claims first bounded by the bytes left: a KV takes at least
 * 14 bytes, a tensor info 33), the key and name copies, and one u64 per
 * element of each string array (each element takes at least 8 bytes):
 * a small multiple of the file's size, never more. */
#ifndef LB_IO_GGUF_H
#define LB_IO_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"
#include "util/file.h"

/* The largest general.alignment accepted. Real files use 32 (the default)
 * or 64; a page (4 KiB) or a huge page (2 MiB) would be odd but harmless,
 * so the cap only stops absurd values such as 2^31 whose padding would
 * move the data section far past the header. */
#define LB_GGUF_MAX_ALIGNMENT (1u << 20)
/* ggml's GGML_MAX_NAME: a tensor name is at most 63 bytes. */
#define LB_GGUF_MAX_NAME 64
#define LB_GGUF_DEFAULT_ALIGNMENT 32u

enum { LB_GGUF_U8 = 0, LB_GGUF_I8, LB_GGUF_U16, LB_GGUF_I16, LB_GGUF_U32, LB_GGUF_I32, LB_GGUF_F32, LB_GGUF_BOOL,
       LB_GGUF_STRING, LB_GGUF_ARRAY, LB_GGUF_U64, LB_GGUF_I64, LB_GGUF_F64, LB_GGUF_TYPE_COUNT };

typedef struct lb__gguf_kv {
    const char *key;          /* NUL-terminated copy */
    int type;                 /* LB_GGUF_* */
    int arr_type;             /* ARRAY: element type (never ARRAY: nested arrays are refused) */
    uint64_t n;               /* ARRAY: element count */
    union { uint64_t u; int64_t i; double f; } v; /* scalars: unsigned in u, signed in i, floats in f, bool in u */
    const char *str;          /* STRING: bytes in the mapping, not NUL-terminated */
    uint64_t str_len;
    const uint8_t *arr;       /* ARRAY: the raw little-endian elements in the mapping (for STRING
                                 elements: the first element's u64 length) */
    void *priv;               /* ARRAY of STRING: per-element offsets from arr (built at parse time) */
    const uint8_t *raw;       /* scalars: the value's bytes in the mapping (copy_kv copies them exactly) */
    uint64_t file_offset;     /* where the KV (its key length) starts in the file */
} lb__gguf_kv;

typedef struct lb__gguf_tensor {
    const char *name;         /* NUL-terminated copy */
    int ggml_type;
    lb_dtype dtype;
    int n_dims;               /* 1..4 */
    uint64_t ne[4];           /* ggml order: ne[0] is the innermost (contiguous) dimension; unused = 1 */
    uint64_t n_elements, n_bytes;
    uint64_t offset;          /* relative to the data section */
    const uint8_t *data;      /* the tensor's bytes in the mapping */
} lb__gguf_tensor;

typedef struct lb__gguf_file {
    lb__mapped map;           /* the mapping (zero when parsed from a caller's buffer) */
    uint32_t version;
    uint64_t alignment;
    size_t n_kv;
    lb__gguf_kv *kv;          /* file order */
    size_t n_tensors;
    lb__gguf_tensor *tensors; /* file order */
    const uint8_t *data;      /* data section start (aligned offset in the file) */
    uint64_t data_size;       /* bytes from data to the end of the file */
    uint64_t data_offset;     /* data - file start */
    void *priv;               /* owned allocations and the lookup indexes */
} lb__gguf_file;

/* Parses a whole file held in buf (which must outlive *out: strings,
 * arrays and tensor data point into it). `what` names the input in
 * messages. On failure *out is left zeroed, so lb__gguf_close is harmless. */
lb_status lb__gguf_parse(const uint8_t *buf, size_t len, const char *what, lb__gguf_file *out);
/* Maps path read-only, then parses with what = path. */
lb_status lb__gguf_open(const char *path, lb__gguf_file *out);
/* Frees everything parse/open made; safe on a zeroed or failed file. */
void lb__gguf_close(lb__gguf_file *f);
/* By exact key / name (binary search over a sorted index); NULL if absent. */
const lb__gguf_kv *lb__gguf_find(const lb__gguf_file *f, const char *key);
const lb__gguf_tensor *lb__gguf_find_tensor(const lb__gguf_file *f, const char *name);

/* Typed access with range checks; return 1 on success, 0 if absent, of the
 * wrong type or out of range. Integers accept any integer type whose value
 * fits (not BOOL); floats accept F32/F64 and integers. */
int lb__gguf_get_u64(const lb__gguf_file *f, const char *key, uint64_t *out);
int lb__gguf_get_i64(const lb__gguf_file *f, const char *key, int64_t *out);
int lb__gguf_get_f64(const lb__gguf_file *f, const char *key, double *out);
int lb__gguf_get_bool(const lb__gguf_file *f, const char *key, int *out);
int lb__gguf_get_str(const lb__gguf_file *f, const char *key, const char **s, uint64_t *len);
/* Element i of an array KV: strings; numbers as double (integer, float
 * and bool arrays); integers as int64 (integer arrays whose element fits). */
int lb__gguf_arr_str(const lb__gguf_kv *kv, uint64_t i, const char **s, uint64_t *len);
int lb__gguf_arr_f64(const lb__gguf_kv *kv, uint64_t i, double *out);
int lb__gguf_arr_i64(const lb__gguf_kv *kv, uint64_t i, int64_t *out);

/* Bytes of one element of a fixed-size value type; 0 for STRING, ARRAY
 * and unknown types. */
size_t lb__gguf_type_size(int type);
/* "u8", "i8", ... "f64"; "?" for an unknown type. */
const char *lb__gguf_type_name(int type);

/* ===== Writer (GGUF v3, little-endian) =====
 *
 * KVs are written in the order set; setting a key twice is an error.
 * general.alignment is not written unless set (the default, 32, needs no
 * KV); setting it (a U32 power of two up to LB_GGUF_MAX_ALIGNMENT, through
 * set_u32 or copy_kv) also changes the alignment the writer uses. Tensor
 * offsets are the running sum of the sizes, each padded to the alignment,
 * and the file ends padded too, as ggml and the gguf package write it. */
typedef struct lb__gguf_writer lb__gguf_writer;
lb_status lb__gguf_writer_new(lb__gguf_writer **w);
lb_status lb__gguf_set_u32(lb__gguf_writer *w, const char *key, uint32_t v);
lb_status lb__gguf_set_i32(lb__gguf_writer *w, const char *key, int32_t v);
lb_status lb__gguf_set_u64(lb__gguf_writer *w, const char *key, uint64_t v);
lb_status lb__gguf_set_f32(lb__gguf_writer *w, const char *key, float v);
lb_status lb__gguf_set_bool(lb__gguf_writer *w, const char *key, int v);
/* Any scalar type: value points to one little-endian element of type. */
lb_status lb__gguf_set_scalar(lb__gguf_writer *w, const char *key, int type, const void *value);
lb_status lb__gguf_set_str(lb__gguf_writer *w, const char *key, const char *s, uint64_t len);
/* lens may be NULL: then each s[i] is NUL-terminated. */
lb_status lb__gguf_set_arr_str(lb__gguf_writer *w, const char *key, const char *const *s, const uint64_t *lens,
                               uint64_t n);
/* Fixed-size little-endian elements (not STRING or ARRAY; BOOLs are 0 or 1). */
lb_status lb__gguf_set_arr(lb__gguf_writer *w, const char *key, int elem_type, const void *elems, uint64_t n);
/* Any KV from a parsed file, arrays included. */
lb_status lb__gguf_copy_kv(lb__gguf_writer *w, const lb__gguf_kv *kv);
/* ne in ggml order (ne[0] innermost); only the first n_dims are read. */
lb_status lb__gguf_add_tensor(lb__gguf_writer *w, const char *name, lb_dtype dtype, int n_dims, const uint64_t ne[4]);

#ifndef LB__TENSOR_FILL_FN /* also declared, identically, by src/io/safetensors.h */
#define LB__TENSOR_FILL_FN
typedef lb_status (*lb__tensor_fill_fn)(void *ctx, size_t i, void *dst, uint64_t n_bytes);
#endif

/* Writes header, KVs, tensor infos, padding, then each tensor's bytes from
 * fill(ctx, i, dst, n_bytes) (i = order of add_tensor), each at an aligned
 * offset, through lb__out_* (temporary file + rename: nothing remains
 * under path on failure). The writer can be written again or freed. */
lb_status lb__gguf_write(lb__gguf_writer *w, const char *path, lb__tensor_fill_fn fill, void *ctx);
void lb__gguf_writer_free(lb__gguf_writer *w);

#endif

/* safetensors files: a hardened reader and a byte-deterministic writer.
 *
 * Layout: a little-endian u64 N, an N-byte JSON header, then the data
 * section. Each header key is a tensor name mapped to {"dtype", "shape",
 * "data_offsets": [begin, end]} (offsets relative to the data section), plus
 * an optional "__metadata__" object of strings.
 *
 * The reader treats the file as hostile: every length, offset and count is
 * checked before use, with overflow-safe arithmetic, and any violation is
 * LB_ERR_PARSE with a message naming the file, the tensor and the byte
 * offset or values involved. (A legal dtype lowbit has no type for, such as
 * U16 or F4, is LB_ERR_UNSUPPORTED instead: the file is not malformed.) Beyond the format's own rules it enforces the
 * spec's MUSTs that the reference reader relaxes (the header starts with
 * '{', no leading whitespace) and refuses a data section with bytes no tensor
 * covers ("polyglot" files). */
#ifndef LB_IO_SAFETENSORS_H
#define LB_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"
#include "util/file.h"

#ifndef LB_MAX_DIMS
#define LB_MAX_DIMS 8
#endif

/* The reference implementation's cap on the JSON header (bytes). */
#define LB_ST_MAX_HEADER 100000000u

/* One tensor: 56 bytes and its n_dims shape values (a header can list a
 * million tensors; the model's own table copies what it needs). */
typedef struct lb__st_tensor {
    const char *name;          /* NUL-terminated, owned by the file */
    lb_dtype dtype;
    int n_dims;                /* 0 = scalar */
    const uint64_t *shape;     /* n_dims values, owned by the file */
    uint64_t n_elements;
    uint64_t begin, end;       /* byte range in the data section */
    const uint8_t *data;       /* data section + begin (no alignment promised: copy, don't cast) */
} lb__st_tensor;

typedef struct lb__st_file {
    lb__mapped map;            /* the mapping (zero when parsed from a caller's buffer) */
    size_t n_tensors;
    lb__st_tensor *tensors;    /* sorted by name */
    size_t n_meta;
    const char **meta_keys, **meta_values; /* __metadata__, sorted by key */
    const uint8_t *data;       /* data section */
    uint64_t data_size;
    void *priv;                /* owned allocations */
} lb__st_file;

/* Parses a whole file held in buf (which must outlive *out: names and data
 * point into it or into out's own allocations). `what` names the input in
 * messages. On failure *out is left zeroed, so lb__st_close is harmless. */
lb_status lb__st_parse(const uint8_t *buf, size_t len, const char *what, lb__st_file *out);
/* The same through the header's whole JSON tree only: the reading
 * lb__st_parse falls back to when its member-by-member one fails (that one
 * accepts nothing this one refuses), so that this one's message is the
 * one given. For the fuzz harness, which checks that both agree. */
lb_status lb__st_parse_tree(const uint8_t *buf, size_t len, const char *what, lb__st_file *out);
/* Maps path read-only, then parses; `what` = path. The header's pages are
 * then dropped from memory (nothing points into them). */
lb_status lb__st_open(const char *path, lb__st_file *out);
/* Frees everything parse/open made; safe on a zeroed or failed file. */
void lb__st_close(lb__st_file *f);
/* Frees the tensor table and the shapes, keeping the mapping, the names
 * and the metadata: for a caller that copied the table (the model view),
 * so that a million tensors are not held twice. The file then lists no
 * tensors. */
void lb__st_drop_table(lb__st_file *f);
/* By exact name (binary search); NULL if absent. */
const lb__st_tensor *lb__st_find(const lb__st_file *f, const char *name);

/* Writer: tensors' bytes come from fill(ctx, i, dst, n_bytes) for t[i], called once per tensor into a buffer
 * of n_bytes. Output: header keys sorted (`__metadata__` first, then tensor names in byte order), data in the
 * same order, contiguous, header padded with spaces to a multiple of 8 bytes (as the Python package writes), so
 * files are byte-deterministic. Written via lb__out_* (temporary file + rename): on any failure nothing remains. */
#ifndef LB__TENSOR_FILL_FN /* also declared, identically, by src/io/gguf.h */
#define LB__TENSOR_FILL_FN
typedef lb_status (*lb__tensor_fill_fn)(void *ctx, size_t i, void *dst, uint64_t n_bytes);
#endif

typedef struct lb__st_out_tensor {
    const char *name;          /* non-empty UTF-8, unique, not "__metadata__" */
    lb_dtype dtype;            /* must have a safetensors name */
    int n_dims;                /* 0..LB_MAX_DIMS */
    uint64_t shape[LB_MAX_DIMS];
} lb__st_out_tensor;

/* Refuses (LB_ERR_ARG, before creating anything) what the reader would
 * refuse: duplicate or empty names, dtypes safetensors lacks, sizes that
 * overflow, a header past LB_ST_MAX_HEADER, strings that are not UTF-8.
 * An error from fill is returned as is, its message prefixed with the
 * tensor's name. */
lb_status lb__st_write(const char *path, const lb__st_out_tensor *t, size_t n, const char *const *meta_keys,
                       const char *const *meta_values, size_t n_meta, lb__tensor_fill_fn fill, void *ctx);

/* The same file written as a stream: the header is made (and everything
 * lb__st_write refuses, refused) from the list alone, before any data
 * exists; then each tensor's bytes are put once, in any order, straight to
 * their place in the file, so a caller holds one tensor at a time. Commit
 * refuses a tensor never put; abort (or any failure) leaves nothing. The
 * bytes are those lb__st_write gives for the same list and data (it is
 * this stream, fed in header order). t (names included) must outlive the
 * stream. */
typedef struct lb__st_stream {
    lb__outfile o;
    const lb__st_out_tensor *t;
    size_t n;
    struct out_entry *te;      /* the header's order */
    uint64_t *offset;          /* t[i]'s bytes start here in the file */
    uint8_t *done;
    uint64_t at;               /* the file position */
} lb__st_stream;

lb_status lb__st_stream_open(const char *path, const lb__st_out_tensor *t, size_t n, const char *const *meta_keys,
                             const char *const *meta_values, size_t n_meta, lb__st_stream *s);
/* t[i]'s bytes (exactly the size its dtype and shape give). */
lb_status lb__st_stream_put(lb__st_stream *s, size_t i, const void *data, uint64_t bytes);
/* Every tensor put: flush, sync, rename into place; frees s either way. */
lb_status lb__st_stream_commit(lb__st_stream *s);
/* Removes the temporary file; safe on a zeroed, committed or failed stream. */
void lb__st_stream_abort(lb__st_stream *s);

/* The dtype whose safetensors name is exactly `name` (case-sensitive, as
 * the format is); 0 if none. */
int lb__st_dtype_from_name(const char *name, lb_dtype *out);

#endif

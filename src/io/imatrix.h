/* Importance matrices (lowbit.h, "Importance matrices"): the object, and
 * llama.cpp's two file formats.
 *
 * GGUF (llama-imatrix's default): per weight NAME two F32 tensors,
 * NAME.in_sum2 (ne = [cols, n_mat]: the sums of x^2) and NAME.counts
 * (ne = [1, n_mat]: tokens summed, an integer stored as float); KVs
 * general.type = "imatrix", imatrix.datasets (array of strings),
 * imatrix.chunk_count and imatrix.chunk_size (u32). Tensors with neither
 * suffix are ignored, as llama.cpp's loader ignores them.
 *
 * Legacy .dat (little-endian): i32 n_entries (>= 1); per entry i32 name
 * length, the name's bytes, i32 ncall, i32 nval (>= 1), nval f32 values
 * (the mean of x^2 times ncall); then, optionally, i32 chunk count and
 * i32 length + bytes of the dataset name.
 *
 * Both readers treat the file as hostile: every length and count is
 * checked against the bytes left before anything is allocated for it. */
#ifndef LB_IO_IMATRIX_H
#define LB_IO_IMATRIX_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* The longest entry name accepted: the GGUF tensor NAME.in_sum2 must fit
 * ggml's 63-byte names, so a longer weight name could never be saved. */
#define LB_IMATRIX_MAX_NAME (63 - 8)
/* llama-imatrix's chunk size when a legacy file is converted (its default
 * context, 512). */
#define LB_IMATRIX_LEGACY_CHUNK 512u

typedef struct lb__imatrix_entry {
    char *name;
    size_t cols, n_mat;
    float *sums;      /* cols * n_mat */
    int64_t *counts;  /* n_mat */
    float *values;    /* cols * n_mat, by lb__imatrix_finish */
} lb__imatrix_entry;

struct lb_imatrix {
    lb__imatrix_entry *e; /* sorted by name (byte order) after lb__imatrix_finish */
    size_t n, cap;
    char **datasets;
    size_t n_datasets;
    uint32_t chunk_count, chunk_size;
    int legacy;
    int has_metadata; /* lb_imatrix_info.has_metadata */
};

lb_imatrix *lb__imatrix_new(void);
/* Appends an entry with zeroed sums and counts; *out points into im until
 * the next add. A duplicate name is lb__imatrix_finish's to refuse. */
lb_status lb__imatrix_add(lb_imatrix *im, const char *name, size_t name_len, size_t cols, size_t n_mat,
                          lb__imatrix_entry **out);
lb_status lb__imatrix_add_dataset(lb_imatrix *im, const char *s, size_t len);
/* Sorts by name, refuses duplicates (naming `what` and the name) and
 * computes every entry's values as llama-quantize does. */
lb_status lb__imatrix_finish(lb_imatrix *im, const char *what);

/* Parses a whole file held in buf (copied: buf may go afterwards); `what`
 * names it in messages. GGUF when it starts with the magic, else legacy. */
lb_status lb__imatrix_parse(const uint8_t *buf, size_t len, const char *what, lb_imatrix **out);

#endif

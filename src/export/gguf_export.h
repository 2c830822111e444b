/* Shared by lb_gguf_choose (gguf_choose.c) and lb_export_gguf
 * (gguf_export.c): a qmodel's tensors as llama.cpp names and shapes them. */
#ifndef LB_EXPORT_GGUF_EXPORT_H
#define LB_EXPORT_GGUF_EXPORT_H

#include "export/gguf_mix.h"
#include "io/gguf.h"
#include "lowbit.h"

typedef struct lb__gguf_view {
    size_t n;                            /* = lb_qmodel_count */
    lb__mix_tensor *t;                   /* per entry: GGUF name, ggml shape, the type it keeps unquantized */
    char (*names)[LB_GGUF_MAX_NAME + 64];
    lb__mix_model model;
} lb__gguf_view;

lb_status lb__gguf_view_make(const lb_qmodel *q, lb__gguf_view *v);
void lb__gguf_view_free(lb__gguf_view *v);
/* o's names as the mix's options; *ov (the caller frees) holds the
 * overrides, whose pattern still ends in "=TYPE". */
lb_status lb__gguf_mix_options(const lb_gguf_options *o, lb__mix_options *mo, lb__mix_override **ov);

/* llama-quantize's --include-weights / --exclude-weights: whether o keeps
 * the imatrix entry of this name (a name containing an excluded string is
 * dropped; with included strings, only a name containing one is kept). */
int lb__gguf_imatrix_keeps(const lb_gguf_options *o, const char *entry_name);
/* The entries of o->imatrix kept (0 without an imatrix): llama-quantize's
 * quantize.imatrix.entries_count, and whether it quantizes with one. */
size_t lb__gguf_imatrix_kept(const lb_gguf_options *o);

/* NVFP4 in GGUF: llama.cpp multiplies a matrix product by the optional
 * F32 tensor "<name less .weight>.scale" of shape {1}, so the blocks hold
 * w / scale. These are the tensors its loader looks that scale up for. */
int lb__gguf_takes_scale(const char *gguf_name);

#endif

/* Writing the GGUF imatrix byte for byte as llama-imatrix writes it: KVs
 * general.type, imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size
 * in that order; per entry in name order NAME.in_sum2 (ne [cols, n_mat])
 * then NAME.counts (ne [1, n_mat]), each with ggml's dimension count
 * (trailing 1s dropped); 32-byte alignment. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "io/imatrix.h"
#include "util/error.h"

typedef struct save_ctx {
    const lb_imatrix *im;
    float scale;       /* legacy: sums and counts times the chunk size */
} save_ctx;

static lb_status fill(void *ctx, size_t i, void *dst, uint64_t n_bytes)
{
    const save_ctx *c = ctx;
    const lb__imatrix_entry *e = &c->im->e[i / 2];
    float *out = dst;
    if (i % 2 == 0) {
        if (n_bytes != (uint64_t)e->cols * e->n_mat * 4) return lb__fail(LB_ERR_ARG, "imatrix save: size of %s", e->name);
        for (size_t j = 0; j < e->cols * e->n_mat; j++) out[j] = c->im->legacy ? e->sums[j] * c->scale : e->sums[j];
    } else {
        if (n_bytes != (uint64_t)e->n_mat * 4) return lb__fail(LB_ERR_ARG, "imatrix save: counts of %s", e->name);
        /* llama-imatrix converts a legacy ncall in int64, then stores float */
        for (size_t m = 0; m < e->n_mat; m++)
            out[m] = (float)(c->im->legacy ? e->counts[0] * (int64_t)LB_IMATRIX_LEGACY_CHUNK : e->counts[m]);
    }
    return LB_OK;
}

/* ggml_n_dims of a 2-D [ne0, ne1]: 1 unless ne1 > 1 */
static int n_dims_of(uint64_t ne1) { return ne1 > 1 ? 2 : 1; }

lb_status lb_imatrix_save(const lb_imatrix *im, const char *path)
{
    if (!im || !path) return lb__fail(LB_ERR_ARG, "lb_imatrix_save: NULL argument");
    if (im->n == 0) return lb__fail(LB_ERR_ARG, "lb_imatrix_save: %s: no entries to write", path);
    for (size_t i = 0; i < im->n; i++)
        if (strlen(im->e[i].name) > LB_IMATRIX_MAX_NAME)
            return lb__fail(LB_ERR_ARG, "lb_imatrix_save: %s: entry name '%s' is longer than %d bytes", path,
                            im->e[i].name, LB_IMATRIX_MAX_NAME);
    uint32_t chunk_size = im->chunk_size, chunk_count = im->chunk_count;
    if (im->legacy) {
        /* as llama-imatrix --in-file: the chunk count becomes the largest ncall */
        chunk_size = LB_IMATRIX_LEGACY_CHUNK, chunk_count = 0;
        for (size_t i = 0; i < im->n; i++) {
            const lb__imatrix_entry *e = &im->e[i];
            if (e->counts[0] > (int64_t)chunk_count) chunk_count = (uint32_t)e->counts[0];
            /* llama-imatrix would write an infinity here, which llama-quantize then refuses */
            for (size_t j = 0; j < e->cols; j++)
                if (!isfinite(e->sums[j] * (float)LB_IMATRIX_LEGACY_CHUNK))
                    return lb__fail(LB_ERR_ARG, "lb_imatrix_save: %s: entry '%s': value %zu (%g) times the chunk size "
                                    "%u overflows fp32", path, e->name, j, (double)e->sums[j], LB_IMATRIX_LEGACY_CHUNK);
        }
    }
    lb__gguf_writer *w;
    lb_status st = lb__gguf_writer_new(&w);
    if (st != LB_OK) return st;
    st = lb__gguf_set_str(w, "general.type", "imatrix", 7);
    if (st == LB_OK)
        st = lb__gguf_set_arr_str(w, "imatrix.datasets", (const char *const *)im->datasets, NULL, im->n_datasets);
    if (st == LB_OK) st = lb__gguf_set_u32(w, "imatrix.chunk_count", chunk_count);
    if (st == LB_OK) st = lb__gguf_set_u32(w, "imatrix.chunk_size", chunk_size);
    for (size_t i = 0; i < im->n && st == LB_OK; i++) {
        const lb__imatrix_entry *e = &im->e[i];
        char name[LB_GGUF_MAX_NAME];
        uint64_t ne_s[4] = {e->cols, e->n_mat, 1, 1}, ne_c[4] = {1, e->n_mat, 1, 1};
        snprintf(name, sizeof name, "%s.in_sum2", e->name);
        st = lb__gguf_add_tensor(w, name, LB_DT_F32, n_dims_of(e->n_mat), ne_s);
        snprintf(name, sizeof name, "%s.counts", e->name);
        if (st == LB_OK) st = lb__gguf_add_tensor(w, name, LB_DT_F32, n_dims_of(e->n_mat), ne_c);
    }
    save_ctx c = {.im = im, .scale = (float)LB_IMATRIX_LEGACY_CHUNK};
    if (st == LB_OK) st = lb__gguf_write(w, path, fill, &c);
    lb__gguf_writer_free(w);
    return st;
}

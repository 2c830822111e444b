/* The importance-matrix object (lowbit.h, "Importance matrices"): entries
 * sorted by llama.cpp's weight names, lookups by either naming, and the
 * per-column values llama-quantize derives from the sums and counts. */
#include <stdlib.h>
#include <string.h>

#include "io/imatrix.h"
#include "util/error.h"

lb_imatrix *lb__imatrix_new(void) { return calloc(1, sizeof(lb_imatrix)); }

lb_status lb__imatrix_add(lb_imatrix *im, const char *name, size_t name_len, size_t cols, size_t n_mat,
                          lb__imatrix_entry **out)
{
    if (cols == 0 || n_mat == 0 || cols > SIZE_MAX / sizeof(float) / n_mat)
        return lb__fail(LB_ERR_ARG, "imatrix entry %.*s: %zu columns x %zu matrices", (int)name_len, name, cols, n_mat);
    if (im->n == im->cap) {
        size_t cap = im->cap ? 2 * im->cap : 64;
        lb__imatrix_entry *e = realloc(im->e, cap * sizeof *e);
        if (!e) return lb__fail(LB_ERR_NOMEM, "imatrix: out of memory for %zu entries", cap);
        im->e = e, im->cap = cap;
    }
    lb__imatrix_entry *e = &im->e[im->n];
    memset(e, 0, sizeof *e);
    e->name = malloc(name_len + 1);
    e->sums = calloc(cols * n_mat, sizeof *e->sums);
    e->counts = calloc(n_mat, sizeof *e->counts);
    e->values = calloc(cols * n_mat, sizeof *e->values);
    if (!e->name || !e->sums || !e->counts || !e->values) {
        free(e->name), free(e->sums), free(e->counts), free(e->values);
        return lb__fail(LB_ERR_NOMEM, "imatrix entry %.*s: out of memory for %zu x %zu sums", (int)name_len, name,
                        cols, n_mat);
    }
    memcpy(e->name, name, name_len);
    e->name[name_len] = 0;
    e->cols = cols, e->n_mat = n_mat;
    im->n++;
    *out = e;
    return LB_OK;
}

lb_status lb__imatrix_add_dataset(lb_imatrix *im, const char *s, size_t len)
{
    char **d = realloc(im->datasets, (im->n_datasets + 1) * sizeof *d);
    if (!d) return lb__fail(LB_ERR_NOMEM, "imatrix: out of memory for a dataset name");
    im->datasets = d;
    char *copy = malloc(len + 1);
    if (!copy) return lb__fail(LB_ERR_NOMEM, "imatrix: out of memory for a dataset name");
    memcpy(copy, s, len);
    copy[len] = 0;
    d[im->n_datasets++] = copy;
    return LB_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const lb__imatrix_entry *)a)->name, ((const lb__imatrix_entry *)b)->name);
}

/* llama-quantize's load_imatrix: GGUF sums divided by their matrix's
 * count in fp32 (a matrix no token reached gets 1.0 everywhere); legacy
 * sums divided by ncall (kept as they are when ncall is not positive). */
static void derive_values(lb__imatrix_entry *e, int legacy)
{
    for (size_t m = 0; m < e->n_mat; m++) {
        const float *s = e->sums + m * e->cols;
        float *v = e->values + m * e->cols;
        int64_t c = legacy ? e->counts[0] : e->counts[m];
        float count = (float)c;
        for (size_t j = 0; j < e->cols; j++) v[j] = c > 0 ? s[j] / count : legacy ? s[j] : 1.0f;
    }
}

lb_status lb__imatrix_finish(lb_imatrix *im, const char *what)
{
    if (im->n) qsort(im->e, im->n, sizeof *im->e, by_name);
    for (size_t i = 1; i < im->n; i++)
        if (strcmp(im->e[i - 1].name, im->e[i].name) == 0)
            return lb__fail(LB_ERR_PARSE, "%s: entry '%s' appears twice", what, im->e[i].name);
    for (size_t i = 0; i < im->n; i++) derive_values(&im->e[i], im->legacy);
    return LB_OK;
}

void lb_imatrix_free(lb_imatrix *im)
{
    if (!im) return;
    for (size_t i = 0; i < im->n; i++) {
        free(im->e[i].name), free(im->e[i].sums), free(im->e[i].counts), free(im->e[i].values);
    }
    for (size_t i = 0; i < im->n_datasets; i++) free(im->datasets[i]);
    free(im->datasets);
    free(im->e);
    free(im);
}

size_t lb_imatrix_count(const lb_imatrix *im) { return im ? im->n : 0; }

void lb_imatrix_get_info(const lb_imatrix *im, lb_imatrix_info *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!im) return;
    out->entries = im->n;
    out->chunk_count = im->chunk_count, out->chunk_size = im->chunk_size;
    out->legacy = im->legacy;
    out->has_metadata = im->has_metadata;
    out->n_datasets = im->n_datasets;
}

const char *lb_imatrix_dataset(const lb_imatrix *im, size_t i)
{
    return im && i < im->n_datasets ? im->datasets[i] : NULL;
}

static void fill(const lb__imatrix_entry *e, lb_imatrix_entry *out)
{
    out->name = e->name;
    out->cols = e->cols, out->n_mat = e->n_mat;
    out->sums = e->sums, out->counts = e->counts, out->values = e->values;
}

lb_status lb_imatrix_entry_at(const lb_imatrix *im, size_t i, lb_imatrix_entry *out)
{
    if (!im || !out) return lb__fail(LB_ERR_ARG, "lb_imatrix_entry_at: NULL argument");
    if (i >= im->n) return lb__fail(LB_ERR_ARG, "lb_imatrix_entry_at: entry %zu of %zu", i, im->n);
    fill(&im->e[i], out);
    return LB_OK;
}

static const lb__imatrix_entry *find_exact(const lb_imatrix *im, const char *name)
{
    size_t lo = 0, hi = im->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(im->e[mid].name, name);
        if (c == 0) return &im->e[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* llama.cpp's name first; a canonical (Hugging Face) name through the
 * GGUF mapping of src/io/names.c. */
static const lb__imatrix_entry *find(const lb_imatrix *im, const char *name)
{
    if (!im || !name) return NULL;
    const lb__imatrix_entry *e = find_exact(im, name);
    char gguf[256];
    if (!e && lb_name_to_gguf(name, gguf, sizeof gguf) && strcmp(gguf, name) != 0) e = find_exact(im, gguf);
    return e;
}

int lb_imatrix_find(const lb_imatrix *im, const char *name, lb_imatrix_entry *out)
{
    const lb__imatrix_entry *e = find(im, name);
    if (e && out) fill(e, out);
    return e != NULL;
}

int lb_imatrix_values(const lb_imatrix *im, const char *name, const float **values, size_t *n)
{
    const lb__imatrix_entry *e = find(im, name);
    if (values) *values = e ? e->values : NULL;
    if (n) *n = e ? e->cols * e->n_mat : 0;
    return e != NULL;
}

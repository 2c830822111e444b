#define _DEFAULT_SOURCE /* madvise, MADV_DONTNEED, strndup */
/* lb_model: one view of a checkpoint, whatever file holds it. The file
 * type is told by content (GGUF magic, a safetensors header's '{'); when
 * the content is too broken to tell, by the name (.gguf, .safetensors), so
 * that the right reader explains what is wrong; anything else is read as
 * a llama2.c checkpoint. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/model_internal.h"
#include "util/error.h"

static lb_status note_source(lb_model *m, const char *path);

/* ----- GGUF ----- */

static lb_status open_gguf(lb_model *m, const char *path)
{
    lb_status st = lb__gguf_open(path, &m->gguf);
    if (st != LB_OK) return st;
    m->kind = LB_MODEL_GGUF;
    if ((st = note_source(m, path)) != LB_OK) return st;
    size_t n = m->gguf.n_tensors;
    m->tensors = calloc(n ? n : 1, sizeof *m->tensors);
    m->owned_names = calloc(n ? n : 1, sizeof *m->owned_names);
    if (!m->tensors || !m->owned_names) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const lb__gguf_tensor *g = &m->gguf.tensors[i];
        lb_tensor *t = &m->tensors[i];
        char buf[160]; /* GGUF names are under 64 bytes; mapped ones stay under 80 */
        lb_name_from_gguf(g->name, buf, sizeof buf);
        if (!(m->owned_names[i] = malloc(strlen(buf) + 1))) return lb__fail(LB_ERR_NOMEM, "out of memory");
        strcpy(m->owned_names[i], buf);
        t->name = m->owned_names[i], t->file_name = g->name;
        t->dtype = g->dtype;
        t->n_dims = g->n_dims;
        for (int d = 0; d < g->n_dims; d++) t->shape[d] = g->ne[g->n_dims - 1 - d]; /* ggml's ne[0] is innermost */
        t->n_elements = g->n_elements, t->n_bytes = g->n_bytes;
        t->data = g->data;
        m->n_tensors++;
    }
    st = lb__arch_from_gguf(&m->gguf, path, &m->arch);
    if (st == LB_OK) lb__arch_notes_from_gguf(&m->gguf, m->arch.name, &m->notes);
    return st;
}

/* ----- safetensors, single file or Hugging Face directory ----- */

static lb_status add_shard_tensors(lb_model *m, const lb__st_file *f, const char *path)
{
    lb_tensor *grown = realloc(m->tensors, (m->n_tensors + f->n_tensors + 1) * sizeof *grown);
    if (!grown) return lb__fail(LB_ERR_NOMEM, "out of memory");
    m->tensors = grown;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const lb__st_tensor *s = &f->tensors[i];
        for (size_t k = 0; k + 1 < m->n_shards; k++) /* the shard being added is the last one */
            if (lb__st_find(&m->shards[k], s->name))
                return lb__fail(LB_ERR_PARSE, "%s: tensor '%s' is also in an earlier shard", path, s->name);
        lb_tensor *t = &m->tensors[m->n_tensors++];
        memset(t, 0, sizeof *t);
        t->name = t->file_name = s->name;
        t->dtype = s->dtype;
        t->n_dims = s->n_dims;
        if (s->n_dims) memcpy(t->shape, s->shape, (size_t)s->n_dims * sizeof *t->shape);
        t->n_elements = s->n_elements, t->n_bytes = s->end - s->begin;
        t->data = s->data;
    }
    return LB_OK;
}

static lb_status open_shard(lb_model *m, const char *path)
{
    lb__st_file *grown = realloc(m->shards, (m->n_shards + 1) * sizeof *grown);
    if (!grown) return lb__fail(LB_ERR_NOMEM, "out of memory");
    m->shards = grown;
    lb_status st = lb__st_open(path, &m->shards[m->n_shards]);
    if (st != LB_OK) return st;
    m->n_shards++;
    if ((st = note_source(m, path)) != LB_OK) return st;
    return add_shard_tensors(m, &m->shards[m->n_shards - 1], path);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A shard name from the index must be a plain file name in the directory:
 * an index is input like any other, and "../x" or "/etc/x" must not work. */
static int plain_file_name(const char *s)
{
    return s[0] && s[0] != '.' && !strchr(s, '/') && !strchr(s, '\\');
}

/* The shard (index into m->shards) that was opened for file name `name`. */
static size_t shard_named(char *const *names, size_t n, const char *name)
{
    for (size_t k = 0; k < n; k++)
        if (strcmp(names[k], name) == 0) return k;
    return n;
}

static lb_status open_sharded(lb_model *m, const char *dir, const char *index_path)
{
    lb__json *idx;
    lb_status st = lb__json_read_file(index_path, 64u << 20, &idx);
    if (st != LB_OK) return st;
    const lb__json *map = lb__json_get(idx, "weight_map");
    if (!map || map->type != LB_JSON_OBJECT) st = lb__fail(LB_ERR_PARSE, "%s: no \"weight_map\" object", index_path);
    else if (map->len == 0) st = lb__fail(LB_ERR_PARSE, "%s: \"weight_map\" lists no tensors", index_path);
    /* each distinct shard once, in the order first named; names[k] is m->shards[k]'s */
    char **names = st == LB_OK ? calloc(map->len, sizeof *names) : NULL;
    size_t n_names = 0;
    if (st == LB_OK && !names) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LB_OK && i < map->len; i++) {
        const lb__json *v = &map->items[i];
        if (v->type != LB_JSON_STRING || !plain_file_name(v->str)) {
            st = lb__fail(LB_ERR_PARSE, "%s: weight_map[\"%s\"] is not a file name in the model directory", index_path,
                          map->keys[i]);
            break;
        }
        if (shard_named(names, n_names, v->str) < n_names) continue;
        char *shard = lb__path_join(dir, v->str);
        st = shard ? open_shard(m, shard) : lb__fail(LB_ERR_NOMEM, "out of memory");
        free(shard);
        if (st == LB_OK) names[n_names++] = (char *)v->str;
    }
    /* the index and the shards must agree, both ways: every entry is in the
     * shard it names, and the shards hold nothing else */
    for (size_t i = 0; st == LB_OK && i < map->len; i++) {
        size_t k = shard_named(names, n_names, map->items[i].str);
        if (!lb__st_find(&m->shards[k], map->keys[i]))
            st = lb__fail(LB_ERR_PARSE, "%s: tensor '%s' is not in %s, the shard the index names", index_path,
                          map->keys[i], map->items[i].str);
    }
    if (st == LB_OK && m->n_tensors != map->len)
        st = lb__fail(LB_ERR_PARSE, "%s: the shards hold %zu tensors but the index lists %zu", index_path,
                      m->n_tensors, map->len);
    free(names);
    lb__json_free(idx);
    return st;
}

/* config.json: the architecture, and a quantized checkpoint's
 * quantization_config (hf_quantized.c turns its modules into logical
 * weights; dir is where hf_quant_config.json would be). */
static lb_status read_config(lb_model *m, const char *config_path, const char *dir)
{
    lb__json *cfg;
    lb_status st = lb__json_read_file(config_path, 16u << 20, &cfg);
    if (st == LB_OK) st = lb__arch_from_config(cfg, config_path, &m->arch);
    if (st == LB_OK) lb__arch_notes_from_config(cfg, &m->notes);
    if (st == LB_OK) st = lb__hfq_apply(m, cfg, dir, config_path);
    lb__json_free(cfg);
    return st;
}

static lb_status open_hf_dir(lb_model *m, const char *dir)
{
    m->kind = LB_MODEL_HF_DIR;
    char *config = lb__path_join(dir, "config.json"), *index = lb__path_join(dir, "model.safetensors.index.json");
    char *single = lb__path_join(dir, "model.safetensors");
    lb_status st = LB_OK;
    if (!config || !index || !single) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    else if (!file_exists(config)) st = lb__fail(LB_ERR_IO, "%s: no config.json: not a Hugging Face model directory", dir);
    else if (file_exists(index)) st = open_sharded(m, dir, index);
    else if (file_exists(single)) st = open_shard(m, single);
    else st = lb__fail(LB_ERR_IO, "%s: neither model.safetensors nor model.safetensors.index.json is there", dir);
    if (st == LB_OK) st = read_config(m, config, dir);
    free(config), free(index), free(single);
    return st;
}

/* ----- llama2.c ----- */

static lb_status open_llama2c(lb_model *m, const char *path)
{
    m->kind = LB_MODEL_LLAMA2C;
    lb_status st = lb__map_file(path, &m->l2c_map);
    if (st != LB_OK) return st;
    st = lb__l2c_parse(m->l2c_map.data, m->l2c_map.size, path, &m->l2c);
    if (st == LB_OK) st = note_source(m, path);
    if (st != LB_OK) return st;
    m->tensors = m->l2c.tensors, m->n_tensors = m->l2c.n_tensors;
    m->l2c.tensors = NULL; /* the model owns the array now */
    m->arch = m->l2c.arch;
    return LB_OK;
}

static lb_status open_safetensors(lb_model *m, const char *path)
{
    m->kind = LB_MODEL_SAFETENSORS;
    lb_status st = open_shard(m, path);
    /* a config.json beside it describes the architecture */
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    char *config = dir ? lb__path_join(dir, "config.json") : NULL;
    if (st == LB_OK && config && file_exists(config)) st = read_config(m, config, dir);
    free(dir), free(config);
    return st;
}

/* ----- dispatch ----- */

static lb_status sniff(const char *path, uint8_t head[9], size_t *got)
{
    FILE *f = fopen(path, "rb");
    if (!f) return lb__fail(LB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    *got = fread(head, 1, 9, f);
    fclose(f);
    return LB_OK;
}

/* Frees everything the model holds and zeroes it: for lb_model_close, and
 * for a file that failed to open as one type and is tried as another. */
static void reset(lb_model *m)
{
    if (m->owned_names)
        for (size_t i = 0; i < m->n_tensors; i++) free(m->owned_names[i]);
    free(m->owned_names), free(m->tensors);
    if (m->by_file_name != m->by_name) free(m->by_file_name);
    free(m->by_name), free(m->sources);
    lb__hfq_free(m->hfq);
    if (m->kind == LB_MODEL_GGUF) lb__gguf_close(&m->gguf);
    for (size_t i = 0; i < m->n_shards; i++) lb__st_close(&m->shards[i]);
    free(m->shards);
    lb__l2c_free(&m->l2c);
    lb__unmap_file(&m->l2c_map);
    memset(m, 0, sizeof *m);
}

static lb_status open_by_content(lb_model *m, const char *path, const uint8_t head[9], size_t got)
{
    size_t n = strlen(path);
    int gguf_name = n >= 5 && strcmp(path + n - 5, ".gguf") == 0;
    int st_name = n >= 12 && strcmp(path + n - 12, ".safetensors") == 0;
    if (got >= 4 && memcmp(head, "GGUF", 4) == 0) return open_gguf(m, path);
    if (gguf_name) return open_gguf(m, path); /* the GGUF reader says what is wrong with it */
    if (st_name) return open_safetensors(m, path);
    if (got == 9 && head[8] == '{') {
        /* a llama2.c header can have '{' there too (n_layers 123): if it
         * does not read as safetensors, it may still read as llama2.c */
        lb_status st = open_safetensors(m, path);
        if (st == LB_OK) return st;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", lb_last_error());
        reset(m);
        if (open_llama2c(m, path) == LB_OK) return LB_OK;
        return lb__fail(st, "%s", msg);
    }
    lb_status st = open_llama2c(m, path);
    if (st == LB_ERR_PARSE) { /* say what else it was not, too */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", lb_last_error());
        st = lb__fail(st, "not GGUF (no 'GGUF' magic) nor safetensors (no JSON header); read as a "
                          "llama2.c checkpoint: %s", msg);
    }
    return st;
}

/* Records a file the model reads (for lb_model_save's refusal to replace
 * an input). */
static lb_status note_source(lb_model *m, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return LB_OK; /* it was just opened; nothing to protect if it is gone */
    struct lb__file_id *grown = realloc(m->sources, (m->n_sources + 1) * sizeof *grown);
    if (!grown) return lb__fail(LB_ERR_NOMEM, "out of memory");
    m->sources = grown;
    m->sources[m->n_sources++] = (struct lb__file_id){(unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino};
    return LB_OK;
}

int lb__model_reads(const lb_model *m, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    for (size_t i = 0; i < m->n_sources; i++)
        if (m->sources[i].dev == (unsigned long long)sb.st_dev && m->sources[i].ino == (unsigned long long)sb.st_ino)
            return 1;
    return 0;
}

/* Sorted indices for lb_model_find; two tensors under one canonical name
 * (a GGUF holding both output.weight and lm_head.weight) are an error. */
static const lb_model *sort_model;
static int by_name_cmp(const void *a, const void *b)
{
    return strcmp(sort_model->tensors[*(const size_t *)a].name, sort_model->tensors[*(const size_t *)b].name);
}
static int by_file_name_cmp(const void *a, const void *b)
{
    return strcmp(sort_model->tensors[*(const size_t *)a].file_name,
                  sort_model->tensors[*(const size_t *)b].file_name);
}

static lb_status build_index(lb_model *m, const char *path)
{
    size_t n = m->n_tensors;
    /* safetensors names are canonical already: one order serves both lookups */
    int same = 1;
    for (size_t i = 0; i < n && same; i++) same = m->tensors[i].name == m->tensors[i].file_name;
    m->by_name = malloc((n ? n : 1) * sizeof *m->by_name);
    m->by_file_name = same ? m->by_name : malloc((n ? n : 1) * sizeof *m->by_file_name);
    if (!m->by_name || !m->by_file_name) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) m->by_name[i] = m->by_file_name[i] = i;
    sort_model = m; /* qsort has no context argument in C11; opening is not reentrant here */
    qsort(m->by_name, n, sizeof *m->by_name, by_name_cmp);
    if (!same) qsort(m->by_file_name, n, sizeof *m->by_file_name, by_file_name_cmp);
    sort_model = NULL;
    for (size_t i = 1; i < n; i++) {
        const lb_tensor *a = &m->tensors[m->by_name[i - 1]], *b = &m->tensors[m->by_name[i]];
        if (strcmp(a->name, b->name) == 0)
            return lb__fail(LB_ERR_PARSE, "%s: tensors '%s' and '%s' both mean '%s'", path, a->file_name, b->file_name,
                            a->name);
    }
    return LB_OK;
}

lb_status lb_model_open(const char *path, lb_model **out)
{
    if (!path || !out) return lb__fail(LB_ERR_ARG, "lb_model_open: NULL argument");
    *out = NULL;
    lb_model *m = calloc(1, sizeof *m);
    if (!m) return lb__fail(LB_ERR_NOMEM, "out of memory");
    struct stat sb;
    lb_status st;
    if (stat(path, &sb) != 0) {
        st = lb__fail(LB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        st = open_hf_dir(m, path);
    } else if (!S_ISREG(sb.st_mode)) { /* a FIFO or device would block or never end */
        st = lb__fail(LB_ERR_IO, "'%s' is not a regular file or a directory", path);
    } else {
        uint8_t head[9] = {0};
        size_t got = 0;
        st = sniff(path, head, &got);
        if (st == LB_OK) st = open_by_content(m, path, head, got);
    }
    /* the model's table holds all it needs of the shards' (their names
     * stay with them): one table, not two, for a million-tensor header */
    for (size_t k = 0; st == LB_OK && k < m->n_shards; k++) lb__st_drop_table(&m->shards[k]);
    if (st == LB_OK) st = build_index(m, path);
    if (st == LB_OK) lb__arch_from_tensors(m, &m->arch);
    if (st == LB_OK && !(m->path = strdup(path))) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st != LB_OK) {
        lb_model_close(m);
        return st;
    }
    *out = m;
    return LB_OK;
}

void lb_model_close(lb_model *m)
{
    if (!m) return;
    free(m->path); /* set only once open succeeded: reset() between attempts never sees it */
    reset(m);
    free(m);
}

lb_model_kind lb_model_get_kind(const lb_model *m) { return m->kind; }
const lb_arch *lb_model_arch(const lb_model *m) { return &m->arch; }
size_t lb_model_tensor_count(const lb_model *m) { return m->n_tensors; }

const lb_tensor *lb_model_tensor(const lb_model *m, size_t i) { return i < m->n_tensors ? &m->tensors[i] : NULL; }

uint64_t lb_model_param_count(const lb_model *m)
{
    uint64_t n = 0;
    for (size_t i = 0; m && i < m->n_tensors; i++) /* saturates (a file cannot hold that many, but stay exact or max) */
        n = m->tensors[i].n_elements > UINT64_MAX - n ? UINT64_MAX : n + m->tensors[i].n_elements;
    return n;
}

static const lb_tensor *search(const lb_model *m, const size_t *order, int file_name, const char *name)
{
    size_t lo = 0, hi = m->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const lb_tensor *t = &m->tensors[order[mid]];
        int c = strcmp(file_name ? t->file_name : t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const lb_tensor *lb_model_find(const lb_model *m, const char *name)
{
    if (!m || !name) return NULL;
    const lb_tensor *t = search(m, m->by_name, 0, name);
    return t ? t : search(m, m->by_file_name, 1, name);
}

lb_status lb_tensor_to_f32(const lb_tensor *t, float *dst)
{
    if (!t || !dst) return lb__fail(LB_ERR_ARG, "lb_tensor_to_f32: NULL argument");
    if (t->dtype == LB_DT_QUANTIZED) return lb__hfq_to_f32(t, dst);
    return lb_dtype_to_f32(t->dtype, t->data, (size_t)t->n_elements, dst);
}

int lb_tensor_is_weight(const lb_tensor *t)
{
    size_t n = strlen(t->name);
    if (t->n_dims != 2 || t->n_elements == 0 || n < 7 || strcmp(t->name + n - 7, ".weight") != 0) return 0;
    return strstr(t->name, "norm") == NULL; /* RMSNorm gains are vectors anyway; this also skips odd 2-D ones */
}

void lb__tensor_prefetch(const lb_tensor *t)
{
#ifdef MADV_POPULATE_READ
    if (!t || !t->data || t->n_bytes == 0 || t->dtype == LB_DT_QUANTIZED) return;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t ps = page > 0 ? (uintptr_t)page : 4096, a = (uintptr_t)t->data / ps * ps;
    uintptr_t b = ((uintptr_t)t->data + (uintptr_t)t->n_bytes + ps - 1) / ps * ps;
    madvise((void *)a, b - a, MADV_POPULATE_READ); /* a kernel before 5.14 refuses it: nothing changes */
#else
    (void)t;
#endif
}

void lb_tensor_release(const lb_tensor *t)
{
    if (!t || !t->data || t->n_bytes == 0) return;
    if (t->dtype == LB_DT_QUANTIZED) { /* its data is the plan, not file bytes: release the components */
        lb__hfq_release(t);
        return;
    }
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)t->data, b = a + (uintptr_t)t->n_bytes, ps = page > 0 ? (uintptr_t)page : 4096;
    a = (a + ps - 1) / ps * ps; /* whole pages inside the tensor only: the neighbours keep theirs */
    b = b / ps * ps;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

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

/* ----- GGUF ----- */

static lb_status open_gguf(lb_model *m, const char *path)
{
    lb_status st = lb__gguf_open(path, &m->gguf);
    if (st != LB_OK) return st;
    m->kind = LB_MODEL_GGUF;
    size_t n = m->gguf.n_tensors;
    m->tensors = calloc(n ? n : 1, sizeof *m->tensors);
    m->owned_names = calloc(n ? n : 1, sizeof *m->owned_names);
    if (!m->tensors || !m->owned_names) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const lb__gguf_tensor *g = &m->gguf.tensors[i];
        lb_tensor *t = &m->tensors[i];
        char buf[160];
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
    return lb__arch_from_gguf(&m->gguf, path, &m->arch);
}

/* ----- safetensors, single file or Hugging Face directory ----- */

static lb_status add_shard_tensors(lb_model *m, const lb__st_file *f, const char *path)
{
    lb_tensor *grown = realloc(m->tensors, (m->n_tensors + f->n_tensors + 1) * sizeof *grown);
    if (!grown) return lb__fail(LB_ERR_NOMEM, "out of memory");
    m->tensors = grown;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const lb__st_tensor *s = &f->tensors[i];
        if (lb_model_find(m, s->name))
            return lb__fail(LB_ERR_PARSE, "%s: tensor '%s' is also in an earlier shard", path, s->name);
        lb_tensor *t = &m->tensors[m->n_tensors++];
        memset(t, 0, sizeof *t);
        t->name = t->file_name = s->name;
        t->dtype = s->dtype;
        t->n_dims = s->n_dims;
        memcpy(t->shape, s->shape, sizeof t->shape);
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

static lb_status open_sharded(lb_model *m, const char *dir, const char *index_path)
{
    lb__json *idx;
    lb_status st = lb__json_read_file(index_path, 64u << 20, &idx);
    if (st != LB_OK) return st;
    const lb__json *map = lb__json_get(idx, "weight_map");
    if (!map || map->type != LB_JSON_OBJECT) st = lb__fail(LB_ERR_PARSE, "%s: no \"weight_map\" object", index_path);
    /* each distinct shard once, in the order first named */
    for (size_t i = 0; st == LB_OK && i < map->len; i++) {
        const lb__json *v = &map->items[i];
        if (v->type != LB_JSON_STRING || !plain_file_name(v->str)) {
            st = lb__fail(LB_ERR_PARSE, "%s: weight_map[\"%s\"] is not a file name in the model directory", index_path,
                          map->keys[i]);
            break;
        }
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) seen = strcmp(map->items[j].str, v->str) == 0;
        if (seen) continue;
        char *shard = lb__path_join(dir, v->str);
        st = shard ? open_shard(m, shard) : lb__fail(LB_ERR_NOMEM, "out of memory");
        free(shard);
    }
    /* the index and the shards must agree, both ways */
    for (size_t i = 0; st == LB_OK && i < map->len; i++)
        if (!lb_model_find(m, map->keys[i]))
            st = lb__fail(LB_ERR_PARSE, "%s: tensor '%s' is in none of the shards (the index names %s)", index_path,
                          map->keys[i], map->items[i].str);
    if (st == LB_OK && m->n_tensors != map->len)
        st = lb__fail(LB_ERR_PARSE, "%s: the shards hold %zu tensors but the index lists %zu", index_path,
                      m->n_tensors, map->len);
    lb__json_free(idx);
    return st;
}

static lb_status read_config(lb_model *m, const char *config_path)
{
    lb__json *cfg;
    lb_status st = lb__json_read_file(config_path, 16u << 20, &cfg);
    if (st == LB_OK) st = lb__arch_from_config(cfg, config_path, &m->arch);
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
    if (st == LB_OK) st = read_config(m, config);
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
    if (st == LB_OK && config && file_exists(config)) st = read_config(m, config);
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
    } else {
        uint8_t head[9] = {0};
        size_t got = 0;
        st = sniff(path, head, &got);
        if (st == LB_OK) {
            size_t n = strlen(path);
            int gguf_name = n >= 5 && strcmp(path + n - 5, ".gguf") == 0;
            int st_name = n >= 12 && strcmp(path + n - 12, ".safetensors") == 0;
            if (got >= 4 && memcmp(head, "GGUF", 4) == 0) st = open_gguf(m, path);
            else if ((got == 9 && head[8] == '{') || (st_name && !gguf_name)) st = open_safetensors(m, path);
            else if (gguf_name) st = open_gguf(m, path); /* the GGUF reader says what is wrong with it */
            else {
                st = open_llama2c(m, path);
                if (st == LB_ERR_PARSE) { /* say what else it was not, too */
                    char msg[1024];
                    snprintf(msg, sizeof msg, "%s", lb_last_error());
                    st = lb__fail(st, "not GGUF (no 'GGUF' magic) nor safetensors (no JSON header); read as a "
                                      "llama2.c checkpoint: %s", msg);
                }
            }
        }
    }
    if (st == LB_OK) lb__arch_from_tensors(m, &m->arch);
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
    if (m->owned_names)
        for (size_t i = 0; i < m->n_tensors; i++) free(m->owned_names[i]);
    free(m->owned_names);
    free(m->tensors);
    if (m->kind == LB_MODEL_GGUF) lb__gguf_close(&m->gguf);
    for (size_t i = 0; i < m->n_shards; i++) lb__st_close(&m->shards[i]);
    free(m->shards);
    lb__l2c_free(&m->l2c);
    lb__unmap_file(&m->l2c_map);
    free(m);
}

lb_model_kind lb_model_get_kind(const lb_model *m) { return m->kind; }
const lb_arch *lb_model_arch(const lb_model *m) { return &m->arch; }
size_t lb_model_tensor_count(const lb_model *m) { return m->n_tensors; }

const lb_tensor *lb_model_tensor(const lb_model *m, size_t i) { return i < m->n_tensors ? &m->tensors[i] : NULL; }

const lb_tensor *lb_model_find(const lb_model *m, const char *name)
{
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0 || strcmp(m->tensors[i].file_name, name) == 0) return &m->tensors[i];
    return NULL;
}

lb_status lb_tensor_to_f32(const lb_tensor *t, float *dst)
{
    if (!t || !dst) return lb__fail(LB_ERR_ARG, "lb_tensor_to_f32: NULL argument");
    return lb_dtype_to_f32(t->dtype, t->data, (size_t)t->n_elements, dst);
}

int lb_tensor_is_weight(const lb_tensor *t)
{
    size_t n = strlen(t->name);
    if (t->n_dims != 2 || n < 7 || strcmp(t->name + n - 7, ".weight") != 0) return 0;
    return strstr(t->name, "norm") == NULL; /* RMSNorm gains are vectors anyway; this also skips odd 2-D ones */
}

void lb_tensor_release(const lb_tensor *t)
{
    if (!t || !t->data || t->n_bytes == 0) return;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)t->data, b = a + (uintptr_t)t->n_bytes, ps = page > 0 ? (uintptr_t)page : 4096;
    a = (a + ps - 1) / ps * ps; /* whole pages inside the tensor only: the neighbours keep theirs */
    b = b / ps * ps;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

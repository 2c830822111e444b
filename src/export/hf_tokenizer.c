/* The tokenizer and generation files of a Hugging Face directory lowbit
 * writes. From a Hugging Face input (a directory, or a .safetensors file
 * with the files beside it) they are copied byte for byte; from a GGUF
 * they are synthesized from its tokenizer.ggml.* metadata
 * (hf_tokenizer_gguf.c); from a llama2.c checkpoint, from the llama2.c
 * tokenizer found beside it (tokenizer.bin, else tok<vocab>.bin, as
 * lb_tokenizer_from_model looks), when there is one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export/hf_tokenizer.h"
#include "export/hf_tokenizer_internal.h"
#include "io/model_internal.h"
#include "model/tokenizer_internal.h"
#include "util/error.h"

/* What a Hugging Face model directory holds beside the weights that makes
 * it loadable with its tokenizer (transformers' AutoTokenizer and
 * GenerationConfig read these). */
const char *const lb__hf_tokenizer_files[LB_HF_TOKENIZER_FILES] = {LB_HF_TOKENIZER_NAMES};

static int regular_file(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 && S_ISREG(s.st_mode);
}

static int is_dir(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

lb_status lb__hf_write_file(const char *dir, const char *name, const char *text, size_t len)
{
    char *path = lb__path_join(dir, name);
    if (!path) return lb__fail(LB_ERR_NOMEM, "out of memory");
    lb__outfile o;
    lb_status st = lb__out_open(path, &o);
    free(path);
    if (st != LB_OK) return st;
    st = lb__out_write(&o, text, len);
    if (st != LB_OK) {
        lb__out_abort(&o);
        return st;
    }
    return lb__out_commit(&o);
}

/* A llama2.c checkpoint's tokenizer, when one lies beside it. */
static lb_status from_llama2c(const lb_model *m, const char *model_path, const char *dir, int *written)
{
    if (!model_path) return LB_OK; /* nowhere to look */
    char name[32], *parent = lb__path_dir(model_path);
    snprintf(name, sizeof name, "tok%u.bin", lb_model_arch(m)->vocab_size);
    char *a = parent ? lb__path_join(parent, "tokenizer.bin") : NULL, *b = parent ? lb__path_join(parent, name) : NULL;
    lb_status st = a && b ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK && (regular_file(a) || regular_file(b))) {
        lb_tokenizer *t = NULL;
        st = lb_tokenizer_from_model(m, model_path, &t);
        if (st == LB_OK) st = lb__hf_tokenizer_from_tok(t, NULL, lb_tokenizer_source(t), dir, written);
        lb_tokenizer_free(t);
    }
    free(parent), free(a), free(b);
    return st;
}

/* Copies every tokenizer file found in src_dir. */
static lb_status copy_from(const char *src_dir, const char *dir, int *written)
{
    lb_status st = LB_OK;
    for (size_t i = 0; st == LB_OK && i < LB_HF_TOKENIZER_FILES; i++) {
        char *src = lb__path_join(src_dir, lb__hf_tokenizer_files[i]);
        if (!src) return lb__fail(LB_ERR_NOMEM, "out of memory");
        if (regular_file(src)) {
            char *text = NULL;
            size_t len = 0;
            st = lb__read_file(src, LB_HF_TOKENIZER_MAX_BYTES, &text, &len);
            if (st == LB_OK) st = lb__hf_write_file(dir, lb__hf_tokenizer_files[i], text, len);
            if (st == LB_OK) (*written)++;
            free(text);
        }
        free(src);
    }
    return st;
}

lb_status lb__hf_tokenizer_write(const lb_model *m, const char *model_path, const char *dir, int *written)
{
    int count = 0;
    if (written) *written = 0;
    if (!m || !dir) return lb__fail(LB_ERR_ARG, "lb__hf_tokenizer_write: NULL argument");
    if (!model_path) model_path = m->path;
    lb_status st = LB_OK;
    switch (lb_model_get_kind(m)) {
    case LB_MODEL_GGUF:
        st = lb__hf_tokenizer_from_gguf(&m->gguf, model_path ? model_path : "GGUF model", dir, &count);
        break;
    case LB_MODEL_HF_DIR:
    case LB_MODEL_SAFETENSORS: {
        if (!model_path) return lb__fail(LB_ERR_ARG, "lb__hf_tokenizer_write: the model's path is needed to find "
                                                     "its tokenizer files");
        char *src = is_dir(model_path) ? strdup(model_path) : lb__path_dir(model_path);
        if (!src) return lb__fail(LB_ERR_NOMEM, "out of memory");
        st = copy_from(src, dir, &count);
        free(src);
        break;
    }
    case LB_MODEL_LLAMA2C:
        st = from_llama2c(m, model_path, dir, &count);
        break;
    }
    if (written) *written = count;
    return st;
}

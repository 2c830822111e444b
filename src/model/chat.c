/* Chat prompts: the template a model carries, and one user turn formatted
 * the way that template writes it. Templates are Jinja programs; lowbit
 * does not run Jinja. It recognises the template's family by the markers
 * it writes (as llama.cpp's built-in chat formats do) and writes the
 * family's turn layout itself, so that a single user message followed by
 * the assistant's header (add_generation_prompt) comes out as the
 * template would produce it. The BOS token is not written: the tokenizer
 * adds it when the model expects one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "io/json.h"
#include "io/model_internal.h"
#include "util/error.h"
#include "util/file.h"

static char *copy(const char *s, size_t n)
{
    char *c = malloc(n + 1);
    if (c) memcpy(c, s, n), c[n] = 0;
    return c;
}

/* tokenizer_config.json's chat_template: a string, or a list of
 * {"name", "template"} whose "default" entry is the one used. */
static char *from_config(const lb__json *j)
{
    const lb__json *c = lb__json_get(j, "chat_template");
    if (c && c->type == LB_JSON_STRING) return copy(c->str, c->len);
    for (size_t i = 0; c && c->type == LB_JSON_ARRAY && i < c->len; i++) {
        const char *name = lb__json_str(&c->items[i], "name");
        const lb__json *t = lb__json_get(&c->items[i], "template");
        if (name && strcmp(name, "default") == 0 && t && t->type == LB_JSON_STRING) return copy(t->str, t->len);
    }
    return NULL;
}

lb_status lb_chat_template(const lb_model *m, char **out)
{
    if (!m || !out) return lb__fail(LB_ERR_ARG, "lb_chat_template: NULL argument");
    *out = NULL;
    if (m->kind == LB_MODEL_GGUF) {
        const char *s;
        uint64_t len;
        if (lb__gguf_get_str(&m->gguf, "tokenizer.chat_template", &s, &len) && !(*out = copy(s, (size_t)len)))
            return lb__fail(LB_ERR_NOMEM, "out of memory");
        return LB_OK;
    }
    if (m->kind == LB_MODEL_LLAMA2C || !m->path) return LB_OK;
    char *dir = m->kind == LB_MODEL_HF_DIR ? copy(m->path, strlen(m->path)) : lb__path_dir(m->path);
    char *cfg = dir ? lb__path_join(dir, "tokenizer_config.json") : NULL;
    char *jinja = dir ? lb__path_join(dir, "chat_template.jinja") : NULL;
    lb_status st = cfg && jinja ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    lb__json *j = NULL;
    if (st == LB_OK && lb__json_read_file(cfg, 64u << 20, &j) == LB_OK) *out = from_config(j);
    lb__json_free(j);
    if (st == LB_OK && !*out) {
        char *text = NULL;
        size_t len;
        if (lb__read_file(jinja, 16u << 20, &text, &len) == LB_OK) *out = text;
    }
    free(dir), free(cfg), free(jinja);
    return st;
}

/* The default system message a ChatML template writes as a literal when
 * the conversation has none (SmolLM2's "You are a helpful AI assistant
 * named SmolLM, ..."): the text between "<|im_start|>system" plus a line
 * break (written "\n" inside the template's string literal, or a real one)
 * and "<|im_end|>", when it holds no template code. Malloc'd, or NULL. */
static char *chatml_default_system(const char *tmpl)
{
    static const char start[] = "<|im_start|>system";
    for (const char *p = strstr(tmpl, start); p; p = strstr(p + 1, start)) {
        const char *q = p + sizeof start - 1;
        if (q[0] == '\\' && q[1] == 'n') q += 2;
        else if (q[0] == '\n') q += 1;
        else continue;
        const char *end = strstr(q, "<|im_end|>");
        if (!end || end == q) continue;
        size_t n = (size_t)(end - q);
        if (memchr(q, '{', n) || memchr(q, '}', n) || memchr(q, '\'', n) || memchr(q, '"', n)) continue; /* code */
        char *s = malloc(n + 1), *w = s;
        if (!s) return NULL;
        for (size_t i = 0; i < n; i++) {
            if (q[i] == '\\' && i + 1 < n && q[i + 1] == 'n') *w++ = '\n', i++;
            else *w++ = q[i];
        }
        *w = 0;
        return s;
    }
    return NULL;
}

static const char *const families = "chatml, llama3, llama2 ([INST]), gemma, phi3";

const char *lb_chat_family(const char *tmpl)
{
    if (!tmpl) return NULL;
    if (strstr(tmpl, "<|im_start|>")) return "chatml";
    if (strstr(tmpl, "<|start_header_id|>")) return "llama3";
    if (strstr(tmpl, "<start_of_turn>")) return "gemma";
    if (strstr(tmpl, "<|assistant|>") && strstr(tmpl, "<|end|>")) return "phi3";
    if (strstr(tmpl, "[INST]")) return "llama2";
    return NULL;
}

lb_status lb_chat_prompt(const char *tmpl, const char *user, char **out)
{
    if (!tmpl || !user || !out) return lb__fail(LB_ERR_ARG, "lb_chat_prompt: NULL argument");
    *out = NULL;
    const char *family = lb_chat_family(tmpl);
    if (!family)
        return lb__fail(LB_ERR_UNSUPPORTED, "chat template of an unknown family (lowbit writes %s)", families);
    char *system = strcmp(family, "chatml") == 0 ? chatml_default_system(tmpl) : NULL;
    size_t need = strlen(user) + (system ? strlen(system) : 0) + 128;
    char *s = malloc(need);
    if (!s) {
        free(system);
        return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    if (strcmp(family, "chatml") == 0) {
        int k = system ? snprintf(s, need, "<|im_start|>system\n%s<|im_end|>\n", system) : 0;
        snprintf(s + k, need - (size_t)k, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", user);
    } else if (strcmp(family, "llama3") == 0) {
        snprintf(s, need, "<|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", user);
    } else if (strcmp(family, "gemma") == 0) {
        snprintf(s, need, "<start_of_turn>user\n%s<end_of_turn>\n<start_of_turn>model\n", user);
    } else if (strcmp(family, "phi3") == 0) {
        snprintf(s, need, "<|user|>\n%s<|end|>\n<|assistant|>\n", user);
    } else {
        snprintf(s, need, "[INST] %s [/INST]", user);
    }
    free(system);
    *out = s;
    return LB_OK;
}

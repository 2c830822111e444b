/* GGUF recipe files (cli_gguf.h, cli_gguf_recipe_load): what lowbit
 * quantize --target-bpw writes for a GGUF, and --recipe reads back. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli_gguf.h"
#include "io/json.h"

#define GGUF_RECIPE_MAX_BYTES (16u << 20)

static int bad(const char *cmd, int json, const char *path, const char *what)
{
    return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--recipe %s: %s", path, what);
}

int cli_gguf_recipe_is(const char *path)
{
    lb__json *root = NULL;
    if (!path || lb__json_read_file(path, GGUF_RECIPE_MAX_BYTES, &root) != LB_OK) return 0;
    const char *f = root->type == LB_JSON_OBJECT ? lb__json_str(root, "format") : NULL;
    int is = f && strcmp(f, "gguf") == 0;
    lb__json_free(root);
    return is;
}

static int known(const lb__json *o, const char *const *keys)
{
    for (size_t k = 0; k < o->len; k++) {
        int ok = 0;
        for (const char *const *p = keys; *p; p++) ok |= strcmp(o->keys[k], *p) == 0;
        if (!ok) return (int)k;
    }
    return -1;
}

int cli_gguf_recipe_load(const char *cmd, int json, const char *path, cli_gguf_args *g, cli_gguf_recipe *out)
{
    memset(out, 0, sizeof *out);
    lb_status st = lb__json_read_file(path, GGUF_RECIPE_MAX_BYTES, &out->root);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_USAGE, st);
    const lb__json *r = out->root;
    if (r->type != LB_JSON_OBJECT) return bad(cmd, json, path, "not a JSON object");
    static const char *const top[] = {"lowbit_recipe", "description", "format", "type", "imatrix", "imatrix_from",
                                      "rules", "mix", NULL};
    int k = known(r, top);
    if (k >= 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "unknown key \"%.64s\" (a GGUF recipe has lowbit_recipe, description, format, type, "
                 "imatrix, imatrix_from, rules, mix)", r->keys[k]);
        return bad(cmd, json, path, msg);
    }
    uint64_t version;
    if (!lb__json_u64(lb__json_get(r, "lowbit_recipe"), &version) || version != 1)
        return bad(cmd, json, path, "\"lowbit_recipe\" must be 1");
    const char *type = lb__json_str(r, "type");
    if (!type) return bad(cmd, json, path, "\"type\" (the --type T of the file) is missing");
    if (g->type && strcasecmp(g->type, type) != 0)
        return bad(cmd, json, path, "its \"type\" differs from --type");
    g->type = type;
    const char *im = lb__json_str(r, "imatrix"), *imf = lb__json_str(r, "imatrix_from");
    if ((im && !g->imatrix_file && !g->imatrix_text) || (imf && !g->imatrix_file && !g->imatrix_text))
        g->imatrix_file = im, g->imatrix_text = imf;
    const lb__json *rules = lb__json_get(r, "rules");
    if (!rules || rules->type != LB_JSON_ARRAY) return bad(cmd, json, path, "\"rules\" must be a list");
    if (g->n_rules + rules->len > CLI_GGUF_MAX_RULES) return bad(cmd, json, path, "too many rules");
    out->rules = calloc(rules->len + 1, sizeof *out->rules);
    if (!out->rules) return cli_fail(cmd, json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    static const char *const rule_keys[] = {"match", "ggml", "description", NULL};
    for (size_t i = 0; i < rules->len; i++) {
        const lb__json *x = &rules->items[i];
        const char *match = x->type == LB_JSON_OBJECT ? lb__json_str(x, "match") : NULL;
        const char *ggml = match ? lb__json_str(x, "ggml") : NULL;
        char msg[256];
        if (!match || !ggml || known(x, rule_keys) >= 0 || lb_ggml_type_by_name(ggml) < 0) {
            snprintf(msg, sizeof msg, "rule %zu: needs \"match\" (a pattern) and \"ggml\" (a ggml type name), nothing "
                     "else but a \"description\"", i + 1);
            return bad(cmd, json, path, msg);
        }
        size_t n = strlen(match) + strlen(ggml) + 2;
        if (!(out->rules[i] = malloc(n))) return cli_fail(cmd, json, EXIT_RUNTIME, "out_of_memory", "out of memory");
        snprintf(out->rules[i], n, "%s=%s", match, ggml);
        out->n_rules++;
        g->rules[g->n_rules++] = out->rules[i];
    }
    g->given = 1;
    return EXIT_OK;
}

void cli_gguf_recipe_free(cli_gguf_recipe *r)
{
    for (size_t i = 0; i < r->n_rules; i++) free(r->rules[i]);
    free(r->rules);
    lb__json_free(r->root);
    memset(r, 0, sizeof *r);
}

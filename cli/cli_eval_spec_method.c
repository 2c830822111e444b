/* compare --method (cli_eval.h, cli_eval_method_runner): a row's model as
 * the --spec options say, built as a quantized model (lb_qmodel) so that
 * an outlier method can transform it, then a runner over it. Every row of
 * such a table, rtn included, is built this way. */
#include <stdlib.h>
#include <string.h>

#include "cli_eval.h"

/* What lb_runner_new's class options apply to: the projections, the
 * embedding, an untied output head. */
static const char *class_of(const lb_model *m, const lb_tensor *t, const cli_eval_args *a)
{
    if (lb_tensor_is_weight(t) && strstr(t->name, ".self_attn.")) return a->spec_attn ? a->spec_attn : a->spec;
    if (lb_tensor_is_weight(t) && strstr(t->name, ".mlp.")) return a->spec_mlp ? a->spec_mlp : a->spec;
    if (strcmp(t->name, "model.embed_tokens.weight") == 0) return a->spec_embed;
    if (strcmp(t->name, "lm_head.weight") == 0 && !lb_model_arch(m)->tied_embeddings) return a->spec_head;
    return NULL;
}

static int is_projection(const lb_tensor *t)
{
    return lb_tensor_is_weight(t) && (strstr(t->name, ".self_attn.") || strstr(t->name, ".mlp."));
}

/* Every class spec set on its tensors; the projections' input
 * quantization as --act says (per token, or static per tensor). */
static int build(const char *cmd, int json, const cli_eval_args *a, lb_format act, int act_static, lb_qmodel *q)
{
    const lb_model *m = lb_qmodel_model(q);
    lb_qact qa = {act_static ? LB_ACT_STATIC : LB_ACT_DYNAMIC, {0}};
    if (act != LB_FMT_FP32) {
        qa.spec.element = act;
        qa.spec.granularity = act_static ? LB_GRAN_TENSOR : LB_GRAN_TOKEN;
    }
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        const char *text = class_of(m, t, a);
        if (!text) continue;
        lb_qspec spec;
        if (cli_plain_float_spec(text, &spec))
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "compare --method quantizes every row's model: "
                            "'%s' is a plain float (no scale to transform); measure it without --method", text);
        lb_status st = lb_qspec_parse(text, &spec);
        if (st == LB_OK) st = lb_qmodel_set_spec(q, i, &spec);
        if (st == LB_OK && act != LB_FMT_FP32 && is_projection(t)) st = lb_qmodel_set_act(q, i, &qa);
        if (st != LB_OK) return cli_fail_lb(cmd, json, st == LB_ERR_ARG || st == LB_ERR_FORMAT ? EXIT_USAGE : EXIT_RUNTIME, st);
    }
    return EXIT_OK;
}

int cli_eval_method_runner(const char *cmd, int json, const cli_eval_args *a, const cli_recipe_args *method,
                           cli_eval_model *e)
{
    /* --calib without --act is the method's text alone: no static scales */
    cli_eval_args fa = *a;
    if (!a->act) fa.calib = NULL, fa.calib_tokens = 0;
    lb_runner_options o = {.threads = a->threads, .max_ctx = a->max_ctx, .fake = a->fake, .decode_act = a->decode_act};
    int rc = cli_eval_formats(cmd, json, &fa, &o);
    if (rc == EXIT_OK && o.ggml_act)
        rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--act ggml is for GGUF types, not compare --method rows");
    if (rc == EXIT_OK && !a->calib && cli_method_given(method))
        rc = cli_method_check(cmd, json, method, NULL);
    if (rc != EXIT_OK) return rc;
    lb_status st = lb_runner_supports(e->model, a->max_ctx);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    if ((st = lb_qmodel_new(e->model, &e->qmodel)) != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    int act_static = o.act != LB_FMT_FP32 && fa.calib;
    rc = build(cmd, json, a, o.act, act_static, e->qmodel);
    /* the method changes the weights; static scales are then calibrated on the transformed model */
    if (rc == EXIT_OK) rc = cli_method_apply(cmd, json, e->qmodel, e->tok, a->calib, method, a->threads);
    if (rc == EXIT_OK && act_static) /* as the --spec rows calibrate: the first 512 tokens unless told */
        rc = cli_recipe_calibrate(cmd, json, e->qmodel, e->tok, a->calib, a->calib_tokens ? a->calib_tokens : 512,
                                  a->threads);
    if (rc != EXIT_OK) return rc;
    o.act = LB_FMT_FP32; /* the qmodel says how each input is quantized */
    st = lb_runner_from_qmodel(e->qmodel, &o, &e->runner);
    if (st != LB_OK)
        return cli_fail_lb(cmd, json, st == LB_ERR_ARG || st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
    return EXIT_OK;
}

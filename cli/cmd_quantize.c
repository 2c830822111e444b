/* lowbit quantize: a model in, a checkpoint an engine loads out. The
 * quantization choices are cli_recipe's (the same ones ppl, kld and
 * generate take, so they evaluate exactly what this writes); calibration
 * (static activation scales, --kv fp8) is cli_recipe_calibrate's; writing
 * is lb_export's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli.h"
#include "cli_gguf.h"
#include "cli_output.h"
#include "cli_recipe.h"
#include "cli_target.h"

static const char usage[] =
    "usage: lowbit quantize MODEL -o OUT [--scheme S] [--recipe FILE] [--rule P=SPEC]... [--keep P]... [--keep-sensitive N]\n"
    "                       [--kv fp8] [--format compressed-tensors|modelopt|gguf] [--calib FILE]\n"
    "                       [--method rtn|smoothquant|awq|gptq|awq+gptq [--alpha A|search] [--damp D] [--block B]\n"
    "                        [--actorder|--no-actorder] [--true-sequential|--no-true-sequential] [--gptq-scales mse|minmax]\n"
    "                        [--calib-seqs N] [--calib-len L]]\n"
    "                       [--calib-tokens N] [--max-shard-size SIZE] [--threads N] [--force] [--json] [--quiet]\n"
    "       lowbit quantize MODEL -o OUT.gguf --type T [--pure] [--output-tensor-type X]\n"
    "                       [--token-embedding-type X] [--tensor-type P=X]... [--rule P=X]... [--dry-run]\n"
    "                       [--imatrix FILE | --imatrix-from TEXT [--tokenizer FILE]]\n"
    "                       [--include-weights S | --exclude-weights S]...\n"
    "                       [--method awq|gptq|awq+gptq --calib FILE [--calib-seqs N] [--calib-len L]]\n"
    "       lowbit quantize MODEL -o OUT[.gguf] (--target-bpw B | --target-size S | --max-kld K) --calib FILE\n"
    "                       [--candidates LIST] [--recipe-out FILE] [--calib-tokens N] [--imatrix-from TEXT]\n"
    "                       [--method gptq ...]\n"
    "       lowbit quantize --list [--json]\n\n"
    "Writes MODEL (GGUF, safetensors, a Hugging Face directory or llama2.c) quantized as a Hugging Face\n"
    "directory an engine loads: compressed-tensors (vLLM, SGLang; the default) or modelopt (TensorRT-LLM),\n"
    "or as one GGUF file llama.cpp loads, with the types llama-quantize picks for each tensor.\n"
    "The output appears only when complete; every tensor of a directory is read back and checked.\n"
    "A --method transforms the quantized model the recipe says (scales folded into norms and layers,\n"
    "weights scaled and clipped) before static scales are calibrated and the output is written.\n\n" CLI_RECIPE_HELP
    "  -o, --output OUT    the output directory, or .gguf file (must not exist; --force replaces one lowbit wrote)\n"
    "  --format F          compressed-tensors (default), modelopt, or gguf (the default for an OUT ending in .gguf)\n"
    "                      (--calib FILE also calibrates static scales: NVFP4 activations, W8A8-FP8-STATIC,\n"
    "                      --kv fp8; and measures --keep-sensitive)\n"
    "  --calib-tokens N    tokens of --calib to run for static scales and --keep-sensitive (default 4096:\n"
    "                      8 windows of 512)\n"
    "  --max-shard-size S  largest safetensors shard: bytes, or with KB/MB/GB (default 5GB, as Hugging Face)\n"
    "  --threads N         worker threads (0: one per CPU)\n"
    "  --list              every scheme with its bits per weight\n" CLI_GGUF_HELP CLI_TARGET_HELP;

/* "5GB", "500MB", "123" (decimal units, as Hugging Face's max_shard_size). */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || s[0] == '-') return 0;
    uint64_t mul = 1;
    if (!*end || strcasecmp(end, "B") == 0) mul = 1;
    else if (strcasecmp(end, "KB") == 0) mul = 1000;
    else if (strcasecmp(end, "MB") == 0) mul = 1000000;
    else if (strcasecmp(end, "GB") == 0) mul = 1000000000;
    else return 0;
    if (v == 0 || v > UINT64_MAX / mul) return 0;
    *out = v * mul;
    return 1;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int run(int argc, char **argv)
{
    const char *model = NULL, *out = NULL, *format = NULL, *calib = NULL;
    cli_gguf_args gg;
    memset(&gg, 0, sizeof gg);
    int json = 0, force = 0, list = 0, threads = 0;
    uint64_t shard = 0;
    size_t calib_tokens = 0;
    cli_recipe_args ra;
    memset(&ra, 0, sizeof ra);
    cli_target_args target = {0};
    cli_target_result chosen = {0};
    cli_gguf_recipe gguf_recipe = {0};
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--json") == 0) json = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_gguf_option("quantize", json, argc, argv, &i, &gg);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        r = cli_recipe_option("quantize", json, argc, argv, &i, &ra);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        r = cli_target_option("quantize", json, argc, argv, &i, &target);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        int has = i + 1 < argc;
        if (strcmp(a, "--json") == 0) continue;
        else if (strcmp(a, "--quiet") == 0) cli_progress_set_quiet(1);
        else if (strcmp(a, "--force") == 0) force = 1;
        else if (strcmp(a, "--list") == 0) list = 1;
        else if ((strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) && has) out = argv[++i];
        else if (strcmp(a, "--format") == 0 && has) format = argv[++i];
        else if (strcmp(a, "--calib") == 0 && has) calib = argv[++i];
        else if (strcmp(a, "--tokenizer") == 0 && has) gg.tokenizer = argv[++i];
        else if (strcmp(a, "--calib-tokens") == 0 && has) {
            char *end;
            long long v = strtoll(argv[++i], &end, 10);
            if (*end || v <= 0 || v > 100000000)
                return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "--calib-tokens takes 1..100000000, not '%s'",
                                argv[i]);
            calib_tokens = (size_t)v;
        } else if (strcmp(a, "--max-shard-size") == 0 && has) {
            if (!parse_size(argv[++i], &shard))
                return cli_fail("quantize", json, EXIT_USAGE, "bad_argument",
                                "--max-shard-size takes a size such as 5GB, 500MB or 1000000, not '%s'", argv[i]);
        } else if (strcmp(a, "--threads") == 0 && has) {
            int rc = cli_parse_threads("quantize", json, argv[++i], &threads);
            if (rc != EXIT_OK) return rc;
        } else if (a[0] == '-' && a[1])
            return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "unknown option or missing value: '%s'", a);
        else if (model)
            return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "more than one MODEL ('%s')", a);
        else model = a;
    }
    if (list) return cli_scheme_list(json);
    if (ra.outlier_threshold > 0) /* known from the options alone: refused before any work */
        return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "--outlier-threshold keeps input columns of "
                        "each weight in 16-bit beside its quantized rest (LLM.int8()): no engine format "
                        "(compressed-tensors, modelopt, gguf) can carry split columns, so there is nothing to "
                        "write; evaluate it with lowbit ppl or kld --outlier-threshold");
    size_t out_len = out ? strlen(out) : 0;
    if (!format) format = (out_len >= 5 && strcasecmp(out + out_len - 5, ".gguf") == 0) || gg.given ? "gguf" : "compressed-tensors";
    if ((target.candidates || target.recipe_out) && !target.given)
        return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "--candidates and --recipe-out go with "
                        "--target-bpw, --target-size or --max-kld");
    if (strcmp(format, "gguf") == 0) {
        cli_gguf_take_rules(&ra, &gg);
        if (!model) return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "need MODEL\n%s", usage);
        /* a GGUF recipe (what --target-bpw writes for a GGUF) holds ggml types: the GGUF options' */
        int from_recipe = ra.recipe_file && cli_gguf_recipe_is(ra.recipe_file);
        if (from_recipe && target.given)
            return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "--recipe and a target: the target writes "
                            "the recipe");
        const char *recipe_path = from_recipe ? ra.recipe_file : NULL;
        if (from_recipe) ra.recipe_file = NULL;
        if (cli_recipe_given(&ra) || ra.keep_sensitive)
            return cli_fail("quantize", json, EXIT_USAGE, "bad_argument",
                            "a GGUF holds ggml types: give --type T (and --rule P=X with X a ggml type), not lowbit "
                            "schemes (--scheme, --recipe, --keep, --keep-sensitive, --kv, --rule P=SPEC)");
        if ((calib && !cli_method_given(&ra) && !target.given) || shard || (calib_tokens && !target.given))
            return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "--max-shard-size and --calib-tokens are not "
                            "GGUF options, nor --calib without a --method");
        if (gg.tokenizer && !gg.imatrix_text && !cli_method_given(&ra))
            return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "--tokenizer is for --imatrix-from TEXT or "
                            "--method's --calib TEXT");
        int mrc = cli_method_check("quantize", json, &ra, calib);
        if (mrc == EXIT_OK && calib) mrc = cli_protect("quantize", json, calib, "--calib");
        if (mrc != EXIT_OK) return mrc;
        lb_output_allow_replace(force);
        if (out) cli_note_leftovers("quantize", out);
        if (target.given) {
            mrc = cli_target_choose("quantize", json, model, out, 1, &gg, &ra, calib, calib_tokens, threads, &target,
                                    &chosen);
            recipe_path = chosen.recipe;
        }
        if (mrc == EXIT_OK && recipe_path)
            mrc = cli_gguf_recipe_load("quantize", json, recipe_path, &gg, &gguf_recipe);
        if (mrc == EXIT_OK)
            mrc = cli_quantize_gguf("quantize", json, model, out, &gg, &ra, calib, threads, chosen.json);
        cli_gguf_recipe_free(&gguf_recipe);
        free(chosen.json);
        return mrc;
    }
    if (gg.given || gg.tokenizer)
        return cli_fail("quantize", json, EXIT_USAGE, "bad_argument",
                        "--type, --pure, --dry-run, --imatrix, --imatrix-from, --tokenizer and the other GGUF options "
                        "need --format gguf (or an OUT ending in .gguf)");
    if (!model || !out) return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "need MODEL and -o OUT\n%s", usage);
    lb_export_format fmt;
    if (strcmp(format, "compressed-tensors") == 0) fmt = LB_EXPORT_COMPRESSED_TENSORS;
    else if (strcmp(format, "modelopt") == 0) fmt = LB_EXPORT_MODELOPT;
    else
        return cli_fail("quantize", json, EXIT_USAGE, "bad_argument",
                        "unknown --format '%s' (compressed-tensors, modelopt, gguf)", format);
    if (!cli_recipe_given(&ra) && !target.given)
        return cli_fail("quantize", json, EXIT_USAGE, "bad_argument",
                        "say what to quantize: --scheme S (lowbit quantize --list), --recipe FILE or --rule P=SPEC");
    if (target.given && fmt != LB_EXPORT_COMPRESSED_TENSORS)
        return cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "a target mixes specs per tensor: "
                        "compressed-tensors or gguf (modelopt holds one scheme per model)");
    int rc = cli_method_check("quantize", json, &ra, calib);
    if (rc != EXIT_OK) return rc;
    lb_output_allow_replace(force);
    rc = cli_protect("quantize", json, model, "MODEL");
    if (rc == EXIT_OK && calib) rc = cli_protect("quantize", json, calib, "--calib");
    if (rc != EXIT_OK) return rc;
    cli_note_leftovers("quantize", out);
    if (target.given) {
        rc = cli_target_choose("quantize", json, model, out, 0, &gg, &ra, calib, calib_tokens, threads, &target,
                               &chosen);
        if (rc != EXIT_OK) return rc;
        ra.recipe_file = chosen.recipe;
    }
    lb_recipe *recipe = NULL;
    rc = cli_recipe_build("quantize", json, &ra, &recipe);
    if (rc != EXIT_OK) return rc;
    double t0 = now();
    lb_model *m = NULL;
    lb_qmodel *q = NULL;
    lb_tokenizer *tok = NULL;
    lb_status st = lb_model_open(model, &m);
    if (st != LB_OK) rc = cli_fail_lb("quantize", json, EXIT_RUNTIME, st);
    if (rc == EXIT_OK) rc = cli_recipe_qmodel("quantize", json, m, recipe, &q);
    lb_export_options o = {.format = fmt, .max_shard_bytes = shard, .model_path = model, .threads = threads, .verify = 1};
    /* refuse what the format cannot express before any writing (and, when
     * nothing needs calibration, at once, before a method's work; a recipe
     * with static scales is checked after calibration, since the check
     * wants those scales) */
    int needs = rc == EXIT_OK && cli_recipe_needs_calib(q), method = cli_method_given(&ra);
    int wants = cli_recipe_wants_calib(&ra); /* --keep-sensitive (--outlier-threshold was refused above) */
    if (rc == EXIT_OK && !needs && (st = lb_export_check(q, &o)) != LB_OK)
        rc = cli_fail_lb("quantize", json, st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
    if (rc == EXIT_OK && (needs || wants) && !calib)
        rc = cli_fail("quantize", json, EXIT_USAGE, "bad_argument", "%s: give --calib TEXT (e.g. a training "
                      "excerpt; never the evaluation text)", needs
                      ? "this recipe has static scales (static or NVFP4 activations, --kv fp8)"
                      : "--keep-sensitive measures each layer on a calibration text");
    if (rc == EXIT_OK && (needs || method || wants) && (st = lb_tokenizer_from_model(m, model, &tok)) != LB_OK)
        rc = cli_fail_lb("quantize", json, EXIT_RUNTIME, st);
    /* the method changes the weights; static scales and the layer sensitivity are then taken on the
     * transformed model */
    if (rc == EXIT_OK && method) rc = cli_method_apply("quantize", json, q, tok, calib, &ra, threads);
    cli_recipe_steps steps;
    memset(&steps, 0, sizeof steps);
    if (rc == EXIT_OK && (needs || wants))
        rc = cli_recipe_prepare("quantize", json, &ra, q, tok, calib, calib_tokens, threads, &steps);
    if (rc == EXIT_OK && (needs || method || wants) && (st = lb_export_check(q, &o)) != LB_OK)
        rc = cli_fail_lb("quantize", json, st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
    cli_progress_ctx progress = {"quantize", "tensor", NULL};
    o.progress = cli_progress_fn, o.progress_ctx = &progress;
    lb_export_result r;
    memset(&r, 0, sizeof r);
    if (rc == EXIT_OK && (st = lb_export(q, out, &o, &r)) != LB_OK)
        rc = cli_fail_lb("quantize", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
    double secs = now() - t0;
    if (rc == EXIT_OK) {
        if (json) {
            printf("{\"output\": ");
            json_string(stdout, out);
            printf(", \"format\": ");
            json_string(stdout, format);
            cli_method_print(stdout, &ra, calib, 1);
            printf(", \"tensors\": %llu, \"quantized\": %llu, \"bytes\": %llu, \"shards\": %u, \"weight_params\": %llu",
                   (unsigned long long)r.tensors, (unsigned long long)r.quantized, (unsigned long long)r.bytes, r.shards,
                   (unsigned long long)r.weight_params);
            json_field(stdout, "bits_per_weight", r.bits_per_weight);
            json_field(stdout, "seconds", secs);
            if (chosen.json) printf(", \"mix\": %s", chosen.json);
            if (steps.ranking) cli_recipe_print(stdout, NULL, &steps, 1);
            printf("}\n");
        } else {
            if (steps.ranking) cli_recipe_print(stdout, NULL, &steps, 0);
            printf("wrote %s (%s", out, format);
            if (method) {
                printf("; ");
                cli_method_print(stdout, &ra, calib, 0);
            }
            printf("): %llu tensors, %llu quantized, %.3f bits per weight (scales included), "
                   "%.1f MB in %u shard%s, %.1f s; every tensor read back and checked\n",
                   (unsigned long long)r.tensors, (unsigned long long)r.quantized, r.bits_per_weight, (double)r.bytes / 1e6, r.shards, r.shards == 1 ? "" : "s", secs);
        }
    }
    cli_recipe_steps_free(&steps);
    lb_tokenizer_free(tok);
    lb_qmodel_free(q);
    lb_model_close(m);
    lb_recipe_free(recipe);
    free(chosen.json);
    return rc;
}

const cli_command cmd_quantize = {"quantize", "write a quantized checkpoint vLLM, SGLang or TensorRT-LLM load",
                                  usage, run};

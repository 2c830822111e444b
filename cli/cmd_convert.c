/* lowbit convert: a model from one file type to another (GGUF <->
 * safetensors / Hugging Face directory, llama2.c -> either), so that a
 * checkpoint can be checked with the tools of the other side. */
#include <string.h>
#include <sys/stat.h>

#include "cli_model.h"
#include "cli_output.h"

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The library writes GGUF for .gguf, safetensors for .safetensors and a
 * directory for anything else: "out.txt" would become a directory. Only
 * names whose kind is plain are taken; NULL if out is one, else its
 * extension. */
static const char *unknown_extension(const char *out)
{
    if (ends_with(out, ".gguf") || ends_with(out, ".safetensors") || ends_with(out, "/")) return NULL;
    struct stat st;
    if (stat(out, &st) == 0 && S_ISDIR(st.st_mode)) return NULL; /* an existing directory says what it is */
    const char *base = strrchr(out, '/');
    return strrchr(base ? base + 1 : out, '.');
}

static const char usage[] =
    "usage: lowbit convert IN OUT [--dtype f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|mxfp4|nvfp4|iq4_nl|iq4_xs] [--allow-nonfinite] [--force] [--json] [--quiet]\n\n"
    "IN is any model lowbit reads (see 'lowbit help inspect'). OUT is chosen by\n"
    "its name: NAME.gguf writes GGUF, NAME.safetensors one safetensors file, and\n"
    "a name without an extension (or ending in '/') a Hugging Face directory\n"
    "(config.json + model.safetensors + the tokenizer files; it must not exist\n"
    "or be empty, or with --force hold only such files); any other extension\n"
    "is refused. The tokenizer and generation files are copied from beside a\n"
    "Hugging Face input, or synthesized from a GGUF's byte-level BPE tokenizer\n"
    "(tokenizer.json, tokenizer_config.json, special_tokens_map.json,\n"
    "generation_config.json); a Hugging Face input written as GGUF keeps its\n"
    "tokenizer as tokenizer.ggml.* keys.\n"
    "Tensors are renamed (blk.N.attn_q.weight <->\n"
    "model.layers.N.self_attn.q_proj.weight) and q/k projection rows permuted\n"
    "between llama.cpp's adjacent rotary pairs and Hugging Face's half-split\n"
    "ones. --dtype stores floating-point tensors as f32, f16 or bf16 (default:\n"
    "keep f32/f16/bf16 tensors, widen quantized ones to f32); for GGUF output\n"
    "q8_0, q4_0, q4_1, q5_0, q5_1, mxfp4, nvfp4, iq4_nl and iq4_xs quantize\n"
    "the weight matrices whose rows are whole blocks (byte-identical to\n"
    "llama.cpp's quantizers without an imatrix; other tensors f32). GGUF metadata, tokenizer included, is\n"
    "carried from a GGUF input. Output appears only when complete (under a\n"
    "temporary name OUT.lowbit-tmp.PID.N until then, removed on failure or\n"
    "SIGINT/SIGTERM). A NaN or infinite weight is refused (naming the tensor\n"
    "and the first bad element), as inspect refuses it; --allow-nonfinite\n"
    "copies such values as they are.\n" CLI_FORCE_HELP;

static int run(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *dtype_name = NULL;
    int json = 0, allow_nonfinite = 0, force = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) json = 1;
        else if (strcmp(a, "--quiet") == 0) cli_progress_set_quiet(1);
        else if (strcmp(a, "--force") == 0) force = 1;
        else if (strcmp(a, "--dtype") == 0 && i + 1 < argc) dtype_name = argv[++i];
        else if (strcmp(a, "--allow-nonfinite") == 0) allow_nonfinite = 1;
        else if (a[0] == '-' && a[1]) return cli_fail("convert", json, EXIT_USAGE, "bad_argument",
                                                      "unknown option or missing value: '%s'", a);
        else if (!in) in = a;
        else if (!out) out = a;
        else return cli_fail("convert", json, EXIT_USAGE, "bad_argument", "one IN and one OUT only ('%s')", a);
    }
    if (!in || !out) return cli_fail("convert", json, EXIT_USAGE, "bad_argument", "need IN and OUT\n%s", usage);
    const char *ext = unknown_extension(out);
    if (ext)
        return cli_fail("convert", json, EXIT_USAGE, "bad_argument",
                        "cannot tell what to write to '%s' (extension '%s'): OUT must end in .gguf (GGUF), .safetensors "
                        "(one safetensors file) or be a directory name without an extension or ending in '/' (a Hugging "
                        "Face directory: config.json + model.safetensors)", out, ext);
    lb_dtype dtype = LB_DT_COUNT;
    if (dtype_name && lb_dtype_by_name(dtype_name, &dtype) != LB_OK)
        return cli_fail("convert", json, EXIT_USAGE, "bad_argument", "unknown --dtype '%s' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, mxfp4, nvfp4, iq4_nl, iq4_xs)",
                        dtype_name);
    lb_output_allow_replace(force);
    int rc = cli_protect("convert", json, in, "IN");
    if (rc != EXIT_OK) return rc;
    cli_note_leftovers("convert", out);
    lb_model *m;
    lb_status st = lb_model_open(in, &m);
    if (st != LB_OK) return cli_fail_lb("convert", json, EXIT_RUNTIME, st);
    cli_test_pause_after_open();
    cli_progress_ctx progress = {"convert", "tensor", NULL};
    lb_save_options so = {.dtype = dtype, .allow_nonfinite = allow_nonfinite, .progress = cli_progress_fn,
                          .progress_ctx = &progress};
    st = lb_model_save_opts(m, out, &so);
    size_t n = lb_model_tensor_count(m);
    lb_model_close(m);
    if (st != LB_OK) return cli_fail_lb("convert", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
    if (json) {
        printf("{\"output\": ");
        json_string(stdout, out);
        printf(", \"tensors\": %zu}\n", n);
    } else {
        printf("wrote %s (%zu tensors)\n", out, n);
    }
    return EXIT_OK;
}

const cli_command cmd_convert = {"convert", "convert a model between GGUF, safetensors and Hugging Face directories",
                                 usage, run};

/* lowbit plan: napkin math for a model on a GPU, every figure from stated
 * inputs and printed with the formula behind it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_model.h"

static const char usage[] =
    "usage: lowbit plan MODEL|CONFIG.json|PRESET [--gpu NAME] [--gpus N] [--weights SPEC]\n"
    "                   [--kv FORMAT|SPEC] [--ctx TOKENS] [--batch N] [--reserve FRACTION]\n"
    "                   [--compute bf16|fp8|fp4|int8] [--quantize-embeddings]\n"
    "                   [--gpu-mem GB] [--gpu-bw TB/s] [--gpu-tflops TFLOPS] [--json]\n"
    "       lowbit plan --list\n\n"
    "Weight memory per precision, KV cache per token and per sequence, how many\n"
    "sequences fit, and upper bounds on decode and prefill speed. MODEL is a\n"
    "checkpoint (GGUF, safetensors, Hugging Face directory: the parameter count is\n"
    "checked against its tensors), a config.json, or a preset (--list shows them\n"
    "and the GPUs). Defaults: --gpu h100-sxm, --gpus 1, --weights bf16, --kv bf16,\n"
    "--ctx 4096, --reserve 0.1 (of GPU memory, for activations and the runtime),\n"
    "--compute bf16. --kv takes a format (int8/int4 get a per-token, per-head fp16\n"
    "scale) or a full spec over head_dim values. The embedding and output head\n"
    "stay 16-bit unless --quantize-embeddings. --gpu-mem (10^9 bytes), --gpu-bw and\n"
    "--gpu-tflops (dense, for --compute) override the GPU's figures. Bounds assume\n"
    "ideal tensor parallelism over --gpus and, for MoE decode, uniform routing.\n";

typedef struct opts {
    const char *model, *gpu, *weights, *kv, *compute;
    unsigned gpus;
    uint64_t ctx, batch;
    double reserve, gpu_mem, gpu_bw, gpu_tflops;
    int json, list, quantize_embeddings;
} opts;

static int parse_double(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end || !(v >= 0) || isinf(v)) return 0;
    *out = v;
    return 1;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9') return 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end) return 0;
    *out = v;
    return 1;
}

static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){.gpu = "h100-sxm", .weights = "bf16", .kv = "bf16", .compute = "bf16", .gpus = 1, .ctx = 4096,
                .reserve = 0.1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t u = 0;
        int ok = 1, takes = 1;
        if (strcmp(a, "--json") == 0) o->json = 1, takes = 0;
        else if (strcmp(a, "--list") == 0) o->list = 1, takes = 0;
        else if (strcmp(a, "--quantize-embeddings") == 0) o->quantize_embeddings = 1, takes = 0;
        else if (!v && a[0] == '-' && a[1]) ok = 0;
        else if (strcmp(a, "--gpu") == 0) o->gpu = v;
        else if (strcmp(a, "--weights") == 0) o->weights = v;
        else if (strcmp(a, "--kv") == 0) o->kv = v;
        else if (strcmp(a, "--compute") == 0) o->compute = v;
        else if (strcmp(a, "--gpus") == 0) ok = parse_u64(v, &u) && u >= 1 && u <= 1024, o->gpus = (unsigned)u;
        else if (strcmp(a, "--ctx") == 0) ok = parse_u64(v, &o->ctx) && o->ctx >= 1 && o->ctx <= (1ull << 32);
        else if (strcmp(a, "--batch") == 0) ok = parse_u64(v, &o->batch) && o->batch >= 1 && o->batch <= (1ull << 24);
        else if (strcmp(a, "--reserve") == 0) ok = parse_double(v, &o->reserve) && o->reserve < 1;
        else if (strcmp(a, "--gpu-mem") == 0) ok = parse_double(v, &o->gpu_mem) && o->gpu_mem > 0;
        else if (strcmp(a, "--gpu-bw") == 0) ok = parse_double(v, &o->gpu_bw) && o->gpu_bw > 0;
        else if (strcmp(a, "--gpu-tflops") == 0) ok = parse_double(v, &o->gpu_tflops) && o->gpu_tflops > 0;
        else if (a[0] == '-' && a[1]) return cli_fail("plan", o->json, EXIT_USAGE, "bad_argument", "unknown option '%s'", a);
        else if (o->model) return cli_fail("plan", o->json, EXIT_USAGE, "bad_argument", "more than one MODEL ('%s')", a);
        else o->model = a, takes = 0;
        if (!ok) return cli_fail("plan", o->json, EXIT_USAGE, "bad_argument", "bad or missing value for %s%s%s", a,
                                 v ? ": " : "", v ? v : "");
        i += takes;
    }
    if (!o->model && !o->list)
        return cli_fail("plan", o->json, EXIT_USAGE, "bad_argument", "no MODEL given (a checkpoint, config.json or "
                                                                    "preset; --list shows presets)");
    return EXIT_OK;
}

static int list(int json)
{
    const char *const *p = lb_shape_preset_names();
    if (json) {
        printf("{\"presets\": [");
        for (size_t i = 0; p[i]; i++) printf("%s\"%s\"", i ? ", " : "", p[i]);
        printf("], \"gpus\": [");
    } else {
        printf("presets:");
        for (size_t i = 0; p[i]; i++) printf(" %s", p[i]);
        printf("\n\n%-14s %-42s %10s %7s %8s %8s %8s %8s\n", "gpu", "", "memory GiB", "TB/s", "BF16 TF", "FP8 TF",
               "FP4 TF", "INT8 TOPS");
    }
    for (size_t i = 0; i < lb_gpu_count(); i++) {
        const lb_gpu *g = lb_gpu_at(i);
        if (json) {
            printf("%s{\"name\": \"%s\", \"display\": ", i ? ", " : "", g->name);
            json_string(stdout, g->display);
            json_field(stdout, "memory_bytes", g->mem_bytes);
            json_field(stdout, "bandwidth_bytes_s", g->bw_bytes_s);
            json_field(stdout, "bf16_flops", g->bf16_flops);
            json_field(stdout, "fp8_flops", g->fp8_flops);
            json_field(stdout, "fp4_flops", g->fp4_flops);
            json_field(stdout, "int8_ops", g->int8_ops);
            printf("}");
        } else {
            printf("%-14s %-42s %10.0f %7.2f %8.0f %8.0f %8.0f %8.0f\n", g->name, g->display,
                   g->mem_bytes / 1073741824.0, g->bw_bytes_s / 1e12, g->bf16_flops / 1e12, g->fp8_flops / 1e12,
                   g->fp4_flops / 1e12, g->int8_ops / 1e12);
        }
    }
    if (json) printf("]}\n");
    else printf("\nTFLOPS are dense (vendors' sparse figures are twice these); sources: src/plan/gpus.def\n");
    return EXIT_OK;
}

/* The model's shape: a preset, a config.json, or a checkpoint (then its
 * tensor count is returned too, to check the formula against). */
static int load_shape(const opts *o, lb_shape *s, uint64_t *counted, int *have_count)
{
    *have_count = 0;
    for (const char *const *p = lb_shape_preset_names(); *p; p++)
        if (strcmp(*p, o->model) == 0) return lb_shape_preset(o->model, s) == LB_OK ? EXIT_OK : EXIT_USAGE;
    struct stat sb;
    if (stat(o->model, &sb) != 0)
        return cli_fail("plan", o->json, EXIT_USAGE, "bad_argument", "'%s' is neither a file nor a preset (%s)",
                        o->model, "lowbit plan --list shows the presets");
    size_t n = strlen(o->model);
    char *config = NULL;
    if (S_ISDIR(sb.st_mode)) {
        config = malloc(n + 16);
        if (config) snprintf(config, n + 16, "%s/config.json", o->model);
    } else if (n >= 5 && strcmp(o->model + n - 5, ".json") == 0) {
        config = strdup(o->model);
    }
    lb_status st = LB_OK;
    if (config) {
        char *text;
        size_t len;
        int rc = cli_read_file("plan", o->json, config, 16u << 20, &text, &len); /* a config.json is a few KB */
        if (rc != EXIT_OK) {
            free(config);
            return rc;
        }
        st = lb_shape_from_config(text, len, config, s);
        free(text);
        free(config);
        if (st != LB_OK) return cli_fail_lb("plan", o->json, EXIT_RUNTIME, st);
        if (!S_ISDIR(sb.st_mode)) return EXIT_OK;
    }
    lb_model *m;
    st = lb_model_open(o->model, &m);
    if (st != LB_OK) return cli_fail_lb("plan", o->json, EXIT_RUNTIME, st);
    if (!config) st = lb_shape_from_model(m, s);
    *counted = 0;
    for (size_t i = 0; i < lb_model_tensor_count(m); i++) *counted += lb_model_tensor(m, i)->n_elements;
    *have_count = 1;
    lb_model_close(m);
    return st == LB_OK ? EXIT_OK : cli_fail_lb("plan", o->json, EXIT_RUNTIME, st);
}

static lb_status weights_spec(const char *text, lb_qspec *out)
{
    return cli_plain_float_spec(text, out) ? LB_OK : lb_qspec_parse(text, out);
}

/* --kv FORMAT: integers get a per-token, per-head fp16 scale; 8-bit and
 * smaller floats a per-tensor one. A full spec is taken as it is. */
static lb_status kv_spec(const char *text, lb_qspec *out)
{
    if (strchr(text, ':')) return lb_qspec_parse(text, out);
    if (cli_plain_float_spec(text, out)) return LB_OK;
    lb_format f;
    lb_status st = lb_format_by_name(text, &f);
    if (st != LB_OK) return lb_qspec_parse(text, out); /* a preset such as nvfp4, or the error */
    char spec[96];
    int integer = lb_format_get(f)->kind == LB_KIND_INT;
    snprintf(spec, sizeof spec, integer ? "%s:channel:scale=fp16" : "%s:tensor", text);
    return lb_qspec_parse(spec, out);
}

static int build_request(const opts *o, const lb_shape *shape, lb_plan_request *r)
{
    memset(r, 0, sizeof *r);
    r->shape = *shape;
    r->n_gpus = o->gpus;
    r->ctx = o->ctx, r->batch = o->batch, r->reserve = o->reserve;
    r->quantize_embeddings = o->quantize_embeddings;
    lb_status st = lb_gpu_find(o->gpu, &r->gpu);
    if (st != LB_OK && !(o->gpu_mem && o->gpu_bw && o->gpu_tflops)) return cli_fail_lb("plan", o->json, EXIT_USAGE, st);
    if (st != LB_OK) snprintf(r->gpu.name, sizeof r->gpu.name, "custom"), snprintf(r->gpu.display, sizeof r->gpu.display, "%s", o->gpu);
    static const char *const computes[] = {"bf16", "fp8", "fp4", "int8"};
    int c = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(o->compute, computes[i]) == 0) c = i;
    if (c < 0) return cli_fail("plan", o->json, EXIT_USAGE, "bad_argument", "--compute takes bf16, fp8, fp4 or int8, not '%s'", o->compute);
    r->compute = (lb_compute)c;
    if (o->gpu_mem) r->gpu.mem_bytes = o->gpu_mem * 1e9;
    if (o->gpu_bw) r->gpu.bw_bytes_s = o->gpu_bw * 1e12;
    if (o->gpu_tflops) {
        double *peaks[] = {&r->gpu.bf16_flops, &r->gpu.fp8_flops, &r->gpu.fp4_flops, &r->gpu.int8_ops};
        *peaks[c] = o->gpu_tflops * 1e12;
    }
    if ((st = weights_spec(o->weights, &r->weights)) != LB_OK) return cli_fail_lb("plan", o->json, EXIT_USAGE, st);
    if ((st = kv_spec(o->kv, &r->kv)) != LB_OK) return cli_fail_lb("plan", o->json, EXIT_USAGE, st);
    return EXIT_OK;
}

static const char *compute_name(lb_compute c)
{
    static const char *const names[] = {"BF16", "FP8", "FP4", "INT8"};
    return names[c];
}

/* Weight memory of one spec, for the table across precisions. */
static double weights_under(const lb_plan_request *r, const char *spec, double *bits)
{
    lb_plan_request q = *r;
    lb_plan p;
    *bits = 0;
    if (weights_spec(spec, &q.weights) != LB_OK || lb_plan_compute(&q, &p) != LB_OK) return -1;
    *bits = p.weight_bits;
    return p.bytes_weights;
}

static const char *const table_specs[] = {"bf16", "fp8_e4m3:channel", "int8:channel", "int4:g128:scale=fp16",
                                          "int4:g32:scale=fp16", "mxfp4", "nvfp4"};
#define N_TABLE (sizeof table_specs / sizeof table_specs[0])

static void print_json(const opts *o, const lb_plan_request *r, const lb_plan *p, uint64_t counted, int have_count)
{
    const lb_shape *s = &r->shape;
    printf("{\"model\": ");
    json_string(stdout, o->model);
    printf(", \"shape\": {\"name\": ");
    json_string(stdout, s->name);
    json_field(stdout, "layers", (double)s->n_layers);
    json_field(stdout, "dim", (double)s->dim);
    json_field(stdout, "heads", (double)s->n_heads);
    json_field(stdout, "kv_heads", (double)s->n_kv_heads);
    json_field(stdout, "head_dim", (double)s->head_dim);
    json_field(stdout, "hidden_dim", (double)s->hidden_dim);
    json_field(stdout, "vocab_size", (double)s->vocab_size);
    json_field(stdout, "experts", (double)s->n_experts);
    json_field(stdout, "experts_per_token", (double)s->experts_per_token);
    json_field(stdout, "full_attention_layers", (double)s->n_full_layers);
    json_field(stdout, "sliding_layers", (double)s->n_sliding_layers);
    printf("}, \"parameters\": {\"total\": %llu, \"active\": %llu, \"embedding\": %llu, \"lm_head\": %llu",
           (unsigned long long)p->params.total, (unsigned long long)p->params.active,
           (unsigned long long)p->params.embedding, (unsigned long long)p->params.lm_head);
    if (have_count) printf(", \"counted_in_checkpoint\": %llu", (unsigned long long)counted);
    printf("}, \"gpu\": {\"name\": ");
    json_string(stdout, r->gpu.name);
    json_field(stdout, "count", r->n_gpus);
    json_field(stdout, "memory_bytes", r->gpu.mem_bytes);
    json_field(stdout, "bandwidth_bytes_s", r->gpu.bw_bytes_s);
    json_field(stdout, "peak_flops", p->peak_flops / r->n_gpus);
    printf(", \"compute\": \"%s\"}, \"weights\": {\"spec\": ", compute_name(r->compute));
    json_string(stdout, o->weights);
    json_field(stdout, "bits_per_weight", p->weight_bits);
    json_field(stdout, "bytes_matrices", p->bytes_matrices);
    json_field(stdout, "bytes_16bit", p->bytes_16bit);
    json_field(stdout, "bytes", p->bytes_weights);
    printf(", \"table\": [");
    for (size_t i = 0; i < N_TABLE; i++) {
        double bits, bytes = weights_under(r, table_specs[i], &bits);
        printf("%s{\"spec\": \"%s\"", i ? ", " : "", table_specs[i]);
        json_field(stdout, "bits_per_weight", bits);
        json_field(stdout, "bytes", bytes);
        printf("}");
    }
    printf("]}, \"kv\": {\"spec\": ");
    json_string(stdout, o->kv);
    json_field(stdout, "bits_per_element", p->kv_bits);
    json_field(stdout, "bytes_per_token", p->kv_bytes_per_token);
    json_field(stdout, "bytes_per_sequence", p->kv_bytes_per_seq);
    json_field(stdout, "ctx", (double)r->ctx);
    printf("}, \"memory\": {\"total\": ");
    json_number(stdout, p->mem_total);
    json_field(stdout, "reserve", p->mem_reserve);
    json_field(stdout, "for_kv", p->mem_for_kv);
    printf(", \"fits\": %s, \"max_batch\": %llu}", p->fits ? "true" : "false", (unsigned long long)p->max_batch);
    printf(", \"decode\": {\"batch_1\": {\"bytes\": ");
    json_number(stdout, p->decode_bytes_1);
    json_field(stdout, "flops", p->decode_flops_1);
    json_field(stdout, "tokens_per_s", p->decode_tps_1);
    printf(", \"bound\": \"%s\"}, \"batch\": %llu, \"batch_n\": {\"bytes\": ", p->decode_compute_bound_1 ? "compute" : "memory",
           (unsigned long long)p->batch);
    json_number(stdout, p->decode_bytes_b);
    json_field(stdout, "flops", p->decode_flops_b);
    json_field(stdout, "tokens_per_s", p->decode_tps_b);
    printf(", \"bound\": \"%s\"}}, \"prefill\": {\"tokens\": %llu", p->decode_compute_bound_b ? "compute" : "memory",
           (unsigned long long)r->ctx);
    json_field(stdout, "flops", p->prefill_flops);
    json_field(stdout, "compute_s", p->prefill_compute_s);
    json_field(stdout, "memory_s", p->prefill_memory_s);
    json_field(stdout, "seconds", p->prefill_s);
    json_field(stdout, "tokens_per_s", p->prefill_tps);
    printf(", \"bound\": \"%s\"}}\n", p->prefill_compute_bound ? "compute" : "memory");
}

static void print_human(const opts *o, const lb_plan_request *r, const lb_plan *p, uint64_t counted, int have_count)
{
    const lb_shape *s = &r->shape;
    const lb_param_count *pc = &p->params;
    char safe_model[4096], safe_name[256]; /* the name comes from config.json: escaped */
    printf("model: %s (%s): %llu layers, dim %llu, ", cli_escape(safe_model, sizeof safe_model, o->model),
           s->name[0] ? cli_escape(safe_name, sizeof safe_name, s->name) : "?",
           (unsigned long long)s->n_layers, (unsigned long long)s->dim);
    if (s->kv_lora_rank)
        printf("%llu heads with latent KV (rank %llu + rope %llu)", (unsigned long long)s->n_heads,
               (unsigned long long)s->kv_lora_rank, (unsigned long long)s->qk_rope_head_dim);
    else
        printf("%llu heads / %llu KV heads x %llu", (unsigned long long)s->n_heads, (unsigned long long)s->n_kv_heads,
               (unsigned long long)s->head_dim);
    if (s->n_experts)
        printf(", %llu experts (%llu per token) x %llu wide", (unsigned long long)s->n_experts,
               (unsigned long long)s->experts_per_token, (unsigned long long)s->moe_hidden_dim);
    else printf(", MLP %llu", (unsigned long long)s->hidden_dim);
    printf(", vocab %llu\n", (unsigned long long)s->vocab_size);
    printf("parameters: %.3f B total, %.3f B active per token (embedding %.3f B, head %s)\n", pc->total / 1e9,
           pc->active / 1e9, pc->embedding / 1e9, pc->lm_head ? "untied" : "tied to the embedding");
    if (have_count)
        printf("  counted in the checkpoint: %llu %s\n", (unsigned long long)counted,
               counted == pc->total ? "(= the formula)" : "(differs from the formula)");
    printf("GPU: %u x %s: %.1f GB (%.1f GiB), %.2f TB/s, dense %s %.0f TFLOPS\n\n", r->n_gpus, r->gpu.display,
           r->gpu.mem_bytes / 1e9, r->gpu.mem_bytes / 1073741824.0, r->gpu.bw_bytes_s / 1e12, compute_name(r->compute),
           p->peak_flops / r->n_gpus / 1e12);

    printf("weights (GB = 10^9 bytes, GiB = 2^30 bytes; %s)\n",
           r->quantize_embeddings ? "embedding and head quantized too" : "embedding and head kept 16-bit");
    printf("  %-24s %11s %10s %10s %14s\n", "spec", "bits/weight", "GB", "GiB", "B x bits / 8");
    for (size_t i = 0; i <= N_TABLE; i++) {
        const char *spec = i < N_TABLE ? table_specs[i] : o->weights;
        if (i == N_TABLE) {
            int listed = 0;
            for (size_t k = 0; k < N_TABLE; k++) listed |= strcmp(table_specs[k], o->weights) == 0;
            if (listed) break;
        }
        double bits, bytes = weights_under(r, spec, &bits);
        printf("%s %-24s %11.3f %10.2f %10.2f %14.2f\n", strcmp(spec, o->weights) == 0 ? ">" : " ", spec, bits,
               bytes / 1e9, bytes / 1073741824.0, pc->total / 1e9 * bits / 8);
    }
    printf("  bits/weight: the weight matrices, scales included. GB: those plus the 16-bit rest (norms%s);\n"
           "  the rule of thumb, billions of parameters x bits / 8, counts every parameter at bits/weight.\n\n",
           r->quantize_embeddings ? "" : ", embedding, head");

    printf("KV cache (%s: %.3f bits per element)\n", o->kv, p->kv_bits);
    if (s->kv_lora_rank)
        printf("  per token = %llu layers x (kv_lora_rank %llu + rope %llu) x %.3f bytes = %.0f bytes\n",
               (unsigned long long)(s->n_full_layers + s->n_sliding_layers), (unsigned long long)s->kv_lora_rank,
               (unsigned long long)s->qk_rope_head_dim, p->kv_bits / 8, p->kv_bytes_per_token);
    else
        printf("  per token = 2 x %llu layers x %llu KV heads x %llu x %.3f bytes = %.0f bytes (%.1f KiB)\n",
               (unsigned long long)(s->n_full_layers + s->n_sliding_layers), (unsigned long long)s->n_kv_heads,
               (unsigned long long)s->head_dim, p->kv_bits / 8, p->kv_bytes_per_token, p->kv_bytes_per_token / 1024);
    if (s->n_sliding_layers)
        printf("  (%llu of those layers slide over %llu tokens and hold at most that many)\n",
               (unsigned long long)s->n_sliding_layers, (unsigned long long)s->sliding_window);
    printf("  per sequence of %llu tokens: %.3f GB\n\n", (unsigned long long)r->ctx, p->kv_bytes_per_seq / 1e9);

    printf("memory: %.2f GB - %.0f%% reserve (%.2f GB) - weights %.2f GB = %.2f GB for the KV cache\n",
           p->mem_total / 1e9, r->reserve * 100, p->mem_reserve / 1e9, p->bytes_weights / 1e9, p->mem_for_kv / 1e9);
    if (!p->fits) {
        printf("  DOES NOT FIT: the weights need %.2f GB more than the GPU memory left after the reserve;\n"
               "  use more GPUs (--gpus), fewer bits (--weights) or a bigger GPU.\n",
               -p->mem_for_kv / 1e9);
        return;
    }
    printf("  -> %llu concurrent sequences of %llu tokens (%.2f GB / %.3f GB)\n\n", (unsigned long long)p->max_batch,
           (unsigned long long)r->ctx, p->mem_for_kv / 1e9, p->kv_bytes_per_seq / 1e9);
    if (r->batch && r->batch > p->max_batch)
        printf("  NOTE: --batch %llu does not fit; the bounds below assume it anyway\n\n", (unsigned long long)r->batch);

    printf("decode upper bound: tokens/s <= batch / max(bytes read per step / %.2f TB/s, FLOPs / %.0f TFLOPS)\n",
           p->bandwidth / 1e12, p->peak_flops / 1e12);
    printf("  batch 1: %.2f GB per step -> %.1f tokens/s (%s-bound)\n", p->decode_bytes_1 / 1e9, p->decode_tps_1,
           p->decode_compute_bound_1 ? "compute" : "memory");
    if (p->batch)
        printf("  batch %llu: %.2f GB per step -> %.0f tokens/s in total, %.1f per sequence (%s-bound)\n",
               (unsigned long long)p->batch, p->decode_bytes_b / 1e9, p->decode_tps_b, p->decode_tps_b / p->batch,
               p->decode_compute_bound_b ? "compute" : "memory");
    else printf("  no sequence of %llu tokens fits beside the weights\n", (unsigned long long)r->ctx);
    printf("prefill lower bound for %llu tokens: FLOPs = 2 x active matmul params x tokens + attention\n",
           (unsigned long long)r->ctx);
    printf("  %.3g FLOPs / %.0f TFLOPS %s = %.4f s; reading the weights once: %.4f s -> %s-bound, %.0f tokens/s\n",
           p->prefill_flops, p->peak_flops / 1e12, compute_name(r->compute), p->prefill_compute_s, p->prefill_memory_s,
           p->prefill_compute_bound ? "compute" : "memory", p->prefill_tps);
}

static int run(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc != EXIT_OK) return rc;
    if (o.list) return list(o.json);
    lb_shape shape;
    uint64_t counted = 0;
    int have_count = 0;
    if ((rc = load_shape(&o, &shape, &counted, &have_count)) != EXIT_OK) {
        if (rc == EXIT_USAGE && lb_last_error()[0]) return cli_fail("plan", o.json, EXIT_USAGE, "bad_argument", "%s", lb_last_error());
        return rc;
    }
    lb_plan_request r;
    if ((rc = build_request(&o, &shape, &r)) != EXIT_OK) return rc;
    lb_plan p;
    lb_status st = lb_plan_compute(&r, &p);
    if (st != LB_OK) return cli_fail_lb("plan", o.json, EXIT_USAGE, st);
    if (o.json) print_json(&o, &r, &p, counted, have_count);
    else print_human(&o, &r, &p, counted, have_count);
    return EXIT_OK;
}

const cli_command cmd_plan = {"plan", "napkin math: memory, KV cache, concurrency, decode/prefill bounds on a GPU",
                              usage, run};

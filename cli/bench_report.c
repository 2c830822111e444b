/* lowbit bench's report (bench.h): tables as text, or one JSON object;
 * every ratio is computed here from the measured figures. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "kernel/qdot8.h"
#include "kernel/readbw.h"
#include "util/cpu.h"
#include "util/parallel.h"

/* ---- output ---- */

static double gw_per_s(const mv_row *r) { return (double)r->rows * (double)r->cols / r->sec / 1e9; }

static const mv_row *baseline(const mv_row *rows, size_t n, lb_format f)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].plain && rows[i].element == f) return &rows[i];
    return NULL;
}

static double speedup(const mv_row *r, const mv_row *base) { return base ? gw_per_s(r) / gw_per_s(base) : 0; }

/* The decode row of the bf16 baseline (the list always has one). */
static const model_row *model_bf16(const opts *o, const results *r)
{
    for (size_t i = 0; i < r->n_dec; i++)
        if (bench_is_plain_of(&o->decode[i], LB_FMT_BF16)) return &r->dec[i];
    return NULL;
}

/* The KV row speedups divide by: the first one measured. */
static const kv_row *kv_base(const results *r)
{
    for (size_t i = 0; i < r->n_kv; i++)
        if (!r->kv[i].refused[0]) return &r->kv[i];
    return NULL;
}

static void print_mv_json(const char *key, const mv_row *rows, size_t n, const read_result *rd, int mem)
{
    const mv_row *f32 = baseline(rows, n, LB_FMT_FP32), *bf16 = baseline(rows, n, LB_FMT_BF16);
    printf(", \"%s\": [", key);
    for (size_t i = 0; i < n; i++) {
        const mv_row *r = &rows[i];
        double gbps = (double)r->bytes / r->sec / 1e9;
        printf("%s{\"spec\": ", i ? ", " : "");
        json_string(stdout, r->name);
        printf(", \"rows\": %zu, \"cols\": %zu, \"bytes\": %llu", r->rows, r->cols, (unsigned long long)r->bytes);
        json_field(stdout, "bits_per_weight", 8.0 * (double)r->bytes / ((double)r->rows * (double)r->cols));
        json_field(stdout, "seconds", r->sec);
        json_field(stdout, "gbps", gbps);
        json_field(stdout, "gweights_per_s", gw_per_s(r));
        json_field(stdout, "speedup_vs_fp32", speedup(r, f32));
        json_field(stdout, "speedup_vs_bf16", speedup(r, bf16));
        printf(", \"shortened\": %s", r->shortened ? "true" : "false");
        if (mem) {
            double gbps1 = (double)r->bytes / r->sec1 / 1e9;
            json_field(stdout, "fraction_of_read", gbps / rd->gbps);
            json_field(stdout, "gbps_1t", gbps1);
            json_field(stdout, "fraction_of_read_1t", gbps1 / rd->gbps1);
        }
        printf("}");
    }
    printf("]");
}

void bench_print_json(const opts *o, const results *r)
{
    unsigned ex = lb__cpu_extras();
    printf("{\"machine\": {\"cpu\": ");
    json_string(stdout, r->cpu);
    printf(", \"isa\": ");
    json_string(stdout, lb_isa_name(lb_isa_active()));
    printf(", \"avx512_vnni\": %s, \"avx512_bf16\": %s, \"int8_kernels\": ", ex & LB__CPU_AVX512_VNNI ? "true" : "false",
           ex & LB__CPU_AVX512_BF16 ? "true" : "false");
    json_string(stdout, lb__qdot8_get(lb_isa_active())->name);
    printf(", \"cpus\": %d, \"threads\": %d, \"l3_bytes\": %llu}", lb__thread_count(0), o->threads, r->l3);
    printf(", \"read\": {\"method\": ");
    json_string(stdout, r->read.method);
    printf(", \"bytes\": %llu, \"passes\": %d", (unsigned long long)r->read.bytes, o->reps_mem);
    json_field(stdout, "gbps_1t", r->read.gbps1);
    json_field(stdout, "gbps", r->read.gbps);
    printf("}, \"matvec\": {\"cols\": %d, \"passes\": %d, \"target_bytes\": %.0f", COLS, o->reps_mem, o->gib * (double)(1u << 30));
    print_mv_json("rows", r->mem, r->n_mem, &r->read, 1);
    printf("}, \"matvec_l3\": {\"note\": \"cache-resident: measures cache, not memory\", \"passes\": %d, \"target_bytes\": %.0f",
           o->reps_l3, o->l3_target);
    print_mv_json("rows", r->l3rows, r->n_l3, &r->read, 0);
    printf("}, \"model\": {\"path\": ");
    json_string(stdout, o->model);
    printf(", \"skipped\": ");
    if (r->model_note) json_string(stdout, r->model_note);
    else printf("null");
    printf(", \"tokens\": \"fixed pseudo-random ids in [0, vocab)\", \"vocab\": %u, \"runs\": %d, \"prompt_tokens\": %d, "
           "\"decode_tokens\": %zu, \"prefill_tokens\": %zu, \"decode\": [",
           r->vocab, o->runs, PROMPT_TOKENS, o->decode_tokens, o->prefill_tokens);
    const model_row *bf = model_bf16(o, r);
    for (size_t i = 0; i < r->n_dec; i++) {
        const model_row *d = &r->dec[i];
        double byte_ratio = (double)bf->weights / (double)d->weights, sp = d->decode_tps / bf->decode_tps;
        printf("%s{\"spec\": ", i ? ", " : "");
        json_string(stdout, d->name);
        printf(", \"weights_bytes\": %llu, \"decode_tokens_timed\": %zu", (unsigned long long)d->weights, d->decode_timed);
        json_field(stdout, "decode_tokens_per_s", d->decode_tps);
        json_field(stdout, "decode_speedup_vs_bf16", sp);
        json_field(stdout, "byte_ratio_bf16", byte_ratio);
        json_field(stdout, "goal_speedup", 0.8 * byte_ratio);
        printf(", \"meets_goal\": %s", sp >= 0.8 * byte_ratio ? "true" : "false");
        json_field(stdout, "prefill_tokens_per_s", d->prefill_tps);
        json_field(stdout, "prefill_speedup_vs_bf16", d->prefill_tps / bf->prefill_tps);
        printf("}");
    }
    printf("], \"kv\": {\"spec\": ");
    json_string(stdout, o->kv_spec.name);
    printf(", \"prefill_tokens\": %zu, \"decode_tokens\": %zu, \"rows\": [", o->kv_prefill, o->kv_decode);
    for (size_t i = 0; i < r->n_kv; i++) {
        const kv_row *k = &r->kv[i], *base = kv_base(r);
        printf("%s{\"kv\": ", i ? ", " : "");
        json_string(stdout, lb_format_get(k->kv)->name);
        if (k->refused[0]) {
            printf(", \"refused\": ");
            json_string(stdout, k->refused);
            printf("}");
            continue;
        }
        printf(", \"refused\": null, \"cache_bytes\": %llu, \"decode_tokens_timed\": %zu",
               (unsigned long long)k->cache_bytes, k->timed);
        json_field(stdout, "decode_tokens_per_s", k->tps);
        json_field(stdout, "speedup_vs_first", k->tps / base->tps);
        json_field(stdout, "prefill_tokens_per_s", k->prefill_tps);
        json_field(stdout, "prefill_vs_first", k->prefill_tps / base->prefill_tps);
        printf("}");
    }
    printf("]}}}\n");
}

void bench_print_machine_text(const opts *o, const results *r)
{
    unsigned ex = lb__cpu_extras();
    printf("lowbit bench: best of several passes each; the machine may be shared, so figures are noisy\n"
           "and each is also given as a ratio to a baseline measured in this same run.\n\n");
    printf("machine: %s, %d CPUs, L3 ", r->cpu, lb__thread_count(0));
    if (r->l3) printf("%.0f MiB", (double)r->l3 / (1 << 20));
    else printf("unknown");
    printf("; kernels %s (AVX512-VNNI %s, AVX512-BF16 %s; int8 mode %s); %d thread%s\n\n", lb_isa_name(lb_isa_active()),
           ex & LB__CPU_AVX512_VNNI ? "yes" : "no", ex & LB__CPU_AVX512_BF16 ? "yes" : "no",
           lb__qdot8_get(lb_isa_active())->name, o->threads, o->threads == 1 ? "" : "s");
    printf("1. Read bandwidth: %s,\n   over %.2f GiB (pages touched first), split over the threads as the matvec is, best of %d:\n"
           "   1 thread %.2f GB/s",
           r->read.method, (double)r->read.bytes / (1u << 30), o->reps_mem, r->read.gbps1);
    if (o->threads > 1) printf(", %d threads %.2f GB/s", o->threads, r->read.gbps);
    printf("\n\n");
}

static void print_mv_text(const mv_row *rows, size_t n, const read_result *rd, int mem)
{
    const mv_row *f32 = baseline(rows, n, LB_FMT_FP32), *bf16 = baseline(rows, n, LB_FMT_BF16);
    int cut = 0;
    for (size_t i = 0; i < n; i++) cut |= rows[i].shortened;
    printf("%-30s %6s %7s %7s %s%7s %7s %7s%s\n", "spec", "bits/w", "MiB", "GB/s", mem ? "of read " : "", "Gw/s",
           "vs fp32", "vs bf16", mem ? " | 1T GB/s of read" : "");
    for (size_t i = 0; i < n; i++) {
        const mv_row *r = &rows[i];
        double gbps = (double)r->bytes / r->sec / 1e9;
        printf("%-30s%c%6.2f %7.1f %7.2f ", r->name, r->shortened ? '*' : ' ', 8.0 * (double)r->bytes / ((double)r->rows * (double)r->cols),
               (double)r->bytes / (1 << 20), gbps);
        if (mem) printf("%7.2f ", gbps / rd->gbps);
        printf("%7.2f %7.2f %7.2f", gw_per_s(r), speedup(r, f32), speedup(r, bf16));
        if (mem) printf(" | %7.2f %7.2f", (double)r->bytes / r->sec1 / 1e9, (double)r->bytes / r->sec1 / 1e9 / rd->gbps1);
        printf("\n");
    }
    if (cut)
        printf("* a slow kernel (a full pass would take minutes): timed on its first rows only, the MiB shown.\n");
}

void bench_print_matvec_text(const opts *o, const results *r)
{
    printf("2a. Matrix-vector product, one token (lb__qmat_matmul, n = 1), %d columns: the rows of a %d x %d\n"
           "    random matrix packed once and tiled to >= %.2f GiB of packed bytes (%.0f x the L3: memory, not\n"
           "    cache); best of %d passes after an untimed one. \"of read\" = GB/s / read GB/s above; Gw/s = G\n"
           "    weights/s; vs fp32/bf16 = ratio of Gw/s. W8A8 rows: activations quantized per token in the call.\n",
           COLS, SMALL_ROWS, COLS, o->gib, r->l3 ? o->gib * (double)(1u << 30) / (double)r->l3 : 0.0, o->reps_mem);
    print_mv_text(r->mem, r->n_mem, &r->read, 1);
    printf("\n2b. The same on ~%.0f MiB of packed weights, which stay in the L3: this measures the cache, not\n"
           "    memory; best of %d passes.\n", o->l3_target / (1 << 20), o->reps_l3);
    print_mv_text(r->l3rows, r->n_l3, &r->read, 0);
    printf("\n");
}

void bench_print_model_text(const opts *o, const results *r)
{
    if (r->model_note) {
        printf("3. Model: %s\n", r->model_note);
        return;
    }
    const model_row *bf = model_bf16(o, r);
    printf("3. Model %s: each spec on attention, MLP and embedding (which also serves a tied head);\n"
           "   prompts are a fixed pseudo-random sequence of token ids in [0, %u), not text; best of %d runs.\n"
           "   decode: a %d-token prompt, then %zu single-token steps timed; prefill: one forward of %zu tokens\n"
           "   (logits of the last only). B ratio = bf16 weight bytes read per token / the spec's; the goal is\n"
           "   a decode speedup over bf16 >= 0.8 x B ratio.\n",
           o->model, r->vocab, o->runs, PROMPT_TOKENS, o->decode_tokens, o->prefill_tokens);
    printf("%-36s %11s %12s %7s %10s %9s %4s %13s %7s\n", "spec", "weights MiB", "decode tok/s", "vs bf16",
           "B ratio", "0.8x that", "met", "prefill tok/s", "vs bf16");
    for (size_t i = 0; i < r->n_dec; i++) {
        const model_row *d = &r->dec[i];
        double ratio = (double)bf->weights / (double)d->weights, sp = d->decode_tps / bf->decode_tps;
        printf("%-36s %11.1f %12.1f %7.2f %10.2f %9.2f %4s %13.1f %7.2f", d->name, (double)d->weights / (1 << 20),
               d->decode_tps, sp, ratio, 0.8 * ratio, sp >= 0.8 * ratio ? "yes" : "no", d->prefill_tps,
               d->prefill_tps / bf->prefill_tps);
        if (d->decode_timed < o->decode_tokens) printf("  (slow: %zu decode steps timed)", d->decode_timed);
        printf("\n");
    }
    printf("\n   KV cache formats, weights %s: prefill %zu tokens, then %zu decode steps; both timed, best of %d runs.\n",
           o->kv_spec.name, o->kv_prefill, o->kv_decode, o->runs);
    printf("%-12s %10s %12s %8s %13s %8s\n", "kv", "cache MiB", "decode tok/s", "vs first", "prefill tok/s", "vs first");
    const kv_row *base = kv_base(r);
    int same_size = 1, other_format = 0; /* a check that the runner honoured the format */
    for (size_t i = 0; i < r->n_kv; i++) {
        const kv_row *k = &r->kv[i];
        if (k->refused[0]) {
            printf("%-12s refused by the runner: %s\n", lb_format_get(k->kv)->name, k->refused);
            continue;
        }
        printf("%-12s %10.2f %12.1f %8.2f %13.1f %8.2f", lb_format_get(k->kv)->name, (double)k->cache_bytes / (1 << 20),
               k->tps, k->tps / base->tps, k->prefill_tps, k->prefill_tps / base->prefill_tps);
        if (k->timed < o->kv_decode) printf("  (slow: %zu decode steps timed)", k->timed);
        printf("\n");
        same_size &= k->cache_bytes == base->cache_bytes;
        other_format |= k->kv != base->kv;
    }
    if (same_size && other_format)
        printf("   note: every format gives the KV cache the same size: this build's runner does not store it as asked.\n");
}

/* lowbit bench, shared by its three files: the options (cmd_bench.c),
 * the measurements (bench_measure.c) and the report, text or JSON
 * (bench_report.c). */
#ifndef LOWBIT_CLI_BENCH_H
#define LOWBIT_CLI_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"

#define MAX_SPECS 48
#define MAX_ROWS (3 * MAX_SPECS) /* each spec, a W8A8 row after an 8-bit one, an int8-activation row */
#define MAX_KV 8
#define SMALL_ROWS 256 /* the random matrix that is quantized once, then tiled */
#define COLS 4096
#define PROMPT_TOKENS 16

typedef struct item {
    char name[96];
    lb_qspec spec;
    lb_format act; /* W8A8 activations, or LB_FMT_FP32 */
    lb_format decode_act; /* "+decode-act=int8": lb_runner_options.decode_act */
    int stored;    /* --decode-specs "stored": the file's tensors as stored (ggml blocks read in place);
                      2 for "stored-fp32": the same values held as fp32 copies */
} item;

typedef struct opts {
    int threads, json, quick, no_model;
    double gib, l3_target;      /* bytes of the beyond-L3 and the cache-resident matrices */
    int reps_mem, reps_l3, runs; /* timed passes (best of) */
    double slow_pass_s, budget_s; /* a pass this long is cut to fewer rows; timing of one row stops after budget_s */
    double min_bytes;            /* a cut pass still reads this much */
    size_t decode_tokens, prefill_tokens, kv_prefill, kv_decode;
    const char *model;
    int model_given;
    item specs[MAX_SPECS], decode[MAX_SPECS];
    size_t n_specs, n_decode;
    lb_format kv[MAX_KV];
    size_t n_kv;
    item kv_spec;
} opts;

typedef struct read_result {
    char method[128];
    uint64_t bytes;
    double gbps1, gbps; /* 1 thread, the chosen threads */
} read_result;

/* One matvec row: the best pass at the chosen threads and on one thread. */
typedef struct mv_row {
    char name[128];
    int plain;          /* plain fp32/bf16/fp16: element is the format */
    lb_format element;
    size_t rows, cols;
    uint64_t bytes;
    double sec, sec1;   /* sec1 0: not measured */
    int shortened;      /* timed on fewer rows than asked: a slow kernel (rows_to_time) */
} mv_row;

typedef struct model_row {
    char name[96];
    uint64_t weights;   /* bytes of weight matrices read per decoded token */
    double decode_tps, prefill_tps;
    size_t decode_timed; /* decode steps in the best run (fewer than asked: cut by the time budget) */
} model_row;

typedef struct kv_row {
    lb_format kv;
    uint64_t cache_bytes;
    double tps, prefill_tps; /* decode steps after the long prefill; that prefill itself */
    size_t timed;
    char refused[256]; /* the runner's message when it does not offer this format; "" if measured */
} kv_row;

typedef struct results {
    char cpu[128];
    unsigned long long l3;
    read_result read;
    mv_row mem[MAX_ROWS], l3rows[MAX_ROWS];
    size_t n_mem, n_l3;
    const char *model_note; /* why the model section was skipped; NULL if it ran */
    uint32_t vocab;
    model_row dec[MAX_SPECS];
    size_t n_dec;
    kv_row kv[MAX_KV];
    size_t n_kv;
} results;

/* A plain (unscaled) f item without W8A8: the baselines fp32 and bf16. */
int bench_is_plain_of(const item *it, lb_format f);

/* The CPU, its L3 size and instruction sets. */
void bench_machine_info(results *r);
/* Each section fills its part of r; EXIT_OK or the reported exit code. */
int bench_measure_read(const opts *o, results *r);
int bench_measure_matvec(const opts *o, results *r);
int bench_measure_model(const opts *o, results *r);

/* The text report, section by section as they finish; or all as JSON. */
void bench_print_machine_text(const opts *o, const results *r);
void bench_print_matvec_text(const opts *o, const results *r);
void bench_print_model_text(const opts *o, const results *r);
void bench_print_json(const opts *o, const results *r);

#endif

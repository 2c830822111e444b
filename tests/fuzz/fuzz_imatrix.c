/* Fuzz harness for the imatrix readers (GGUF and legacy .dat). Every input
 * must either be refused with a message that names the input, or parse to
 * an imatrix whose every part is consistent: entries in strictly
 * increasing name order, each found by its name, with positive sizes,
 * non-negative counts, finite non-negative sums and the values
 * llama-quantize derives from them; and the writer must accept it, with
 * what it writes reading back to the same entries (a legacy value too large
 * to scale to a GGUF sum is the one refusal allowed).
 *
 * Built with -DLB_LIBFUZZER and clang -fsanitize=fuzzer,address (`make fuzz`)
 * it is a libFuzzer target; built plainly (`make test`) its main() runs a
 * deterministic mutation loop over built-in seeds. The same seeds are in
 * tests/fuzz/seeds/fuzz_imatrix/ (main --write-seeds DIR writes them). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/imatrix.h"
#include "lowbit.h"

static long n_accepted;
static char out_path[256]; /* where accepted inputs are written back (plain build only) */

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_imatrix: %s (last error: '%s')\n", what, lb_last_error());
    abort();
}

static void check_entry(const lb_imatrix *im, const lb_imatrix_entry *e, int legacy)
{
    lb_imatrix_entry f;
    if (!lb_imatrix_find(im, e->name, &f) || f.sums != e->sums) fail("an entry does not find itself");
    if (e->cols == 0 || e->n_mat == 0 || (legacy && e->n_mat != 1)) fail("bad entry size accepted");
    for (size_t m = 0; m < e->n_mat; m++)
        if (e->counts[m] < 0) fail("negative count accepted");
    for (size_t m = 0; m < e->n_mat; m++)
        for (size_t j = 0; j < e->cols; j++) {
            size_t k = m * e->cols + j;
            float s = e->sums[k];
            if (!isfinite(s) || s < 0) fail("bad sum accepted");
            int64_t c = legacy ? e->counts[0] : e->counts[m];
            float want = c > 0 ? s / (float)c : legacy ? s : 1.0f;
            if (memcmp(&want, &e->values[k], sizeof want) != 0) fail("values are not llama-quantize's");
        }
    const float *v;
    size_t n;
    if (!lb_imatrix_values(im, e->name, &v, &n) || v != e->values || n != e->cols * e->n_mat) fail("values lookup");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lb_imatrix *im;
    if (lb__imatrix_parse(data, size, "fuzz.imatrix", &im) != LB_OK) {
        if (strncmp(lb_last_error(), "fuzz.imatrix: ", 14) != 0) fail("refused without a message naming the input");
        if (im) fail("a refused parse returned an imatrix");
        return 0;
    }
    lb_imatrix_info info;
    lb_imatrix_get_info(im, &info);
    if (info.entries == 0 || info.entries != lb_imatrix_count(im)) fail("an imatrix without entries accepted");
    const char *prev = NULL;
    for (size_t i = 0; i < info.entries; i++) {
        lb_imatrix_entry e;
        if (lb_imatrix_entry_at(im, i, &e) != LB_OK) fail("entry_at");
        if (prev && strcmp(prev, e.name) >= 0) fail("entries not in strictly increasing name order");
        if (strlen(e.name) > LB_IMATRIX_MAX_NAME) fail("a name too long to save accepted");
        check_entry(im, &e, info.legacy);
        prev = e.name;
    }
    for (size_t i = 0; i < info.n_datasets; i++)
        if (!lb_imatrix_dataset(im, i)) fail("a dataset is missing");
    if (out_path[0]) { /* write it back and read it again: same entries and counts */
        unlink(out_path);
        if (lb_imatrix_save(im, out_path) != LB_OK) {
            /* the one refusal allowed: a legacy value that overflows when scaled to a sum */
            if (!info.legacy || !strstr(lb_last_error(), "overflows fp32"))
                fail("the writer refused an imatrix the reader accepted");
            lb_imatrix_free(im);
            n_accepted++;
            return 0;
        }
        lb_imatrix *back;
        if (lb_imatrix_load(out_path, &back) != LB_OK) fail("the written imatrix does not read back");
        if (lb_imatrix_count(back) != info.entries) fail("the written imatrix lost entries");
        for (size_t i = 0; i < info.entries; i++) {
            lb_imatrix_entry a, b;
            lb_imatrix_entry_at(im, i, &a), lb_imatrix_entry_at(back, i, &b);
            if (strcmp(a.name, b.name) || a.cols != b.cols || a.n_mat != b.n_mat) fail("an entry changed on writing");
            if (!info.legacy && (memcmp(a.sums, b.sums, a.cols * a.n_mat * sizeof *a.sums) ||
                                 memcmp(a.counts, b.counts, a.n_mat * sizeof *a.counts)))
                fail("sums or counts changed on writing");
        }
        lb_imatrix_free(back);
        unlink(out_path);
    }
    lb_imatrix_free(im);
    n_accepted++;
    return 0;
}

#ifndef LB_LIBFUZZER
/* ===== Seeds and a deterministic mutation loop ===== */

typedef struct buf {
    uint8_t p[2048];
    size_t n;
} buf;

static void put(buf *b, const void *s, size_t n)
{
    if (b->n + n <= sizeof b->p) memcpy(b->p + b->n, s, n), b->n += n;
}
static void le(buf *b, uint64_t v, int size)
{
    uint8_t x[8];
    for (int k = 0; k < size; k++) x[k] = (uint8_t)(v >> (8 * k));
    put(b, x, (size_t)size);
}
static void f32(buf *b, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    le(b, u, 4);
}
static void str(buf *b, const char *s) { le(b, strlen(s), 8), put(b, s, strlen(s)); }
static void pad(buf *b, size_t a) { while (b->n % a) le(b, 0, 1); }
static void tinfo(buf *b, const char *name, uint64_t ne0, uint64_t ne1, uint64_t off)
{
    str(b, name), le(b, ne1 > 1 ? 2 : 1, 4), le(b, ne0, 8);
    if (ne1 > 1) le(b, ne1, 8);
    le(b, 0, 4), le(b, off, 8); /* F32 */
}
static void legacy_entry(buf *b, const char *name, int32_t ncall, int n, float base)
{
    le(b, strlen(name), 4), put(b, name, strlen(name)), le(b, (uint32_t)ncall, 4), le(b, (uint32_t)n, 4);
    for (int j = 0; j < n; j++) f32(b, base + (float)j);
}

#define N_SEEDS 3
static buf seeds[N_SEEDS];

static void make_seeds(void)
{
    buf *b = &seeds[0]; /* GGUF: a dense entry and a 2-expert one, llama-imatrix's KVs */
    b->n = 0;
    put(b, "GGUF", 4), le(b, 3, 4), le(b, 4, 8), le(b, 4, 8);
    str(b, "general.type"), le(b, 8, 4), str(b, "imatrix");
    str(b, "imatrix.datasets"), le(b, 9, 4), le(b, 8, 4), le(b, 1, 8), str(b, "calib.txt");
    str(b, "imatrix.chunk_count"), le(b, 4, 4), le(b, 2, 4);
    str(b, "imatrix.chunk_size"), le(b, 4, 4), le(b, 512, 4);
    tinfo(b, "blk.0.attn_q.weight.in_sum2", 4, 1, 0);
    tinfo(b, "blk.0.attn_q.weight.counts", 1, 1, 32);
    tinfo(b, "blk.1.ffn_up_exps.weight.in_sum2", 2, 2, 64);
    tinfo(b, "blk.1.ffn_up_exps.weight.counts", 1, 2, 96);
    pad(b, 32);
    for (int j = 0; j < 4; j++) f32(b, 10.0f * (float)j);
    pad(b, 32), f32(b, 1024.0f), pad(b, 32);
    for (int j = 0; j < 4; j++) f32(b, 0.5f + (float)j);
    pad(b, 32), f32(b, 3.0f), f32(b, 0.0f), pad(b, 32);

    b = &seeds[1]; /* legacy with the trailer */
    b->n = 0;
    le(b, 2, 4);
    legacy_entry(b, "blk.0.attn_k.weight", 2, 3, 1.5f);
    legacy_entry(b, "blk.0.attn_v.weight", 0, 2, 4.0f);
    le(b, 2, 4), le(b, 9, 4), put(b, "calib.txt", 9);

    b = &seeds[2]; /* legacy without it */
    b->n = 0;
    le(b, 1, 4);
    legacy_entry(b, "output.weight", 7, 5, 0.25f);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) { return rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; }

static void mutate(buf *b)
{
    static const uint64_t interesting[] = {0, 1, 2, 3, 4, 7, 8, 31, 32, 33, 55, 56, 64, 0x7F, 0xFF, 0xFFFF,
                                           0x7F800000u /* inf */, 0x7FC00000u /* nan */, 0xBF800000u /* -1 */,
                                           0x3F000000u /* 0.5 */, 0x80000000u, 0xFFFFFFFFu, 1ull << 63, UINT64_MAX};
    uint64_t r = next();
    size_t pos = b->n ? (size_t)(r >> 16) % b->n : 0;
    switch (r % 6) {
    case 0: if (b->n) b->p[pos] ^= (uint8_t)(1u << ((r >> 8) % 8)); break;
    case 1: if (b->n) b->p[pos] = (uint8_t)(r >> 40); break;
    case 2: {
        uint64_t v = interesting[(r >> 8) % (sizeof interesting / sizeof *interesting)];
        int size = (r >> 12) & 1 ? 8 : 4;
        pos &= ~(size_t)3;
        for (int k = 0; k < size && pos + (size_t)k < b->n; k++) b->p[pos + (size_t)k] = (uint8_t)(v >> (8 * k));
        break;
    }
    case 3: b->n = pos; break;
    case 4: if (b->n < sizeof b->p) memmove(b->p + pos + 1, b->p + pos, b->n - pos), b->p[pos] = (uint8_t)(r >> 48), b->n++; break;
    default: if (b->n) memmove(b->p + pos, b->p + pos + 1, b->n - pos - 1), b->n--;
    }
}

static void run(const buf *b)
{
    uint8_t *copy = malloc(b->n ? b->n : 1);
    if (!copy) fail("malloc");
    memcpy(copy, b->p, b->n);
    LLVMFuzzerTestOneInput(copy, b->n);
    free(copy);
}

int main(int argc, char **argv)
{
    make_seeds();
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) {
        for (int k = 0; k < N_SEEDS; k++) {
            char path[512];
            snprintf(path, sizeof path, "%s/seed%d.%s", argv[2], k, k == 0 ? "gguf" : "dat");
            FILE *fp = fopen(path, "wb");
            if (!fp || fwrite(seeds[k].p, 1, seeds[k].n, fp) != seeds[k].n) fail("writing a seed");
            fclose(fp);
        }
        return 0;
    }
    snprintf(out_path, sizeof out_path, "/tmp/fuzz_imatrix.%ld.gguf", (long)getpid());
    lb_output_allow_replace(1);
    long runs = 0;
    for (int k = 0; k < N_SEEDS; k++, runs++) {
        lb_imatrix *im;
        if (lb__imatrix_parse(seeds[k].p, seeds[k].n, "seed", &im) != LB_OK) fail("a seed does not parse");
        lb_imatrix_free(im);
        run(&seeds[k]);
    }
    static buf b;
    for (int it = 0; it < 20000; it++, runs++) {
        b = seeds[it % N_SEEDS];
        for (int m = 0; m < 1 + it % 4; m++) mutate(&b);
        /* the write-back round trip costs a file each: every 16th input */
        char saved = out_path[0];
        if (it % 16) out_path[0] = 0;
        run(&b);
        out_path[0] = saved;
    }
    printf("fuzz_imatrix: %ld inputs (%ld parsed)\n%ld passed, 0 failed\n", runs, n_accepted, runs);
    return 0;
}
#endif

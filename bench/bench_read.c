/* Model reading throughput: open a model, convert every tensor to fp32,
 * tensor by tensor (what inspect, error and convert do), against memcpy of
 * the same number of fp32 bytes in the same run.
 *
 * usage: bench_read MODEL [REPS]   (default best of 3)
 * The file is read once before timing, so its pages are in the page cache:
 * this measures mapping + decoding from memory, not the disk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "lowbit.h"

int main(int argc, char **argv)
{
    if (argc < 2) return fprintf(stderr, "usage: bench_read MODEL [REPS]\n"), 2;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    lb_model *m;
    if (lb_model_open(argv[1], &m) != LB_OK) return fprintf(stderr, "%s\n", lb_last_error()), 1;
    size_t n = lb_model_tensor_count(m), largest = 0;
    uint64_t stored = 0, values = 0;
    for (size_t i = 0; i < n; i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        stored += t->n_bytes, values += t->n_elements;
        if (t->n_elements > largest) largest = (size_t)t->n_elements;
    }
    float *buf = malloc(largest * sizeof *buf), *copy = malloc(largest * sizeof *copy);
    if (!buf || !copy) return fprintf(stderr, "out of memory\n"), 1;
    memset(buf, 1, largest * sizeof *buf), memset(copy, 0, largest * sizeof *copy);
    double best = 1e30, best_copy = 1e30;
    for (int r = 0; r <= reps; r++) { /* rep 0 warms the page cache */
        double t0 = bench_now();
        for (size_t i = 0; i < n; i++)
            if (lb_tensor_to_f32(lb_model_tensor(m, i), buf) != LB_OK) return fprintf(stderr, "%s\n", lb_last_error()), 1;
        double t1 = bench_now();
        /* the same fp32 bytes, tensor by tensor, through memcpy */
        for (size_t i = 0; i < n; i++) memcpy(copy, buf, (size_t)lb_model_tensor(m, i)->n_elements * sizeof *buf);
        double t2 = bench_now();
        if (r && t1 - t0 < best) best = t1 - t0;
        if (r && t2 - t1 < best_copy) best_copy = t2 - t1;
    }
    double f32_bytes = (double)values * 4;
    printf("| %s | %zu | %.2f | %.2f | %.2f | %.2f | %.2f |\n", argv[1], n, (double)stored / 1e9, f32_bytes / 1e9,
           (double)stored / best / 1e9, f32_bytes / best / 1e9, (f32_bytes / best) / (f32_bytes / best_copy));
    free(buf), free(copy);
    lb_model_close(m);
    return 0;
}

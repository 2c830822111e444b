/* The GPU table: rows of src/plan/gpus.def, the editable data file that
 * holds each figure with its source. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/error.h"

#define GB 1e9
#define GIB 1073741824.0

static const lb_gpu table[] = {
#define GPU(id, display, mem, unit, bw_tbs, bf16, fp8, fp4, int8) \
    {id, display, (mem) * (unit), (bw_tbs) * 1e12, (bf16) * 1e12, (fp8) * 1e12, (fp4) * 1e12, (int8) * 1e12},
#include "plan/gpus.def"
#undef GPU
};

#define N_GPUS (sizeof table / sizeof table[0])

size_t lb_gpu_count(void) { return N_GPUS; }

const lb_gpu *lb_gpu_at(size_t i) { return i < N_GPUS ? &table[i] : NULL; }

lb_status lb_gpu_find(const char *name, lb_gpu *out)
{
    if (!name || !out) return lb__fail(LB_ERR_ARG, "lb_gpu_find: NULL argument");
    for (size_t i = 0; i < N_GPUS; i++)
        if (strcasecmp(name, table[i].name) == 0) {
            *out = table[i];
            return LB_OK;
        }
    char list[1024] = "";
    for (size_t i = 0; i < N_GPUS; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, table[i].name, sizeof list - strlen(list) - 1);
    }
    return lb__fail(LB_ERR_ARG, "unknown GPU '%s' (known: %s; or give --gpu-mem, --gpu-bw and --gpu-tflops)", name, list);
}

/* The library's internals that the Python oracle tests call (the GGUF and
 * safetensors readers and writers against the reference packages, the
 * llama2.c vocabulary reader), by name. liblowbit.so exports only the
 * LB_API functions, so these tests load build/tests/liblowbit_internal.so
 * instead: the whole static library (its public API exported as usual)
 * plus this table (tests/internal_lib.py turns a name into a ctypes
 * function). Add a row when a Python test needs another internal. */
#include <stddef.h>
#include <string.h>

#include "algo/awq.h"
#include "algo/calib_pass.h"
#include "algo/fold.h"
#include "algo/gptq.h"
#include "algo/gptq_grid.h"
#include "algo/gptq_grid_ggml.h"
#include "algo/gptq_layer.h"
#include "algo/smooth_error.h"
#include "algo/smoothquant.h"
#include "export/exporter.h"
#include "export/modelopt.h"
#include "io/ggml_quants.h"
#include "io/ggml_quants_k.h"
#include "io/ggml_rows.h"
#include "io/gguf.h"
#include "io/llama2c.h"
#include "io/safetensors.h"
#include "lowbit.h"
#include "model/ggml_act.h"
#include "model/runner_internal.h"
#include "weights/qmodel_internal.h"

typedef void (*any_fn)(void);

/* The ModelOpt exporter's table, for the tests that drive it directly
 * (tests/interop/test_modelopt_export.py). */
static const lb__exporter *lb__mo_exporter_table(void);
static const lb__exporter *lb__mo_exporter_table(void) { return &lb__exporter_modelopt; }

/* The calibration pass's structs as C lays them out, so that the ctypes
 * mirrors (tests/model/test_calib_pass.py) can be checked field by field:
 * sizes of lb__site_stats, lb__layer_stats, lb__calib_pass_options, then
 * the offsets of their last fields. */
static void lb__calib_struct_layout(size_t out[6]);
static void lb__calib_struct_layout(size_t out[6])
{
    out[0] = sizeof(lb__site_stats), out[1] = sizeof(lb__layer_stats), out[2] = sizeof(lb__calib_pass_options);
    out[3] = offsetof(lb__site_stats, n_weights), out[4] = offsetof(lb__layer_stats, current);
    out[5] = offsetof(lb__calib_pass_options, progress_ctx);
}

#define ROW(f) {#f, (any_fn)f}
static const struct {
    const char *name;
    any_fn fn;
} internals[] = {
    ROW(lb__gguf_add_tensor), ROW(lb__gguf_arr_f64),    ROW(lb__gguf_arr_i64),     ROW(lb__gguf_arr_str),
    ROW(lb__gguf_close),      ROW(lb__gguf_copy_kv),    ROW(lb__gguf_find),        ROW(lb__gguf_find_tensor),
    ROW(lb__gguf_get_f64),    ROW(lb__gguf_get_str),    ROW(lb__gguf_get_u64),     ROW(lb__gguf_open),
    ROW(lb__gguf_parse),      ROW(lb__gguf_set_arr),    ROW(lb__gguf_set_arr_str), ROW(lb__gguf_set_scalar),
    ROW(lb__gguf_set_str),    ROW(lb__gguf_set_u32),    ROW(lb__gguf_write),       ROW(lb__gguf_writer_free),
    ROW(lb__gguf_writer_new), ROW(lb__l2c_vocab_free),  ROW(lb__l2c_vocab_parse),  ROW(lb__st_close),
    ROW(lb__st_find),         ROW(lb__st_open),         ROW(lb__st_parse),         ROW(lb__st_write),
    ROW(lb__jsonw_new),       ROW(lb__jsonw_free),      ROW(lb__jsonw_text),       ROW(lb__mo_classify),
    ROW(lb__mo_emit_weight),  ROW(lb__mo_exclude_json),   ROW(lb__mo_exporter_table),    ROW(lb__jsonw_status),
    ROW(lb__ggml_quantize_rows),
    ROW(lb__ggml_quantize_row_q2_k), ROW(lb__ggml_quantize_row_q3_k), ROW(lb__ggml_quantize_row_q4_k),
    ROW(lb__ggml_quantize_row_q5_k), ROW(lb__ggml_quantize_row_q6_k), ROW(lb__ggml_quantize_row_q4_0_imatrix),
    ROW(lb__ggml_quantize_row_q4_1_imatrix), ROW(lb__ggml_quantize_row_q5_0_imatrix),
    ROW(lb__ggml_quantize_row_q5_1_imatrix), ROW(lb__ggml_act_round), ROW(lb__ggml_act_type),
    ROW(lb__calib_pass), ROW(lb__calib_windows), ROW(lb__calib_sample_positions), ROW(lb__calib_struct_layout),
    /* the layerwise runner the calibration pass builds (model/runner_internal.h) */
    ROW(lb__runner_build_layerwise), ROW(lb__runner_reload_layer_as), ROW(lb__runner_unload_layer),
    ROW(lb__runner_unload_ends), ROW(lb__runner_layer), ROW(lb__runner_embed), ROW(lb__runner_reload_weights),
    ROW(lb__smoothquant_scales), ROW(lb__smoothquant_layer), ROW(lb__fold_input_scale), ROW(lb__smooth_group_init),
    ROW(lb__smooth_group_error), ROW(lb__smooth_group_free),
    /* AWQ (algo/awq.h) and the fake quantizer it measures through (weights/qmodel_internal.h) */
    ROW(lb__awq_search_scale), ROW(lb__awq_search_scale_ex), ROW(lb__awq_search_clip), ROW(lb__awq_layer),
    ROW(lb__qmodel_fake_quantize), ROW(lb__qmodel_fakeq), ROW(lb__fake_quantize), ROW(lb__qmodel_imatrix),
    /* GPTQ's solver driven by the oracle's IntSym grid (algo/gptq.h) */
    ROW(lb__gptq_int_sym_test),
    /* GPTQ with the grid of an lb_qspec (algo/gptq_grid.h), and the group quantizer it uses */
    ROW(lb__gptq_spec_test), ROW(lb__quantize_ts), ROW(lb__quantize_ex),
    /* GPTQ onto the ggml block grids (algo/gptq_grid_ggml.h) */
    ROW(lb__gptq_ggml_test), ROW(lb__ggml_nvfp4_scale), ROW(lb__qmodel_set_ggml_bytes),
    /* GPTQ as a method: the calibration pass's layer callback (algo/gptq_layer.h) */
    ROW(lb__gptq_layer),
};

/* The internal function called `name`, or NULL. */
LB_API any_fn lb_test_internal(const char *name);
LB_API any_fn lb_test_internal(const char *name)
{
    for (size_t i = 0; name && i < sizeof internals / sizeof internals[0]; i++)
        if (strcmp(internals[i].name, name) == 0) return internals[i].fn;
    return NULL;
}

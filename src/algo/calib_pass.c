/* STUB, replaced by the calibration pass (calib_pass.h). */
#include "algo/calib_pass.h"
#include "util/error.h"

lb_status lb__calib_pass(lb_qmodel *q, const int32_t *windows, size_t n_windows, size_t window,
                         const lb__calib_pass_options *o, lb__calib_layer_fn fn, void *ctx)
{
    (void)q, (void)windows, (void)n_windows, (void)window, (void)o, (void)fn, (void)ctx;
    return lb__fail(LB_ERR_UNSUPPORTED, "the calibration pass is not built yet");
}

lb_status lb__calib_windows(const int32_t *tokens, size_t n, size_t seqs, size_t len, int32_t bos, int32_t **out,
                            size_t *n_out)
{
    (void)tokens, (void)n, (void)seqs, (void)len, (void)bos, (void)out, (void)n_out;
    return lb__fail(LB_ERR_UNSUPPORTED, "calibration windows are not built yet");
}

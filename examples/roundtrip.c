/* The library API in one page: round-trip an array through fp8_e4m3 and
 * report the error. Build: cc roundtrip.c $(pkg-config --cflags --libs lowbit) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <lowbit.h>

int main(void)
{
    enum { N = 1000 };
    float x[N], back[N];
    for (int i = 0; i < N; i++) x[i] = sinf((float)i) * 10.0f;

    lb_format fmt;
    if (lb_format_by_name("fp8_e4m3", &fmt) != LB_OK) return fprintf(stderr, "%s\n", lb_last_error()), 1;
    const lb_format_info *info = lb_format_get(fmt);
    uint8_t *codes = malloc(lb_format_bytes(fmt, N));
    if (!codes) return 1;

    /* saturate: values beyond +-448 clamp; threads = 0: one per CPU */
    if (lb_encode_f32(fmt, LB_SATURATE, x, N, codes, 0) != LB_OK ||
        lb_decode_f32(fmt, codes, N, back, 0) != LB_OK)
        return fprintf(stderr, "%s\n", lb_last_error()), 1;

    double err = 0, sig = 0;
    for (int i = 0; i < N; i++) err += (back[i] - x[i]) * (back[i] - x[i]), sig += x[i] * x[i];
    printf("%s (max %g): %d values, %zu bytes, SQNR %.1f dB\n", info->name, info->max_finite, N,
           lb_format_bytes(fmt, N), 10 * log10(sig / err));
    free(codes);
    return 0;
}

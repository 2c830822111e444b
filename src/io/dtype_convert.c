/* Placeholder until the conversions land: every call is refused. */
#include "util/error.h"

lb_status lb_dtype_to_f32(lb_dtype t, const void *src, size_t n, float *dst)
{
    (void)src, (void)n, (void)dst;
    return lb__fail(LB_ERR_UNSUPPORTED, "dtype %d: conversion not built yet", (int)t);
}

lb_status lb_dtype_from_f32(lb_dtype t, const float *src, size_t n, void *dst)
{
    (void)src, (void)n, (void)dst;
    return lb__fail(LB_ERR_UNSUPPORTED, "dtype %d: conversion not built yet", (int)t);
}

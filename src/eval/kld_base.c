/* The LBKLD001 base-logits file (kld_base.h): header, and one position
 * packed and unpacked. */
#include "eval/kld_base.h"

#include <math.h>
#include <string.h>

#include "util/checked.h"
#include "util/error.h"

#define KLD_MAGIC "LBKLD001"

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

void lb__kld_base_header(uint8_t out[LB__KLD_HEADER_BYTES], uint32_t vocab, uint32_t ctx, uint64_t chunks,
                         uint64_t hash)
{
    memcpy(out, KLD_MAGIC, 8), put32(out + 8, vocab), put32(out + 12, ctx), put64(out + 16, chunks), put64(out + 24, hash);
}

lb_status lb__kld_base_check(const uint8_t *data, size_t size, const char *path, uint32_t vocab, uint32_t ctx,
                             uint64_t chunks, uint64_t hash)
{
    if (size < LB__KLD_HEADER_BYTES || memcmp(data, KLD_MAGIC, 8) != 0)
        return lb__fail(LB_ERR_PARSE, "%s: not a lowbit base-logits file", path);
    if (get32(data + 8) != vocab || get32(data + 12) != ctx || get64(data + 16) != chunks)
        return lb__fail(LB_ERR_ARG, "%s was saved for vocab %u, ctx %u, %llu windows; this run has vocab %u, ctx %u, "
                        "%llu windows", path, get32(data + 8), get32(data + 12), (unsigned long long)get64(data + 16),
                        vocab, ctx, (unsigned long long)chunks);
    if (get64(data + 24) != hash) return lb__fail(LB_ERR_ARG, "%s was saved for other text (its token ids differ)", path);
    /* the run's own figures, small enough (its windows fit in memory) that
     * this product cannot overflow: a header cannot make it */
    uint64_t per_chunk = ctx - 1 - ctx / 2;
    uint64_t want = LB__KLD_HEADER_BYTES + chunks * per_chunk * lb__kld_position_bytes(vocab);
    if ((uint64_t)size != want)
        return lb__fail(LB_ERR_PARSE, "%s is %zu bytes; its header says %llu", path, size, (unsigned long long)want);
    return LB_OK;
}

/* 16-bit steps over the range of the finite values; a probability of
 * exactly 0 (-inf) is stored as the bottom of the range. */
void lb__kld_base_pack(const double *lp, size_t vocab, uint8_t *out)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < vocab; i++)
        if (isfinite(lp[i])) {
            if (lp[i] < lo) lo = lp[i];
            if (lp[i] > hi) hi = lp[i];
        }
    float flo = (float)lo, step = (float)((hi - lo) / 65535.0);
    if (!(step > 0) || !isfinite(step)) step = 1;
    memcpy(out, &flo, 4), memcpy(out + 4, &step, 4);
    for (size_t i = 0; i < vocab; i++) {
        double q = isfinite(lp[i]) ? floor((lp[i] - flo) / step + 0.5) : 0;
        uint16_t c = (uint16_t)(q < 0 ? 0 : q > 65535 ? 65535 : q);
        out[8 + 2 * i] = (uint8_t)c, out[9 + 2 * i] = (uint8_t)(c >> 8);
    }
}

static uint32_t code_at(const uint8_t *in, size_t i) { return (uint32_t)in[8 + 2 * i] | (uint32_t)in[9 + 2 * i] << 8; }

lb_status lb__kld_base_unpack(const uint8_t *in, size_t vocab, double *lp, const char *path, uint64_t position)
{
    float lo, step;
    memcpy(&lo, in, 4), memcpy(&step, in + 4, 4);
    if (!isfinite(lo) || !(step > 0) || !isfinite(step))
        return lb__fail(LB_ERR_PARSE, "%s: scored position %llu: its range (lo %g, step %g) is not valid (finite lo, "
                        "finite step > 0)", path, (unsigned long long)position, lo, step);
    uint32_t top = 0;
    for (size_t i = 0; i < vocab; i++)
        if (code_at(in, i) > top) top = code_at(in, i);
    /* the most likely token's log-probability lies in [-log(vocab), 0];
     * packing moves it by at most half a step plus float rounding of lo
     * and step (relative 6e-8 each, over at most 65535 steps) */
    double mx = (double)lo + (double)top * step, tol = step + 1e-6 * (1 + fabs((double)lo));
    if (!(mx <= tol) || !(mx >= -log((double)vocab) - tol))
        return lb__fail(LB_ERR_PARSE, "%s: scored position %llu: its largest log-probability is %g, outside "
                        "[-log(vocab) = %g, 0]: not a distribution", path, (unsigned long long)position, mx,
                        -log((double)vocab));
    double sum = 0;
    for (size_t i = 0; i < vocab; i++) {
        lp[i] = (double)lo + (double)code_at(in, i) * step;
        sum += exp(lp[i] - mx); /* <= 1 each, one of them 1: 1 <= sum <= vocab */
    }
    double fix = mx + log(sum); /* renormalize what the rounding moved */
    for (size_t i = 0; i < vocab; i++) lp[i] -= fix;
    return LB_OK;
}

uint64_t lb_kld_base_bytes(uint32_t vocab, uint32_t ctx, uint64_t chunks)
{
    uint64_t scored, bytes, total;
    if (ctx < 4 || !lb__mul_u64_checked(chunks, ctx - 1 - ctx / 2, &scored) ||
        !lb__mul_u64_checked(scored, lb__kld_position_bytes(vocab), &bytes) ||
        !lb__add_u64_checked(bytes, LB__KLD_HEADER_BYTES, &total))
        return UINT64_MAX;
    return total;
}

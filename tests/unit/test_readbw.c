/* The read-bandwidth loop (kernel/readbw.h): the AVX-512 path gives the
 * scalar reference's sum exactly, for every length and misalignment, and
 * the sum is the one computed here word by word. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernel/readbw.h"

static uint64_t reference(const unsigned char *p, size_t bytes)
{
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t w = 0;
        for (int b = 7; b >= 0; b--) w = w << 8 | p[i + (size_t)b]; /* little-endian word */
        s += w;
    }
    return s;
}

int main(void)
{
    enum { N = 4096 + 64 };
    unsigned char *buf = malloc(N);
    CHECK(buf != NULL, "out of memory");
    if (!buf) return 1;
    uint64_t x = 12345;
    for (size_t i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)(x >> 56);
    }
    int avx512 = lb_isa_detected() == LB_ISA_AVX512; /* NEON's value is above it, but no x86 level */
    int avx2 = avx512 || lb_isa_detected() == LB_ISA_AVX2;
    /* lengths around the 256-byte vector step and the 8-byte word, at every offset in a cache line */
    for (size_t off = 0; off < 64; off += 7)
        for (size_t len = 0; len + off <= N; len += len < 600 ? 1 : 251) {
            uint64_t want = reference(buf + off, len);
            CHECK(lb__read_sum_scalar(buf + off, len) == want, "scalar, offset %zu, %zu bytes", off, len);
            if (avx512) CHECK(lb__read_sum_avx512(buf + off, len) == want, "avx512, offset %zu, %zu bytes", off, len);
            if (avx2) CHECK(lb__read_sum_avx2(buf + off, len) == want, "avx2, offset %zu, %zu bytes", off, len);
            CHECK(lb__read_sum(buf + off, len, lb_isa_active()) == want, "dispatch, offset %zu, %zu bytes", off, len);
        }
    /* all-ones bytes: a checkable total (what lowbit bench verifies) */
    memset(buf, 1, N);
    CHECK(lb__read_sum(buf, 4096, LB_ISA_AVX512) == 512 * 0x0101010101010101ull, "ones");
    CHECK(lb__read_sum(buf, 4096, LB_ISA_AVX2) == 512 * 0x0101010101010101ull, "ones, avx2");
    CHECK(strlen(lb__read_sum_method(LB_ISA_SCALAR)) > 0, "method");
    free(buf);
    return check_summary();
}

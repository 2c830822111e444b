/* Code point classes for the GPT-2 pre-tokenizer: UTF-8 decoding that
 * never fails (an invalid byte stands alone) and \p{L} / \p{N} / \s. */
#include "model/tokenizer_internal.h"
#include "model/unicode_tables.h"

int32_t lb__utf8_decode(const unsigned char *p, const unsigned char *end, int *len)
{
    unsigned c = p[0];
    *len = 1;
    if (c < 0x80) return (int32_t)c;
    int n;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07, min = 0x10000;
    else return -1; /* a continuation byte, C0/C1 (always overlong) or F5..FF */
    if (end - p < n) return -1;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    *len = n;
    return (int32_t)cp;
}

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* Unicode's White_Space property: what Oniguruma's \s matches in UTF-8
 * (tab..CR, space, NEL, and the Zs/Zl/Zp separators). It is not Python's
 * str.isspace, which adds U+001C..U+001F. */
static int is_space(uint32_t cp)
{
    switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

lb__uclass lb__uclass_of(int32_t cp)
{
    if (cp < 0) return LB__UC_OTHER;
    uint32_t c = (uint32_t)cp;
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return LB__UC_LETTER;
        if (c >= '0' && c <= '9') return LB__UC_NUMBER;
        return is_space(c) ? LB__UC_SPACE : LB__UC_OTHER;
    }
    if (is_space(c)) return LB__UC_SPACE;
    if (in_ranges(lb__uni_letter, sizeof lb__uni_letter / sizeof lb__uni_letter[0], c)) return LB__UC_LETTER;
    if (in_ranges(lb__uni_number, sizeof lb__uni_number / sizeof lb__uni_number[0], c)) return LB__UC_NUMBER;
    return LB__UC_OTHER;
}

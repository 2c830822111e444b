/* Reading a parsed JSON tree: member lookup (through the hash index that
 * json_parse.c builds for large objects) and exact integers from a
 * number's source text. */
#include <stdlib.h>
#include <string.h>

#include "io/json_internal.h"
#include "util/file.h"

/* ===== SipHash-1-3 (Aumasson and Bernstein's keyed hash) ===== */

static uint64_t rotl(uint64_t x, int b) { return x << b | x >> (64 - b); }

#define SIP_ROUND(v0, v1, v2, v3)                                                                         \
    do {                                                                                                 \
        v0 += v1, v1 = rotl(v1, 13), v1 ^= v0, v0 = rotl(v0, 32);                                        \
        v2 += v3, v3 = rotl(v3, 16), v3 ^= v2;                                                           \
        v0 += v3, v3 = rotl(v3, 21), v3 ^= v0;                                                           \
        v2 += v1, v1 = rotl(v1, 17), v1 ^= v2, v2 = rotl(v2, 32);                                        \
    } while (0)

uint64_t lb__json_hash(uint64_t k0, uint64_t k1, const char *key, size_t len)
{
    uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
    const unsigned char *s = (const unsigned char *)key;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t m = 0;
        for (int b = 0; b < 8; b++) m |= (uint64_t)s[i + b] << (8 * b);
        v3 ^= m;
        SIP_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t last = (uint64_t)len << 56;
    for (int b = 0; i + (size_t)b < len; b++) last |= (uint64_t)s[i + b] << (8 * b);
    v3 ^= last;
    SIP_ROUND(v0, v1, v2, v3);
    v0 ^= last;
    v2 ^= 0xff;
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ===== Members ===== */

const lb__json *lb__json_get(const lb__json *obj, const char *key)
{
    if (!obj || !key || obj->type != LB_JSON_OBJECT || obj->len == 0) return NULL;
    size_t len = strlen(key);
    if (obj->len < LB__JSON_INDEX_MIN) {
        for (size_t i = 0; i < obj->len; i++)
            if (obj->key_lens[i] == len && memcmp(obj->keys[i], key, len) == 0) return &obj->items[i];
        return NULL;
    }
    const lb__json_index *ix = lb__json_index_of(obj);
    for (size_t h = (size_t)lb__json_hash(ix->k0, ix->k1, key, len) & ix->mask; ix->slots[h]; h = (h + 1) & ix->mask) {
        size_t i = ix->slots[h] - 1;
        if (obj->key_lens[i] == len && memcmp(obj->keys[i], key, len) == 0) return &obj->items[i];
    }
    return NULL;
}

const char *lb__json_str(const lb__json *obj, const char *key)
{
    const lb__json *v = lb__json_get(obj, key);
    return v && v->type == LB_JSON_STRING ? v->str : NULL;
}

/* ===== Exact integers ===== */

/* The number's magnitude when it is an integer of at most 64 bits. The
 * text is digits D (integer part, then fraction) times 10^E, with E the
 * exponent less the fraction's length; dropping D's trailing zeros into E,
 * the value is an integer exactly when D is zero or E >= 0. */
static int integer_magnitude(const lb__json *v, int *neg, uint64_t *mag)
{
    if (!v || v->type != LB_JSON_NUMBER || !v->str || v->num_len == 0) return 0;
    const char *s = v->str;
    size_t n = v->num_len, i = 0;
    *neg = s[0] == '-';
    i = (size_t)*neg;
    size_t int_at = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    size_t int_len = i - int_at, frac_at = i, frac_len = 0;
    if (i < n && s[i] == '.') {
        frac_at = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        frac_len = i - frac_at;
    }
    int64_t exp = 0; /* saturates far beyond any meaningful exponent */
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int exp_neg = i < n && s[i] == '-';
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            if (exp < 1000000000) exp = exp * 10 + (s[i] - '0');
        if (exp_neg) exp = -exp;
    }
    if (i != n || int_len == 0) return 0; /* not from the parser */
#define DIGIT(k) (s[(k) < int_len ? int_at + (k) : frac_at + (k) - int_len] - '0')
    size_t first = 0, end = int_len + frac_len;
    while (first < end && DIGIT(first) == 0) first++;
    *mag = 0;
    if (first == end) return 1; /* zero, whatever the exponent */
    int64_t e = exp - (int64_t)frac_len;
    while (DIGIT(end - 1) == 0) end--, e++;
    if (e < 0 || (int64_t)(end - first) + e > 20) return 0; /* a fraction remains, or over 20 digits */
    uint64_t m = 0;
    for (size_t k = first; k < end; k++) {
        uint64_t d = (uint64_t)DIGIT(k);
        if (m > (UINT64_MAX - d) / 10) return 0;
        m = m * 10 + d;
    }
#undef DIGIT
    for (; e > 0; e--) {
        if (m > UINT64_MAX / 10) return 0;
        m *= 10;
    }
    *mag = m;
    return 1;
}

int lb__json_u64(const lb__json *v, uint64_t *out)
{
    int neg;
    uint64_t m;
    if (!out || !integer_magnitude(v, &neg, &m) || (neg && m != 0)) return 0;
    *out = m;
    return 1;
}

int lb__json_i64(const lb__json *v, int64_t *out)
{
    int neg;
    uint64_t m;
    if (!out || !integer_magnitude(v, &neg, &m)) return 0;
    if (neg) {
        if (m > (uint64_t)INT64_MAX + 1) return 0;
        *out = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
    } else {
        if (m > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)m;
    }
    return 1;
}

lb_status lb__json_read_file(const char *path, size_t max_bytes, lb__json **out)
{
    char *text;
    size_t len;
    *out = NULL;
    lb_status st = lb__read_file(path, max_bytes, &text, &len);
    if (st != LB_OK) return st;
    st = lb__json_parse(text, len, path, out);
    free(text);
    return st;
}

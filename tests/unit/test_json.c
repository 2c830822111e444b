/* C unit tests for the strict JSON reader (src/io/json.h): every rule of
 * RFC 8259 it enforces, each reject case checked for its status, its
 * reason and its position; escapes, surrogates and \u0000; exact integers;
 * nesting at the limit; large generated documents; and text that is not
 * NUL-terminated, placed at the very end of its allocation so that
 * AddressSanitizer catches any read past len. */
#undef NDEBUG
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "io/json.h"
#include "lowbit.h"
#include "util/error.h" /* LB__PRINTF */

/* A copy of len bytes at the very end of a malloc'd block, no NUL after. */
static char *tail_copy(const char *text, size_t len, char **block)
{
    *block = malloc(len ? len : 1);
    char *t = *block + (len ? 0 : 1);
    memcpy(t, text, len);
    return t;
}

static lb_status parse_n(const char *text, size_t len, lb__json **out)
{
    char *block;
    char *t = tail_copy(text, len, &block);
    lb_status st = lb__json_parse(t, len, "test.json", out);
    free(block);
    return st;
}

static lb__json *accept_n(const char *text, size_t len, int line)
{
    lb__json *j = NULL;
    lb_status st = parse_n(text, len, &j);
    CHECK(st == LB_OK && j, "line %d: '%.*s' refused: %s", line, (int)len, text, lb_last_error());
    return j;
}
#define ACCEPT(text) accept_n(text, strlen(text), __LINE__)
#define ACCEPT_N(text) accept_n(text, sizeof(text) - 1, __LINE__)

static int n_rejects;

/* Refused with LB_ERR_PARSE, the reason in the message, at this position. */
static void reject_n(const char *text, size_t len, const char *reason, int line, int col, int byte, int src_line)
{
    lb__json *j = (lb__json *)1;
    lb_status st = parse_n(text, len, &j);
    const char *msg = lb_last_error();
    char where[96];
    snprintf(where, sizeof where, "test.json: line %d, column %d (byte %d): ", line, col, byte);
    CHECK(st == LB_ERR_PARSE && j == NULL, "line %d: '%.*s' gave %s (%s)", src_line, (int)len, text, lb_status_name(st),
          msg);
    CHECK(strncmp(msg, where, strlen(where)) == 0, "line %d: want position '%s' in: %s", src_line, where, msg);
    CHECK(strstr(msg, reason) != NULL, "line %d: want reason '%s' in: %s", src_line, reason, msg);
    n_rejects++;
}
#define REJECT(text, reason, line, col, byte) reject_n(text, strlen(text), reason, line, col, byte, __LINE__)
#define REJECT_N(text, reason, line, col, byte) reject_n(text, sizeof(text) - 1, reason, line, col, byte, __LINE__)

/* ===== Rejects ===== */

static void test_reject_structure(void)
{
    REJECT("", "unexpected end of input", 1, 1, 0);
    REJECT("   ", "unexpected end of input", 1, 4, 3);
    REJECT("[", "unexpected end of input, expected a value", 1, 2, 1);
    REJECT("[1", "expected ',' or ']' after an array element, found end of input", 1, 3, 2);
    REJECT("[1 2]", "expected ',' or ']' after an array element, found '2'", 1, 4, 3);
    REJECT("[1,2,]", "trailing comma before ']'", 1, 6, 5);
    REJECT("[1,2 , ]", "trailing comma before ']'", 1, 8, 7);
    REJECT("[,1]", "expected a value, found ','", 1, 2, 1);
    REJECT("[1,,2]", "expected a value, found ','", 1, 4, 3);
    REJECT("[1}", "expected ',' or ']' after an array element, found '}'", 1, 3, 2);
    REJECT("{", "expected a string key or '}', found end of input", 1, 2, 1);
    REJECT("{1:2}", "expected a string key or '}', found '1'", 1, 2, 1);
    REJECT("{,}", "expected a string key or '}', found ','", 1, 2, 1);
    REJECT("{\"a\"", "expected ':' after an object key, found end of input", 1, 5, 4);
    REJECT("{\"a\" 1}", "expected ':' after an object key, found '1'", 1, 6, 5);
    REJECT("{\"a\"=1}", "expected ':' after an object key, found '='", 1, 5, 4);
    REJECT("{\"a\":", "unexpected end of input, expected a value", 1, 6, 5);
    REJECT("{\"a\":}", "expected a value, found '}'", 1, 6, 5);
    REJECT("{\"a\":1", "expected ',' or '}' after an object member, found end of input", 1, 7, 6);
    REJECT("{\"a\":1 \"b\":2}", "expected ',' or '}' after an object member, found '\"'", 1, 8, 7);
    REJECT("{\"a\":1]", "expected ',' or '}' after an object member, found ']'", 1, 7, 6);
    REJECT("{\"a\":1,}", "trailing comma before '}'", 1, 8, 7);
    REJECT("{\"a\":1,,}", "expected a string key after ',', found ','", 1, 8, 7);
    REJECT("{a:1}", "expected a string key or '}', found 'a'", 1, 2, 1);
    REJECT("[1]]", "unexpected ']' after the JSON value", 1, 4, 3);
    REJECT("[1]x", "unexpected 'x' after the JSON value", 1, 4, 3);
    REJECT("1 2", "unexpected '2' after the JSON value", 1, 3, 2);
    REJECT("{}{}", "unexpected '{' after the JSON value", 1, 3, 2);
    REJECT("\"a\"\"b\"", "after the JSON value", 1, 4, 3);
    REJECT_N("[1]\0", "unexpected byte 0x00 after the JSON value", 1, 4, 3);
    REJECT("]", "expected a value, found ']'", 1, 1, 0);
}

static void test_reject_non_json(void)
{
    REJECT("// c\n1", "comments are not allowed", 1, 1, 0);
    REJECT("[1/*x*/]", "comments are not allowed", 1, 3, 2);
    REJECT("1 // c", "comments are not allowed", 1, 3, 2);
    REJECT("{\"a\":1 /* c */}", "comments are not allowed", 1, 8, 7);
    REJECT("# c\n1", "expected a value, found '#'", 1, 1, 0);
    REJECT("{'a':1}", "single quotes are not allowed", 1, 2, 1);
    REJECT("['a']", "single quotes are not allowed", 1, 2, 1);
    REJECT("NaN", "NaN and Infinity are not JSON numbers", 1, 1, 0);
    REJECT("[Infinity]", "NaN and Infinity are not JSON numbers", 1, 2, 1);
    REJECT("-Infinity", "NaN and Infinity are not JSON numbers", 1, 1, 0);
    REJECT("[nan]", "invalid literal 'nan'", 1, 2, 1);
    REJECT("tru", "invalid literal 'tru'", 1, 1, 0);
    REJECT("nul", "invalid literal 'nul'", 1, 1, 0);
    REJECT("[fals]", "invalid literal 'fals'", 1, 2, 1);
    REJECT("True", "invalid literal 'True'", 1, 1, 0);
    REJECT("NULL", "invalid literal 'NULL'", 1, 1, 0);
    REJECT("truex", "invalid literal 'truex'", 1, 1, 0);
    REJECT("undefined", "invalid literal 'undefined'", 1, 1, 0);
    REJECT("\xEF\xBB\xBF{}", "byte order mark", 1, 1, 0);
    REJECT("\xC3\xA9", "expected a value, found byte 0xC3", 1, 1, 0);
    REJECT("\xC2\xA0" "1", "expected a value, found byte 0xC2", 1, 1, 0);
    REJECT("\v1", "expected a value, found byte 0x0B", 1, 1, 0);
    REJECT("\f1", "expected a value, found byte 0x0C", 1, 1, 0);
    REJECT("[1,\f2]", "expected a value, found byte 0x0C", 1, 4, 3);
}

static void test_reject_numbers(void)
{
    REJECT("01", "leading zeros are not allowed", 1, 1, 0);
    REJECT("-01", "leading zeros are not allowed", 1, 1, 0);
    REJECT("[00]", "leading zeros are not allowed", 1, 2, 1);
    REJECT("[1,007]", "leading zeros are not allowed", 1, 4, 3);
    REJECT("+1", "a leading '+' is not allowed", 1, 1, 0);
    REJECT("[+0.5]", "a leading '+' is not allowed", 1, 2, 1);
    REJECT(".5", "a digit must come before the decimal point", 1, 1, 0);
    REJECT("-.5", "expected a digit after '-', found '.'", 1, 2, 1);
    REJECT("1.", "expected a digit after the decimal point, found end of input", 1, 3, 2);
    REJECT("[1.]", "expected a digit after the decimal point, found ']'", 1, 4, 3);
    REJECT("1.e5", "expected a digit after the decimal point, found 'e'", 1, 3, 2);
    REJECT("1e", "expected a digit in the exponent, found end of input", 1, 3, 2);
    REJECT("1e+", "expected a digit in the exponent", 1, 4, 3);
    REJECT("1E-x", "expected a digit in the exponent, found 'x'", 1, 4, 3);
    REJECT("-", "expected a digit after '-', found end of input", 1, 2, 1);
    REJECT("--1", "expected a digit after '-', found '-'", 1, 2, 1);
    REJECT("- 1", "expected a digit after '-', found byte 0x20", 1, 2, 1);
    REJECT("0x10", "unexpected 'x' after the JSON value", 1, 2, 1);
    REJECT("1.5.2", "unexpected '.' after the JSON value", 1, 4, 3);
    REJECT("1e5.5", "unexpected '.' after the JSON value", 1, 4, 3);
    REJECT("[1,2e]", "expected a digit in the exponent, found ']'", 1, 6, 5);
}

static void test_reject_strings(void)
{
    REJECT("\"abc", "unterminated string", 1, 1, 0);
    REJECT("[\"abc]", "unterminated string", 1, 2, 1);
    REJECT("\"a\\", "unterminated string", 1, 1, 0);
    REJECT("\"a\\\"", "unterminated string", 1, 1, 0);
    REJECT("\"a\x01" "b\"", "control character 0x01 in a string", 1, 3, 2);
    REJECT("\"a\nb\"", "control character 0x0A in a string", 1, 3, 2);
    REJECT("\"\t\"", "control character 0x09 in a string", 1, 2, 1);
    REJECT("\"\x1F\"", "control character 0x1F in a string", 1, 2, 1);
    REJECT_N("\"a\0\"", "control character 0x00 in a string", 1, 3, 2);
    REJECT("\"\\x41\"", "invalid escape '\\x'", 1, 2, 1);
    REJECT("\"\\a\"", "invalid escape '\\a'", 1, 2, 1);
    REJECT("\"\\U0041\"", "invalid escape '\\U'", 1, 2, 1);
    REJECT("\"\\'\"", "invalid escape '\\''", 1, 2, 1);
    REJECT("\"\\0\"", "invalid escape '\\0'", 1, 2, 1);
    REJECT("\"\\\x01\"", "invalid escape: '\\' followed by byte 0x01", 1, 2, 1);
    REJECT("\"\\u12\"", "\\u must be followed by 4 hex digits", 1, 2, 1);
    REJECT("\"\\u12G4\"", "\\u must be followed by 4 hex digits", 1, 2, 1);
    REJECT("\"\\u\"", "\\u must be followed by 4 hex digits", 1, 2, 1);
    REJECT("\"ab\\u00", "\\u must be followed by 4 hex digits", 1, 4, 3);
    REJECT("\"\\uD800\"", "high surrogate \\uD800 is not followed by a low surrogate", 1, 2, 1);
    REJECT("\"\\uDBFF\\u0041\"", "high surrogate \\uDBFF is not followed by a low surrogate", 1, 2, 1);
    REJECT("\"\\uD800\\uD800\"", "high surrogate", 1, 2, 1);
    REJECT("\"\\ud83dx\"", "high surrogate \\uD83D", 1, 2, 1);
    REJECT("\"\\uD83D\\n\"", "high surrogate", 1, 2, 1);
    REJECT("\"x\\uD83D\\uDE0", "high surrogate", 1, 3, 2);
    REJECT("\"\\uDC00\"", "lone low surrogate \\uDC00", 1, 2, 1);
    REJECT("\"\\uDFFF\\uD800\"", "lone low surrogate \\uDFFF", 1, 2, 1);
}

static void test_reject_utf8(void)
{
    REJECT("\"\xC0\xAF\"", "invalid UTF-8 sequence starting with byte 0xC0", 1, 2, 1);    /* overlong '/' */
    REJECT("\"\xC1\xBF\"", "invalid UTF-8 sequence starting with byte 0xC1", 1, 2, 1);    /* overlong */
    REJECT("\"\xE0\x80\xAF\"", "invalid UTF-8 sequence starting with byte 0xE0", 1, 2, 1); /* overlong, 3 bytes */
    REJECT("\"\xE0\x9F\xBF\"", "invalid UTF-8", 1, 2, 1);                                 /* overlong U+07FF */
    REJECT("\"\xF0\x80\x80\xAF\"", "invalid UTF-8", 1, 2, 1);                             /* overlong, 4 bytes */
    REJECT("\"\xF0\x8F\xBF\xBF\"", "invalid UTF-8", 1, 2, 1);                             /* overlong U+FFFF */
    REJECT("\"\xED\xA0\x80\"", "invalid UTF-8 sequence starting with byte 0xED", 1, 2, 1); /* U+D800 */
    REJECT("\"\xED\xBF\xBF\"", "invalid UTF-8", 1, 2, 1);                                 /* U+DFFF */
    REJECT("\"\xF4\x90\x80\x80\"", "invalid UTF-8 sequence starting with byte 0xF4", 1, 2, 1); /* U+110000 */
    REJECT("\"\xF5\x80\x80\x80\"", "invalid UTF-8 sequence starting with byte 0xF5", 1, 2, 1);
    REJECT("\"\xFF\"", "invalid UTF-8 sequence starting with byte 0xFF", 1, 2, 1);
    REJECT("\"\xFE\"", "invalid UTF-8", 1, 2, 1);
    REJECT("\"\x80\"", "invalid UTF-8 sequence starting with byte 0x80", 1, 2, 1); /* stray continuation */
    REJECT("\"ab\xBF\"", "invalid UTF-8", 1, 4, 3);
    REJECT("\"\xC3\"", "invalid UTF-8 sequence starting with byte 0xC3", 1, 2, 1);  /* truncated by the quote */
    REJECT("\"\xE2\x82\"", "invalid UTF-8 sequence starting with byte 0xE2", 1, 2, 1);
    REJECT("\"\xF0\x9F\x98\"", "invalid UTF-8", 1, 2, 1);
    REJECT("\"\xC3", "invalid UTF-8", 1, 2, 1);                  /* truncated by the end of input */
    REJECT("\"\xF0\x9F\x98", "invalid UTF-8", 1, 2, 1);
    REJECT("\"\xE2\x82\x41\"", "invalid UTF-8", 1, 2, 1);        /* bad continuation */
    REJECT("{\"k\xC0\":1}", "invalid UTF-8", 1, 4, 3);           /* in a key */
}

static void test_reject_duplicates_and_depth(void)
{
    REJECT("{\"a\":1,\"a\":2}", "duplicate key \"a\" in one object (first at byte 1)", 1, 8, 7);
    REJECT("{\"a\":1,\"\\u0061\":2}", "duplicate key \"a\"", 1, 8, 7); /* equal once decoded */
    REJECT("{\"x\":{\"b\":[],\"b\":{}}}", "duplicate key \"b\" in one object (first at byte 6)", 1, 14, 13);
    REJECT("{\"a\\\"b\" : 1, \"a\\\"b\":2}", "duplicate key \"a\\x22b\" in one object (first at byte 1)", 1, 14, 13);
    REJECT_N("{\"\\u0000\":1,\"\\u0000\":2}", "duplicate key \"\\x00\"", 1, 13, 12);
    /* an object large enough for the hash index */
    char big[512];
    size_t w = 0;
    w += (size_t)snprintf(big + w, sizeof big - w, "{");
    for (int i = 0; i < 30; i++) w += (size_t)snprintf(big + w, sizeof big - w, "\"key%d\":%d,", i, i);
    size_t dup_at = w;
    w += (size_t)snprintf(big + w, sizeof big - w, "\"key17\":0}");
    char want[64];
    snprintf(want, sizeof want, "duplicate key \"key17\" in one object (first at byte %d)",
             (int)(strstr(big, "\"key17\"") - big));
    reject_n(big, w, want, 1, (int)dup_at + 1, (int)dup_at, __LINE__);

    /* nesting: LB_JSON_MAX_DEPTH levels parse, one more is refused */
    char deep[2 * LB_JSON_MAX_DEPTH + 8];
    for (int d = LB_JSON_MAX_DEPTH; d <= LB_JSON_MAX_DEPTH + 1; d++) {
        memset(deep, '[', (size_t)d);
        memset(deep + d, ']', (size_t)d);
        lb__json *j = NULL;
        lb_status st = parse_n(deep, 2 * (size_t)d, &j);
        if (d == LB_JSON_MAX_DEPTH) {
            CHECK(st == LB_OK, "depth %d: %s", d, lb_last_error());
            const lb__json *v = j;
            int levels = 0;
            while (v && v->type == LB_JSON_ARRAY) levels++, v = v->len ? &v->items[0] : NULL;
            CHECK(levels == LB_JSON_MAX_DEPTH, "levels %d", levels);
            lb__json_free(j);
        } else {
            reject_n(deep, 2 * (size_t)d, "nesting too deep", 1, d, d - 1, __LINE__);
        }
    }
    /* objects count toward the same limit; a huge depth is refused without recursing */
    size_t big_depth = 1000000;
    char *objs = malloc(6 * big_depth);
    for (size_t i = 0; i < big_depth; i++) memcpy(objs + 5 * i, "{\"a\":", 5);
    reject_n(objs, 5 * big_depth, "nesting too deep", 1, 5 * LB_JSON_MAX_DEPTH + 1, 5 * LB_JSON_MAX_DEPTH, __LINE__);
    free(objs);
    char mixed[8 * LB_JSON_MAX_DEPTH];
    w = 0;
    for (int i = 0; i < LB_JSON_MAX_DEPTH; i++) w += (size_t)snprintf(mixed + w, sizeof mixed - w, i % 2 ? "[" : "{\"k\":");
    w += (size_t)snprintf(mixed + w, sizeof mixed - w, "0");
    for (int i = LB_JSON_MAX_DEPTH - 1; i >= 0; i--) mixed[w++] = i % 2 ? ']' : '}';
    lb__json *j = accept_n(mixed, w, __LINE__);
    lb__json_free(j);
}

static void test_positions(void)
{
    /* the brief's example shape: line 3, column 14 */
    const char *cfg = "{\n  \"a\": 1,\n  \"hidden_size\" 4096\n}";
    REJECT(cfg, "expected ':' after an object key, found '4'", 3, 17, 28);
    REJECT("{\n\"model_type\": \"llama\"\n\"x\": 1}", "expected ',' or '}' after an object member", 3, 1, 24);
    REJECT("[1,\r\n2 3]", "expected ',' or ']'", 2, 3, 7);
    REJECT("[\n\n\n  \"\\q\"]", "invalid escape", 4, 4, 7);
    REJECT("\n\n\"\xC3\xA9\xFF\"", "invalid UTF-8", 3, 4, 5); /* columns count bytes */
    lb__json *j = (lb__json *)1;
    CHECK(lb__json_parse("x", 1, NULL, &j) == LB_ERR_PARSE && j == NULL, "NULL what");
    CHECK(strncmp(lb_last_error(), "JSON: line 1, column 1 (byte 0): ", 33) == 0, "%s", lb_last_error());
    CHECK(lb__json_parse(NULL, 0, "empty", &j) == LB_ERR_PARSE, "NULL text, len 0");
    CHECK(strstr(lb_last_error(), "empty: line 1, column 1 (byte 0): unexpected end of input") != NULL, "%s",
          lb_last_error());
    CHECK(lb__json_parse(NULL, 3, "x", &j) == LB_ERR_ARG, "NULL text, len 3");
    CHECK(lb__json_parse("1", 1, "x", NULL) == LB_ERR_ARG, "NULL out");
    lb__json_free(NULL);
}

/* ===== Accepts ===== */

static void test_scalars(void)
{
    lb__json *j;
    j = ACCEPT("null");
    CHECK(j && j->type == LB_JSON_NULL && j->offset == 0, "null");
    lb__json_free(j);
    j = ACCEPT(" \t\r\n true \n\r\t ");
    CHECK(j && j->type == LB_JSON_TRUE && j->offset == 5, "true");
    lb__json_free(j);
    j = ACCEPT("false");
    CHECK(j && j->type == LB_JSON_FALSE, "false");
    lb__json_free(j);
    j = ACCEPT("\"\"");
    CHECK(j && j->type == LB_JSON_STRING && j->len == 0 && j->str && j->str[0] == '\0', "empty string");
    lb__json_free(j);
    j = ACCEPT("[]");
    CHECK(j && j->type == LB_JSON_ARRAY && j->len == 0, "[]");
    lb__json_free(j);
    j = ACCEPT("{ }");
    CHECK(j && j->type == LB_JSON_OBJECT && j->len == 0 && !lb__json_get(j, "a"), "{}");
    lb__json_free(j);
}

static void expect_number(const char *text, double want, int line)
{
    lb__json *j = accept_n(text, strlen(text), line);
    if (!j) return;
    CHECK(j->type == LB_JSON_NUMBER, "line %d: type", line);
    CHECK(j->num_len == strlen(text) && memcmp(j->str, text, j->num_len) == 0, "line %d: source text '%.*s'", line,
          (int)j->num_len, j->str);
    CHECK(memcmp(&j->number, &want, sizeof want) == 0 || (j->number == want && want != 0),
          "line %d: %s -> %.17g, want %.17g", line, text, j->number, want);
    lb__json_free(j);
}
#define NUMBER(text, want) expect_number(text, want, __LINE__)

static void test_numbers(void)
{
    NUMBER("0", 0.0);
    NUMBER("-0", -0.0);
    NUMBER("-0.0", -0.0);
    NUMBER("1", 1.0);
    NUMBER("-17", -17.0);
    NUMBER("1.5", 1.5);
    NUMBER("0.1", 0.1);
    NUMBER("1e3", 1000.0);
    NUMBER("1E3", 1000.0);
    NUMBER("1e+3", 1000.0);
    NUMBER("-1.25e-2", -0.0125);
    NUMBER("1e-05", 1e-05);
    NUMBER("0.02", 0.02);
    NUMBER("999999999999999", 999999999999999.0);
    NUMBER("9007199254740993", 9007199254740992.0); /* 2^53+1 rounds to even */
    NUMBER("9007199254740995", 9007199254740996.0);
    NUMBER("123456789012345678901234567890", 1.2345678901234568e29);
    NUMBER("2.2250738585072011e-308", 2.2250738585072011e-308);
    NUMBER("4.9406564584124654e-324", 4.9406564584124654e-324);
    NUMBER("1.7976931348623157e308", 1.7976931348623157e308);
    NUMBER("1e-400", 0.0);
    NUMBER("1e400", HUGE_VAL); /* too large for a double: kept as text, number is inf */
    NUMBER("-1e400", -HUGE_VAL);
    NUMBER("0.30000000000000004", 0.30000000000000004);
    lb__json *j = ACCEPT("[1,-2.5,3e2]");
    CHECK(j && j->len == 3 && j->items[1].number == -2.5 && j->items[2].number == 300 && j->items[1].offset == 3 &&
              j->items[2].offset == 8,
          "array of numbers");
    lb__json_free(j);
}

static int exact_u64(const char *text, uint64_t *u)
{
    lb__json *j = ACCEPT(text);
    int ok = j ? lb__json_u64(j, u) : -1;
    lb__json_free(j);
    return ok;
}

static int exact_i64(const char *text, int64_t *i)
{
    lb__json *j = ACCEPT(text);
    int ok = j ? lb__json_i64(j, i) : -1;
    lb__json_free(j);
    return ok;
}

static void test_integers(void)
{
    uint64_t u = 7;
    int64_t i = 7;
    CHECK(exact_u64("18446744073709551615", &u) == 1 && u == UINT64_MAX, "u64 max: %llu", (unsigned long long)u);
    CHECK(exact_u64("18446744073709551616", &u) == 0, "u64 max + 1");
    CHECK(exact_u64("99999999999999999999999", &u) == 0, "u64 far over");
    CHECK(exact_u64("9007199254740993", &u) == 1 && u == 9007199254740993ull, "2^53+1: %llu", (unsigned long long)u);
    CHECK(exact_i64("9007199254740993", &i) == 1 && i == 9007199254740993ll, "2^53+1 as i64");
    CHECK(exact_u64("0", &u) == 1 && u == 0, "0");
    CHECK(exact_u64("-0", &u) == 1 && u == 0, "-0 is 0");
    CHECK(exact_u64("-1", &u) == 0, "negative u64");
    CHECK(exact_i64("-1", &i) == 1 && i == -1, "-1");
    CHECK(exact_i64("9223372036854775807", &i) == 1 && i == INT64_MAX, "i64 max");
    CHECK(exact_i64("9223372036854775808", &i) == 0, "i64 max + 1");
    CHECK(exact_u64("9223372036854775808", &u) == 1 && u == 9223372036854775808ull, "2^63 as u64");
    CHECK(exact_i64("-9223372036854775808", &i) == 1 && i == INT64_MIN, "i64 min");
    CHECK(exact_i64("-9223372036854775809", &i) == 0, "i64 min - 1");
    CHECK(exact_i64("-18446744073709551615", &i) == 0, "-u64 max as i64");
    CHECK(exact_u64("1e3", &u) == 1 && u == 1000, "1e3");
    CHECK(exact_u64("1E+3", &u) == 1 && u == 1000, "1E+3");
    CHECK(exact_u64("1.5e1", &u) == 1 && u == 15, "1.5e1");
    CHECK(exact_u64("1.0", &u) == 1 && u == 1, "1.0");
    CHECK(exact_u64("100e-2", &u) == 1 && u == 1, "100e-2");
    CHECK(exact_u64("0.0e999", &u) == 1 && u == 0, "0.0e999");
    CHECK(exact_u64("0e-99999999999999999999", &u) == 1 && u == 0, "zero with a huge exponent");
    CHECK(exact_u64("1e19", &u) == 1 && u == 10000000000000000000ull, "1e19");
    CHECK(exact_u64("1.8446744073709551615e19", &u) == 1 && u == UINT64_MAX, "u64 max, scientific");
    CHECK(exact_u64("1e20", &u) == 0, "1e20");
    CHECK(exact_u64("1e99999999999999999999", &u) == 0, "huge exponent");
    CHECK(exact_u64("1.5", &u) == 0, "1.5");
    CHECK(exact_u64("0.5", &u) == 0, "0.5");
    CHECK(exact_u64("1e-1", &u) == 0, "1e-1");
    CHECK(exact_u64("15e-1", &u) == 0, "15e-1");
    CHECK(exact_u64("1.00000000000000000001", &u) == 0, "fraction far right");
    CHECK(exact_i64("-1.5e1", &i) == 1 && i == -15, "-1.5e1");
    CHECK(exact_i64("-9.223372036854775808e18", &i) == 1 && i == INT64_MIN, "i64 min, scientific");
    CHECK(exact_i64("12345678901234567890e-1", &i) == 1 && i == 1234567890123456789ll, "12345678901234567890e-1");
    lb__json *j = ACCEPT("[true,\"1\",null,[1],{\"a\":1}]");
    for (size_t k = 0; j && k < j->len; k++) {
        CHECK(lb__json_u64(&j->items[k], &u) == 0 && lb__json_i64(&j->items[k], &i) == 0, "non-number %zu", k);
    }
    CHECK(lb__json_u64(NULL, &u) == 0 && lb__json_i64(NULL, &i) == 0, "NULL");
    lb__json_free(j);
}

static void expect_string(const char *text, size_t text_len, const char *want, size_t want_len, int line)
{
    lb__json *j = accept_n(text, text_len, line);
    if (!j) return;
    CHECK(j->type == LB_JSON_STRING && j->len == want_len && memcmp(j->str, want, want_len) == 0 &&
              j->str[want_len] == '\0',
          "line %d: decoded %zu bytes, want %zu", line, j->len, want_len);
    lb__json_free(j);
}
#define STRING(text, want) expect_string(text, sizeof(text) - 1, want, sizeof(want) - 1, __LINE__)

static void test_strings(void)
{
    STRING("\"abc\"", "abc");
    STRING("\"\\\"\"", "\"");
    STRING("\"\\\\\"", "\\");
    STRING("\"\\/\"", "/");
    STRING("\"\\b\"", "\b");
    STRING("\"\\f\"", "\f");
    STRING("\"\\n\"", "\n");
    STRING("\"\\r\"", "\r");
    STRING("\"\\t\"", "\t");
    STRING("\"a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti\"", "a\"b\\c/d\be\ff\ng\rh\ti");
    STRING("\"\\u0041\\u0062\"", "Ab");
    STRING("\"\\u00e9\\u00E9\"", "\xC3\xA9\xC3\xA9");
    STRING("\"\\u007F\\u0080\"", "\x7F\xC2\x80");
    STRING("\"\\u07FF\\u0800\"", "\xDF\xBF\xE0\xA0\x80");
    STRING("\"\\u20AC\"", "\xE2\x82\xAC");
    STRING("\"\\uFFFF\"", "\xEF\xBF\xBF");
    STRING("\"\\uD83D\\uDE00\"", "\xF0\x9F\x98\x80");          /* surrogate pair -> U+1F600 */
    STRING("\"\\ud800\\udc00\"", "\xF0\x90\x80\x80");          /* U+10000 */
    STRING("\"\\uDBFF\\uDFFF\"", "\xF4\x8F\xBF\xBF");          /* U+10FFFF */
    STRING("\"x\\uD834\\uDD1Ey\"", "x\xF0\x9D\x84\x9Ey");      /* U+1D11E */
    STRING("\"a\\u0000b\"", "a\0b");                         /* \u0000 counts in len */
    STRING("\"\\u0000\"", "\0");
    STRING("\"\\u001f \x7f\"", "\x1F \x7F");                 /* DEL need not be escaped */
    STRING("\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"", "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"); /* raw UTF-8 */
    STRING("\"\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF\"",
           "\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF"); /* range boundaries */
    STRING("\"\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\"", "\xF0\x90\x80\x80\xF4\x8F\xBF\xBF");
    STRING("\"\\u0022\\u005C\"", "\"\\");
    STRING("\"'single' //not a comment\"", "'single' //not a comment");
}

static void test_objects(void)
{
    lb__json *j = ACCEPT("{\"b\":1, \"a\" : \"x\", \"c\":[true,null],\"d\":{\"e\":-1},\"\":\"empty\"}");
    if (!j) return;
    CHECK(j->type == LB_JSON_OBJECT && j->len == 5, "members");
    const char *order[] = {"b", "a", "c", "d", ""};
    for (size_t i = 0; i < 5 && i < j->len; i++)
        CHECK(strcmp(j->keys[i], order[i]) == 0 && j->key_lens[i] == strlen(order[i]), "key %zu", i);
    CHECK(lb__json_get(j, "b") == &j->items[0] && j->items[0].number == 1, "get b");
    CHECK(lb__json_str(j, "a") && strcmp(lb__json_str(j, "a"), "x") == 0, "str a");
    CHECK(lb__json_str(j, "b") == NULL, "str of a number");
    CHECK(lb__json_str(j, "zz") == NULL && lb__json_get(j, "zz") == NULL, "missing");
    CHECK(lb__json_get(j, "") == &j->items[4], "empty key");
    const lb__json *c = lb__json_get(j, "c");
    CHECK(c && c->type == LB_JSON_ARRAY && c->len == 2 && c->items[0].type == LB_JSON_TRUE &&
              c->items[1].type == LB_JSON_NULL,
          "c");
    CHECK(lb__json_get(c, "0") == NULL, "get on an array");
    const lb__json *e = lb__json_get(lb__json_get(j, "d"), "e");
    int64_t v;
    CHECK(e && lb__json_i64(e, &v) && v == -1, "d.e");
    CHECK(lb__json_get(NULL, "a") == NULL && lb__json_get(j, NULL) == NULL, "NULL arguments");
    CHECK(j->items[0].offset == 5 && j->offset == 0, "offsets %zu", j->items[0].offset);
    lb__json_free(j);

    /* keys with \u0000: distinct, and key_lens count the NUL */
    static const char nul_keys[] = "{\"a\\u0000b\":1,\"a\\u0000c\":2,\"a\":3}";
    j = ACCEPT_N(nul_keys);
    CHECK(j && j->len == 3 && j->key_lens[0] == 3 && memcmp(j->keys[0], "a\0b", 4) == 0 && j->key_lens[1] == 3,
          "NUL in keys");
    CHECK(j && lb__json_get(j, "a") == &j->items[2], "lookup stops at the C string's NUL");
    lb__json_free(j);
    /* escaped and raw spellings of one key are one key */
    j = ACCEPT("{\"\\u00e9\":1}");
    CHECK(j && lb__json_get(j, "\xC3\xA9") == &j->items[0], "decoded key lookup");
    lb__json_free(j);
}

/* ===== Large documents ===== */

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void putf(buf *b, const char *fmt, ...) LB__PRINTF(2, 3);
static void putf(buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(b, tmp, (size_t)n);
}

static void test_many_keys(void)
{
    enum { N = 100000 };
    buf b = {0};
    put(&b, "{", 1);
    for (int i = 0; i < N; i++) putf(&b, "%s\"tok_%d\":%d", i ? "," : "", i * 7, i);
    put(&b, "}", 1);
    clock_t t0 = clock();
    lb__json *j = accept_n(b.p, b.n, __LINE__);
    int bad = 0;
    for (int i = 0; j && i < N; i++) {
        char key[32];
        snprintf(key, sizeof key, "tok_%d", i * 7);
        const lb__json *v = lb__json_get(j, key);
        uint64_t u;
        if (!v || !lb__json_u64(v, &u) || u != (uint64_t)i || v != &j->items[i]) bad++;
        snprintf(key, sizeof key, "tok_%d", i * 7 + 1);
        if (lb__json_get(j, key)) bad++;
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(j && j->len == N && bad == 0, "%d bad lookups", bad);
    CHECK(secs < 2.0, "100k-key parse and 200k lookups took %.3f s", secs);
    printf("100k-key object (%zu bytes): parse + 200k lookups %.3f s\n", b.n, secs);
    lb__json_free(j);
    /* the same object with one key repeated at the end */
    b.n--;
    putf(&b, ",\"tok_%d\":0}", 7 * 4321);
    j = (lb__json *)1;
    CHECK(parse_n(b.p, b.n, &j) == LB_ERR_PARSE && j == NULL, "duplicate in 100k keys");
    CHECK(strstr(lb_last_error(), "duplicate key \"tok_30247\"") != NULL, "%s", lb_last_error());
    free(b.p);
}

static void test_big_array(void)
{
    enum { N = 100000 };
    buf b = {0};
    put(&b, "[", 1);
    for (int i = 0; i < N; i++) putf(&b, "%s{\"i\":%d,\"s\":\"v\\u00e9%d\",\"f\":%d.5}", i ? ",\n" : "", i, i, i);
    put(&b, "]", 1);
    lb__json *j = accept_n(b.p, b.n, __LINE__);
    int bad = 0;
    for (int i = 0; j && i < N; i++) {
        const lb__json *o = &j->items[i];
        int64_t v;
        char want[32];
        snprintf(want, sizeof want, "v\xC3\xA9%d", i);
        if (o->type != LB_JSON_OBJECT || o->len != 3 || !lb__json_i64(lb__json_get(o, "i"), &v) || v != i ||
            strcmp(lb__json_str(o, "s"), want) != 0 || lb__json_get(o, "f")->number != i + 0.5)
            bad++;
    }
    CHECK(j && j->len == N && bad == 0, "%d bad items", bad);
    lb__json_free(j);
    /* an error deep in the big document reports the right line */
    b.p[b.n - 2] = ',';
    char want[64];
    snprintf(want, sizeof want, "test.json: line %d,", N);
    j = (lb__json *)1;
    CHECK(parse_n(b.p, b.n, &j) == LB_ERR_PARSE && strstr(lb_last_error(), want), "%s", lb_last_error());
    free(b.p);
}

/* A tokenizer.json-shaped document of about 10 MB must parse well under a second. */
static void test_tokenizer_speed(void)
{
    buf b = {0};
    putf(&b, "{\"version\":\"1.0\",\"model\":{\"type\":\"BPE\",\"vocab\":{");
    int n_vocab = 0;
    while (b.n < 6000000) {
        putf(&b, "%s\"\\u0120tok%d\\u00e9\xE2\x82\xAC\":%d", n_vocab ? "," : "", n_vocab, n_vocab);
        n_vocab++;
    }
    putf(&b, "},\"merges\":[");
    for (int i = 0; b.n < 10000000; i++) putf(&b, "%s\"\xC4\xA0t%d ok%d\"", i ? "," : "", i, i % 977);
    putf(&b, "]}}");
    clock_t t0 = clock();
    lb__json *j = accept_n(b.p, b.n, __LINE__);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    const lb__json *vocab = lb__json_get(lb__json_get(j, "model"), "vocab");
    uint64_t id = 0;
    CHECK(vocab && vocab->len == (size_t)n_vocab && lb__json_u64(lb__json_get(vocab, "\xC4\xA0tok4242\xC3\xA9\xE2\x82\xAC"), &id) &&
              id == 4242,
          "vocab lookup");
    printf("tokenizer-like document: %.1f MB, %d vocab entries, parsed in %.3f s\n", (double)b.n / 1e6, n_vocab, secs);
    CHECK(secs < 1.0, "10 MB took %.3f s", secs);
    lb__json_free(j);
    free(b.p);
}

/* ===== Text that is not NUL-terminated ===== */

static void test_prefixes(void)
{
    const char *whole = "[1,2,3]garbage";
    lb__json *j = NULL;
    CHECK(lb__json_parse(whole, 7, "p", &j) == LB_OK && j && j->len == 3, "prefix of a longer buffer: %s",
          lb_last_error());
    lb__json_free(j);
    /* every proper prefix of a valid document is refused, and reads nothing past its end (ASan) */
    const char *doc = "{\"a\":[1,-2.5e3,true,false,null,\"\\u00e9\\uD83D\\uDE00x\"],\"b\":{\"c\":\"\xE2\x82\xAC\"}}";
    size_t n = strlen(doc);
    int refused = 0;
    for (size_t len = 0; len < n; len++) {
        j = NULL;
        lb_status st = parse_n(doc, len, &j);
        if (st == LB_ERR_PARSE && !j) refused++;
        else lb__json_free(j);
    }
    CHECK(refused == (int)n, "%d of %zu prefixes refused", refused, n);
    j = ACCEPT(doc);
    lb__json_free(j);
    /* a number, a literal and a string cut by len, not by the text */
    j = NULL;
    CHECK(lb__json_parse("1234", 3, "p", &j) == LB_OK && j && j->number == 123 && j->num_len == 3, "number cut");
    lb__json_free(j);
    j = NULL;
    CHECK(lb__json_parse("truex", 4, "p", &j) == LB_OK && j && j->type == LB_JSON_TRUE, "literal cut");
    lb__json_free(j);
    REJECT("\"abc", "unterminated string", 1, 1, 0);
    /* the number's text is a copy: it survives the input */
    char *block;
    char *t = tail_copy("[12.5e1]", 8, &block);
    j = NULL;
    CHECK(lb__json_parse(t, 8, "p", &j) == LB_OK, "copy");
    free(block);
    CHECK(j && j->items[0].num_len == 6 && memcmp(j->items[0].str, "12.5e1", 6) == 0, "number text is owned");
    lb__json_free(j);
}

/* ===== lb__json_each_member ===== */

typedef struct members_seen {
    size_t n;
    char keys[8][16];
    lb__json_type types[8];
    size_t at[8];
} members_seen;

static lb_status note_member(void *ctx, const char *key, size_t key_len, const lb__json *value, size_t value_at)
{
    members_seen *m = ctx;
    if (m->n < 8 && key_len < 16) {
        memcpy(m->keys[m->n], key, key_len + 1);
        m->types[m->n] = value->type, m->at[m->n] = value_at;
    }
    m->n++;
    return LB_OK;
}

static lb_status stop_at_second(void *ctx, const char *key, size_t key_len, const lb__json *value, size_t value_at)
{
    (void)key, (void)key_len, (void)value, (void)value_at;
    return ++*(int *)ctx == 2 ? lb__fail(LB_ERR_UNSUPPORTED, "stopped") : LB_OK;
}

/* Walked member by member, a document is accepted exactly when the whole
 * tree reading accepts it (except repeated keys, which the walk leaves to
 * its caller): every key and value goes through lb__json_parse, and the
 * punctuation between them is checked here. */
static void test_each_member(void)
{
    static const char *const docs[] = {
        "{}", " { } ", "{\"a\":1}", "{\"a\" : [1, {\"b\": [true, null]}] ,\"c\":\"}\\\"]\"}\n",
        "{\"\\u00e9\":{}}", "{\"a\":-0.5e3,\"b\":false}", "{\"a\":\"x\"}\t\r\n ",
        /* refused */
        "", "[]", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{\"a\":1 \"b\":2}", "{\"a\":1}x", "{\"a\":1}{}",
        "{\"a\":tru}", "{\"a\":01}", "{\"a\":[1,]}", "{\"a\":[1}", "{\"a\":{\"b\":1]}", "{\"a\":\"\x01\"}",
        "{\"a\xff\":1}", "{a:1}", "{\"a\":1,,\"b\":2}", "{\"a\":\"unterminated}", "{\"a\":1}\v",
        "{\"a\":\"x\"y}", "{\"a\"::1}", "{,}", "{\"a\":NaN}", "{\"a\":\"\\x\"}"};
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        size_t len = strlen(docs[i]);
        char *block;
        char *t = tail_copy(docs[i], len, &block);
        lb__json *tree = NULL;
        lb_status whole = lb__json_parse(t, len, "t", &tree);
        int object = whole == LB_OK && tree->type == LB_JSON_OBJECT;
        lb__json_free(tree);
        members_seen m = {0};
        lb_status walk = lb__json_each_member(t, len, "t", note_member, &m);
        CHECK((walk == LB_OK) == object, "'%s': walk %d, tree %d", docs[i], walk, whole);
        CHECK(walk == LB_OK || lb_last_error()[0], "'%s': refused without a message", docs[i]);
        free(block);
    }
    /* depth: a value may nest as deep as the whole document may */
    char deep[2 * LB_JSON_MAX_DEPTH + 16];
    for (int extra = 0; extra <= 2; extra++) {
        int levels = LB_JSON_MAX_DEPTH - 2 + extra; /* arrays inside the value */
        size_t o = (size_t)snprintf(deep, sizeof deep, "{\"a\":");
        for (int k = 0; k < levels; k++) deep[o++] = '[';
        for (int k = 0; k < levels; k++) deep[o++] = ']';
        deep[o++] = '}';
        lb__json *tree = NULL;
        lb_status whole = lb__json_parse(deep, o, "t", &tree);
        lb__json_free(tree);
        members_seen m = {0};
        lb_status walk = lb__json_each_member(deep, o, "t", note_member, &m);
        CHECK(walk != LB_OK || whole == LB_OK, "depth %d: the walk accepts what the tree refuses", levels);
    }
    /* what the callback sees: keys decoded, values typed, offsets into the text */
    const char *doc = "{\"w\":{\"x\":1}, \"\\u00e9\" : [2],\"n\":null}";
    members_seen m = {0};
    CHECK(lb__json_each_member(doc, strlen(doc), "t", note_member, &m) == LB_OK, "%s", lb_last_error());
    CHECK(m.n == 3 && strcmp(m.keys[0], "w") == 0 && strcmp(m.keys[1], "\xc3\xa9") == 0 &&
          strcmp(m.keys[2], "n") == 0, "keys");
    CHECK(m.types[0] == LB_JSON_OBJECT && m.types[1] == LB_JSON_ARRAY && m.types[2] == LB_JSON_NULL, "types");
    CHECK(m.at[0] == 5 && doc[m.at[1]] == '[' && doc[m.at[2]] == 'n', "offsets %zu %zu %zu", m.at[0], m.at[1], m.at[2]);
    /* repeated keys are the caller's to catch */
    m.n = 0;
    CHECK(lb__json_each_member("{\"a\":1,\"a\":2}", 13, "t", note_member, &m) == LB_OK && m.n == 2, "repeat");
    /* the callback's status ends the walk */
    int calls = 0;
    CHECK(lb__json_each_member("{\"a\":1,\"b\":2,\"c\":3}", 19, "t", stop_at_second, &calls) ==
              LB_ERR_UNSUPPORTED && calls == 2, "stop: %d", calls);
}

int main(void)
{
    test_each_member();
    test_reject_structure();
    test_reject_non_json();
    test_reject_numbers();
    test_reject_strings();
    test_reject_utf8();
    test_reject_duplicates_and_depth();
    test_positions();
    test_scalars();
    test_numbers();
    test_integers();
    test_strings();
    test_objects();
    test_many_keys();
    test_big_array();
    test_tokenizer_speed();
    test_prefixes();
    printf("%d reject cases\n", n_rejects);
    /* the tree-size cap: 16M zeros take ~1.2 GB of tree, so they are refused
     * after the counting pass, before any allocation of that size */
    {
        size_t n = 16u << 20, len = 2 * n + 1;
        char *big = malloc(len);
        big[0] = '[';
        for (size_t i = 0; i < n; i++) big[1 + 2 * i] = '0', big[2 + 2 * i] = ',';
        big[len - 1] = ']';
        lb__json *j = NULL;
        lb_status st = lb__json_parse(big, len, "big.json", &j);
        CHECK(st == LB_ERR_PARSE && j == NULL && strstr(lb_last_error(), "MiB a JSON input may use"),
              "tree cap: %d %s", st, lb_last_error());
        free(big);
    }
    return check_summary();
}

/* Names and strings from a file, made safe to print: a tensor name or a
 * metadata string may hold terminal escape sequences ("\x1b[2J" clears the
 * screen) or bytes that are not UTF-8. Text output escapes them; valid,
 * printable UTF-8 (accents, CJK, emoji) is printed as it is. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

size_t cli_utf8_next(const unsigned char *p, uint32_t *cp)
{
    unsigned char b = p[0];
    size_t len;
    uint32_t c, min;
    if (b < 0x80) return *cp = b, 1;
    if (b >= 0xC2 && b <= 0xDF) len = 2, c = b & 0x1F, min = 0x80;
    else if (b >= 0xE0 && b <= 0xEF) len = 3, c = b & 0x0F, min = 0x800;
    else if (b >= 0xF0 && b <= 0xF4) len = 4, c = b & 0x07, min = 0x10000;
    else return 0; /* a continuation byte, C0/C1 (overlong) or F5..FF */
    for (size_t k = 1; k < len; k++) { /* stops at the terminating NUL: it is no continuation */
        if ((p[k] & 0xC0) != 0x80) return 0;
        c = c << 6 | (p[k] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0; /* overlong, too big, a surrogate */
    *cp = c;
    return len;
}

/* Code points that change how a terminal shows what follows rather than
 * showing a glyph: C0, DEL, C1, and the bidirectional overrides and
 * isolates ("Trojan Source") that reorder the text around them. */
int cli_is_control(uint32_t c)
{
    return c < 0x20 || (c >= 0x7F && c <= 0x9F) || (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069) ||
           c == 0x2028 || c == 0x2029;
}

/* Appends text to buf at *at if it fits whole; 0 if it does not. */
static int put(char *buf, size_t size, size_t *at, const char *text, size_t len)
{
    if (*at + len >= size) return 0;
    memcpy(buf + *at, text, len);
    *at += len;
    return 1;
}

const char *cli_escape_keep(char *buf, size_t size, const char *s, const char *keep)
{
    static const char ellipsis[] = "...";
    size_t at = 0;
    if (size == 0) return "";
    buf[0] = '\0';
    if (!s) return buf;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        uint32_t c;
        size_t len = cli_utf8_next(p, &c);
        char esc[16];
        const char *out = (const char *)p;
        size_t out_len = len;
        if (len == 0) { /* not UTF-8: the byte itself, in hex */
            snprintf(esc, sizeof esc, "\\x%02x", *p);
            out = esc, out_len = 4, len = 1;
        } else if (cli_is_control(c) && !(c < 0x80 && keep && strchr(keep, (int)c))) {
            out_len = (size_t)(c < 0x80 ? snprintf(esc, sizeof esc, "\\x%02x", (unsigned)c)
                                        : snprintf(esc, sizeof esc, "\\u%04x", (unsigned)c));
            out = esc;
        }
        /* room for an ellipsis after the last item that fits */
        size_t reserve = p[len] ? sizeof ellipsis - 1 : 0;
        if (at + out_len + reserve >= size) {
            put(buf, size, &at, ellipsis, sizeof ellipsis - 1);
            break;
        }
        put(buf, size, &at, out, out_len);
        p += len;
    }
    buf[at] = '\0';
    return buf;
}

const char *cli_escape(char *buf, size_t size, const char *s) { return cli_escape_keep(buf, size, s, NULL); }

void cli_put_escaped(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
        uint32_t c;
        size_t len = cli_utf8_next(p, &c);
        if (len == 0) fprintf(out, "\\x%02x", *p), len = 1;
        else if (cli_is_control(c)) fprintf(out, c < 0x80 ? "\\x%02x" : "\\u%04x", (unsigned)c);
        else fwrite(p, 1, len, out);
        p += len;
    }
}

/* SPDX-License-Identifier: MIT */
/*
 * Terminal-safe printing of untrusted text; the rules are in escape.h. One scanner decides, per
 * character, whether it is copied or escaped; the three entry points only differ in where the
 * result goes.
 */
#include "escape.h"
#include "heap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Length of the valid UTF-8 sequence at s (2 to 4) with its code point in *cp, or 0 when the
 * bytes there are not one (the caller then escapes a single byte).
 */
static size_t utf8_seq(const unsigned char *s, uint32_t *cp)
{
    size_t len;
    uint32_t c, min;

    if (s[0] >= 0xC2 && s[0] <= 0xDF)
        len = 2, c = s[0] & 0x1Fu, min = 0x80;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF)
        len = 3, c = s[0] & 0x0Fu, min = 0x800;
    else if (s[0] >= 0xF0 && s[0] <= 0xF4)
        len = 4, c = s[0] & 0x07u, min = 0x10000;
    else
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) /* also stops at the terminating NUL */
            return 0;
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

static int unsafe_cp(uint32_t c)
{
    return (c >= 0x80 && c <= 0x9F) || (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069);
}

/*
 * The next character of s as it is printed: its text in out (at most 12 bytes plus NUL) and the
 * number of input bytes it consumes.
 */
static size_t next_piece(const unsigned char *s, char out[16])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char b = s[0];
    uint32_t cp;
    size_t len;

    if (b == '\\') {
        memcpy(out, "\\\\", 3);
        return 1;
    }
    if (b >= 0x20 && b < 0x7F) {
        out[0] = (char)b, out[1] = '\0';
        return 1;
    }
    if (b == '\t' || b == '\n' || b == '\r') {
        out[0] = '\\', out[1] = b == '\t' ? 't' : b == '\n' ? 'n' : 'r', out[2] = '\0';
        return 1;
    }
    if (b >= 0x80 && (len = utf8_seq(s, &cp)) != 0) {
        if (unsafe_cp(cp)) {
            out[0] = '\\', out[1] = 'u';
            for (int i = 0; i < 4; i++)
                out[2 + i] = hex[(cp >> (12 - 4 * i)) & 15];
            out[6] = '\0';
        } else {
            memcpy(out, s, len);
            out[len] = '\0';
        }
        return len;
    }
    out[0] = '\\', out[1] = 'x', out[2] = hex[b >> 4], out[3] = hex[b & 15], out[4] = '\0';
    return 1;
}

char *qs_escape_into(const char *s, char *buf, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t k = 0;
    char piece[16];

    while (*p) {
        size_t used = next_piece(p, piece), len = strlen(piece);
        if (k + len + 1 > n)
            break;
        memcpy(buf + k, piece, len);
        k += len;
        p += used;
    }
    buf[k] = '\0';
    return buf;
}

char *qs_escape_dup(const char *s)
{
    /* The most an input byte grows to is four bytes ("\x1b"; "\u0080" is six for two). */
    size_t n = 4 * strlen(s) + 1;
    char *buf = qs_heap_malloc(n);

    return buf ? qs_escape_into(s, buf, n) : NULL;
}

void qs_escape_print(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    char piece[16];

    while (*p) {
        p += next_piece(p, piece);
        fputs(piece, f);
    }
}

/* SPDX-License-Identifier: MIT */
/*
 * Text from a model file (tensor names, metadata strings) printed to a terminal: every byte a
 * terminal could act on is written as a visible escape, so a hostile name cannot move the cursor,
 * retitle the window or hide text. Kept as they are: printable ASCII and valid UTF-8 for
 * characters that are not controls. Escaped: the backslash as `\\`; tab, newline and carriage
 * return as `\t`, `\n`, `\r`; other C0 controls and DEL as `\xHH`; the C1 controls U+0080-U+009F
 * (which some terminals read as ESC sequences) and the bidirectional overrides and isolates
 * (U+202A-U+202E, U+2066-U+2069, which reorder what is shown) as `\uHHHH`; every byte of invalid
 * UTF-8 (stray continuation bytes, overlong forms, surrogates, code points past U+10FFFF,
 * truncated sequences) as `\xHH`.
 */
#ifndef QS_TOOLS_ESCAPE_H
#define QS_TOOLS_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* The escaped copy of s, NUL-terminated, from malloc; NULL when out of memory. */
char *qs_escape_dup(const char *s);

/*
 * The escaped copy of s in buf (n >= 1 bytes), cut at a character boundary so that neither an
 * escape nor a UTF-8 sequence is split when it does not fit. Returns buf.
 */
char *qs_escape_into(const char *s, char *buf, size_t n);

/* Print s escaped to f. */
void qs_escape_print(FILE *f, const char *s);

#endif /* QS_TOOLS_ESCAPE_H */

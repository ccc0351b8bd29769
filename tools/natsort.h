/* SPDX-License-Identifier: MIT */
/*
 * Names in the order people count: runs of digits compare as numbers, so "layer.2" comes before
 * "layer.10" (a byte-wise comparison puts layer.10 first). The per-layer tables of `quantize`
 * and `inspect` are sorted this way.
 */
#ifndef QS_TOOLS_NATSORT_H
#define QS_TOOLS_NATSORT_H

/* < 0, 0 or > 0 as a sorts before, with or after b. Digit runs compare by value (leading
 * zeros ignored, then the shorter run first), everything else byte by byte; equal only when
 * the strings are. */
int qs_natural_cmp(const char *a, const char *b);

#endif /* QS_TOOLS_NATSORT_H */

/* SPDX-License-Identifier: MIT */
/*
 * Scalar reference of the 2:4 kernels (docs/sparsity.md §2.2, §2.3, §3): the STRIP mask of |w| or
 * of Wanda scores, the fused prune + compress, compress with a mask or by non-zero values,
 * decompress, and the TILE (transposable) mask. Every kernel works on one row segment whose first
 * element starts a group and, where meta is written, a meta word (column % 16 == 0); n % 4 == 0.
 * Drivers have validated everything: masks given to compress keep at most two per group, meta
 * given to decompress holds only valid nibbles.
 */
#include <math.h>

#include "../core/kernels.h"
#include "element_hd.h"
#include "ref.h"
#include "sp24_ref.h"

/* Score key of element i: |w| or fl(|w| * norm[i]) (§2.2, one defined f32 expression). */
static uint32_t score_key(const float *w, const float *norm, int64_t i)
{
    float a = fabsf(qs_ld_f32(w + i));
    return qs_sp_key_abs(norm ? a * qs_ld_f32(norm + i) : a);
}

/* Keep bits of one group of 4 keys: position i is kept when fewer than two others beat it, an
 * equal key at a lower position beating it too (§2.2 rules 1-3). */
static unsigned keep_of_keys(const uint32_t k[4])
{
    return qs_hd_sp24_keep(k); /* element_hd.h: the CUDA plugin runs this rule too */
}

static unsigned group_keep(const float *w, const float *norm, int64_t g)
{
    uint32_t k[4];
    for (int i = 0; i < 4; i++)
        k[i] = score_key(w, norm, 4 * g + i);
    return keep_of_keys(k);
}

void qs_sp24_mask_f32__ref(const float *w, const float *norm, int64_t n, uint8_t *mask)
{
    for (int64_t g = 0; g < n / 4; g++) {
        unsigned keep = group_keep(w, norm, g);
        for (int i = 0; i < 4; i++)
            mask[4 * g + i] = (uint8_t)((keep >> i) & 1u);
    }
}

/* Values and nibble of group g given its keep bits: kept positions copied bit for bit, positions
 * added by the fill rule (§3.4) written as +0. */
static unsigned put_group_f32(const float *w, int64_t g, unsigned keep, float *values)
{
    unsigned nib = qs_sp24_nibble_of_keep[keep & 15u];
    unsigned i0 = nib & 3u, i1 = nib >> 2;
    qs_st_f32(values + 2 * g, (keep >> i0) & 1u ? qs_ld_f32(w + 4 * g + i0) : 0.0f);
    qs_st_f32(values + 2 * g + 1, (keep >> i1) & 1u ? qs_ld_f32(w + 4 * g + i1) : 0.0f);
    return nib;
}

static void put_nibble(uint16_t *meta, int64_t g, unsigned nib)
{
    uint16_t word = g % 4 == 0 ? 0 : qs_ld_u16(meta + g / 4); /* unused nibbles stay 0 (§3.1) */
    qs_st_u16(meta + g / 4, (uint16_t)(word | (nib << (4 * (g % 4)))));
}

void qs_sp24_prune_f32__ref(const float *w, const float *norm, int64_t n, float *values,
                            uint16_t *meta)
{
    for (int64_t g = 0; g < n / 4; g++)
        put_nibble(meta, g, put_group_f32(w, g, group_keep(w, norm, g), values));
}

/* Keep bits of a group from a mask (non-zero byte) or, without one, from non-zero values. */
static unsigned mask_keep(const uint8_t *mask, int64_t g)
{
    unsigned keep = 0;
    for (int i = 0; i < 4; i++)
        keep |= (mask[4 * g + i] != 0) << i;
    return keep;
}

void qs_sp24_compress_f32__ref(const float *w, const uint8_t *mask, int64_t n, float *values,
                               uint16_t *meta)
{
    for (int64_t g = 0; g < n / 4; g++) {
        unsigned keep = 0;
        if (mask)
            keep = mask_keep(mask, g);
        else
            for (int i = 0; i < 4; i++)
                keep |= (qs_ld_f32(w + 4 * g + i) != 0.0f) << i; /* NaN != 0 is true: NaN is kept */
        put_nibble(meta, g, put_group_f32(w, g, keep, values));
    }
}

void qs_sp24_compress_u16__ref(const uint16_t *w, const uint8_t *mask, int64_t n,
                               uint16_t *values, uint16_t *meta)
{
    for (int64_t g = 0; g < n / 4; g++) {
        unsigned keep = 0;
        if (mask)
            keep = mask_keep(mask, g);
        else
            for (int i = 0; i < 4; i++) /* f16 and bf16 alike: zero iff only the sign is set */
                keep |= ((qs_ld_u16(w + 4 * g + i) & 0x7FFFu) != 0) << i;
        unsigned nib = qs_sp24_nibble_of_keep[keep];
        unsigned i0 = nib & 3u, i1 = nib >> 2;
        qs_st_u16(values + 2 * g, (keep >> i0) & 1u ? qs_ld_u16(w + 4 * g + i0) : 0);
        qs_st_u16(values + 2 * g + 1, (keep >> i1) & 1u ? qs_ld_u16(w + 4 * g + i1) : 0);
        put_nibble(meta, g, nib);
    }
}

void qs_sp24_decompress_f32__ref(const float *values, const uint16_t *meta, int64_t n,
                                 float *dst)
{
    for (int64_t g = 0; g < n / 4; g++) {
        unsigned nib = (qs_ld_u16(meta + g / 4) >> (4 * (g % 4))) & 15u;
        for (int i = 0; i < 4; i++)
            qs_st_f32(dst + 4 * g + i, 0.0f);
        qs_st_f32(dst + 4 * g + (nib & 3u), qs_ld_f32(values + 2 * g));
        qs_st_f32(dst + 4 * g + (nib >> 2), qs_ld_f32(values + 2 * g + 1));
    }
}

void qs_sp24_decompress_u16__ref(const uint16_t *values, const uint16_t *meta, int64_t n,
                                 uint16_t *dst)
{
    for (int64_t g = 0; g < n / 4; g++) {
        unsigned nib = (qs_ld_u16(meta + g / 4) >> (4 * (g % 4))) & 15u;
        for (int i = 0; i < 4; i++)
            qs_st_u16(dst + 4 * g + i, 0);
        qs_st_u16(dst + 4 * g + (nib & 3u), qs_ld_u16(values + 2 * g));
        qs_st_u16(dst + 4 * g + (nib >> 2), qs_ld_u16(values + 2 * g + 1));
    }
}

/* ---- TILE (§2.3) ----------------------------------------------------------------------------- */

/* The 90 patterns with two kept per row and per column (§2.3), in canonical order: each row's
 * pair is one of (0,1), (0,2), (0,3), (1,2), (1,3), (2,3), patterns ordered lexicographically
 * by (row 0 pair, ..., row 3 pair). Row r's keep bits sit at bits 4r ... 4r+3. Generated by
 * enumerating the 6^4 row choices and keeping those with column counts (2, 2, 2, 2); the tests
 * repeat that enumeration independently. */
static const uint16_t tile_patterns[90] = {
    0xCC33, 0xCA53, 0xAC53, 0xC693, 0x6C93, 0xC963, 0x9C63, 0xC5A3, 0x5CA3, 0xC3C3, 0xA5C3, 0x69C3,
    0x96C3, 0x5AC3, 0x3CC3, 0xCA35, 0xAC35, 0xAA55, 0xA695, 0x6A95, 0xA965, 0x9A65, 0xC3A5, 0xA5A5,
    0x69A5, 0x96A5, 0x5AA5, 0x3CA5, 0xA3C5, 0x3AC5, 0xC639, 0x6C39, 0xA659, 0x6A59, 0x6699, 0xC369,
    0xA569, 0x6969, 0x9669, 0x5A69, 0x3C69, 0x65A9, 0x56A9, 0x63C9, 0x36C9, 0xC936, 0x9C36, 0xA956,
    0x9A56, 0xC396, 0xA596, 0x6996, 0x9696, 0x5A96, 0x3C96, 0x9966, 0x95A6, 0x59A6, 0x93C6, 0x39C6,
    0xC53A, 0x5C3A, 0xC35A, 0xA55A, 0x695A, 0x965A, 0x5A5A, 0x3C5A, 0x659A, 0x569A, 0x956A, 0x596A,
    0x55AA, 0x53CA, 0x35CA, 0xC33C, 0xA53C, 0x693C, 0x963C, 0x5A3C, 0x3C3C, 0xA35C, 0x3A5C, 0x639C,
    0x369C, 0x936C, 0x396C, 0x53AC, 0x35AC, 0x33CC,
};

/* A pattern's total: kept NaN scores first, then kept +Inf, then the finite sum in double in
 * row-major order of the kept positions. The spec sums in double; NaN and Inf would swallow that
 * sum, so they are counted apart [convention], which ranks them above any finite total as the
 * STRIP rule does. */
struct tile_total {
    int nan, inf;
    double sum;
};

static int total_better(const struct tile_total *a, const struct tile_total *b)
{
    if (a->nan != b->nan)
        return a->nan > b->nan;
    if (a->inf != b->inf)
        return a->inf > b->inf;
    return a->sum > b->sum;
}

/* Kept positions of each pattern in row-major order, derived once per kernel call. */
static void tile_positions(uint8_t pos[90][8])
{
    for (int p = 0; p < 90; p++)
        for (int i = 0, k = 0; i < 16; i++)
            if ((tile_patterns[p] >> i) & 1u)
                pos[p][k++] = (uint8_t)i;
}

static void tile_best(const float s[16], const uint8_t pos[90][8], uint8_t keep_rows[4])
{
    struct tile_total best = {-1, 0, 0.0};
    uint16_t chosen = tile_patterns[0];
    int special = 0;

    for (int i = 0; i < 16; i++)
        special |= !isfinite(s[i]);
    /* A later pattern must be strictly better: the first best one wins. */
    for (int p = 0; p < 90; p++) {
        struct tile_total t = {0, 0, 0.0};
        for (int k = 0; k < 8; k++) {
            float v = s[pos[p][k]];
            if (special && isnan(v))
                t.nan++;
            else if (special && isinf(v))
                t.inf++;
            else
                t.sum += (double)v;
        }
        if (total_better(&t, &best)) {
            best = t;
            chosen = tile_patterns[p];
        }
    }
    for (int r = 0; r < 4; r++)
        keep_rows[r] = (uint8_t)((chosen >> (4 * r)) & 15u);
}

static void tile_greedy(const float s[16], uint8_t keep_rows[4])
{
    uint32_t key[16];
    int order[16], rows[4] = {0, 0, 0, 0}, cols[4] = {0, 0, 0, 0};

    for (int i = 0; i < 16; i++) {
        key[i] = qs_sp_key_abs(s[i]);
        order[i] = i;
    }
    /* Stable insertion sort by descending key: equal keys keep row-major order. */
    for (int i = 1; i < 16; i++) {
        int v = order[i], j = i;
        while (j > 0 && key[order[j - 1]] < key[v]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    for (int r = 0; r < 4; r++)
        keep_rows[r] = 0;
    for (int i = 0; i < 16; i++) {
        int r = order[i] / 4, c = order[i] % 4;
        if (rows[r] < 2 && cols[c] < 2) {
            rows[r]++;
            cols[c]++;
            keep_rows[r] = (uint8_t)(keep_rows[r] | (1u << c));
        }
    }
}

void qs_sp24_tile_f32__ref(const float *w, int64_t ldw, const float *norm, int64_t cols,
                           int32_t variant, uint8_t *mask, int64_t ldm)
{
    uint8_t pos[90][8];

    tile_positions(pos);
    for (int64_t c0 = 0; c0 < cols; c0 += 4) {
        float s[16];
        uint8_t keep[4];
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 4; c++) {
                float a = fabsf(qs_ld_f32(w + r * ldw + c0 + c));
                s[4 * r + c] = norm ? a * qs_ld_f32(norm + c0 + c) : a;
            }
        if (variant)
            tile_greedy(s, keep);
        else
            tile_best(s, pos, keep);
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 4; c++)
                mask[r * ldm + c0 + c] = (uint8_t)((keep[r] >> c) & 1u);
    }
}

/* SPDX-License-Identifier: MIT */
/*
 * The weight panel of the AVX-512 int8-activation GEMM kernels (mm8n_avx512vnni.c: VNNI lanes
 * over W rows; mm8_amx.c: AMX tiles). src/ref/mm8_ref.c defines every result; this header only
 * decodes weights into the integers the reference multiplies, so the kernels' sums are the same.
 *
 * A panel holds MM8P_NP rows of W (two groups of 16) by a chunk of kc columns (a multiple of 64),
 * decoded once per kernel call and then read by every x row of the call, in the VNNI layout: for
 * each k-quad j (columns 4j ... 4j + 3 of the chunk) one 64-byte line of the 16 rows of a group,
 * four bytes a row: q[plane][j][row][4]. That line is what vpdpbusd multiplies with a broadcast
 * x quad (a dword lane per W row), and 16 consecutive lines at a stride of NP * 4 bytes are an
 * AMX B tile (16 k-quads by 16 rows). Rows past the weight's end repeat its last row (their
 * outputs are never stored), columns past the row's end decode to values the kernels multiply
 * only with x bytes they set to 0.
 *
 * Each W element becomes one byte, plus `bias` (128 for VNNI, whose vpdpbusd wants the weight
 * unsigned: the kernels subtract bias * sum x per segment; 0 for AMX, whose TDPBSSD multiplies
 * signed bytes):
 * - NF4 / FP4 (bitsandbytes' flattened layout, the even element in the high nibble) and MXFP4 /
 *   NVFP4 (rows of their own, the even element in the low nibble): a 16-entry table lookup of
 *   each nibble (the int8 codebook, or the doubled E2M1 values);
 * - INT8 codes as they are;
 * - FP8 E4M3 in three planes: c = 2^9 v (an integer of -229376 ... 229376) as base-256 digits
 *   c = d0 + 256 d1 + 65536 d2, d0 and d1 in 0 ... 255 (unsigned bytes), d2 in -4 ... 3 (a
 *   signed byte, plus bias / 32 = 4 for VNNI), NaN codes as 0 with their segment flagged.
 * Per segment and row the panel also holds the segment's scale (sc), the float the kernels
 * multiply the segment's integer sum with.
 */
#ifndef QS_X86_MM8_PANEL_AVX512_H
#define QS_X86_MM8_PANEL_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "../core/kernels.h"
#include "../ref/mm8_ref.h"
#include "../ref/ref.h"

#define MM8P_NP 32      /* W rows per panel */
#define MM8P_KC 256     /* columns per chunk with segments of at most 256 */
#define MM8P_KC_MAX 512 /* the largest chunk: segments of 512, and whole rows */
#define MM8P_Q_BYTES (3 * MM8P_KC * MM8P_NP)    /* the largest panel: E4M3's three planes */
#define MM8P_SC_FLOATS (MM8P_KC / 16 * MM8P_NP) /* NVFP4: 16 segments per chunk */
#define MM8P_INLINE static inline __attribute__((always_inline))

enum mm8p_kind { MM8P_BNB4, MM8P_W8A8, MM8P_MX, MM8P_NV, MM8P_E4M3 };

/* What the panels of one call are made of. */
typedef struct {
    int kind;     /* enum mm8p_kind */
    int planes;   /* 1, or 3 (E4M3 digits) */
    int whole;    /* 1: one segment per row (INT8 per row or tensor, a bnb4 block >= K) */
    uint8_t bias; /* added to each single-plane byte; bias / 32 to E4M3's d2 */
    int64_t seg;  /* columns per segment (whole: K) */
    int64_t kc;   /* columns per chunk: a multiple of 64 and of seg (or whole rows) */
    __m512i tab;  /* the 16 values (+ bias) in every 128-bit lane: NF4, FP4, E2M1 */
    const qs_mm_weight *w;
    int64_t r0;   /* the call's first W row (view row numbers) */
    int64_t rows; /* the call's W rows */
    float u;      /* E4M3: fl(scale 2^-9) */
} mm8p_fmt;

/* Columns of the chunk at k0 that lie inside the row. */
MM8P_INLINE int64_t mm8p_cols(const mm8p_fmt *f, int64_t k0)
{
    return f->w->k - k0 < f->kc ? f->w->k - k0 : f->kc;
}

/* The 16 x 16 transpose of dwords: r[j] becomes the j-th column of the rows r[0 ... 15]. */
MM8P_INLINE void mm8p_transpose16(__m512i r[16])
{
    __m512i t[16];

    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4a + b] holds, in 128-bit block c, columns 4c + b of rows 4a ... 4a + 3 */
    for (int i = 0; i < 16; i += 8)
        for (int b = 0; b < 4; b++) {
            t[i + b] = _mm512_shuffle_i32x4(r[i + b], r[i + 4 + b], 0x88);
            t[i + 4 + b] = _mm512_shuffle_i32x4(r[i + b], r[i + 4 + b], 0xDD);
        }
    /* t[8h + b] (b < 4): columns b, 8 + b of rows 8h ... 8h + 7; t[8h + 4 + b]: 4 + b, 12 + b */
    for (int b = 0; b < 8; b++) {
        r[b] = _mm512_shuffle_i32x4(t[b], t[8 + b], 0x88);
        r[8 + b] = _mm512_shuffle_i32x4(t[b], t[8 + b], 0xDD);
    }
}

/* Bytes of the mask of the first n (0 ... 64) bytes. */
MM8P_INLINE __mmask64 mm8p_mask(int64_t n)
{
    return n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
}

/* 64 nibbles (32 bytes at p, the first nb of them read) in element order through the table: hi
 * first (bitsandbytes: the even element in the high nibble) or lo first (MX, NVFP4). */
MM8P_INLINE __m512i mm8p_nibbles(const uint8_t *p, int64_t nb, __m512i tab, int hi_first)
{
    __m512i w = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8((__mmask32)mm8p_mask(nb), p));
    if (hi_first) /* word b -> bytes (b >> 4, b & 15) */
        w = _mm512_srli_epi16(_mm512_or_si512(w, _mm512_slli_epi16(w, 12)), 4);
    else /* word b -> bytes (b & 15, b >> 4) */
        w = _mm512_and_si512(_mm512_or_si512(w, _mm512_slli_epi16(w, 4)),
                             _mm512_set1_epi16(0x0F0F));
    return _mm512_shuffle_epi8(tab, w);
}

/* The three digit planes of 64 E4M3 codes (n of them read) and a mask of their NaN codes. In
 * 16-bit lanes: m = f or 8 + f, s = max(e - 1, 0), |c| = m << s split into its low 16 bits and
 * its bits 16 and up (m >> (16 - s)); a negative code takes the two's complement across both. */
MM8P_INLINE __mmask64 mm8p_e4m3(const uint8_t *p, int64_t n, uint8_t bias2, __m512i d[3])
{
    __m512i c = _mm512_maskz_loadu_epi8(mm8p_mask(n), p);
    __mmask64 nan = _mm512_mask_cmpeq_epi8_mask(
        mm8p_mask(n), _mm512_and_si512(c, _mm512_set1_epi8(0x7F)), _mm512_set1_epi8(0x7F));
    c = _mm512_maskz_mov_epi8(~nan, c);
    __m512i lo[2], hi[2];
    for (int h = 0; h < 2; h++) {
        __m512i b =
            _mm512_cvtepu8_epi16(h ? _mm512_extracti64x4_epi64(c, 1) : _mm512_castsi512_si256(c));
        __m512i e = _mm512_and_si512(_mm512_srli_epi16(b, 3), _mm512_set1_epi16(15));
        __m512i m = _mm512_and_si512(b, _mm512_set1_epi16(7));
        __mmask32 norm = _mm512_test_epi16_mask(e, e);
        m = _mm512_mask_add_epi16(m, norm, m, _mm512_set1_epi16(8));
        __m512i s = _mm512_subs_epu16(e, _mm512_set1_epi16(1));
        __m512i l = _mm512_sllv_epi16(m, s);
        __m512i u = _mm512_srlv_epi16(m, _mm512_sub_epi16(_mm512_set1_epi16(16), s));
        __mmask32 neg = _mm512_test_epi16_mask(b, _mm512_set1_epi16(0x80));
        /* -(u 65536 + l) = (-u - (l != 0)) 65536 + (65536 - l) mod 65536 */
        __mmask32 lnz = _mm512_test_epi16_mask(l, l);
        __m512i nu = _mm512_sub_epi16(_mm512_setzero_si512(), u);
        u = _mm512_mask_blend_epi16(neg, u, nu);
        u = _mm512_mask_blend_epi16(neg & lnz, u, _mm512_sub_epi16(nu, _mm512_set1_epi16(1)));
        l = _mm512_mask_blend_epi16(neg, l, _mm512_sub_epi16(_mm512_setzero_si512(), l));
        lo[h] = l;
        hi[h] = u;
    }
    /* bytes back in element order: the low bytes, the high bytes, the top digit */
    const __m512i perm = _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0);
    __m512i l0 = _mm512_and_si512(lo[0], _mm512_set1_epi16(0xFF));
    __m512i l1 = _mm512_and_si512(lo[1], _mm512_set1_epi16(0xFF));
    d[0] = _mm512_permutexvar_epi64(perm, _mm512_packus_epi16(l0, l1));
    d[1] = _mm512_permutexvar_epi64(
        perm, _mm512_packus_epi16(_mm512_srli_epi16(lo[0], 8), _mm512_srli_epi16(lo[1], 8)));
    d[2] = _mm512_add_epi8(_mm512_permutexvar_epi64(perm, _mm512_packs_epi16(hi[0], hi[1])),
                           _mm512_set1_epi8((char)bias2));
    return nan;
}

/* The first byte of row `row` (view numbering) at column k0, and the bytes left in the row. */
MM8P_INLINE const uint8_t *mm8p_row(const mm8p_fmt *f, int64_t row, int64_t k0)
{
    const qs_mm_weight *w = f->w;
    if (f->kind == MM8P_BNB4)
        return (const uint8_t *)w->data + (row * w->k + k0) / 2;
    if (f->kind == MM8P_W8A8 || f->kind == MM8P_E4M3)
        return (const uint8_t *)w->data + row * w->row_bytes + k0;
    return (const uint8_t *)w->data + row * w->row_bytes + k0 / 2;
}

/* The first scale of row `row` (view numbering) at column k0, for a prefetch (E4M3: none). */
MM8P_INLINE const void *mm8p_scale_addr(const mm8p_fmt *f, int64_t row, int64_t k0)
{
    const qs_mm_weight *w = f->w;
    switch (f->kind) {
    case MM8P_BNB4: return (const float *)w->scale + (row * w->k + k0) / w->group;
    case MM8P_W8A8: return (const float *)w->scale + row * w->sstride + k0 / w->group;
    case MM8P_E4M3: return NULL;
    default: return (const uint8_t *)w->scale + row * w->sstride + k0 / w->group;
    }
}

/* Decode panel rows [pr, pr + 16) of the call (rows past the call's end repeat its last row),
 * columns [k0, k0 + kc) (those past the row's end: anything finite), into q at row offset g.
 * Meanwhile the panel the caller decodes next is
 * prefetched into L2 (rows pf_pr ..., chunk pf_k; pf_pr < 0: none), a line per row and block
 * among the decode's loads: the rows are 32 short streams, which the hardware prefetchers do not
 * follow, and the decode would wait on memory. */
MM8P_INLINE void mm8p_group(const mm8p_fmt *f, int64_t pr, int g, int64_t k0, uint8_t *q,
                            uint16_t nanbits[MM8P_NP], int64_t pf_pr, int64_t pf_k)
{
    const int64_t cols = mm8p_cols(f, k0), kc = f->kc, lines = MM8P_NP * 4;
    const int nibbles = f->kind != MM8P_W8A8 && f->kind != MM8P_E4M3;
    const __m512i bias = _mm512_set1_epi8((char)f->bias);
    const uint8_t *rp[16], *pf[16];

    for (int r = 0; r < 16; r++) {
        int64_t row = pr + r < f->rows ? pr + r : f->rows - 1;
        int64_t next = pf_pr >= 0 && pf_pr + r < f->rows ? pf_pr + r : -1;
        rp[r] = mm8p_row(f, f->r0 + row, k0);
        pf[r] = next >= 0 ? mm8p_row(f, f->r0 + next, pf_k) : NULL;
        nanbits[g * 16 + r] = 0;
        /* the chunk's scales of the row (16 bytes or fewer for a 256-column chunk) */
        if (next >= 0 && mm8p_scale_addr(f, f->r0 + next, pf_k))
            _mm_prefetch((const char *)mm8p_scale_addr(f, f->r0 + next, pf_k), _MM_HINT_T1);
    }
    for (int64_t b = 0; b * 64 < kc; b++) {
        int64_t n = cols - 64 * b < 0 ? 0 : cols - 64 * b < 64 ? cols - 64 * b : 64;
        uint8_t *dst = q + 16 * b * lines + g * 64;
        if (!nibbles || b % 2 == 0)
            for (int r = 0; r < 16; r++)
                if (pf[r])
                    _mm_prefetch((const char *)((uintptr_t)pf[r] + (uintptr_t)(64 * b >> nibbles)),
                                 _MM_HINT_T1);
        if (f->planes == 3) {
            __m512i v[3][16];
            for (int r = 0; r < 16; r++) {
                __m512i d[3];
                __mmask64 nan = mm8p_e4m3(rp[r] + 64 * b, n, (uint8_t)(f->bias >> 5), d);
                for (int p = 0; p < 3; p++)
                    v[p][r] = d[p];
                /* one bit per 64-column block with a NaN code (segments are 64 columns) */
                nanbits[g * 16 + r] |= (uint16_t)((nan != 0) << b);
            }
            for (int p = 0; p < 3; p++) {
                mm8p_transpose16(v[p]);
                for (int j = 0; j < 16; j++)
                    _mm512_storeu_si512(dst + p * kc * MM8P_NP + j * lines, v[p][j]);
            }
            continue;
        }
        __m512i v[16];
        for (int r = 0; r < 16; r++) {
            if (f->kind == MM8P_W8A8)
                v[r] = _mm512_add_epi8(_mm512_maskz_loadu_epi8(mm8p_mask(n), rp[r] + 64 * b), bias);
            else
                v[r] = mm8p_nibbles(rp[r] + 32 * b, (n + 1) / 2, f->tab, f->kind == MM8P_BNB4);
        }
        mm8p_transpose16(v);
        for (int j = 0; j < 16; j++)
            _mm512_storeu_si512(dst + j * lines, v[j]);
    }
}

/* Decode the panel of call rows [pr, pr + MM8P_NP) and columns [k0, k0 + kc): q and, per segment
 * of the chunk (whole rows: one), sc[s * MM8P_NP + r] and (INT8 with zero points, zc not NULL)
 * the zero points zc[s * MM8P_NP + r]; prefetch the panel at (pf_pr, pf_k) meanwhile. */
MM8P_INLINE void mm8p_panel(const mm8p_fmt *f, int64_t pr, int64_t k0, uint8_t *q, float *sc,
                            int32_t *zc, int64_t pf_pr, int64_t pf_k)
{
    uint16_t nanbits[MM8P_NP];
    const qs_mm_weight *w = f->w;
    int64_t nseg = f->whole ? 1 : (mm8p_cols(f, k0) + f->seg - 1) / f->seg;

    mm8p_group(f, pr, 0, k0, q, nanbits, pf_pr, pf_k);
    mm8p_group(f, pr + 16, 1, k0, q, nanbits, pf_pr < 0 ? -1 : pf_pr + 16, pf_k);
    /* segment s of the chunk is scale unit u0 + s of the row (segments are scale units, and a
     * chunk starts on one); whole rows: the row's one unit */
    const int64_t c0 = f->whole ? 0 : k0 / w->group;
    /* NF4 / FP4 units run over the flattened tensor: K / block per row, or block / K rows per
     * unit (whole rows); the others are sstride per row (0: one for the tensor) */
    const int64_t per_row = f->kind != MM8P_BNB4 ? w->sstride : f->whole ? 0 : w->k / w->group;
    const int64_t rows_per = f->kind == MM8P_BNB4 && f->whole ? w->group / w->k : 0;
    for (int r = 0; r < MM8P_NP; r++) {
        int64_t row = f->r0 + (pr + r < f->rows ? pr + r : f->rows - 1);
        int64_t u0 = rows_per > 0 ? row / rows_per : row * per_row + c0;
        float *scr = sc + r;
        switch (f->kind) {
        case MM8P_BNB4:
        case MM8P_W8A8:
            for (int64_t s = 0; s < nseg; s++)
                scr[s * MM8P_NP] = qs_ld_f32((const float *)w->scale + u0 + s);
            if (zc && w->zp)
                for (int64_t s = 0; s < nseg; s++)
                    zc[s * MM8P_NP + r] = w->zp[u0 + s];
            break;
        case MM8P_MX: /* half the block scale, exactly: 2^(E - 128) */
            for (int64_t s = 0; s < nseg; s++)
                scr[s * MM8P_NP] =
                    qs_e8m0_decode_inline(((const uint8_t *)w->scale)[u0 + s]) * 0.5f;
            break;
        case MM8P_NV: /* an E4M3 value (>= 2^-9) halved, exactly */
            for (int64_t s = 0; s < nseg; s++)
                scr[s * MM8P_NP] =
                    qs_ue4m3_values[((const uint8_t *)w->scale)[u0 + s] & 0x7F] * 0.5f;
            break;
        default: /* E4M3: one scale; a segment with a NaN code gets NaN */
            for (int64_t s = 0; s < nseg; s++)
                scr[s * MM8P_NP] = (nanbits[r] >> s) & 1 ? qs_f32_from_bits(QS_NAN_F32_BITS) : f->u;
            break;
        }
    }
}

/* The panel the GEMM kernels decode after (pr, k0), one panel of work ahead of them: the next
 * chunk of the same rows for a call's first panel, else the same chunk of the next panel. */
MM8P_INLINE void mm8p_next_panel(const mm8p_fmt *f, int64_t pr, int64_t k0, int64_t *pf_pr,
                                 int64_t *pf_k)
{
    if (pr == 0 && k0 + f->kc < f->w->k) {
        *pf_pr = 0;
        *pf_k = k0 + f->kc;
    } else {
        *pf_pr = pr + MM8P_NP < f->rows ? pr + MM8P_NP : -1;
        *pf_k = k0;
    }
}

#endif /* QS_X86_MM8_PANEL_AVX512_H */

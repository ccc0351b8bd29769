/* SPDX-License-Identifier: MIT */
/*
 * The M = 1 path of the 4-bit bf16-activation kernels for AVX512-BF16 (NF4, FP4, MXFP4, NVFP4;
 * mm_bnb4_avx512bf16.c, mm_mx_avx512bf16.c): one x row against tiles of 4 W rows, 64 columns a
 * step. The general driver (mm_gemv_avx512bf16.h) decodes 32 codes into column order with a
 * broadcast, a byte shuffle, a variable shift and a vpermw: three shuffles per 32 codes, which
 * the one shuffle port runs at 3 cycles per 32 columns and row, above the 2 of vdpbf16ps. Here
 * the 32 bytes of 64 codes widen once (vpmovzxbw) and two vpermw give the 32 high-nibble and the
 * 32 low-nibble values (bitsandbytes: the even and the odd columns; E2M1 the other way round),
 * 1.5 shuffles per 32 columns; x is put in the same order once per step for the 4 rows (its even
 * and its odd columns: a byte shuffle in each 128-bit lane, then two qword permutes).
 *
 * Lane j of an even-column product then adds columns 4j and 4j + 2, so lanes 0-7 hold columns
 * 0-31 of the step and lanes 8-15 columns 32-63 (and lanes 4i ... 4i+3 columns 16i ... 16i+15):
 * blocks of 64 take one scale per step, MX blocks of 32 one per half, NVFP4 blocks of 16 one per
 * quarter, as vectors decoded for 16 blocks at a time. The sums are those of the definition
 * (each product exact, f32 sums in another order, a block's lane sums scaled by its scale).
 * Blocks of 64 test their f32 scales for an infinity once per tile (as the general driver);
 * MX scales are never infinite; NVFP4 takes this path only where its table of block scales
 * holds no infinity.
 */
#ifndef QS_X86_MM_GEMV4_AVX512BF16_H
#define QS_X86_MM_GEMV4_AVX512BF16_H

#include "minifloat_avx512.h"
#include "mm_gemv_avx512bf16.h"

/* How a row's blocks are scaled (gemv4_m1_avx512bf16's `mode`). */
#define GEMV4_BLOCK64 0 /* f32 scales, blocks of a multiple of 64 columns (NF4, FP4) */
#define GEMV4_MX 1      /* E8M0 bytes, blocks of 32 */
#define GEMV4_NV 2      /* E4M3 bytes times s_global, blocks of 16 */

/* The 16 E8M0 scales at p (n of them, the rest +0) as f32: 2^(e - 127), NaN for 0xFF. */
static inline __m512 e8m0_16_avx512bf16(const uint8_t *p, int64_t n)
{
    __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(gemv_mask_avx512(n), p));
    __m512i v = _mm512_slli_epi32(e, 23);
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                              _mm512_set1_epi32(0x00400000)); /* 2^-127, a denormal */
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF)),
                              _mm512_set1_epi32(0x7FC00000));
    return _mm512_maskz_mov_ps(gemv_mask_avx512(n), _mm512_castsi512_ps(v));
}

/* The 16 NVFP4 block scales at p (n of them): fl(E4M3(S & 0x7F) * s_global), as the reference
 * forms them (the E4M3 value exact through F16C, then one rounding). */
static inline __m512 nv_16_avx512bf16(const uint8_t *p, int64_t n, float s_global)
{
    __m128i b = _mm_and_si128(_mm_maskz_loadu_epi8(gemv_mask_avx512(n), p), _mm_set1_epi8(0x7F));
    __m512 v = _mm512_mul_ps(e4m3_decode16_f16_avx512(b), _mm512_set1_ps(256.0f));
    return _mm512_maskz_mov_ps(gemv_mask_avx512(n), _mm512_mul_ps(v, _mm512_set1_ps(s_global)));
}

/* The even and the odd columns of x's 64 columns at c (mask: the columns that exist), each 32
 * bf16 values in column order. */
static inline void x_evenodd_avx512bf16(const uint16_t *x, int64_t c, __mmask64 mask, __m512i *even,
                                        __m512i *odd)
{
    const __m512i lane = _mm512_set4_epi32(0x0F0E0B0A, 0x07060302, 0x0D0C0908, 0x05040100);
    const __m512i qe = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
    const __m512i qo = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    __m512i a = _mm512_maskz_loadu_epi16((__mmask32)mask, x + c);
    __m512i b = _mm512_maskz_loadu_epi16((__mmask32)(mask >> 32), x + c + 32);

    a = _mm512_shuffle_epi8(a, lane); /* each 128-bit lane: its 4 even, then its 4 odd words */
    b = _mm512_shuffle_epi8(b, lane);
    *even = _mm512_permutex2var_epi64(a, qe, b);
    *odd = _mm512_permutex2var_epi64(a, qo, b);
}

/* R rows (R constant) from row r0 of w, columns [0, k), x one row; table: the codebook in bf16,
 * twice (vpermw reads 5 index bits); hi_first: the high nibble holds the even column
 * (bitsandbytes). Returns nothing; y[r0 + r] gets the raw sums (NaN rule). */
static inline __attribute__((always_inline)) void
gemv4_tile_avx512bf16(const uint16_t *x, int64_t k, const gemv_rows_avx512 *w, int64_t r0,
                      const int R, int64_t rows, __m512i table, int hi_first, int mode,
                      float s_global, float *y)
{
    /* the step's scale lanes: MX halves, NVFP4 quarters of the 16 decoded block scales */
    const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const int64_t bpb = mode == GEMV4_MX ? 2 : 4; /* blocks per step (MX, NVFP4) */
    const int64_t nblk = mode == GEMV4_BLOCK64 ? 0 : (k + 64 / bpb - 1) / (64 / bpb);
    const uint8_t *drow[4], *srow[4];
    __m512 acc[4], sv[4];
    int chk = 0;
    gemv_pf_avx512 pf;

    gemv_pf_init_avx512(&pf, w, k / 4, r0, R, rows); /* one prefetch step per 64 columns */
    for (int r = 0; r < R; r++) {
        drow[r] = w->data + (r0 + r) * w->dstride;
        srow[r] = w->scale + (r0 + r) * w->sstride;
        if (mode == GEMV4_BLOCK64)
            chk |= f32_any_inf_avx512bf16(srow[r], (k + w->seg - 1) / w->seg);
        acc[r] = _mm512_setzero_ps();
        sv[r] = _mm512_setzero_ps();
    }
    for (int64_t s0 = 0, s = 0; s0 < k; s0 += mode == GEMV4_BLOCK64 ? w->seg : 64, s++) {
        int64_t s1 = mode == GEMV4_BLOCK64 && k - s0 > w->seg ? s0 + w->seg
                     : mode != GEMV4_BLOCK64 && k - s0 > 64   ? s0 + 64
                                                              : k;
        __m512 b[4];
        for (int r = 0; r < R; r++)
            b[r] = _mm512_setzero_ps();
        for (int64_t c = s0; c < s1; c += 64) {
            int64_t left = s1 - c;
            __mmask64 m = left >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << left) - 1;
            __m512i xe, xo;
            gemv_pf_step_avx512(&pf);
            x_evenodd_avx512bf16(x, c, m, &xe, &xo);
            for (int r = 0; r < R; r++) {
                /* the bytes of the columns that exist (a last odd column shares its byte) */
                __m256i bytes =
                    left >= 64 ? _mm256_loadu_si256((const __m256i *)(drow[r] + c / 2))
                               : _mm256_maskz_loadu_epi8(
                                     (__mmask32)((1ull << ((left + 1) / 2)) - 1), drow[r] + c / 2);
                __m512i q = _mm512_cvtepu8_epi16(bytes);
                __m512i hi = _mm512_permutexvar_epi16(_mm512_srli_epi16(q, 4), table);
                __m512i lo = _mm512_permutexvar_epi16(q, table);
                b[r] = dp_avx512bf16(b[r], xe, hi_first ? hi : lo);
                b[r] = dp_avx512bf16(b[r], xo, hi_first ? lo : hi);
            }
        }
        for (int r = 0; r < R; r++) {
            if (mode == GEMV4_BLOCK64) {
                __m512 sc = _mm512_set1_ps(qs_ld_f32((const float *)srow[r] + s));
                acc[r] = chk ? gemv_scale_add_avx512(acc[r], b[r], sc)
                             : _mm512_fmadd_ps(b[r], sc, acc[r]);
                continue;
            }
            int64_t blk = s * bpb, j = blk % 16; /* the step's first block, its lane in sv */
            if (j == 0)
                sv[r] = mode == GEMV4_MX ? e8m0_16_avx512bf16(srow[r] + blk, nblk - blk)
                                         : nv_16_avx512bf16(srow[r] + blk, nblk - blk, s_global);
            __m512i idx =
                _mm512_add_epi32(mode == GEMV4_MX ? half : quarter, _mm512_set1_epi32((int)j));
            acc[r] = _mm512_fmadd_ps(b[r], _mm512_permutexvar_ps(idx, sv[r]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++)
        qs_st_f32(y + r0 + r, gemv_canon_avx512(_mm512_reduce_add_ps(acc[r])));
}

/* Every row of the call for one x row: tiles of 4, then single rows. */
static inline __attribute__((always_inline)) void
gemv4_m1_avx512bf16(const uint16_t *x, int64_t k, const gemv_rows_avx512 *w, int64_t rows,
                    __m512i table, int hi_first, int mode, float s_global, float *y)
{
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4)
        gemv4_tile_avx512bf16(x, k, w, r, 4, rows, table, hi_first, mode, s_global, y);
    for (; r < rows; r++)
        gemv4_tile_avx512bf16(x, k, w, r, 1, rows, table, hi_first, mode, s_global, y);
}

#endif /* QS_X86_MM_GEMV4_AVX512BF16_H */

/* SPDX-License-Identifier: MIT */
/*
 * 2:4 kernels for AArch64 NEON: STRIP mask, fused prune + compress, compress with a mask or by
 * non-zero values, and decompress, 16 floats (four groups, one meta word) per step. Same rules as
 * src/ref/sp24_ref.c (docs/sparsity.md §2.2, §3): rank keys are the magnitude bits of the score
 * with NaN clamped just above +Inf. VLD4 puts position j of four groups in one vector, so the six
 * pairwise key compares of a group rank four groups at once; ties go to the lower position as in
 * the reference. Values move as bytes with TBL under per-group index tables, whose out-of-range
 * entries give the +0.0 of the fill rule (§3.4). Tails of fewer than 16 elements call the
 * reference kernels.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "../ref/sp24_ref.h"

#define Z 0xFF /* a TBL index past the table: the byte reads as 0 */

/* Byte indices of a group's two stored values from its 4-bit keep pattern: the positions
 * (i0, i1) of qs_sp24_nibble_of_keep, Z where a fill position is not kept (stored as +0). */
static const uint8_t gather_idx[16][8] = {
    {Z, Z, Z, Z, Z, Z, Z, Z},       {0, 1, 2, 3, Z, Z, Z, Z},     {Z, Z, Z, Z, 4, 5, 6, 7},
    {0, 1, 2, 3, 4, 5, 6, 7},       {Z, Z, Z, Z, 8, 9, 10, 11},   {0, 1, 2, 3, 8, 9, 10, 11},
    {4, 5, 6, 7, 8, 9, 10, 11},     {0, 1, 2, 3, 4, 5, 6, 7},     {Z, Z, Z, Z, 12, 13, 14, 15},
    {0, 1, 2, 3, 12, 13, 14, 15},   {4, 5, 6, 7, 12, 13, 14, 15}, {0, 1, 2, 3, 4, 5, 6, 7},
    {8, 9, 10, 11, 12, 13, 14, 15}, {0, 1, 2, 3, 8, 9, 10, 11},   {4, 5, 6, 7, 8, 9, 10, 11},
    {0, 1, 2, 3, 4, 5, 6, 7},
};

/* Decompress of one group by nibble: output bytes from the group's two stored values (bytes 0-7),
 * position i0 = nib & 3 taking value 0 and then i1 = nib >> 2 value 1, the rest +0, which is the
 * reference's store order for every nibble (drivers pass only the six valid ones). */
static const uint8_t scatter_idx[16][16] = {
    {4, 5, 6, 7, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z},
    {4, 5, 6, 7, 0, 1, 2, 3, Z, Z, Z, Z, Z, Z, Z, Z},
    {4, 5, 6, 7, Z, Z, Z, Z, 0, 1, 2, 3, Z, Z, Z, Z},
    {4, 5, 6, 7, Z, Z, Z, Z, Z, Z, Z, Z, 0, 1, 2, 3},
    {0, 1, 2, 3, 4, 5, 6, 7, Z, Z, Z, Z, Z, Z, Z, Z},
    {Z, Z, Z, Z, 4, 5, 6, 7, Z, Z, Z, Z, Z, Z, Z, Z},
    {Z, Z, Z, Z, 4, 5, 6, 7, 0, 1, 2, 3, Z, Z, Z, Z},
    {Z, Z, Z, Z, 4, 5, 6, 7, Z, Z, Z, Z, 0, 1, 2, 3},
    {0, 1, 2, 3, Z, Z, Z, Z, 4, 5, 6, 7, Z, Z, Z, Z},
    {Z, Z, Z, Z, 0, 1, 2, 3, 4, 5, 6, 7, Z, Z, Z, Z},
    {Z, Z, Z, Z, Z, Z, Z, Z, 4, 5, 6, 7, Z, Z, Z, Z},
    {Z, Z, Z, Z, Z, Z, Z, Z, 4, 5, 6, 7, 0, 1, 2, 3},
    {0, 1, 2, 3, Z, Z, Z, Z, Z, Z, Z, Z, 4, 5, 6, 7},
    {Z, Z, Z, Z, 0, 1, 2, 3, Z, Z, Z, Z, 4, 5, 6, 7},
    {Z, Z, Z, Z, Z, Z, Z, Z, 0, 1, 2, 3, 4, 5, 6, 7},
    {Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, 4, 5, 6, 7},
};

#undef Z

/* Keep vectors (all ones where kept) of the four positions of four groups, position j of group g
 * in lane g of k[j]. Position i beats j when its key is larger, or equal and i < j: for i < j
 * that is k[i] >= k[j], for i > j it is k[i] > k[j], the negation of the same compare. Keys are
 * below 2^31, so the beat masks (-1 each) add up without overflow; kept when fewer than two beat
 * it. */
static inline void keep4_neon(const uint32x4_t k[4], uint32x4_t keep[4])
{
    uint32x4_t c01 = vcgeq_u32(k[0], k[1]), c02 = vcgeq_u32(k[0], k[2]);
    uint32x4_t c03 = vcgeq_u32(k[0], k[3]), c12 = vcgeq_u32(k[1], k[2]);
    uint32x4_t c13 = vcgeq_u32(k[1], k[3]), c23 = vcgeq_u32(k[2], k[3]);
    int32x4_t s[4], two = vdupq_n_s32(-2);

    uint32x4_t b0 = vaddq_u32(vaddq_u32(vmvnq_u32(c01), vmvnq_u32(c02)), vmvnq_u32(c03));

    s[0] = vreinterpretq_s32_u32(b0);
    s[1] = vreinterpretq_s32_u32(vaddq_u32(vaddq_u32(c01, vmvnq_u32(c12)), vmvnq_u32(c13)));
    s[2] = vreinterpretq_s32_u32(vaddq_u32(vaddq_u32(c02, c12), vmvnq_u32(c23)));
    s[3] = vreinterpretq_s32_u32(vaddq_u32(vaddq_u32(c03, c13), c23));
    for (int j = 0; j < 4; j++)
        keep[j] = vcgtq_s32(s[j], two);
}

/* Rank keys of position j of four groups: |w| or fl(|w| * norm) bits, NaN clamped (§2.2). */
static inline void keys4_neon(const float32x4x4_t *w, const float *norm, uint32x4_t k[4])
{
    const uint32x4_t absm = vdupq_n_u32(0x7FFFFFFFu), knan = vdupq_n_u32(QS_SP_KEY_NAN);
    float32x4x4_t nv;

    if (norm)
        nv = vld4q_f32(norm);
    for (int j = 0; j < 4; j++) {
        uint32x4_t u = vandq_u32(vreinterpretq_u32_f32(w->val[j]), absm);
        if (norm) {
            float32x4_t a = vmulq_f32(vreinterpretq_f32_u32(u), nv.val[j]);
            u = vandq_u32(vreinterpretq_u32_f32(a), absm);
        }
        k[j] = vminq_u32(u, knan);
    }
}

/* Keep bits of each group (bit j = position j kept) in lane g. */
static inline uint32x4_t keep_bits_neon(const uint32x4_t keep[4])
{
    uint32x4_t b = vandq_u32(keep[0], vdupq_n_u32(1));
    b = vorrq_u32(b, vandq_u32(keep[1], vdupq_n_u32(2)));
    b = vorrq_u32(b, vandq_u32(keep[2], vdupq_n_u32(4)));
    return vorrq_u32(b, vandq_u32(keep[3], vdupq_n_u32(8)));
}

/* Keep bits of four groups as one 16-bit word, group g at bits 4g. */
static inline unsigned keep16_neon(uint32x4_t kb)
{
    const int32_t sh[4] = {0, 4, 8, 12};
    return vaddvq_u32(vshlq_u32(kb, vld1q_s32(sh)));
}

/* Meta word and the eight stored values of 16 elements w[0..16) from their keep bits (§3.2,
 * §3.4): kept values are copied as bytes, fill positions become +0. */
static inline uint16_t put16_neon(const float *w, unsigned k16, float *values)
{
    uint8x16x2_t a = {{vld1q_u8((const uint8_t *)w), vld1q_u8((const uint8_t *)(w + 4))}};
    uint8x16x2_t b = {{vld1q_u8((const uint8_t *)(w + 8)), vld1q_u8((const uint8_t *)(w + 12))}};
    const uint8x8_t hi = vdup_n_u8(16); /* second table register; Z | 16 stays out of range */
    uint8x16_t ia = vcombine_u8(vld1_u8(gather_idx[k16 & 15u]),
                                vorr_u8(vld1_u8(gather_idx[(k16 >> 4) & 15u]), hi));
    uint8x16_t ib = vcombine_u8(vld1_u8(gather_idx[(k16 >> 8) & 15u]),
                                vorr_u8(vld1_u8(gather_idx[k16 >> 12]), hi));

    vst1q_u8((uint8_t *)values, vqtbl2q_u8(a, ia));
    vst1q_u8((uint8_t *)(values + 4), vqtbl2q_u8(b, ib));
    unsigned n01 = qs_sp24_nibbles_of_keep8[k16 & 0xFFu];
    unsigned n23 = qs_sp24_nibbles_of_keep8[k16 >> 8];
    return (uint16_t)(n01 | n23 << 8);
}

/* Keep bits of four groups of w[0..16) by rank (§2.2). */
static inline uint32x4_t rank_bits_neon(const float *w, const float *norm, uint32x4_t keep[4])
{
    float32x4x4_t x = vld4q_f32(w);
    uint32x4_t k[4];

    keys4_neon(&x, norm, k);
    keep4_neon(k, keep);
    return keep_bits_neon(keep);
}

void qs_sp24_mask_f32__neon(const float *w, const float *norm, int64_t n, uint8_t *mask)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint32x4_t keep[4];
        (void)rank_bits_neon(w + i, norm ? norm + i : NULL, keep);
        /* lane g holds the four mask bytes of group g, position j in byte j (little endian) */
        uint32x4_t m = vandq_u32(keep[0], vdupq_n_u32(0x1u));
        m = vorrq_u32(m, vandq_u32(keep[1], vdupq_n_u32(0x100u)));
        m = vorrq_u32(m, vandq_u32(keep[2], vdupq_n_u32(0x10000u)));
        m = vorrq_u32(m, vandq_u32(keep[3], vdupq_n_u32(0x1000000u)));
        vst1q_u8(mask + i, vreinterpretq_u8_u32(m));
    }
    qs_sp24_mask_f32__ref(w + i, norm ? norm + i : NULL, n - i, mask + i);
}

void qs_sp24_prune_f32__neon(const float *w, const float *norm, int64_t n, float *values,
                             uint16_t *meta)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint32x4_t keep[4];
        unsigned k16 = keep16_neon(rank_bits_neon(w + i, norm ? norm + i : NULL, keep));
        qs_st_u16(meta + i / 16, put16_neon(w + i, k16, values + i / 2));
    }
    qs_sp24_prune_f32__ref(w + i, norm ? norm + i : NULL, n - i, values + i / 2, meta + i / 16);
}

void qs_sp24_compress_f32__neon(const float *w, const uint8_t *mask, int64_t n, float *values,
                                uint16_t *meta)
{
    const uint8_t bit[16] = {1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8};
    const uint8x16_t vbit = vld1q_u8(bit);
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        uint32x4_t kb;
        if (mask) {
            uint8x16_t m = vld1q_u8(mask + i);
            kb = vpaddlq_u16(vpaddlq_u8(vandq_u8(vtstq_u8(m, m), vbit)));
        } else {
            /* FCMEQ is false for every NaN, signaling ones too: NaN != 0 is kept */
            float32x4x4_t x = vld4q_f32(w + i);
            uint32x4_t keep[4];
            for (int j = 0; j < 4; j++)
                keep[j] = vmvnq_u32(vceqq_f32(x.val[j], vdupq_n_f32(0.0f)));
            kb = keep_bits_neon(keep);
        }
        qs_st_u16(meta + i / 16, put16_neon(w + i, keep16_neon(kb), values + i / 2));
    }
    qs_sp24_compress_f32__ref(w + i, mask ? mask + i : NULL, n - i, values + i / 2, meta + i / 16);
}

void qs_sp24_decompress_f32__neon(const float *values, const uint16_t *meta, int64_t n, float *dst)
{
    const uint8x16_t hi = vdupq_n_u8(8); /* the second group's values sit at bytes 8-15 */
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        unsigned word = qs_ld_u16(meta + i / 16);
        uint8x16_t t01 = vld1q_u8((const uint8_t *)(values + i / 2));
        uint8x16_t t23 = vld1q_u8((const uint8_t *)(values + i / 2 + 4));
        uint8_t *d = (uint8_t *)(dst + i);
        vst1q_u8(d, vqtbl1q_u8(t01, vld1q_u8(scatter_idx[word & 15u])));
        vst1q_u8(d + 16, vqtbl1q_u8(t01, vorrq_u8(vld1q_u8(scatter_idx[(word >> 4) & 15u]), hi)));
        vst1q_u8(d + 32, vqtbl1q_u8(t23, vld1q_u8(scatter_idx[(word >> 8) & 15u])));
        vst1q_u8(d + 48, vqtbl1q_u8(t23, vorrq_u8(vld1q_u8(scatter_idx[word >> 12]), hi)));
    }
    qs_sp24_decompress_f32__ref(values + i / 2, meta + i / 16, n - i, dst + i);
}

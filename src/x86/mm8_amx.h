/* SPDX-License-Identifier: MIT */
/*
 * The tile configuration and the panel format of a call (mm8_panel_avx512.h) of the AMX
 * int8-activation kernels (mm8_amx.c). Include only from files compiled with the AMX flags.
 */
#ifndef QS_X86_MM8_AMX_H
#define QS_X86_MM8_AMX_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "mm8_panel_avx512.h"

/* The tile configuration (palette 1) of the Intel SDM, 64 bytes. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} mm8_amx_cfg;

/* Segments: tiles 0 and 6 hold 16 rows of `step` bytes (A), 1 and 7 step / 4 k-quads of 16
 * lanes (B), 2 ... 5 C (16 x 16 int32). pair: 0 and 1 A, 2 and 3 B, 4 ... 7 C (2 x 2 tiles). */
static inline void mm8_amx_start(int64_t step, int pair)
{
    mm8_amx_cfg c;

    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        int a = pair ? t < 2 : t == 0 || t == 6, b = pair ? t == 2 || t == 3 : t == 1 || t == 7;
        c.rows[t] = (uint8_t)(b ? step / 4 : 16);
        c.colsb[t] = (uint16_t)(a ? step : 64);
    }
    _tile_loadconfig(&c);
}

/* The panel's format for a call (signed bytes); 0 if the tiles do not take the layout (the
 * caller's fallback runs it). Segments must tile a 256-column chunk (16, 32, 64, 128, 256) or be
 * 512 columns, or be whole rows. */
static inline int mm8_amx_setup(mm8p_fmt *f, int kind, const int8_t *book, const qs_mm_weight *w,
                                int64_t r0, int64_t rows)
{
    int64_t seg;

    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->planes = kind == MM8P_E4M3 ? 3 : 1;
    f->w = w;
    f->r0 = r0;
    f->rows = rows;
    switch (kind) {
    case MM8P_BNB4:
        if (w->k % 2 != 0) /* rows on whole bytes */
            return 0;
        if (w->group % w->k == 0) { /* a block holds whole rows: one scale per row */
            f->whole = 1;
            seg = w->k;
        } else if (w->k % w->group == 0 && w->group % 64 == 0) {
            seg = w->group;
        } else {
            return 0;
        }
        break;
    case MM8P_W8A8:
        f->whole = w->group >= w->k;
        seg = f->whole ? w->k : w->group;
        break;
    case MM8P_MX: seg = 32; break;
    case MM8P_NV: seg = 16; break;
    default: seg = QS_MM_E4M3A8_SEG; break;
    }
    f->seg = seg;
    if (f->whole)
        f->kc = MM8P_KC_MAX;
    else if (MM8P_KC % seg == 0 && seg % 16 == 0)
        f->kc = MM8P_KC;
    else if (seg == MM8P_KC_MAX)
        f->kc = seg;
    else
        return 0;
    if (book) {
        int8_t t8[16];
        memcpy(t8, book, 16);
        f->tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t8));
    }
    if (kind == MM8P_E4M3)
        f->u = qs_ld_f32((const float *)w->scale) * 0x1p-9f;
    return 1;
}

#endif /* QS_X86_MM8_AMX_H */

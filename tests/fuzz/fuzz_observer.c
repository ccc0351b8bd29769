/* SPDX-License-Identifier: MIT */
/*
 * qs_observer_deserialize on arbitrary bytes, then everything an accepted observer offers, under
 * every ISA tier. The first input byte is a mode: bit 0 set rewrites the FNV-1a checksum of the
 * rest before deserializing, so mutations reach the state checks behind it instead of dying at
 * the checksum. Checked: known statuses; *out untouched on failure; an accepted string has
 * qs_observer_serialized_size equal to its length and serializes back to the same bytes; the
 * thresholds, ranges and qparams of every target agree bit for bit between tiers, before and
 * after an update with data from the input and a self-merge; a failing call wrote nothing.
 *
 * Histogram searches (entropy, MSE) cost O(num_bins^2) per channel and run once per query, per
 * tier and per round (about 70 times an input), and the MSE search's FP8 fake quantizer is slow
 * under the sanitizers: their queries run only while num_bins^2 x channels stays within
 * MAX_SEARCH_WORK, so that one input stays well under a second. The library's own bound
 * (QS_OBSERVER_SEARCH_MAX_BINS) is tested in tests/test_calib.c at full size.
 */
#include "fuzz_common.h"

#include "qsparse/calib.h"

#define MAX_QUERY_BINS 4096
#define MAX_QUERY_CHANNELS 64
#define MAX_SEARCH_WORK (1 << 18)

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Everything computed from one observer, written into a flat record to compare between tiers. */
struct answers {
    qs_status st[16];
    uint32_t amax[MAX_QUERY_CHANNELS], lo[MAX_QUERY_CHANNELS], hi[MAX_QUERY_CHANNELS];
    uint32_t scale[6][MAX_QUERY_CHANNELS];
    int32_t zp[6][MAX_QUERY_CHANNELS];
    uint64_t finite, nan, inf;
};

static void query(qs_ctx *ctx, const qs_observer *o, int64_t ch, struct answers *a)
{
    memset(a, 0, sizeof *a);
    float f[MAX_QUERY_CHANNELS], g[MAX_QUERY_CHANNELS];
    int k = 0;

    /* A short buffer must be refused untouched. */
    if (ch > 0) {
        memset(f, FZ_CANARY, sizeof f);
        qs_status st = qs_observer_amax(ctx, o, f, ch - 1);
        fz_check(st == QS_ERR_BUFFER_TOO_SMALL && fz_untouched((uint8_t *)f, sizeof f),
                 "qs_observer_amax with a short buffer: %s", qs_status_str(st));
    }
    a->st[k++] = qs_observer_amax(ctx, o, f, ch);
    memcpy(a->amax, f, (size_t)ch * 4);
    a->st[k++] = qs_observer_range(ctx, o, f, g, ch);
    memcpy(a->lo, f, (size_t)ch * 4);
    memcpy(a->hi, g, (size_t)ch * 4);
    for (int target = 0; target <= 5; target++) {
        int32_t zp[MAX_QUERY_CHANNELS];
        memset(f, FZ_CANARY, sizeof f);
        memset(zp, FZ_CANARY, sizeof zp);
        qs_status st = qs_observer_qparams(ctx, o, target, f, zp, ch);
        fz_check(fz_status_known(st), "qs_observer_qparams: unknown status %d", st);
        if (st != QS_OK)
            fz_check(fz_untouched((uint8_t *)f, sizeof f) && fz_untouched((uint8_t *)zp, sizeof zp),
                     "qs_observer_qparams wrote and failed (%s)", qs_status_str(st));
        a->st[k++] = st;
        memcpy(a->scale[target], f, (size_t)ch * 4);
        memcpy(a->zp[target], zp, (size_t)ch * 4);
    }
    a->st[k++] = qs_observer_counts(o, -1, &a->finite, &a->nan, &a->inf);
    for (int i = 0; i < k; i++)
        fz_check(fz_status_known(a->st[i]), "observer query %d: unknown status %d", i, a->st[i]);
}

/* Serialize o and check it reads back as an observer that serializes to the same bytes. */
static void check_serialize(qs_ctx *ctx, const qs_observer *o, const uint8_t *expect,
                            size_t expect_len)
{
    int64_t bytes = -1, written = -1;
    fz_check(qs_observer_serialized_size(o, &bytes) == QS_OK && bytes > 0,
             "qs_observer_serialized_size failed on an accepted observer");
    uint8_t *buf = fz_canary_new((size_t)bytes);
    qs_status st = qs_observer_serialize(ctx, o, buf, bytes - 1, &written);
    fz_check(st == QS_ERR_BUFFER_TOO_SMALL && fz_untouched(buf, (size_t)bytes),
             "qs_observer_serialize into a short buffer: %s", qs_status_str(st));
    st = qs_observer_serialize(ctx, o, buf, bytes, &written);
    fz_check(st == QS_OK && written == bytes, "qs_observer_serialize: %s", qs_status_str(st));
    if (expect)
        fz_check((size_t)bytes == expect_len && fz_byte_diff(buf, expect, expect_len) < 0,
                 "an accepted string does not serialize back to itself");
    qs_observer *back = NULL;
    st = qs_observer_deserialize(ctx, buf, bytes, &back);
    fz_check(st == QS_OK, "a serialized observer is refused: %s", qs_status_str(st));
    qs_observer_destroy(back);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fz_tiers *t = fz_tiers_get();
    uint8_t mode = data[0];
    size_t len = size - 1;
    uint8_t *blob = fz_canary_new(len);
    memcpy(blob, data + 1, len);
    if ((mode & 1) && len >= 8) {
        uint64_t h = fnv1a(blob, len - 8);
        for (int i = 0; i < 8; i++)
            blob[len - 8 + i] = (uint8_t)(h >> (8 * i));
    }

    qs_observer *const sentinel = (qs_observer *)(uintptr_t)0x5a5a5a5a;
    qs_observer *obs[FZ_MAX_TIERS];
    qs_status st0 = 0;
    for (int i = 0; i < t->count; i++) {
        obs[i] = sentinel;
        qs_status st = qs_observer_deserialize(t->ctx[i], blob, (int64_t)len, &obs[i]);
        fz_check(fz_status_known(st), "qs_observer_deserialize: unknown status %d", st);
        if (i == 0)
            st0 = st;
        fz_check(st == st0, "deserialize status differs between tiers");
        if (st != QS_OK)
            fz_check(obs[i] == sentinel, "*out written by a failing qs_observer_deserialize");
    }
    if (st0 != QS_OK) {
        free(blob);
        return 0;
    }

    check_serialize(t->ctx[0], obs[0], blob, len);
    qs_observer_params p;
    int64_t ch = 0;
    fz_check(qs_observer_get_params(obs[0], &p) == QS_OK, "qs_observer_get_params failed");
    fz_check(qs_observer_channels(obs[0], &ch) == QS_OK && ch >= 0, "qs_observer_channels");
    int searches = p.method == QS_OBSERVER_ENTROPY || p.method == QS_OBSERVER_MSE;
    int64_t search_work = (int64_t)p.num_bins * p.num_bins * (ch > 0 ? ch : 1);
    int cheap = p.num_bins <= MAX_QUERY_BINS && ch <= MAX_QUERY_CHANNELS &&
                (!searches || search_work <= MAX_SEARCH_WORK);

    /* Data for an update: the blob's own bytes as f32, one column per channel or row. */
    int64_t rows = 1, cols = 8;
    if (p.axis == 0 && ch > 0)
        rows = ch, cols = 2;
    else if (p.axis == 1 && ch > 0)
        rows = 2, cols = ch;
    float *x = malloc((size_t)(rows * cols) * 4);
    if (!x)
        fz_fail("out of memory");
    for (int64_t k = 0; k < rows * cols; k++) {
        uint32_t bits = 0;
        for (int b = 0; b < 4; b++)
            bits |= (uint32_t)blob[(size_t)(k * 4 + b) % len] << (8 * b);
        memcpy(&x[k], &bits, 4);
    }

    struct answers ref, cur;
    for (int round = 0; round < 2 && cheap; round++) {
        for (int i = 0; i < t->count; i++) {
            query(t->ctx[i], obs[i], ch, i == 0 ? &ref : &cur);
            if (i > 0)
                fz_check(memcmp(&ref, &cur, sizeof ref) == 0,
                         "observer answers differ between scalar and %s (round %d)",
                         fz_tier_name(t->ctx[i]), round);
        }
        if (round == 1)
            break;
        for (int i = 0; i < t->count; i++) {
            qs_status su = qs_observer_update(t->ctx[i], obs[i], x, QS_DTYPE_F32, rows, cols);
            qs_status sm = qs_observer_merge(t->ctx[i], obs[i], obs[i]);
            fz_check(fz_status_known(su) && fz_status_known(sm), "update/merge: unknown status");
        }
        check_serialize(t->ctx[0], obs[0], NULL, 0);
        /* A per-channel observer without updates took its channel count from this one. */
        fz_check(qs_observer_channels(obs[0], &ch) == QS_OK && ch <= MAX_QUERY_CHANNELS,
                 "qs_observer_channels after an update");
        if (searches && (int64_t)p.num_bins * p.num_bins * ch > MAX_SEARCH_WORK)
            break;
    }
    free(x);
    for (int i = 0; i < t->count; i++)
        qs_observer_destroy(obs[i]);
    free(blob);
    return 0;
}

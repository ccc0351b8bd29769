/* SPDX-License-Identifier: MIT */
/*
 * Observer serialization (docs/calibration.md §3, §9): a versioned byte string, little-endian on
 * every platform (written and read byte by byte, never by casting structs), ending in a 64-bit
 * FNV-1a checksum. Reading checks the whole string — length, magic, version, checksum, parameters
 * and the consistency of every channel's state — before allocating anything.
 *
 * Layout, version 1 (offsets in bytes):
 *   0 "QSOB"; 4 u32 version; 8 u32 header bytes (64); 12 i32 method; 16 i32 axis;
 *   20 i32 num_bins; 24 i32 num_levels; 28 i32 start_bin; 32 i32 target;
 *   36 f32 averaging_constant; 40 f64 percentile; 48 u64 channels; 56 u64 zero.
 *   Per channel (56 bytes): u64 total, n_nan, n_inf, zeros_pending; f32 lo, hi, ema_lo, ema_hi;
 *   i32 k; u32 flags (bit 0: k set, bit 1: moving average initialised).
 *   Histogram methods: channels * num_bins u64 counts. Then u64 FNV-1a of all preceding bytes.
 */
#include <math.h>
#include <string.h>

#include "calib_internal.h"

#define HEADER_BYTES 64
#define CHAN_BYTES 56
#define MAGIC "QSOB"

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int is_neg_zero(float f)
{
    return fbits(f) == 0x80000000u;
}

/* One channel record (56 bytes) into *ch; returns its flags word. */
static uint32_t read_chan(const uint8_t *q, struct qs_calib_chan *ch)
{
    uint32_t flags = get32(q + 52);

    qs_calib_chan_init(ch);
    ch->total = get64(q);
    ch->n_nan = get64(q + 8);
    ch->n_inf = get64(q + 16);
    ch->zeros_pending = get64(q + 24);
    ch->lo = bitsf(get32(q + 32));
    ch->hi = bitsf(get32(q + 36));
    ch->ema_lo = bitsf(get32(q + 40));
    ch->ema_hi = bitsf(get32(q + 44));
    ch->k = (int32_t)get32(q + 48);
    ch->has_k = (int32_t)(flags & 1u);
    ch->ema_init = (int32_t)((flags >> 1) & 1u);
    return flags;
}

static uint64_t fnv1a(const uint8_t *p, int64_t n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (int64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

/* Serialized size for `channels` channels, or -1 on overflow. */
static int64_t size_for(const qs_observer_params *p, int64_t channels)
{
    int64_t per = CHAN_BYTES + (qs_calib_has_hist(p->method) ? (int64_t)p->num_bins * 8 : 0);
    int64_t body, total;

    if (channels < 0 || qs_mul_overflow(channels, per, &body) ||
        qs_add_overflow(body, HEADER_BYTES + 8, &total))
        return -1;
    return total;
}

QS_API qs_status qs_observer_serialized_size(const qs_observer *obs, int64_t *bytes)
{
    if (!obs || !bytes)
        return QS_ERR_INVALID_ARG;
    int64_t s = size_for(&obs->p, obs->channels);
    if (s < 0)
        return QS_ERR_OVERFLOW;
    *bytes = s;
    return QS_OK;
}

QS_API qs_status qs_observer_serialize(qs_ctx *ctx, const qs_observer *obs, void *dst,
                                       int64_t capacity, int64_t *written)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!obs || !dst || !written)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_serialize: null pointer");
    int64_t size = size_for(&obs->p, obs->channels);
    if (size < 0)
        return qs_fail(ctx, QS_ERR_OVERFLOW, "qs_observer_serialize: size overflows");
    if (capacity < size)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "qs_observer_serialize: %lld < %lld bytes",
                       (long long)capacity, (long long)size);

    uint8_t *p = dst, *q;
    const qs_observer_params *pr = &obs->p;
    uint64_t pct;
    memcpy(&pct, &pr->percentile, 8);
    memcpy(p, MAGIC, 4);
    put32(p + 4, QS_OBSERVER_FORMAT_VERSION);
    put32(p + 8, HEADER_BYTES);
    put32(p + 12, (uint32_t)pr->method);
    put32(p + 16, (uint32_t)pr->axis);
    put32(p + 20, (uint32_t)pr->num_bins);
    put32(p + 24, (uint32_t)pr->num_levels);
    put32(p + 28, (uint32_t)pr->start_bin);
    put32(p + 32, (uint32_t)pr->target);
    put32(p + 36, fbits(pr->averaging_constant));
    put64(p + 40, pct);
    put64(p + 48, (uint64_t)obs->channels);
    put64(p + 56, 0);
    q = p + HEADER_BYTES;
    for (int64_t c = 0; c < obs->channels; c++, q += CHAN_BYTES) {
        const struct qs_calib_chan *ch = &obs->ch[c];
        put64(q, ch->total);
        put64(q + 8, ch->n_nan);
        put64(q + 16, ch->n_inf);
        put64(q + 24, ch->zeros_pending);
        put32(q + 32, fbits(ch->lo));
        put32(q + 36, fbits(ch->hi));
        put32(q + 40, fbits(ch->ema_lo));
        put32(q + 44, fbits(ch->ema_hi));
        put32(q + 48, (uint32_t)ch->k);
        put32(q + 52, (uint32_t)(ch->has_k ? 1 : 0) | (uint32_t)(ch->ema_init ? 2 : 0));
    }
    if (obs->counts) {
        int64_t n = obs->channels * (int64_t)pr->num_bins;
        for (int64_t i = 0; i < n; i++, q += 8)
            put64(q, obs->counts[i]);
    }
    put64(q, fnv1a(p, size - 8));
    *written = size;
    return qs_ok(ctx);
}

/* Consistency of one channel read from bytes; NULL if fine, else the reason. */
static const char *chan_error(const qs_observer_params *p, int32_t log2_bins,
                              const struct qs_calib_chan *c, const uint8_t *counts)
{
    int has_hist = qs_calib_has_hist(p->method);

    if (c->total == 0) {
        if (!(c->lo == INFINITY && c->hi == -INFINITY))
            return "empty channel with a range";
    } else if (!(isfinite(c->lo) && isfinite(c->hi) && c->lo <= c->hi)) {
        return "channel range is not finite and ordered";
    } else if (is_neg_zero(c->lo) || is_neg_zero(c->hi)) {
        return "channel range holds -0";
    }
    if (c->ema_init && (p->method != QS_OBSERVER_MOVING_AVERAGE || !isfinite(c->ema_lo) ||
                        !isfinite(c->ema_hi)))
        return "inconsistent moving average";
    if (!has_hist) {
        if (c->has_k || c->zeros_pending || c->k)
            return "histogram fields set for a method without histogram";
        return NULL;
    }
    float amax = qs_calib_chan_amax(c);
    if (c->has_k != (amax > 0.0f))
        return "bin width set without a non-zero value, or missing";
    if (c->has_k && c->k != qs_calib_fit_k(amax, log2_bins))
        return "bin width does not fit the range";
    if (c->has_k && c->zeros_pending)
        return "pending zeros with a bin width";
    if (!c->has_k && (c->k != 0 || c->zeros_pending != c->total))
        return "zeros-only channel with other values";
    /* counts add up to total; none above the bin that holds amax */
    int64_t n_used = c->has_k ? (int64_t)floor(ldexp((double)amax, -c->k)) + 1 : 0;
    uint64_t sum = 0;
    for (int64_t j = 0; j < p->num_bins; j++) {
        uint64_t v = get64(counts + 8 * j);
        if (v && j >= n_used)
            return "counts above the observed maximum";
        if (sum + v < sum)
            return "counts overflow";
        sum += v;
    }
    if (sum + c->zeros_pending != c->total)
        return "counts do not add up to the total";
    if (c->has_k && get64(counts + 8 * (n_used - 1)) == 0)
        return "the bin of the maximum is empty";
    return NULL;
}

QS_API qs_status qs_observer_deserialize(qs_ctx *ctx, const void *src, int64_t bytes,
                                         qs_observer **out)
{
    const uint8_t *p = src;
    qs_observer_params pr;
    const char *why;
    int64_t channels, size;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!src || !out || bytes < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_deserialize: null pointer");
    if (bytes < HEADER_BYTES + 8 || memcmp(p, MAGIC, 4) != 0)
        return qs_fail(ctx, QS_ERR_BAD_DATA, "qs_observer_deserialize: not an observer (magic)");
    if (get32(p + 4) != QS_OBSERVER_FORMAT_VERSION)
        return qs_fail(ctx, QS_ERR_UNSUPPORTED,
                       "qs_observer_deserialize: format version %u, this library reads %d",
                       get32(p + 4), QS_OBSERVER_FORMAT_VERSION);
    if (fnv1a(p, bytes - 8) != get64(p + bytes - 8))
        return qs_fail(ctx, QS_ERR_BAD_DATA,
                       "qs_observer_deserialize: checksum mismatch (corrupt or truncated)");
    qs_observer_params_init(&pr, 0);
    pr.method = (int32_t)get32(p + 12);
    pr.axis = (int32_t)get32(p + 16);
    pr.num_bins = (int32_t)get32(p + 20);
    pr.num_levels = (int32_t)get32(p + 24);
    pr.start_bin = (int32_t)get32(p + 28);
    pr.target = (int32_t)get32(p + 32);
    pr.averaging_constant = bitsf(get32(p + 36));
    uint64_t pct = get64(p + 40);
    memcpy(&pr.percentile, &pct, 8);
    if (get32(p + 8) != HEADER_BYTES || get64(p + 56) != 0)
        return qs_fail(ctx, QS_ERR_BAD_DATA, "qs_observer_deserialize: bad header");
    if ((why = qs_calib_params_error(&pr)) != NULL)
        return qs_fail(ctx, QS_ERR_BAD_DATA, "qs_observer_deserialize: %s", why);
    if (get64(p + 48) > (uint64_t)INT64_MAX)
        return qs_fail(ctx, QS_ERR_BAD_DATA, "qs_observer_deserialize: bad channel count");
    channels = (int64_t)get64(p + 48);
    if ((pr.axis < 0 && channels != 1) || (size = size_for(&pr, channels)) < 0 || size != bytes)
        return qs_fail(ctx, QS_ERR_BAD_DATA,
                       "qs_observer_deserialize: length %lld does not match the header",
                       (long long)bytes);

    int32_t log2_bins = 0;
    while ((1 << log2_bins) < pr.num_bins)
        log2_bins++;
    const uint8_t *cp = p + HEADER_BYTES;
    const uint8_t *counts = cp + channels * CHAN_BYTES;
    int64_t per = qs_calib_has_hist(pr.method) ? (int64_t)pr.num_bins * 8 : 0;
    for (int64_t c = 0; c < channels; c++) {
        struct qs_calib_chan ch;
        uint32_t flags = read_chan(cp + c * CHAN_BYTES, &ch);
        why = flags > 3 ? "unknown flags" : chan_error(&pr, log2_bins, &ch, counts + c * per);
        if (why)
            return qs_fail(ctx, QS_ERR_BAD_DATA, "qs_observer_deserialize: channel %lld: %s",
                           (long long)c, why);
    }

    /* valid: build the observer */
    qs_observer *o;
    qs_status st = qs_observer_create(ctx, &pr, &o);
    if (st != QS_OK)
        return st;
    if (pr.axis >= 0 && channels > 0) {
        st = qs_calib_alloc_state(&o->alloc, &o->p, channels, &o->ch, &o->counts);
        if (st != QS_OK) {
            qs_observer_destroy(o);
            return qs_fail(ctx, st, "qs_observer_deserialize: no memory for the state");
        }
        o->channels = channels;
    }
    for (int64_t c = 0; c < channels; c++)
        (void)read_chan(cp + c * CHAN_BYTES, &o->ch[c]);
    if (o->counts)
        for (int64_t i = 0; i < channels * (int64_t)pr.num_bins; i++)
            o->counts[i] = get64(counts + 8 * i);
    *out = o;
    return qs_ok(ctx);
}

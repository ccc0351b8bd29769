/* SPDX-License-Identifier: MIT */
/*
 * The kernel registry (kernels.inc) as data, and the one selection rule: per slot, the
 * highest-ranked entry whose ISA bits the context allows and whose shape minimums the problem
 * meets. Every slot has a __ref entry of rank 0 and no minimums, so it never ends
 * without a kernel.
 */
#include <stddef.h>

#include "internal.h"

/* Two entries of one slot with the same rank would make the choice depend on list order: they
 * declare the same enumerator here, and the build stops. */
enum qs_rank_check {
#define QS_KERNEL(slot, fn, rank, isa) qs_rank_check_##slot##_##rank,
#include "kernels.inc"
#undef QS_KERNEL
    qs_rank_check_end
};

static const struct qs_kernel_entry entries[] = {
#define QS_KERNEL(slot, fn, rank, isa)                                                             \
    {QS_SLOT_##slot, QS_FAMILY, (rank), (isa), (void (*)(void))fn, #fn, {0, 0, 0, 0, 0, 0, 0, 0}},
#define QS_MATMUL_KERNEL(slot, fn, rank, isa, mr, nr, kr, min_m, min_n, min_k, pack, act)         \
    {QS_SLOT_##slot, QS_FAMILY,          (rank),                                                   \
     (isa),          (void (*)(void))fn, #fn,                                                      \
     {(mr), (nr), (kr), (min_m), (min_n), (min_k), (pack), (act)}},
#include "kernels.inc"
#undef QS_MATMUL_KERNEL
#undef QS_KERNEL
};

#define ENTRY_COUNT ((int32_t)(sizeof entries / sizeof entries[0]))

static const char *const slot_names[] = {
#define QS_SLOT(slot) #slot,
#include "slots.inc"
#undef QS_SLOT
};

const struct qs_kernel_entry *qs_kernel_entries(int32_t *count)
{
    *count = ENTRY_COUNT;
    return entries;
}

const char *qs_slot_name(int32_t slot)
{
    return slot >= 0 && slot < QS_SLOT_COUNT ? slot_names[slot] : NULL;
}

int32_t qs_slot_family(int32_t slot)
{
    for (int32_t i = 0; i < ENTRY_COUNT; i++)
        if (entries[i].slot == slot)
            return entries[i].family;
    return -1;
}

const struct qs_kernel_entry *qs_kernel_select(const struct qs_kernel_entry *e, int32_t count,
                                               int32_t slot, uint32_t isa, int64_t m, int64_t n,
                                               int64_t k)
{
    const struct qs_kernel_entry *best = NULL;

    for (int32_t i = 0; i < count; i++) {
        if (e[i].slot != slot || (e[i].isa & ~isa) != 0)
            continue;
        if (m < e[i].tile.min_m || n < e[i].tile.min_n || k < e[i].tile.min_k)
            continue;
        if (!best || e[i].rank > best->rank)
            best = &e[i];
    }
    return best;
}

static void set_slot(struct qs_kernels *k, int32_t slot, void (*fn)(void))
{
    switch (slot) {
#define QS_SLOT(s)                                                                                 \
    case QS_SLOT_##s: k->s = (qs_##s##_fn *)fn; break;
#include "slots.inc"
#undef QS_SLOT
    default: break;
    }
}

void qs_kernels_init(struct qs_kernels *k, const char **names, uint32_t isa)
{
    for (int32_t s = 0; s < QS_SLOT_COUNT; s++) {
        const struct qs_kernel_entry *e =
            qs_kernel_select(entries, ENTRY_COUNT, s, isa, INT64_MAX, INT64_MAX, INT64_MAX);
        set_slot(k, s, e ? e->fn : NULL);
        names[s] = e ? e->name : NULL;
    }
}

const struct qs_kernel_entry *qs_ctx_kernel_select(const qs_ctx *ctx, int32_t slot, int64_t m,
                                                   int64_t n, int64_t k)
{
    return qs_kernel_select(entries, ENTRY_COUNT, slot, ctx->isa, m, n, k);
}

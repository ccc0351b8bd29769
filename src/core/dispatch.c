/* SPDX-License-Identifier: MIT */
/*
 * The kernel table, generated from kernels.inc: every slot starts at its __ref kernel and is
 * upgraded to the best implementation whose ISA bits the context allows (STYLE.md §4).
 */
#include <stddef.h>

#include "internal.h"

static const struct qs_kernel_entry entries[] = {
#define QS_KERNEL(slot, isa, fn) {QS_SLOT_##slot, (isa), (void (*)(void))fn, #fn},
#include "kernels.inc"
#undef QS_KERNEL
};

static const char *const slot_names[] = {
#define QS_SLOT(slot) #slot,
#include "slots.inc"
#undef QS_SLOT
};

const struct qs_kernel_entry *qs_kernel_entries(int32_t *count)
{
    *count = (int32_t)(sizeof entries / sizeof entries[0]);
    return entries;
}

const char *qs_slot_name(int32_t slot)
{
    return slot >= 0 && slot < QS_SLOT_COUNT ? slot_names[slot] : NULL;
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
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        if ((entries[i].isa & ~isa) != 0)
            continue;
        set_slot(k, entries[i].slot, entries[i].fn);
        names[entries[i].slot] = entries[i].name;
    }
}

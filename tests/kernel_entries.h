/* SPDX-License-Identifier: MIT */
/*
 * The kernel registry as the kernel tests walk it: the reference entry of a slot (the one entry
 * with no ISA bits). Header-only; include it after common.h and core/kernels.h.
 */
#ifndef QS_TESTS_KERNEL_ENTRIES_H
#define QS_TESTS_KERNEL_ENTRIES_H

/* The reference (src/ref) entry of `slot`, NULL if the registry has none. */
static inline const struct qs_kernel_entry *test_ref_entry(int32_t slot)
{
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);

    for (int32_t i = 0; i < count; i++)
        if (e[i].slot == slot && e[i].isa == 0)
            return &e[i];
    return NULL;
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * Public CPU queries, the ISA tier table (isa_tiers.inc), the QS_FORCE_ISA names and the tier a
 * kernel's name carries. Detection
 * itself lives with each architecture (src/x86/cpu_x86.c, src/arm/cpu_arm.c); other machines run
 * the scalar reference.
 */
#include <string.h>
#include <unistd.h>

#include "internal.h"

#if !defined(__x86_64__) && !defined(__aarch64__) /* src/x86, src/arm detect on their own */
uint32_t qs_cpu_detect(void)
{
    return 0;
}
#endif

QS_API uint32_t qs_cpu_isa(void)
{
    return qs_cpu_detect();
}

/* Asked once per process: glibc answers by CPUID, which a virtual machine traps. Threads that
 * race here store the same value. */
int64_t qs_cpu_l2_bytes(void)
{
    static int64_t cached = -1;
    int64_t v = __atomic_load_n(&cached, __ATOMIC_RELAXED);

    if (v < 0) {
#ifdef _SC_LEVEL2_CACHE_SIZE
        long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        v = l2 > 0 ? (int64_t)l2 : 0;
#else
        v = 0;
#endif
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

static const struct {
    uint32_t bit;
    const char *name;
} isa_names[] = {
    {QS_ISA_AVX2, "avx2"},
    {QS_ISA_AVX512, "avx512"},
    {QS_ISA_AVX512_VNNI, "avx512-vnni"},
    {QS_ISA_AVX512_BF16, "avx512-bf16"},
    {QS_ISA_AVX_VNNI, "avx-vnni"},
    {QS_ISA_AVX512_FP16, "avx512-fp16"},
    {QS_ISA_AMX_TILE, "amx-tile"},
    {QS_ISA_AMX_INT8, "amx-int8"},
    {QS_ISA_AMX_BF16, "amx-bf16"},
    {QS_ISA_NEON, "neon"},
    {QS_ISA_NEON_DOTPROD, "neon-dotprod"},
    {QS_ISA_NEON_FP16, "neon-fp16"},
    {QS_ISA_NEON_BF16, "neon-bf16"},
    {QS_ISA_SVE, "sve"},
    {QS_ISA_NEON_I8MM, "neon-i8mm"},
};

QS_API const char *qs_isa_name(uint32_t isa_bit)
{
    if (isa_bit == 0)
        return "scalar";
    for (size_t i = 0; i < sizeof isa_names / sizeof isa_names[0]; i++)
        if (isa_names[i].bit == isa_bit)
            return isa_names[i].name;
    return NULL;
}

static const struct {
    const char *name, *id, *arch;
    uint32_t required, allowed;
} tiers[] = {
#define QS_TIER(name, id, arch, suite, required, allowed) {name, #id, arch, (required), (allowed)},
#include "isa_tiers.inc"
#undef QS_TIER
};

/* One enumerator per id: an id that is no C identifier (a dash or a dot in it) or that two tiers
 * share does not compile. */
enum {
#define QS_TIER(name, id, arch, suite, required, allowed) qs_tier_id_##id,
#include "isa_tiers.inc"
#undef QS_TIER
};

#define TIER_COUNT ((int32_t)(sizeof tiers / sizeof tiers[0]))

QS_API int32_t qs_isa_tier_count(void)
{
    return TIER_COUNT;
}

QS_API qs_status qs_isa_tier_info(int32_t index, qs_isa_tier *info)
{
    if (!info || index < 0 || index >= TIER_COUNT)
        return QS_ERR_INVALID_ARG;
    info->name = tiers[index].name;
    info->arch = tiers[index].arch;
    info->required = tiers[index].required;
    info->allowed = tiers[index].allowed;
    info->available = (qs_cpu_detect() & tiers[index].required) == tiers[index].required;
    info->reserved = 0;
    return QS_OK;
}

const char *qs_isa_tier_name(uint32_t isa)
{
    int32_t best = 0;

    for (int32_t i = 0; i < TIER_COUNT; i++)
        if ((isa & tiers[i].required) == tiers[i].required)
            best = i;
    return tiers[best].name;
}

/* A forced tier applies its `allowed` mask; "none" is an old spelling of "scalar"; an unset, empty
 * or unknown name forces nothing. */
uint32_t qs_force_isa_mask(const char *value)
{
    if (!value || !*value)
        return QS_ISA_ALL;
    if (strcmp(value, "none") == 0)
        return 0;
    for (int32_t i = 0; i < TIER_COUNT; i++)
        if (strcmp(value, tiers[i].name) == 0)
            return tiers[i].allowed;
    return QS_ISA_ALL;
}

const char *qs_isa_tier_id(int32_t index)
{
    return index >= 0 && index < TIER_COUNT ? tiers[index].id : NULL;
}

/* The suffix runs from the first "__" to the next '_' (a matmul tile) or the end. */
int32_t qs_isa_tier_of_kernel(const char *kernel)
{
    const char *p = kernel ? strstr(kernel, "__") : NULL;

    if (!p)
        return -1;
    p += 2;
    size_t len = strcspn(p, "_");
    for (int32_t i = 0; i < TIER_COUNT; i++)
        if (strlen(tiers[i].id) == len && strncmp(p, tiers[i].id, len) == 0)
            return i;
    return -1;
}

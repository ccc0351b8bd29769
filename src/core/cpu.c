/* SPDX-License-Identifier: MIT */
/*
 * Public CPU queries and the QS_FORCE_ISA names. Detection itself lives with each architecture
 * (src/x86/cpu_x86.c, src/arm/cpu_arm.c); other machines run the scalar reference.
 */
#include <string.h>

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

static const struct {
    uint32_t bit;
    const char *name;
} isa_names[] = {
    {QS_ISA_AVX2, "avx2"},       {QS_ISA_AVX512, "avx512"},
    {QS_ISA_AVX512_VNNI, "avx512-vnni"}, {QS_ISA_AVX512_BF16, "avx512-bf16"},
    {QS_ISA_NEON, "neon"},       {QS_ISA_NEON_DOTPROD, "neon-dotprod"},
    {QS_ISA_NEON_FP16, "neon-fp16"}, {QS_ISA_NEON_BF16, "neon-bf16"},
    {QS_ISA_SVE, "sve"},
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

/* A forced level keeps its tier and everything below it; unknown names force nothing. */
uint32_t qs_force_isa_mask(const char *value)
{
    static const uint32_t x86_all = QS_ISA_AVX2 | QS_ISA_AVX512 | QS_ISA_AVX512_VNNI |
                                    QS_ISA_AVX512_BF16;
    static const uint32_t arm_all = QS_ISA_NEON | QS_ISA_NEON_DOTPROD | QS_ISA_NEON_FP16 |
                                    QS_ISA_NEON_BF16 | QS_ISA_SVE;

    if (!value || !*value)
        return QS_ISA_ALL;
    if (strcmp(value, "scalar") == 0 || strcmp(value, "none") == 0)
        return 0;
    if (strcmp(value, "avx2") == 0)
        return QS_ISA_AVX2;
    if (strcmp(value, "avx512") == 0)
        return x86_all;
    if (strcmp(value, "neon") == 0)
        return QS_ISA_NEON | QS_ISA_NEON_FP16 | QS_ISA_NEON_BF16;
    if (strcmp(value, "neon-dotprod") == 0)
        return arm_all;
    return QS_ISA_ALL;
}

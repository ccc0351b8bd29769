/* SPDX-License-Identifier: MIT */
/*
 * AArch64 CPU detection, compiled with baseline flags only. Advanced SIMD is part of
 * the AArch64 baseline; dot product, FP16 arithmetic, BF16, I8MM and SVE come from getauxval on
 * Linux and from sysctlbyname on Apple platforms (which have no SVE).
 */
#include <stdint.h>

#include "../core/internal.h"

#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#ifndef HWCAP_FPHP
#define HWCAP_FPHP (1ul << 9)
#endif
#ifndef HWCAP_ASIMDHP
#define HWCAP_ASIMDHP (1ul << 10)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif
#ifndef HWCAP_SVE
#define HWCAP_SVE (1ul << 22)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1ul << 13)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1ul << 14)
#endif

uint32_t qs_cpu_detect(void)
{
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    uint32_t isa = 0;

    if (!(hw & HWCAP_ASIMD))
        return 0;
    isa |= QS_ISA_NEON;
    if (hw & HWCAP_ASIMDDP)
        isa |= QS_ISA_NEON_DOTPROD;
    if ((hw & HWCAP_FPHP) && (hw & HWCAP_ASIMDHP))
        isa |= QS_ISA_NEON_FP16;
    if (hw2 & HWCAP2_BF16)
        isa |= QS_ISA_NEON_BF16;
    if (hw2 & HWCAP2_I8MM)
        isa |= QS_ISA_NEON_I8MM;
    if (hw & HWCAP_SVE)
        isa |= QS_ISA_SVE;
    return isa;
}

#elif defined(__APPLE__)
#include <sys/sysctl.h>

static int has(const char *name)
{
    int v = 0;
    size_t len = sizeof v;
    return sysctlbyname(name, &v, &len, NULL, 0) == 0 && v != 0;
}

uint32_t qs_cpu_detect(void)
{
    uint32_t isa = QS_ISA_NEON;

    if (has("hw.optional.arm.FEAT_DotProd"))
        isa |= QS_ISA_NEON_DOTPROD;
    if (has("hw.optional.arm.FEAT_FP16"))
        isa |= QS_ISA_NEON_FP16;
    if (has("hw.optional.arm.FEAT_BF16"))
        isa |= QS_ISA_NEON_BF16;
    if (has("hw.optional.arm.FEAT_I8MM"))
        isa |= QS_ISA_NEON_I8MM;
    return isa;
}

#else
uint32_t qs_cpu_detect(void)
{
    return QS_ISA_NEON; /* baseline on every AArch64 system */
}
#endif

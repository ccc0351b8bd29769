/* SPDX-License-Identifier: MIT */
/*
 * x86-64 CPU detection, compiled with baseline flags only (STYLE.md §5): a CPUID feature bit counts
 * only if XGETBV shows that the OS saves the matching register state. AVX-512 is reported only on
 * top of the AVX2 tier, so that every tier includes the ones below it.
 */
#include <cpuid.h>
#include <stdint.h>

#include "../core/internal.h"

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;

    /* xgetbv, emitted as bytes: the _xgetbv() intrinsic would need -mxsave in this file */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

uint32_t qs_cpu_detect(void)
{
    uint32_t a, b, c, d, b7, c7, a71 = 0, isa = 0;
    uint64_t xcr0;

    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    /* OSXSAVE (ECX 27) and AVX (ECX 28), and the OS saves XMM and YMM state */
    if (!(c & (1u << 27)) || !(c & (1u << 28)))
        return 0;
    xcr0 = read_xcr0();
    if ((xcr0 & 0x06) != 0x06)
        return 0;
    int fma = (c >> 12) & 1, f16c = (c >> 29) & 1;

    if (!__get_cpuid_count(7, 0, &a, &b7, &c7, &d))
        return 0;
    if ((b7 & (1u << 5)) && fma && f16c)
        isa |= QS_ISA_AVX2;
    else
        return 0;

    /* AVX-512 F (16), DQ (17), BW (30), VL (31); the OS saves opmask, ZMM_Hi256, Hi16_ZMM */
    const uint32_t avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
    if ((b7 & avx512) != avx512 || (xcr0 & 0xE6) != 0xE6)
        return isa;
    isa |= QS_ISA_AVX512;
    if (c7 & (1u << 11))
        isa |= QS_ISA_AVX512_VNNI;
    if (__get_cpuid_count(7, 1, &a71, &b, &c, &d) && (a71 & (1u << 5)))
        isa |= QS_ISA_AVX512_BF16;
    return isa;
}

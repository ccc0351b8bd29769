/* SPDX-License-Identifier: MIT */
/*
 * x86-64 CPU detection, compiled with baseline flags only: a CPUID feature bit counts
 * only if XGETBV shows that the OS saves the matching register state. Every bit is reported only on
 * top of the AVX2 tier, and the EVEX extensions (VNNI, BF16, FP16) only on top of AVX-512, so that
 * a kernel's bits never promise an encoding the OS or CPU lacks. AMX needs the tile state in XCR0;
 * on Linux a process must also ask for it once before the first tile instruction
 * (qs_x86_amx_request).
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* syscall() */
#endif
#include <cpuid.h>
#include <stdint.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "../core/internal.h"

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;

    /* xgetbv, emitted as bytes: the _xgetbv() intrinsic would need -mxsave in this file */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* XCR0 state components: XMM | YMM; opmask | ZMM_Hi256 | Hi16_ZMM; XTILECFG | XTILEDATA. */
#define XCR0_AVX 0x06ull
#define XCR0_AVX512 0xE0ull
#define XCR0_AMX 0x60000ull

uint32_t qs_cpu_detect(void)
{
    uint32_t a, b, c, d, b7, c7, d7, a71 = 0, isa = 0;
    uint64_t xcr0;

    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    /* OSXSAVE (ECX 27) and AVX (ECX 28), and the OS saves XMM and YMM state */
    if (!(c & (1u << 27)) || !(c & (1u << 28)))
        return 0;
    xcr0 = read_xcr0();
    if ((xcr0 & XCR0_AVX) != XCR0_AVX)
        return 0;
    int fma = (c >> 12) & 1, f16c = (c >> 29) & 1;

    if (!__get_cpuid_count(7, 0, &a, &b7, &c7, &d7))
        return 0;
    if ((b7 & (1u << 5)) && fma && f16c)
        isa |= QS_ISA_AVX2;
    else
        return 0;
    /* leaf 7 subleaf 1 exists when leaf 7.0 EAX (the highest subleaf) is at least 1 */
    if (a >= 1 && !__get_cpuid_count(7, 1, &a71, &b, &c, &d))
        a71 = 0;

    if (a71 & (1u << 4)) /* AVX-VNNI: VEX-encoded, YMM state suffices */
        isa |= QS_ISA_AVX_VNNI;

    /* AMX-BF16 (EDX 22), AMX-TILE (EDX 24), AMX-INT8 (EDX 25); the OS saves the tile state */
    if ((d7 & (1u << 24)) && (xcr0 & XCR0_AMX) == XCR0_AMX) {
        isa |= QS_ISA_AMX_TILE;
        if (d7 & (1u << 25))
            isa |= QS_ISA_AMX_INT8;
        if (d7 & (1u << 22))
            isa |= QS_ISA_AMX_BF16;
    }

#if defined(QS_AVX512_EMULATION)
    /* a test build whose AVX-512 tiers run on SIMDe (meson option avx512_emulation) */
    return isa | QS_ISA_AVX512 | QS_ISA_AVX512_VNNI;
#endif
    /* AVX-512 F (16), DQ (17), BW (30), VL (31); the OS saves opmask, ZMM_Hi256, Hi16_ZMM */
    const uint32_t avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
    if ((b7 & avx512) != avx512 || (xcr0 & (XCR0_AVX | XCR0_AVX512)) != (XCR0_AVX | XCR0_AVX512))
        return isa;
    isa |= QS_ISA_AVX512;
    if (c7 & (1u << 11))
        isa |= QS_ISA_AVX512_VNNI;
    if (a71 & (1u << 5))
        isa |= QS_ISA_AVX512_BF16;
    if (d7 & (1u << 23))
        isa |= QS_ISA_AVX512_FP16;
    return isa;
}

/* Linux (5.16 and later) enables the AMX tile data state per process on request (XFD): without
 * it the first tile load faults. Other systems enable it with XCR0. The answer is kept (granting
 * is per process and lasts), so the matmul plan, which asks before every AMX call, pays the CPUID
 * and the system call once: 0 not asked yet, 1 granted, -1 refused or no AMX. */
int qs_x86_amx_request(void)
{
    static int cached;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);

    if (v != 0)
        return v > 0;
    if (!(qs_cpu_detect() & QS_ISA_AMX_TILE))
        v = -1;
    else {
#if defined(__linux__)
        /* ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA (state component 18); granting it twice
         * is harmless, so threads that race here agree */
        v = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
#else
        v = 1;
#endif
    }
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    return v > 0;
}

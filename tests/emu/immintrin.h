/* SPDX-License-Identifier: MIT */
/*
 * Stands in for <immintrin.h> in the AVX-512 tiers of an emulation build (meson option
 * avx512_emulation, test use only): the compiler's own header first, for the AVX2 / FMA / F16C
 * intrinsics this machine runs natively, then SIMDe's portable AVX-512 intrinsics under their
 * Intel names, then the ones SIMDe does not have yet (simde_gaps.h). The AVX-512 kernels compile
 * unchanged, run on any AVX2 machine, and the test suite checks them against src/ref there.
 */
#include_next <immintrin.h>

#ifndef QS_EMU_IMMINTRIN_H
#define QS_EMU_IMMINTRIN_H

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include "simde_gaps.h"

#endif

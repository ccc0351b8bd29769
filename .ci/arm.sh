#!/bin/sh
# SPDX-License-Identifier: MIT
#
# AArch64 CI: cross-build libqsparse with Debian's gcc-aarch64-linux-gnu and run the whole C test
# suite under qemu-user at every ISA level (QS_FORCE_ISA = scalar, neon, neon-dotprod, registered
# by tests/meson.build), then run the CPU-detection test under qemu CPU models with and without
# dot product / FP16 / BF16 / SVE / I8MM, so that every detection path of src/arm/cpu_arm.c runs and its
# answer is checked. Installs what it needs from Debian packages
# when run as root (arm64 multiarch for cmocka, which is not in the cross sysroot).
#
#   .ci/arm.sh            build in build-arm-ci (wiped first); BUILD_DIR=... to change
#
# Budget: about 6 minutes on a 2-core machine. OpenMP regions run in the tests, so qemu-user must
# be able to start threads: see the exe_wrapper note in cross/aarch64-linux-gnu.ini.
set -eu

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-arm-ci}
JOBS=$(nproc 2>/dev/null || echo 2)

need_install=0
for p in gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libcmocka-dev:arm64 meson \
         ninja-build pkg-config; do
    dpkg -s "$p" >/dev/null 2>&1 || need_install=1
done
if [ "$need_install" = 1 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "arm.sh: missing packages and not root; install gcc-aarch64-linux-gnu" \
             "libc6-dev-arm64-cross qemu-user libcmocka-dev:arm64 meson ninja-build" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    dpkg --add-architecture arm64
    apt-get update -q
    apt-get install -y -q --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
        qemu-user libcmocka-dev:arm64 meson ninja-build pkg-config
fi

start=$(date +%s)
rm -rf "$BUILD_DIR"
meson setup "$BUILD_DIR" --cross-file cross/aarch64-linux-gnu.ini -Dblas=disabled -Dbench=false
ninja -C "$BUILD_DIR" -j "$JOBS"

# qemu-user emulates every guest thread on the host; one OpenMP thread per test keeps the two
# cores for running two tests at once. Tests that set their own thread count still start threads.
export OMP_NUM_THREADS=1

# 1. The whole C suite, once per ISA tier (the default CPU model, "max", has every feature).
#    Under emulation test_kernels (every registry entry against the reference, every tail) takes
#    10-15 minutes per NEON tier on a 2-core machine: four times the native 600 s limit.
meson test -C "$BUILD_DIR" --suite c --num-processes "$JOBS" --print-errorlogs \
  --timeout-multiplier 4

# 2. Detection under CPU models with and without the optional features: test_cpu_arm checks the
#    qs_cpu_isa() bits against QS_EXPECT_ISA (QS_ISA_NEON 0x100, DOTPROD 0x200, FP16 0x400, BF16
#    0x800, SVE 0x1000, I8MM 0x2000), the tier each QS_FORCE_ISA level gives, and the NEON
#    kernels' edge cases.
wrap="qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib"
for model in cortex-a53:0x100 neoverse-n1:0x700 a64fx:0x1500 max:0x3f00; do
    cpu=${model%%:*}
    echo "== qemu -cpu $cpu: expect ISA bits ${model#*:}"
    QS_EXPECT_ISA=${model#*:} $wrap -cpu "$cpu" "$BUILD_DIR/tests/test_cpu_arm"
done

echo "arm.sh: all passed in $(( $(date +%s) - start )) s"

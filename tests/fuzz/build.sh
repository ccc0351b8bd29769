#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets with clang, AddressSanitizer and UndefinedBehaviorSanitizer (every
# UBSan report is fatal, misaligned accesses included) into BUILD_DIR (default build-fuzz).
# Needs clang-14 and libclang-rt-14-dev (Debian), jansson for the safetensors target.
#   bash tests/fuzz/build.sh            # then see tests/fuzz/README.md to run them
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-fuzz}
cc=${FUZZ_CC:-clang-14}
command -v "$cc" >/dev/null || cc=clang
if [ ! -f "$build/build.ninja" ]; then
  CC="$cc" meson setup "$build" --buildtype=debugoptimized -Dfuzz=true -Dbench=false \
    -Db_sanitize=address,undefined -Db_lundef=false \
    -Dc_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=all -fno-omit-frame-pointer" \
    >/dev/null
fi
ninja -C "$build" tests/fuzz/fuzz_quantize tests/fuzz/fuzz_dequantize tests/fuzz/fuzz_sp24 \
  tests/fuzz/fuzz_observer tests/fuzz/fuzz_safetensors tests/fuzz/fuzz_matmul \
  tests/fuzz/fuzz_hessian tests/fuzz/fuzz_sidefiles

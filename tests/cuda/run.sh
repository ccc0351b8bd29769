#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The CUDA plugin on a GPU machine, in one call: build the library and the plugin (SASS for this
# GPU only, to keep the build short), run tests/cuda/gpu_check.c (every format and option
# quantized and dequantized on the GPU and compared bit for bit with the CPU reference on large
# and tail shapes; the NF4 and INT8 GEMV compared bit for bit with the reference dot products),
# then its benchmarks (device-to-device copy in the same run, quantize / dequantize GB/s, GEMV
# 8192 x 8192 GB/s). Results go under $OUT (default ./gpu-results): run.log, results.txt,
# device.txt. Needs nvcc, a C compiler, meson and ninja; nothing is downloaded.
#   Usage: [OUT=dir] [GPU_ARCH=90] bash tests/cuda/run.sh [--no-bench]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ]; then echo "run.sh: no nvcc"; exit 2; fi
cuda_root=$(dirname "$(dirname "$nvcc")")
meson=(meson)
command -v meson >/dev/null || meson=(python3 -m mesonbuild.mesonmain)
{ nvidia-smi 2>&1 || true; "$nvcc" --version; } > "$OUT/device.txt"
# This GPU's compute capability (e.g. 90 on an H200) unless GPU_ARCH says otherwise.
arch=${GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
                   sed -n 1p | tr -d ' .')}
arch=${arch:-90}
elapsed "nvcc $nvcc, building for sm_$arch"

build="build-gpu"
rm -rf "$build"
"${meson[@]}" setup "$build" --buildtype=release -Dcuda=enabled -Dgpu_archs="$arch" \
  -Dtests=false -Dbench=false -Dblas=disabled || { elapsed "meson setup failed"; exit 2; }
ninja -C "$build" libqsparse.a src/cuda/libqsparse-cuda.so || { elapsed "build failed"; exit 2; }
elapsed "built: $(stat -c %s "$build/src/cuda/libqsparse-cuda.so") bytes of plugin"

cc=${CC:-cc}
"$cc" -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iinclude -I"$cuda_root/include" \
  tests/cuda/gpu_check.c "$build/libqsparse.a" -L"$cuda_root/lib64" -lcudart_static \
  -fopenmp -lm -ldl -lpthread -lrt -lstdc++ -o "$build/gpu_check" ||
  { elapsed "gpu_check did not compile"; exit 2; }

bench=--bench
[ "${1:-}" = "--no-bench" ] && bench=
QS_PLUGIN_PATH="$PWD/$build/src/cuda/libqsparse-cuda.so" \
  timeout 420 "$build/gpu_check" $bench "$OUT/results.txt"
rc=$?
elapsed "gpu_check exit status $rc"
exit $rc

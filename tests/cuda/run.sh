#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The CUDA plugin on a GPU machine, in one call, in well under 8 minutes on an H100 / H200: build
# the library and the plugin (SASS for this GPU only, to keep the build short), then run
# tests/cuda/gpu_check (gpu_check.c: every format and option quantized and dequantized on the
# GPU, compared bit for bit with the CPU reference on large and tail shapes, f32 / f16 / bf16,
# 2:4; gpu_matmul.c: the matmul of every weight, GEMV and tensor-core GEMM shapes, within
# include/qsparse/matmul.h's bound; the stream rules: graph capture, host pointers) and its
# throughput table (gpu_bench.c: quantize, dequantize, GEMV, GEMM as a share of a
# device-to-device copy measured in the same run, GEMM also against cuBLAS bf16).
# Results go under $OUT (default ./gpu-results): run.log, results.txt, device.txt, build.log.
#
#   [OUT=dir] [GPU_ARCH=90] bash tests/cuda/run.sh [--no-bench]
#       builds here (needs nvcc, a C compiler, meson and ninja; nothing is downloaded)
#   [OUT=dir] bash tests/cuda/run.sh --prebuilt DIR [--no-bench]
#       for a GPU machine without nvcc: DIR holds libqsparse-cuda.so and gpu_check, made by
#   bash tests/cuda/run.sh --build-only DIR [ARCHS]
#       on a machine with nvcc (ARCHS: e.g. "90" or "80,90"; default 90); copy DIR over.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-$PWD/gpu-results}
bench=--bench
prebuilt=
build_only=
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench= ;;
    --prebuilt) prebuilt=$2; shift ;;
    --build-only)
      build_only=$2
      shift
      case "${2:-}" in [0-9]*) GPU_ARCH=$2; shift ;; esac ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{ nvidia-smi 2>&1 || true; } > "$OUT/device.txt"

# build DIR ARCH_LIST: the plugin and gpu_check into DIR
build() {
  local dir=$1 archs=$2 nvcc cuda_root meson build="build-gpu"
  nvcc=$(command -v nvcc || true)
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  if [ -z "$nvcc" ]; then elapsed "run.sh: no nvcc (use --prebuilt DIR)"; return 2; fi
  cuda_root=$(dirname "$(dirname "$nvcc")")
  meson=(meson)
  command -v meson >/dev/null || meson=(python3 -m mesonbuild.mesonmain)
  "$nvcc" --version >> "$OUT/device.txt"
  elapsed "nvcc $nvcc, building for sm_$archs"
  rm -rf "$build"
  "${meson[@]}" setup "$build" --buildtype=release -Dcuda=enabled -Dgpu_archs="$archs" \
    -Dtests=false -Dbench=false -Dblas=disabled >"$OUT/build.log" 2>&1 ||
    { tail -n 30 "$OUT/build.log"; elapsed "meson setup failed (build.log)"; return 2; }
  ninja -C "$build" libqsparse.a src/cuda/libqsparse-cuda.so >>"$OUT/build.log" 2>&1 ||
    { tail -n 30 "$OUT/build.log"; elapsed "build failed (build.log)"; return 2; }
  mkdir -p "$dir"
  cp "$build/src/cuda/libqsparse-cuda.so" "$dir/"
  ${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -Iinclude -I"$cuda_root/include" \
    tests/cuda/gpu_check.c tests/cuda/gpu_common.c tests/cuda/gpu_matmul.c tests/cuda/gpu_bench.c \
    "$build/libqsparse.a" -L"$cuda_root/lib64" -lcudart_static -fopenmp -lm -ldl -lpthread -lrt \
    -lstdc++ -o "$dir/gpu_check" || { elapsed "gpu_check did not compile"; return 2; }
  elapsed "built: $(stat -c %s "$dir/libqsparse-cuda.so") bytes of plugin, gpu_check in $dir"
}

if [ -n "$build_only" ]; then
  build "$build_only" "${GPU_ARCH:-90}"
  exit $?
fi
if [ -z "$prebuilt" ]; then
  # This GPU's compute capability (e.g. 90 on an H200) unless GPU_ARCH says otherwise.
  arch=${GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
                     sed -n 1p | tr -d ' .')}
  prebuilt="$PWD/build-gpu/out"
  build "$prebuilt" "${arch:-90}" || exit 2
fi
QS_PLUGIN_PATH="$(cd "$prebuilt" && pwd)/libqsparse-cuda.so" \
  timeout 420 "$prebuilt/gpu_check" $bench "$OUT/results.txt"
rc=$?
elapsed "gpu_check exit status $rc"
exit $rc

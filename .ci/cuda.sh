#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The CUDA plugin without a GPU (CI): build libqsparse-cuda.so for every architecture when nvcc
# is there (on PATH or in /usr/local/cuda/bin), check that only the plugin holds CUDA code and
# that it exports one symbol, list its architectures when cuobjdump is there and check its
# compiled code with .ci/cuda_sass.py (every bulk kernel reads with 128-bit global loads and
# keeps its arrays out of local memory; registers, shared memory and occupancy per kernel), then
# run test_backend, test_cuda_items and test_cuda_mv (the plugin's items on an emulated grid)
# and tests/cuda/no_gpu_check.py: the core with the plugin absent, present without a GPU,
# truncated and corrupt, never crashing or printing.
set -euo pipefail
cd "$(dirname "$0")/.."
build="build-cuda-ci"
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc

rm -rf "$build"
if [ -z "$nvcc" ]; then
  echo "cuda.sh: no nvcc; the plugin is not built, only the check without it runs"
  meson setup "$build" --buildtype=release -Dwerror=true -Dcuda=disabled -Dbench=false >/dev/null
  ninja -C "$build" >/dev/null
  QSPARSE_LIB="$PWD/$build/libqsparse.so" python3 tests/cuda/no_gpu_check.py "" "$build/nogpu"
  exit 0
fi

meson setup "$build" --buildtype=release -Dwerror=true -Dcuda=enabled -Dbench=false >/dev/null
t0=$(date +%s)
ninja -C "$build" src/cuda/libqsparse-cuda.so >/dev/null
t1=$(date +%s)
plugin="$PWD/$build/src/cuda/libqsparse-cuda.so"
echo "plugin built in $((t1 - t0)) s: $(stat -c %s "$plugin") bytes"
# Only what the checks below run (the main CI job builds and tests everything else).
lib=$(ninja -C "$build" -t targets all | grep -oE '^libqsparse\.so(\.[0-9]+)*:' | tr -d : | tail -n 1)
targets=("$lib" tests/test_backend tests/test_cuda_items tests/test_cuda_mv)
for v in good recorder no_symbol wrong_abi refuse unavailable reserved bad_name; do
  targets+=("tests/libqs-test-plugin-$v.so")
done
ninja -C "$build" "${targets[@]}" >/dev/null

# libqsparse links no CUDA library; the plugin needs no CUDA library but the driver at run time.
# (ldd's output is taken whole first: under pipefail, "ldd | grep -q" fails when grep's early
# exit kills ldd with SIGPIPE, which would make these checks pass unseen.)
lib_deps=$(ldd "$build/libqsparse.so")
plugin_deps=$(ldd "$plugin")
if grep -qi cuda <<<"$lib_deps"; then
  echo "libqsparse.so links a CUDA library" >&2; exit 1
fi
if grep -qi 'cudart\|cublas' <<<"$plugin_deps"; then
  echo "libqsparse-cuda.so links the CUDA runtime dynamically" >&2; exit 1
fi
exports=$(nm -D --defined-only "$plugin" | awk '$2 ~ /[TDBR]/ {print $3}' | grep -v '^_' || true)
if [ "$exports" != "qs_backend_plugin_init" ]; then
  echo "libqsparse-cuda.so exports more than qs_backend_plugin_init: $exports" >&2; exit 1
fi
cuobjdump=$(command -v cuobjdump || true)
[ -z "$cuobjdump" ] && [ -x "$(dirname "$nvcc")/cuobjdump" ] && cuobjdump="$(dirname "$nvcc")/cuobjdump"
# PyPI's nvidia-cuda-cuobjdump (.ci/deps) puts it inside the nvidia package
[ -z "$cuobjdump" ] && cuobjdump=$(python3 -c 'import glob, nvidia
print(next(iter(sorted(glob.glob(nvidia.__path__[0] + "/cu*/bin/cuobjdump"))), ""))' 2>/dev/null || true)
if [ -n "$cuobjdump" ]; then
  archs=$("$cuobjdump" --list-elf "$plugin" | grep -o 'sm_[0-9]*' | sort -u | tr '\n' ' ')
  echo "SASS in the plugin: $archs"
  for a in sm_80 sm_86 sm_89 sm_90; do
    case " $archs " in *" $a "*) ;; *) echo "no $a SASS in the plugin" >&2; exit 1 ;; esac
  done
  echo "PTX in the plugin: $("$cuobjdump" --list-ptx "$plugin" | grep -o 'sm_[0-9]*' | sort -u | tr '\n' ' ')"
  # the SASS needs nvdisasm (beside cuobjdump, or on PATH)
  if [ -x "$(dirname "$cuobjdump")/nvdisasm" ] || command -v nvdisasm >/dev/null; then
    # the whole table for sm_90 (the H100 / H200 of issue 31), a line for the others
    for a in $archs; do
      quiet=--quiet
      [ "$a" = sm_90 ] && quiet=
      python3 .ci/cuda_sass.py "$cuobjdump" "$plugin" "$a" $quiet
    done
  else
    echo "cuda.sh: no nvdisasm (.ci/deps installs it): the plugin's SASS is not checked" >&2
    exit 1
  fi
else
  echo "cuda.sh: no cuobjdump (.ci/deps installs it): the plugin's code is not checked" >&2
  exit 1
fi

meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 2 test_backend \
  test_cuda_items-scalar test_cuda_mv-scalar
QSPARSE_LIB="$PWD/$build/libqsparse.so" python3 tests/cuda/no_gpu_check.py "$plugin" "$build/nogpu"

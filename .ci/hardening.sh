#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Hostile-input and concurrency checks (SECURITY.md), run by .ci/test after the other steps:
#   1. the libFuzzer targets (clang, ASan + UBSan), each FUZZ_SECONDS (default 40) from its seed
#      corpus; a crash, a leak, a timeout or a broken promise fails the job;
#   2. the C suite built with clang and UBSan that traps on every report, misaligned accesses
#      included, at every ISA tier;
#   3. ThreadSanitizer: the C suite (test_threads: contexts per thread, two OpenMP threads each)
#      built with clang and LLVM's libomp, whose Archer tool (libarcher.so) tells TSan about
#      OpenMP's synchronization, so only races in our code are reported;
#   4. valgrind memcheck over a fast subset of the C tests (error exit code 1).
# Installs its own packages (Debian 12, as root, idempotent). Build folders: build-hard-*.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(clang-14 libclang-rt-14-dev libomp-14-dev valgrind libjansson-dev libcmocka-dev
              meson ninja-build pkg-config)
arch=$(dpkg --print-architecture)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || dpkg -s "$p:$arch" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "hardening: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

CLANG=clang-14
FUZZ_SECONDS=${FUZZ_SECONDS:-40}
start=$(date +%s)
last=$start
step() {
  local now
  now=$(date +%s)
  echo
  echo "=== hardening: $* (at $((now - start)) s; previous step $((now - last)) s)"
  last=$now
}

# Every C test binary of a build, by name (test_* executables under tests/).
c_tests() { find "$1/tests" -maxdepth 1 -type f -name 'test_*' -perm -u+x | sort; }

step "fuzz targets: build (clang, libFuzzer, ASan + UBSan)"
rm -rf build-hard-fuzz
BUILD_DIR=build-hard-fuzz FUZZ_CC=$CLANG bash tests/fuzz/build.sh

# The long-run form is in tests/fuzz/README.md; here each target runs briefly on a scratch copy of
# its corpus (the committed seeds stay as they are). -timeout: one input taking 10 s is a hang.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in fuzz_quantize fuzz_dequantize fuzz_sp24 fuzz_observer fuzz_safetensors; do
  step "fuzz: $t for $FUZZ_SECONDS s"
  mkdir -p "$work/$t" "$work/$t-artifacts"
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
       TMPDIR="$work" "build-hard-fuzz/tests/fuzz/$t" -max_total_time="$FUZZ_SECONDS" \
       -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$work/$t-artifacts/" "$work/$t" "tests/fuzz/corpus/$t" \
       >"$work/$t.log" 2>&1; then
    tail -n 60 "$work/$t.log"
    for a in "$work/$t-artifacts"/*; do
      [ -f "$a" ] && { echo "input that failed ($a):"; od -A x -t x1z -v "$a" | head -n 40; }
    done
    echo "hardening: $t failed; reproduce with build-hard-fuzz/tests/fuzz/$t FILE"
    exit 1
  fi
  grep -E '^#[0-9]+ +DONE' "$work/$t.log" || true
done

step "UBSan (clang, traps on misaligned access): build"
rm -rf build-hard-ubsan
CC=$CLANG meson setup build-hard-ubsan --buildtype=debugoptimized -Db_sanitize=undefined \
  -Db_lundef=false -Dbench=false \
  -Dc_args="-fsanitize=alignment -fno-sanitize-recover=all" >/dev/null
ninja -C build-hard-ubsan
step "UBSan: C suite at every ISA tier"
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  meson test -C build-hard-ubsan --print-errorlogs --num-processes 2 --suite c

step "ThreadSanitizer (clang, libomp with Archer): build"
rm -rf build-hard-tsan
CC=$CLANG meson setup build-hard-tsan --buildtype=debugoptimized -Db_sanitize=thread \
  -Db_lundef=false -Dbench=false >/dev/null
ninja -C build-hard-tsan
archer=$(find /usr/lib/llvm-14/lib -name libarcher.so | head -n 1)
if [ -z "$archer" ] || ! ldd build-hard-tsan/tests/test_threads | grep -q 'libomp'; then
  echo "hardening: the TSan build needs LLVM's libomp and libarcher.so (libomp-14-dev)"
  exit 1
fi
step "ThreadSanitizer: C tests (test_kernels excepted: single-threaded kernel sweeps, slow here)"
for t in $(c_tests build-hard-tsan); do
  case $(basename "$t") in test_kernels) continue ;; esac
  echo "tsan: $(basename "$t")"
  rc=0
  OMP_TOOL_LIBRARIES=$archer ARCHER_OPTIONS=verbose=1 OMP_NUM_THREADS=2 \
    TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 second_deadlock_stack=1" \
    "$t" >"$work/tsan.log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || { tail -n 80 "$work/tsan.log"; exit 1; }
  # Without Archer, TSan would not see OpenMP's barriers: make sure it ran where threads start.
  if [ "$(basename "$t")" = test_threads ] &&
     ! grep -q 'Archer detected OpenMP application with TSan' "$work/tsan.log"; then
    echo "hardening: Archer did not attach (OMP_TOOL_LIBRARIES=$archer)"
    exit 1
  fi
done

step "valgrind memcheck: build (gcc, no sanitizer)"
rm -rf build-hard-vg
meson setup build-hard-vg --buildtype=debugoptimized -Dbench=false -Dblas=disabled >/dev/null
ninja -C build-hard-vg
step "valgrind memcheck: fast C tests"
# Valgrind's CPU has no AVX-512, so the library picks AVX2 (and scalar when forced).
tiers=scalar
[ "$(uname -m)" = x86_64 ] && tiers="scalar avx2"
for t in test_api test_sparse_format test_threads test_nvfp4 test_mx test_fp8 test_int8; do
  for tier in $tiers; do
    echo "valgrind: $t ($tier)"
    QS_FORCE_ISA=$tier OMP_NUM_THREADS=2 valgrind --quiet --error-exitcode=1 --leak-check=full \
      --errors-for-leak-kinds=definite "build-hard-vg/tests/$t" >"$work/vg.log" 2>&1 ||
      { tail -n 80 "$work/vg.log"; exit 1; }
  done
done

step "done"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Hostile-input and concurrency checks (SECURITY.md), run by .ci/test after the other steps:
#   1. the fuzz targets, built with clang, AddressSanitizer, UndefinedBehaviorSanitizer (every
#      report fatal, misaligned accesses included) and libFuzzer (tests/fuzz/build.sh);
#   2. each fuzz target for FUZZ_SECONDS (default 40) from its seed corpus, two side by side: a
#      crash, a leak, a hang (10 s per input) or a broken promise fails the job;
#   3. the C suite built with clang and UBSan alone, trapping on every report, misaligned
#      accesses included, at every ISA tier (without ASan and coverage it runs several times
#      faster; gcc's ASan + UBSan build of .ci/test covers the rest);
#   4. ThreadSanitizer: the C suite (test_threads: contexts per thread, two OpenMP threads each)
#      built with clang and LLVM's libomp, whose Archer tool (libarcher.so) tells TSan about
#      OpenMP's synchronization, so only races in our code are reported;
#   5. valgrind memcheck over a fast subset of the C tests (error exit code 1), on the native
#      build of .ci/test (VALGRIND_BUILD, default build-ci; built here when missing).
# Every job runs even when an earlier one fails; the failing jobs are listed at the end.
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
VALGRIND_BUILD=${VALGRIND_BUILD:-build-ci}
start=$(date +%s)
last=$start
failed=()
step() {
  local now
  now=$(date +%s)
  echo
  echo "=== hardening: $* (at $((now - start)) s; previous step $((now - last)) s)"
  last=$now
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The C test executables of the suite (tests/meson.build's c_tests), as ninja targets.
c_test_names=$(sed -n "/^c_tests = \[/,/^\]/p" tests/meson.build | grep -o "'test_[a-z0-9_]*'" | tr -d "'")
c_test_targets() { for t in $c_test_names; do echo "tests/$t"; done; }

step "fuzz targets: build (clang, libFuzzer, ASan + UBSan)"
rm -rf build-hard-fuzz
BUILD_DIR=build-hard-fuzz FUZZ_CC=$CLANG bash tests/fuzz/build.sh

# The long-run form is in tests/fuzz/README.md; here each target runs briefly on a scratch copy of
# its corpus (the committed seeds stay as they are), two at a time (one core each: each target
# still gets its FUZZ_SECONDS of one core).
fuzz_one() {
  local t=$1
  mkdir -p "$work/$t" "$work/$t-artifacts"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    TMPDIR="$work" "build-hard-fuzz/tests/fuzz/$t" -max_total_time="$FUZZ_SECONDS" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/$t-artifacts/" "$work/$t" "tests/fuzz/corpus/$t" \
    >"$work/$t.log" 2>&1
}
fuzz_report() {
  local t=$1 rc=$2
  if [ "$rc" = 0 ]; then
    echo "fuzz: $t: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/$t.log" || echo done)"
  else
    grep -m 20 -E '^fuzz:|runtime error|ERROR|SUMMARY|ALARM' "$work/$t.log" || true
    for a in "$work/$t-artifacts"/*; do
      [ -f "$a" ] && { echo "input that failed ($(basename "$a")):"; od -A x -t x1 -v -N 256 "$a"; }
    done
    echo "hardening: $t failed; reproduce with build-hard-fuzz/tests/fuzz/$t FILE (tests/fuzz/README.md)"
    failed+=("$t")
  fi
}
for pair in "fuzz_quantize fuzz_dequantize" "fuzz_sp24 fuzz_observer" "fuzz_safetensors fuzz_matmul" \
            "fuzz_hessian fuzz_sidefiles"; do
  read -r a b <<<"$pair"
  step "fuzz: $a and $b for $FUZZ_SECONDS s each, side by side"
  rc_a=0 rc_b=0
  fuzz_one "$a" & pid_a=$!
  fuzz_one "$b" & pid_b=$!
  wait "$pid_a" || rc_a=$?
  wait "$pid_b" || rc_b=$?
  fuzz_report "$a" "$rc_a"
  fuzz_report "$b" "$rc_b"
done

step "UBSan (clang, traps on misaligned access): build"
rm -rf build-hard-ubsan
CC=$CLANG meson setup build-hard-ubsan --buildtype=debugoptimized -Db_sanitize=undefined \
  -Db_lundef=false -Dbench=false \
  -Dc_args="-fsanitize=alignment -fno-sanitize-recover=all" >/dev/null
# Everything the c suite runs, test_backend's plugin modules included.
ninja -C build-hard-ubsan
step "UBSan: C suite at every ISA tier"
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  meson test -C build-hard-ubsan --no-rebuild --print-errorlogs --num-processes 2 --suite c ||
  failed+=("clang-ubsan-suite")

step "ThreadSanitizer (clang, libomp with Archer): build"
rm -rf build-hard-tsan
CC=$CLANG meson setup build-hard-tsan --buildtype=debugoptimized -Db_sanitize=thread \
  -Db_lundef=false -Dbench=false >/dev/null
ninja -C build-hard-tsan $(c_test_targets)
archer=$(find /usr/lib/llvm-14/lib -name libarcher.so -print -quit)
# ldd's output whole, then the test: under pipefail, "ldd | grep -q" fails whenever grep's
# early exit kills ldd with SIGPIPE, which ldd's line-by-line writes meet now and then on a
# loaded machine (29 of 1500 tries here; stop 23's CI failed that way with libomp linked).
tsan_deps=$(ldd build-hard-tsan/tests/test_threads)
step "ThreadSanitizer: C tests (test_kernels excepted: single-threaded kernel sweeps, slow here)"
if [ -z "$archer" ] || ! grep -q 'libomp' <<<"$tsan_deps"; then
  echo "hardening: the TSan build needs LLVM's libomp and libarcher.so (libomp-14-dev);" \
    "libarcher.so: ${archer:-not found}; test_threads links:"
  echo "$tsan_deps"
  failed+=("tsan")
else
  for t in $c_test_names; do
    [ "$t" = test_kernels ] && continue
    rc=0
    OMP_TOOL_LIBRARIES=$archer ARCHER_OPTIONS=verbose=1 OMP_NUM_THREADS=2 \
      TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 second_deadlock_stack=1" \
      "build-hard-tsan/tests/$t" >"$work/tsan.log" 2>&1 || rc=$?
    echo "tsan: $t exit $rc"
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
      tail -n 60 "$work/tsan.log"
      failed+=("tsan:$t")
    fi
    # Without Archer TSan would not see OpenMP's barriers: make sure it attached where threads run.
    if [ "$t" = test_threads ] &&
       ! grep -q 'Archer detected OpenMP application with TSan' "$work/tsan.log"; then
      echo "hardening: Archer did not attach (OMP_TOOL_LIBRARIES=$archer)"
      failed+=("tsan:archer")
    fi
  done
fi

vg_tests=(test_api test_sparse_format test_threads test_untouched test_nvfp4 test_mx test_fp8 test_int8)
if [ ! -x "$VALGRIND_BUILD/tests/test_api" ]; then
  step "valgrind memcheck: build (gcc, no sanitizer)"
  VALGRIND_BUILD=build-hard-vg
  rm -rf "$VALGRIND_BUILD"
  meson setup "$VALGRIND_BUILD" --buildtype=debugoptimized -Dbench=false >/dev/null
  ninja -C "$VALGRIND_BUILD" "${vg_tests[@]/#/tests/}"
fi
step "valgrind memcheck: fast C tests ($VALGRIND_BUILD)"
# Valgrind's CPU has no AVX-512, so the library picks AVX2 there (and scalar when forced). The
# (test, tier) runs go two at a time (valgrind runs one thread at a time: one core each).
tiers=scalar
[ "$(uname -m)" = x86_64 ] && tiers="scalar avx2"
vg_one() { # tier test: exit status into $work/vg-<tier>-<test>.rc
  local rc=0
  QS_FORCE_ISA=$1 OMP_NUM_THREADS=2 valgrind --quiet --error-exitcode=1 --leak-check=full \
    --errors-for-leak-kinds=definite "$VALGRIND_BUILD/tests/$2" >"$work/vg-$1-$2.log" 2>&1 || rc=$?
  echo "$rc" >"$work/vg-$1-$2.rc"
}
export -f vg_one
export work VALGRIND_BUILD
for t in "${vg_tests[@]}"; do for tier in $tiers; do echo "$tier $t"; done; done |
  xargs -P 2 -L 1 bash -c 'vg_one "$0" "$1"'
for t in "${vg_tests[@]}"; do
  for tier in $tiers; do
    rc=$(cat "$work/vg-$tier-$t.rc" 2>/dev/null || echo missing)
    echo "valgrind: $t ($tier) exit $rc"
    [ "$rc" = 0 ] || { tail -n 60 "$work/vg-$tier-$t.log"; failed+=("valgrind:$t:$tier"); }
  done
done

step "done"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "hardening: FAILED: ${failed[*]}"
  exit 1
fi
echo "hardening: all jobs passed"

#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The long fuzz run that SECURITY.md records: every target (or the ones named) for
# SECONDS_PER_TARGET seconds (default 3600) of one core each, PARALLEL at a time (default 2),
# from its seed corpus into a growing corpus outside the repository (OUT, default ~/qs-fuzz),
# then one row per target in the format of tests/fuzz/README.md's campaign log, with the
# executions added. Build the targets first (bash tests/fuzz/build.sh).
#
#   bash tests/fuzz/long_run.sh                                  # all eight targets, 1 h each
#   SECONDS_PER_TARGET=300 bash tests/fuzz/long_run.sh fuzz_hessian fuzz_sidefiles
#
# A target stops at its first finding (libFuzzer's default): its row then names the input, kept
# in OUT/TARGET/artifacts/, and its log is OUT/TARGET/log.
set -euo pipefail
cd "$(dirname "$0")/../.."
export QS_BUILD=${BUILD_DIR:-build-fuzz}
export QS_SECONDS=${SECONDS_PER_TARGET:-3600}
export QS_OUT=${OUT:-$HOME/qs-fuzz}
parallel=${PARALLEL:-2}
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(fuzz_quantize fuzz_dequantize fuzz_sp24 fuzz_observer fuzz_safetensors fuzz_matmul
           fuzz_hessian fuzz_sidefiles)
fi
for t in "${targets[@]}"; do
  [ -x "$QS_BUILD/tests/fuzz/$t" ] || { echo "long_run: $QS_BUILD/tests/fuzz/$t is not built (bash tests/fuzz/build.sh)"; exit 2; }
done
tree="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include tools tests/fuzz || echo '+local changes')"

run_one() {
  local t=$1 d=$QS_OUT/$1 rc=0 start
  rm -rf "$d/artifacts" "$d/scratch"
  mkdir -p "$d/corpus" "$d/artifacts" "$d/scratch"
  start=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TMPDIR="$d/scratch" \
    nice -n 5 "$QS_BUILD/tests/fuzz/$t" "$d/corpus" "tests/fuzz/corpus/$t" \
    -max_total_time="$QS_SECONDS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$d/artifacts/" >"$d/log" 2>&1 || rc=$?
  echo "$rc $(( $(date +%s) - start ))" >"$d/result"
}
export -f run_one
printf '%s\n' "${targets[@]}" | xargs -P "$parallel" -I{} bash -c 'run_one {}'

echo
echo "| date | target | tree | seconds | executions | exec/s | cov | ft | QS_FUZZ_KNOWN | findings |"
echo "|---|---|---|---|---|---|---|---|---|---|"
failed=0
for t in "${targets[@]}"; do
  d=$QS_OUT/$t
  read -r rc secs <"$d/result"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$d/log" | tail -n 1)
  last=$(grep -E '^#[0-9]+.*cov: [0-9]+' "$d/log" | tail -n 1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  finding=none
  if [ "$rc" != 0 ]; then
    failed=1
    art=$(ls "$d/artifacts" 2>/dev/null | head -n 1)
    finding="exit $rc: $(grep -m 1 -E '^fuzz:|ERROR: |runtime error|SUMMARY' "$d/log" | cut -c1-100); input $d/artifacts/${art:-?}"
  fi
  echo "| $(date +%F) | $t | $tree | $secs | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${ft:-?} | ${QS_FUZZ_KNOWN:-(strict)} | $finding |"
done
exit "$failed"

#!/usr/bin/env bash
# Single-H200 device calls of session 9 (about 9 minutes each):
#   PART=a: gpu_dropout.sh (dropout tests, plain/dropout bench, dropout tuning),
#           then the forced-hopper GPU tests in the time left;
#   PART=b: host time with call plans (gpu_host_plans.sh PART=2), every row of
#           bench_variants.py, then the forced-portable GPU tests in the time left.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { local l=$(( ${END:-560} - ($(date +%s) - t0) )); [ $l -lt 30 ] && l=30; echo $l; }
forced() {  # tier
  FLASHATTN_TRITON_BACKEND=$1 FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 $(left) python3 -m pytest -q \
    -p no:cacheprovider -rfE --tb=short -n 6 tests/test_hopper.py tests/test_attention.py tests/test_backward.py \
    > "$R/tests_$1.log" 2>&1
  echo "rc=$?" >> "$R/tests_$1.log"; el "forced $1"; tail -4 "$R/tests_$1.log"
}
if [ "${PART:-a}" = a ]; then
  T2=120 T4=120 JOBS=12 OUT="$R/dropout" bash benchmarks/history/gpu_dropout.sh > "$R/dropout.log" 2>&1; el dropout
  tail -45 "$R/dropout.log" | cut -c1-220
  forced hopper
else
  PART=2 OUT="$R/host" bash benchmarks/history/gpu_host_plans.sh > "$R/host.log" 2>&1; el host
  tail -30 "$R/host.log" | cut -c1-220
  timeout -k 5 170 python3 benchmarks/bench_variants.py --out "$R/variants" > "$R/variants.log" 2>&1
  echo "rc=$?" >> "$R/variants.log"; el variants
  sed -n '/short:begin/,/short:end/p' "$R/variants/bench_variants.md" | cut -c1-200
  forced portable
fi
tar -C "$OUT" -czf "$OUT/results.tgz" r

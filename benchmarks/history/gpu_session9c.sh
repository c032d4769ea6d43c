#!/usr/bin/env bash
# Last single-H200 call of session 9 (about 7 minutes): the MLA head dims
# (gpu_mla.sh: tune the d256v128 keys, bench the d=192/dv=128 row, d != dv and
# config tests), then the GPU tests touched by the (d_pad, dv_pad) config key
# (attention, backward, plans, fast launch, configs) in the time left.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { local l=$(( ${END:-420} - ($(date +%s) - t0) )); [ $l -lt 30 ] && l=30; echo $l; }
T_TUNE=120 T_BENCH=50 T_TESTS=70 OUT="$R/mla" bash benchmarks/history/gpu_mla.sh > "$R/mla.log" 2>&1; el mla
cat "$R/mla.log" | cut -c1-220
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 $(left) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 8 \
  tests/test_attention.py tests/test_backward.py tests/test_plans.py tests/test_fastlaunch.py tests/test_configs.py \
  > "$R/tests.log" 2>&1
echo "rc=$?" >> "$R/tests.log"; el tests; tail -5 "$R/tests.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r

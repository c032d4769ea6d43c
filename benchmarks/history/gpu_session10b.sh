#!/usr/bin/env bash
# Second single-H200 call of session 10: the Gluon backward (kernels/hopper/bwd.py).
#   1. smoke: benchmarks/hopper_bwd_smoke.py (one GQA ragged case, d=128 and 64);
#   2. tests/test_hopper_bwd.py on the GPU;
#   3. backward TFLOP/s: ours (Hopper backward) + SDPA flash + cuDNN, bf16, d 64/128,
#      N 2k/8k, causal and not; then ours with FLASHATTN_TRITON_HOPPER_BWD=0 (portable);
#   4. compute-sanitizer memcheck of the smoke case (small shape).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { local l=$(( ${END:-560} - ($(date +%s) - t0) )); [ $l -lt 30 ] && l=30; echo $l; }
git log -1 --format=%H > "$R/env.txt" 2>/dev/null
( timeout -k 5 90 python3 benchmarks/hopper_bwd_smoke.py --d 128 && \
  timeout -k 5 60 python3 benchmarks/hopper_bwd_smoke.py --d 64 ) > "$R/smoke.log" 2>&1
rc=$?; echo "rc=$rc" >> "$R/smoke.log"; el smoke; cat "$R/smoke.log" | tail -16
if [ $rc -eq 0 ]; then
  FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_TESTS:-150} python3 -m pytest -q -p no:cacheprovider -rfE \
    --tb=short -n 4 tests/test_hopper_bwd.py > "$R/tests.log" 2>&1
  echo "rc=$?" >> "$R/tests.log"; el tests; tail -12 "$R/tests.log" | cut -c1-300
  B="--modes bwd --head-dims 64,128 --seqlens 2048,8192 --dtype bf16 --no-gqa --no-plot --no-progress"
  timeout -k 5 ${T_BENCH:-120} python3 benchmarks/bench_attention.py $B --peers sdpa_flash,sdpa_cudnn \
    --out "$R/bench" > "$R/bench.log" 2>&1
  echo "rc=$?" >> "$R/bench.log"; el bench
  FLASHATTN_TRITON_HOPPER_BWD=0 timeout -k 5 ${T_BENCH2:-80} python3 benchmarks/bench_attention.py $B \
    --providers flashattn_triton --out "$R/bench_portable" > "$R/bench_portable.log" 2>&1
  echo "rc=$?" >> "$R/bench_portable.log"; el bench_portable
  grep -A12 "flashattn_triton TFLOP/s" "$R/bench/bench_attention.md" | cut -c1-200
  grep -A12 "flashattn_triton TFLOP/s" "$R/bench_portable/bench_attention.md" | cut -c1-200
  timeout -k 5 $(left) compute-sanitizer --tool memcheck python3 benchmarks/hopper_bwd_smoke.py --shape 1,4,2,200,333 \
    > "$R/memcheck.log" 2>&1
  echo "rc=$?" >> "$R/memcheck.log"; el memcheck; tail -5 "$R/memcheck.log"
fi
tar -C "$OUT" -czf "$OUT/results.tgz" r

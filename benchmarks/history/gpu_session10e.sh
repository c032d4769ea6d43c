#!/usr/bin/env bash
# Last single-H200 call of session 10 (about 8 minutes), on the final defaults:
#   1. tests/test_hopper_bwd.py, then the forced-hopper GPU suite (test_hopper,
#      test_attention, test_backward);
#   2. bench_attention.py side by side: bf16, d 64/128/256, N 2k/8k, causal and
#      not, plus the GQA row, forward and backward, ours + SDPA flash (FA2) +
#      cuDNN + FlexAttention, one run.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$R/env.txt"
git log -1 --format=%H >> "$R/env.txt" 2>/dev/null
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_BWD:-70} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 4 tests/test_hopper_bwd.py > "$R/tests_bwd.log" 2>&1
echo "rc=$?" >> "$R/tests_bwd.log"; el tests_bwd; tail -3 "$R/tests_bwd.log" | cut -c1-300
FLASHATTN_TRITON_BACKEND=hopper FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_TESTS:-190} python3 -m pytest -q \
  -p no:cacheprovider -rfE --tb=short -n 6 tests/test_hopper.py tests/test_attention.py tests/test_backward.py \
  > "$R/tests_hopper.log" 2>&1
echo "rc=$?" >> "$R/tests_hopper.log"; el tests_hopper; tail -4 "$R/tests_hopper.log" | cut -c1-300
timeout -k 5 ${T_BENCH:-230} python3 benchmarks/bench_attention.py --modes fwd,bwd --head-dims 64,128,256 \
  --seqlens 2048,8192 --dtype bf16 --peers sdpa_flash,sdpa_cudnn,flex --max-seconds ${B_BENCH:-210} \
  --no-progress --out "$R/bench" > "$R/bench.log" 2>&1
echo "rc=$?" >> "$R/bench.log"; el bench
sed -n '/short:begin/,/short:end/p' "$R/bench/bench_attention.md" | cut -c1-200
tar -C "$OUT" -czf "$OUT/results.tgz" r

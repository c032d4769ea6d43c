#!/usr/bin/env bash
# First single-H200 call of session 10 (about 9 minutes): time what session 9
# changed but did not time, then re-run the forced-tier GPU suites.
#   1. gpu_split_qk.sh parts fwd + bwd (split Q K^T on/off, d 96/160/192:128);
#   2. bench_decode.py B=1,8 at 1k-64k with the pipelined merge (fused and
#      separate combine);
#   3. bench_variants.py dropout row, default and FLASHATTN_TRITON_FUSED_DQ=1;
#   4. forced hopper and forced portable GPU suites (test_hopper,
#      test_attention, test_backward) in the time left.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { local l=$(( ${END:-560} - ($(date +%s) - t0) )); [ $l -lt 30 ] && l=30; echo $l; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$R/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$R/env.txt"
git log -1 --format=%H >> "$R/env.txt" 2>/dev/null
PARTS="fwd bwd" T_BENCH=80 T_BWD=80 OUT="$R/split" bash benchmarks/history/gpu_split_qk.sh > "$R/split.log" 2>&1; el split
grep -E "speedup|rc=" "$R/split.log" | cut -c1-200
timeout -k 5 120 python3 benchmarks/bench_decode.py --out "$R/decode" --batches 1,8 \
  --seqlens 1024,4096,16384,65536 --combine fused,separate > "$R/decode.log" 2>&1
echo "rc=$?" >> "$R/decode.log"; el decode; tail -30 "$R/decode/bench_decode.md" 2>/dev/null | cut -c1-200
timeout -k 5 60 python3 benchmarks/bench_variants.py --out "$R/drop" --only dropout --skip-sweep > "$R/drop.log" 2>&1
echo "rc=$?" >> "$R/drop.log"
FLASHATTN_TRITON_FUSED_DQ=1 timeout -k 5 60 python3 benchmarks/bench_variants.py --out "$R/drop_fused" --only dropout \
  --skip-sweep > "$R/drop_fused.log" 2>&1
echo "rc=$?" >> "$R/drop_fused.log"; el dropout
for f in drop drop_fused; do sed -n '/short:begin/,/short:end/p' "$R/$f/bench_variants.md" 2>/dev/null | cut -c1-200; done
forced() {  # tier
  FLASHATTN_TRITON_BACKEND=$1 FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 $2 python3 -m pytest -q \
    -p no:cacheprovider -rfE --tb=short -n 6 tests/test_hopper.py tests/test_attention.py tests/test_backward.py \
    > "$R/tests_$1.log" 2>&1
  echo "rc=$?" >> "$R/tests_$1.log"; el "forced $1"; tail -4 "$R/tests_$1.log"
}
half=$(( $(left) / 2 )); [ $half -lt 30 ] && half=30
forced hopper $half
forced portable $(left)
tar -C "$OUT" -czf "$OUT/results.tgz" r

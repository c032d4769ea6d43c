#!/usr/bin/env bash
# First call of the next session (about 8 minutes on one H200):
#   1. benchmarks/history/gpu_next_band.sh: the causal forward's M_BAND tile order
#      (GPU tests, A/B with its decision rule);
#   2. decoding without the per-call memset (split counters kept per stream
#      and reset by the kernel): the KV-cache GPU tests (CUDA-graph capture
#      included), then bench_decode at B = 1 and 8 with cuDNN in the same run;
#      expect ours / cuDNN at B = 1, 1k-8k above session 12 call 1's
#      0.80-0.83x (a memset kernel and its launch gap were part of the ~12 us
#      fixed cost);
#   3. test_variants.py + test_gpu.py with 8 workers (the big-memory lock;
#      session 12 call 7: 6 OOM failures without it).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
OUT="$R/band" bash benchmarks/history/gpu_next_band.sh > "$R/band.log" 2>&1; el band; tail -30 "$R/band.log" | cut -c1-300
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_KV:-110} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 6 tests/test_kvcache.py > "$R/tests_kv.log" 2>&1
echo "rc=$?" >> "$R/tests_kv.log"; el tests_kv; tail -3 "$R/tests_kv.log" | cut -c1-300
timeout -k 5 ${T_DEC:-60} python3 benchmarks/bench_decode.py --quick --batches 1,8 --layouts contiguous,paged16 \
  --peers sdpa_cudnn --max-seconds 50 --out "$R/decode" > "$R/decode.log" 2>&1
echo "rc=$?" >> "$R/decode.log"; el decode; sed -n '/short:begin/,/short:end/p' "$R/decode/bench_decode.md" | head -12
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_VAR:-130} python3 -m pytest -q -p no:cacheprovider -rfE \
  --tb=short -n 8 tests/test_variants.py tests/test_gpu.py > "$R/tests_var.log" 2>&1
echo "rc=$?" >> "$R/tests_var.log"; el tests_var; tail -3 "$R/tests_var.log" | cut -c1-300
tar -C "$OUT" -czf "$OUT/results.tgz" r

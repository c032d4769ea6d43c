# Session 53 call 1 (ran as benchmarks/callA.sh on an H100; results/h100/session53/): the GPU-unrun kernel changes of sessions 52-53 (chunked
# attention, the KV cache's leftpad-relative chunks and split plan, the paged varlen forward),
# session 51's host changes, the forced Hopper tier, the self-check.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests new 200 -n 8 tests/test_chunk.py tests/test_kvcache_chunk.py tests/test_varlen_paged.py \
  tests/test_integrations.py
gpu_tests session51_host 150 -n 8 tests/test_kvcache.py tests/test_ops.py tests/test_plans.py tests/test_fastlaunch.py \
  tests/test_varlen.py
( export FLASHATTN_TRITON_BACKEND=hopper; gpu_tests hopper_forced 80 -n 8 tests/test_attention.py )
timeout 50 python3 -m flashattn_triton check --no-bench > "$R/check.log" 2>&1; echo "rc=$?" >> "$R/check.log"; tail -3 "$R/check.log"
timeout -k 5 90 python3 benchmarks/bench_varlen.py --batches 1 --out "$R/varlen" > "$R/bench_varlen.log" 2>&1
echo "rc=$?" >> "$R/bench_varlen.log"; el bench_varlen; tail -9 "$R/bench_varlen.log" | cut -c1-200
tar -C "$OUT" -czf "$OUT/results.tgz" r

# Session 53 call 2 (ran as benchmarks/callB.sh on an H200; results/h200/session53/): call 1's failing groups again after the fixes (fastlaunch.empty's int sizes,
# two test fixes), and the forced Hopper tier.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests new 150 -n 8 tests/test_chunk.py tests/test_kvcache_chunk.py tests/test_varlen_paged.py \
  tests/test_integrations.py
gpu_tests session51_host 130 -n 8 tests/test_kvcache.py tests/test_ops.py tests/test_plans.py tests/test_fastlaunch.py \
  tests/test_varlen.py
( export FLASHATTN_TRITON_BACKEND=hopper; gpu_tests hopper_forced 70 -n 8 tests/test_attention.py )
tar -C "$OUT" -czf "$OUT/results.tgz" r

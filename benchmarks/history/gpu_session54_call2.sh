# Session 54 call 2 (warm H100 after call 1): the forced Hopper tier whole, session 50's host tests.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
( export FLASHATTN_TRITON_BACKEND=hopper; gpu_tests hopper_forced 240 -n 12 tests/test_attention.py )
gpu_tests session50_host 200 -n 12 -m "not gpu" tests/test_nn.py tests/test_dq_convert.py tests/test_configs.py \
  tests/test_cli.py tests/test_backward.py
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# Queued by session 47 (one call, about 5 minutes): the GPU run owed by its
# CPU-only changes.
#  1. The float32 builds' rounded score scale (9679604, kernels/score.py
#     ROUND_SCALED): test_huge_scores_fp32_gradients failed on the H100 by 153x
#     before it; it must pass now, and every float32 test with it.
#  2. This session's other GPU-reachable changes: double backward, window
#     sentinels, kvcache autocast, fake strides, compile(dynamic=True) with a
#     module's mask / slopes, the Transformers mask builder (Llama 4 chunks).
# Rule: every test passes (a failure is a bug to fix, not a result).  Then run
# gpu_tests.sh parts a3, b1, b2 (each its own call).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests fp32 200 -n 8 tests/test_ops.py tests/test_attention.py tests/test_backward.py tests/test_varlen.py \
  -k "huge_scores or float32 or fp32"
gpu_tests session47 200 -n 8 tests/test_ops.py tests/test_variants.py tests/test_kvcache.py tests/test_integrations.py \
  -k "double_backward or window_sentinels or autocast_casts or fake_strides or compile_dynamic_with_module or llama4 or tells_windows"

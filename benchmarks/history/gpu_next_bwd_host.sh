#!/usr/bin/env bash
# The Hopper backward's host path after its per-signature launch plans
# (kernels/hopper/bwd.py _PLANS: checks, kernel_meta, layouts and grid once per
# signature, then the launch fast path; before, fresh layouts made every launch
# take Triton's own path), on one H200, under 2 minutes:
#   1. GPU tests -k repeated (tests/test_hopper_bwd.py): a repeated
#      flash_attn_func backward gives the first call's gradients (bit for bit
#      with one key block; dK, dV bit for bit and dQ within the atomics'
#      rounding otherwise), one plan for the signature;
#   2. hopper_bwd_probe.py --rows window --profile (d = 128, N = 2k, causal
#      windows of 256 and 1024, bf16): the API row against the kernel alone,
#      and the host profile of the API calls (session 13 call 5: about 1.2 ms
#      per API call against 0.61 ms of kernels at window 256, cProfile 34 ms
#      per 20 calls against 19 for the portable backward).
# Expected: api:window closer to kernel-alone at window 256; the profile's
# hopper_attention_backward well under its 18 ms per 20 calls (no
# unsupported_reason / kernel_meta / JIT run per call).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: timing only (the tests ran in the suite)
gpu_tests tests_bwd_host ${T_TESTS:-50} tests/test_hopper_bwd.py -k repeated
fi
timeout -k 5 ${T_BENCH:-60} python3 benchmarks/hopper_bwd_probe.py --rows window --head-dims 128 \
  --seqlens 2048 --windows 256,1024 --profile --out "$R" > "$R/bench_bwd_host.log" 2>&1
echo "rc=$?" >> "$R/bench_bwd_host.log"; el bench_bwd_host; cut -c1-300 "$R/bench_bwd_host.log" | tail -40
tar -C "$OUT" -czf "$OUT/results.tgz" r

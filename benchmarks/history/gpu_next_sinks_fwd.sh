#!/usr/bin/env bash
# Learnable sinks on the Hopper forward (FLASHATTN_TRITON_HOPPER_SINKS, _dispatch.HOPPER_SINKS_DEFAULT
# "0"; built in session 22): a dense call whose only kernel-side variant is its sinks runs the
# Hopper forward without them, then ops._fold_sinks folds each head's sink into O and the base-2
# LSE in place (kernels/combine.py's merge, one part, LSE_BASE2); the backward reads the sinks
# only through the LSE, so it is unchanged. Why: the variant table (session 22 call 3) runs the
# sinks forward on the portable kernels at 0.357 ms against the plain causal row's 0.232 ms
# (Hopper) at the same shape. One H200, about 4-6 minutes:
#   1. GPU tests (T_TESTS 200 s, -n 4): tests/test_hopper.py -k sinks_folded (the real Hopper
#      forward with the fold, d 64 / 128, causal / full / window 128, GQA, Nq != Nk, output,
#      LSE and the gradients of q, k, v, sinks against float64), tests/test_variants.py -k sinks
#      and tests/test_kvcache.py -k "sinks or combine" (the combine kernel changed: LSE_BASE2),
#      each file once with FLASHATTN_TRITON_HOPPER_SINKS=1.
#   2. bench_variants.py --only sinks --no-peer (forward and backward ms, do_bench medians) at
#      B=2 N=4k Hq16 Hkv4 d=128 and B=2 N=4k Hq64 Hkv8 d=64 (gpt-oss' head dim), causal, with
#      the switch 0 and 1 in separate processes (T_BENCH 90 s each), alternated over 3 rounds;
#      a round does not start after T_STOP (440 s) of the call.
# Rule, fixed before the run: HOPPER_SINKS_DEFAULT becomes "1" if the tests pass (rc=0), at
# least 2 rounds completed, and on every row of every completed round the forward with the
# switch on takes <= 0.95x the time with it off and the backward <= 1.03x.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
sinks_rounds
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import rules; print(rules.sinks_verdict('$R', False))" \
  | tee "$OUT/verdict.txt"
tar czf "$OUT/results.tgz" -C "$OUT" r

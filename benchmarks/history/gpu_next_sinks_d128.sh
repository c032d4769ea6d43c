#!/usr/bin/env bash
# Learnable sinks on the Hopper forward by head dim (_dispatch.HOPPER_SINKS_DIMS, empty until this
# rule). Session 23 call 1 (gpu_next_sinks_fwd.sh, 3 rounds) timed the fold's forward at
# 0.708-0.721x the portable forward with sinks at d = 128 and 0.960-0.969x at d = 64; its rule (one
# switch for all dims, every round's backward <= 1.03x) failed on d = 64's forward and on one
# round's 1.30x backward (the backward does not change with the switch: a stalled iteration).
# Same steps, tests and shapes as gpu_next_sinks_fwd.sh (GPU tests with the switch on, then
# bench_variants.py --only sinks --no-peer with FLASHATTN_TRITON_HOPPER_SINKS 0 / 1, 3 rounds).
# Rule, fixed before the run, per head dim d of the two rows (128: B=2 N=4k Hq16 Hkv4; 64: B=2 N=4k
# Hq64 Hkv8; causal): d joins HOPPER_SINKS_DIMS if the tests pass, at least 2 rounds completed, the
# forward on/off time ratio is <= 0.95 in every completed round and the median over the rounds of
# the backward's on/off ratio is <= 1.03.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
sinks_rounds
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import rules; print(rules.sinks_verdict('$R', True))" \
  | tee "$OUT/verdict.txt"
tar czf "$OUT/results.tgz" -C "$OUT" r

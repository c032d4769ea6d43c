#!/usr/bin/env bash
# The dropout backward's draws before each step's products (DROPOUT_SHARED_CALLS = 2, an override;
# kernels/hopper/bwd.py _attn_bwd_step) against the default (drawn while dP^T runs), on one H200,
# about 4-5 minutes. Why: issue 10's dropout row reads 0.89x SDPA (session 37 call 3), and the
# d = 128 causal dropout build spills in its GEMM loops (568 B, 119 local stores there); drawn
# first, with only dK and dV live, it spills 492 B / 76 (full 312 / 33 -> 288 / 25; d = 64
# causal 76 / 0 -> 112 / 1, full unchanged; compile_check --hopper-bwd --dropout --sass
# --hopper-variants default,DROPOUT_SHARED_CALLS=2, Triton 3.6).
#   1. GPU tests: tests/test_hopper_bwd.py -k "dropout" (test_dropout_early_draws among them: the
#      override's gradients equal the default's, the same Philox mask).
#   2. hopper_bwd_probe.py --dropout 0.1, two repeats, the rows of gpu_next_tma_dkv_variants.sh:
#      causal (8,16,16,2048,128), (4,16,16,4096,128), (2,16,4,4096,128), (2,16,16,8192,128),
#      (8,32,32,2048,64), (4,32,32,4096,64), (4,32,8,4096,64), (2,32,32,8192,64); non-causal
#      (8,16,16,2048,128), (2,16,16,8192,128), (8,32,32,2048,64), (2,32,32,8192,64); variants
#      default, DROPOUT_SHARED_CALLS=2.
# Rule, fixed before the run, per head dim over its 6 rows (DROPOUT_CONFIGS is per head dim): every
# test of step 1 passed, every check "ok", each row's best-of-two ratio >= 0.99, geometric mean
# >= 1.02: DROPOUT_CONFIGS[d]["DROPOUT_SHARED_CALLS"] = 2. Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/gpu_next_dropout_early.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_hopper_bwd.py -k "dropout" -n 4
dropout_probe_reps "default,DROPOUT_SHARED_CALLS=2"
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import best_of_reps_rule, probe_run
tests_ok, reps = probe_run(sys.argv[1])
for d in (64, 128):
    print(f"== dropout d={d}")
    sel = [[x for x in rep if x["d"] == d] for rep in reps]
    best, _ = best_of_reps_rule(sel, {"early": "DROPOUT_SHARED_CALLS=2"}, 6, 0.99, 1.02)
    print("RULE: " + (f"DROPOUT_CONFIGS[{d}]['DROPOUT_SHARED_CALLS'] = 2" if best and tests_ok else "nothing changes"))
PY
tar czf "$OUT/results.tgz" -C "$OUT" r

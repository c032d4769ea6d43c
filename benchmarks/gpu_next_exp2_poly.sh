#!/usr/bin/env bash
# The d = 64 forward with one exponential in every 8 (or 4) of a thread's computed on the FMA pipe
# (kernels/hopper/fwd.py EXP2_POLY, an override: a degree-3 polynomial of 2^f and an exponent add,
# relative error 1.2e-4), on one H200, about 4-5 minutes. Why: the d = 64 causal forward is 0.86x
# cuDNN at 2k (session 37 sweep), and its warp-state samples (session 37 call 6) sit on the exp2
# line (19.9 %: waits and MUFU-queue throttles) while wgmma and its waits hold 4.6 %: at d = 64 a
# score costs as much MUFU time (1/16 per SM clock) as tensor time.
#   1. GPU tests: tests/test_hopper.py -k exp2_poly (every CASES entry, d 64 / 128 / 256, bf16 and
#      fp16, EXP2_POLY 4 and 8, against float64);
#   2. hopper_fwd_probe.py: correctness of exp2_poly8 at d = 64, then two timing repeats in fresh
#      processes of rows softmax64 (bf16, B*N = 16k, d = 64: causal N 1k / 2k / 4k / 8k and Hq 32 /
#      Hkv 8 at 4k; non-causal N 1k / 2k / 4k, the 1k row the forward's one below Flex) with
#      default, exp2_poly8_plans and exp2_poly4_plans (CONFIGS[64] with EXP2_POLY = 8 / 4, through
#      the cached plans), next to cuDNN.
# Rule, fixed before the run: with the tests and the correctness stage passed, a candidate qualifies
# when in both repeats all 8 rows are timed, each >= 0.99x default and their geometric mean >= 1.02;
# the qualifying one with the larger summed geomeans becomes CONFIGS[64]["EXP2_POLY"]. Otherwise
# nothing changes.
#
#     OUT=/tmp/out bash benchmarks/gpu_next_exp2_poly.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
gpu_tests tests ${T_TESTS:-150} tests/test_hopper.py -k "exp2_poly" -n 4
fwd_probe_ab exp2_poly8 default,exp2_poly8_plans,exp2_poly4_plans softmax64 sdpa:cudnn
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import fwd_probe_records, probe_candidate, probe_correct, tests_passed
r = sys.argv[1]
ok0 = tests_passed(f"{r}/tests.log") and probe_correct(f"{r}/correct.log", "exp2_poly8")
print("tests and correctness:", "passed" if ok0 else "FAILED or missing")
reps = [{(x["d"], x["n"], x["hkv"], x["causal"]): x for x in rep}
        for rep in fwd_probe_records([f"{r}/ab1.log", f"{r}/ab2.log"])]
best = None
for cand, n in (("exp2_poly8_plans", 8), ("exp2_poly4_plans", 4)):
    ok, means = probe_candidate(reps, cand, want=8, row_min=0.99, geo_min=1.02,
                                label=lambda k: f"N={k[1]} Hkv={k[2]} causal={k[3]}")
    ok = ok and ok0 and len(reps) == 2
    print(f"{cand}: geomean per repeat {', '.join(f'{m:.3f}' for m in means)}" + (" qualifies" if ok else ""))
    if ok and (best is None or sum(means) > best[1]):
        best = (n, sum(means))
print(f"RULE: CONFIGS[64]['EXP2_POLY'] = {best[0]}" if best else "RULE: nothing changes")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r

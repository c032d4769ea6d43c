#!/usr/bin/env bash
# Learnable sinks with dropout on the Hopper dropout backward (ops._bwd_into chooses the
# backward's tier without the sinks since da8abdc: the kernels read them only through the LSE),
# on one H200, about 3 minutes.
#   1. GPU tests: test_hopper_dropout.py (test_dropout_with_sinks_takes_the_hopper_backward: d 64
#      / 128, causal and not, GQA, Nq != Nk, NaN past N; the dispatch and mixed-tier tests) and
#      test_cli.py -k sinks; then, while T_STOP allows, test_variants.py's gpu-marked sinks cases
#      (sinks+dropout among them; float64 reference).
#   2. bench_variants.py --only sinks+dropout --no-peer (B=2 N=4k Hq16 Hkv4 d=128 causal,
#      bf16), FLASHATTN_TRITON_HOPPER_BWD=0 (the portable backward: what the call ran before)
#      and unset, alternated, two rounds.
# Rule, fixed before the run: the change stays if step 1 passed (every log rc=0) and the
# backward with the Hopper tier is faster than the portable one in both rounds; otherwise
# ops._bwd_into passes the sinks to hopper_takes_variants again (the change reverted).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_sinks_dropout.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests_sd ${T_TESTS:-110} -n 8 tests/test_hopper_dropout.py tests/test_cli.py \
  -k "sinks or backward_dispatch or mixed"
for round in 1 2; do
  for sw in 0 1; do
    env $([ $sw = 0 ] && echo FLASHATTN_TRITON_HOPPER_BWD=0) timeout -k 5 ${T_BENCH:-40} python3 \
      benchmarks/bench_variants.py --only sinks+dropout --no-peer --rep ${REP:-30} --out "$R/bench_${round}_$sw" \
      > "$R/bench_${round}_$sw.log" 2>&1
    echo "rc=$?" >> "$R/bench_${round}_$sw.log"
  done
  el "round $round"
done
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import tests_passed, tier_rows
r = sys.argv[1]
ok = tests_passed(f"{r}/tests_sd.log")
faster = []
for rnd in (1, 2):
    rows = tier_rows(lambda sw: f"{r}/bench_{rnd}_{sw}")  # 0: the portable backward, 1: the Hopper one
    bwd = [rows.get(sw, {}).get("ours_bwd_ms") for sw in (0, 1)]
    faster.append(None not in bwd and bwd[1] < bwd[0])
print(f"tests rc=0: {ok}; hopper backward faster in both rounds: {all(faster)}")
print("RULE: " + ("the change stays" if ok and all(faster) else "revert: sinks with dropout keep the portable backward"))
PY
if [ $(( $(date +%s) - t0 )) -lt ${T_STOP:-150} ]; then
  gpu_tests tests_gpu_sinks ${T_GPU:-90} -n 2 tests/test_variants.py -m gpu -k "test_gpu_variants and sinks"
fi
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# Early Q release in the Hopper forward (fwd.py EARLY_Q, EARLY_Q_DEFAULT all off; docs/hopper.md
# "Early Q release"), on one H200: about 5 minutes, at most 7 under the timeouts.
# Hypothesis: a persistent program's consumers stage O in their Q buffer and free it only after
# the TMA store has read it, so the next work tile's Q load (DRAM latency) starts after the whole
# epilogue: a bubble of ~1.5-2 us per work tile, ~5% of a d = 128 tile at N = 2k (16 key tiles,
# ~30 us), ~10% of an average causal one, ~1.5% at 8k -- the size of the short-N gap to cuDNN
# (d = 128: 0.92x full / 0.88x causal at 2k, 1.01x / 0.99x at 8k, session 16 call 1).
# EARLY_Q frees Q after the last S and stores O from registers; the producer loads one K/V tile
# fewer before Q.
#   1. GPU tests: tests/test_hopper.py -k "early_q" (float64 reference, ragged / GQA / padded /
#      packed layouts, d 64/128/256 and 192/128, grid, persistent and DYNAMIC on 5 programs and
#      one per SM) and the fake-driver launch test;
#   2. A/B in one process, two repeats: hopper_fwd_probe.py --rows short, default vs early_q (each
#      head dim's default schedule) with cuDNN, d 128/64/256, N 2k/4k/8k, causal and not.
# Rule, fixed before the run: for each (d, causal), EARLY_Q_DEFAULT[d][causal] = True if the tests
# passed and early_q / default has a geometric mean >= 1.02 over N in {2k, 4k, 8k} in each repeat
# with no row below 0.99 in either; otherwise it stays off there.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests_early_q ${T_TESTS:-150} -n 8 tests/test_hopper.py -k "early_q or launch_plans_on_a_fake"
for rep in 1 2; do
  timeout -k 5 $([ $rep = 1 ] && echo ${T_AB1:-200} || echo ${T_AB2:-110}) python3 benchmarks/hopper_fwd_probe.py --stage bench \
    --variants default,early_q --rows short --baselines sdpa:cudnn > "$R/ab$rep.log" 2>&1
  echo "rc=$?" >> "$R/ab$rep.log"; el "ab$rep"
done
python3 - "$R/tests_early_q.log" "$R/ab1.log" "$R/ab2.log" <<'PY' 2>&1 | tee "$R/verdict.txt"
import math, sys
sys.path.insert(0, "benchmarks")
from rules import fwd_probe_records, tests_passed
tests_ok = tests_passed(sys.argv[1])
ratios = {}  # (d, causal) -> per repeat: {n: early_q / default}
for i, records in enumerate(fwd_probe_records(sys.argv[2:])):
    for r in records:
        base, new = r.get("hopper:default"), r.get("hopper:early_q")
        if isinstance(base, float) and isinstance(new, float) and base > 0:
            ratios.setdefault((r["d"], bool(r["causal"])), [{}, {}])[i][r["n"]] = new / base
            print(f"rep{i + 1} d={r['d']} N={r['n']} causal={r['causal']}: default {base:.0f} early_q {new:.0f} "
                  f"({new / base:.3f}) cudnn {r.get('sdpa:cudnn')}")
print(f"tests: {'passed' if tests_ok else 'NOT passed'}")
for (d, causal), per_rep in sorted(ratios.items()):
    means = []
    ok = tests_ok
    for rep in per_rep:
        if sorted(rep) != [2048, 4096, 8192]:
            ok = False
            means.append(float("nan"))
            continue
        means.append(math.exp(sum(math.log(x) for x in rep.values()) / 3))
        ok = ok and means[-1] >= 1.02 and min(rep.values()) >= 0.99
    print(f"d={d} causal={causal}: geomean per repeat {', '.join(f'{m:.3f}' for m in means)}, rows "
          f"{', '.join(f'{x:.3f}' for rep in per_rep for x in rep.values())} -> "
          f"{'EARLY_Q_DEFAULT on' if ok else 'stays off'}")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r

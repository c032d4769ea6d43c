#!/usr/bin/env bash
# Confirmation of the Hopper backward's named-barrier default by shape (kernels/hopper/bwd.py
# NAMED_BAR_BY_SHAPE: causal d = 64 -> 1, causal d = 128 -> 2, non-causal 0), chosen from
# session 17's gpu_next_bwd_sync.sh run (whose single-level rule over all 12 rows was not met:
# both levels gained on every causal row and lost at d = 64 non-causal).  One H200, about 6 min.
#   1. GPU tests with the new default: tests/test_hopper_bwd.py but the fake-driver and named_bar
#      ones (those ran in session 17 call 2), against float64 autograd on NaN-poisoned outputs;
#   2. timing, two repeats, fresh process each: the new default ("default") against
#      mod:HOPPER_BWD_NAMED_BAR_DEFAULT=0 (every call level 0, the old default), through the
#      cached plans, d 64/128, N 2k/4k/8k, causal and not, bf16, B*N = 16k, H = 2048/d, and two
#      GQA causal rows (B=4 N=4k Hq/Hkv 32/8 d=64, 16/4 d=128: the group split's path), with cuDNN.
# Rule, fixed before the run: per head dim, the causal entry stays if the tests pass, every check
# is ok, and in each repeat default / level-0 has a geometric mean >= 1.02 over that head dim's
# causal rows (MHA 2k/4k/8k and its GQA row) with no row below 0.99; otherwise it goes back to 0.
# The non-causal rows run the same build both ways (a drift check: printed, not in the rule).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
L0="mod:HOPPER_BWD_NAMED_BAR_DEFAULT=0"
if [ -z "${SKIP_TESTS:-}" ]; then
gpu_tests tests_bwd ${T_TESTS:-280} -n 8 tests/test_hopper_bwd.py -k "not fake_driver and not named_bar"
fi
probe_reps ${T_BENCH:-200} --head-dims 64,128 --seqlens 2048,4096,8192 \
  --gqa "4,32,8,4096,64,1;4,16,4,4096,128,1" \
  --variants "default,$L0" --variants64 "" --variants256 "" --baselines cudnn --rep 40
python3 - "$R/rep1/hopper_bwd_probe.json" "$R/rep2/hopper_bwd_probe.json" "$R/tests_bwd.log" "$L0" <<'PY'
import math, sys
sys.path.insert(0, "benchmarks")
from rules import load_reps, probe_checks_ok, tests_passed
reps = load_reps(sys.argv[1:3])
tests_ok = tests_passed(sys.argv[3])
old = sys.argv[4]
checks = probe_checks_ok(reps)
keep = {}
for d in (64, 128):
    logs, low = [[] for _ in reps], False
    for rows in zip(*reps):
        r0 = rows[0]
        if r0["d"] != d:
            continue
        ratios = [r["tflops"]["default"] / r["tflops"][old] if r["tflops"].get("default") and r["tflops"].get(old)
                  else None for r in rows]
        vs = " ".join(f"{r['tflops'][old] / r['tflops']['cudnn']:.2f}->{r['tflops']['default'] / r['tflops']['cudnn']:.2f}"
                      if r["tflops"].get("cudnn") and r["tflops"].get("default") and r["tflops"].get(old) else "-"
                      for r in rows)
        shape = {k: r0.get(k) for k in ("b", "hq", "hkv", "n", "causal") if k in r0}
        print(f"d={d} {shape}: new/old " + " ".join(f"{x:.3f}" if x else "-" for x in ratios)
              + f"  vs cuDNN {vs}")
        if r0["causal"]:
            low |= not all(x is not None and x >= 0.99 for x in ratios)
            for log, x in zip(logs, ratios):
                log.append(x)
    geo = [math.exp(sum(map(math.log, log)) / len(log)) if log and all(log) else 0.0 for log in logs]
    keep[d] = tests_ok and checks and not low and len(logs[0]) >= 4 and all(g >= 1.02 for g in geo)
    print(f"d={d} causal: geomean new/old " + " ".join(f"{g:.3f}" for g in geo)
          + (" -> keeps its NAMED_BAR_BY_SHAPE entry" if keep[d] else " -> back to 0"))
bad = sorted({c for rows in reps for r in rows for c in r["check"].values() if c and c not in ("ok", "ref")})
print(f"tests {'passed' if tests_ok else 'FAILED'}, checks {'ok' if checks else bad}; RULE: "
      + ", ".join(f"d={d} {'kept' if k else 'reverted'}" for d, k in keep.items()))
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r

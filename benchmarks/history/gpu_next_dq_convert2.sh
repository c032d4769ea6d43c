#!/usr/bin/env bash
# The dQ conversion kernel per causal flag, second run (one H200, about 1.5 minutes).  Session 18
# call 1 (gpu_next_dq_convert.sh) measured DQ_CONVERT_KERNEL at 1.005-1.096x the default on the 6
# causal rows (both repeats) but 0.975-0.982x on d = 64 non-causal 4k / 8k, so its all-rows rule
# failed.  Since then, with the float32 buffer in dq's layout (hopper/bwd.py DQ_ACC_LIKE_DQ) the
# conversion is one flat pass over both arrays (kernels/bwd.py _bwd_dq_convert_flat), and both
# switches take a bool or {causal: bool} (kernels/bwd.py by_causal).
#   1. GPU tests: tests/test_dq_convert.py and tests/test_hopper_bwd.py -k "dq_convert and not
#      fake" (bit for bit torch's copy of the same buffer, both buffer layouts);
#   2. timing, two repeats, fresh process each, through the cached plans (hopper_bwd_probe.py,
#      the buffer's zeroing and conversion included): default, C1 = pmod:DQ_CONVERT_KERNEL=True,
#      C2 = C1 with mod:DQ_ACC_LIKE_DQ=True; d 64/128, N 2k/4k/8k, causal and not, bf16, B*N = 16k.
# Rule, fixed before the run: per causal flag, a candidate qualifies if the tests pass, every
# check is ok and in each repeat its geometric mean over that flag's 6 rows against default is
# >= 1.01 with no row below 0.99; the qualifying candidate with the larger mean over both
# repeats is adopted for that flag (C1: DQ_CONVERT_KERNEL[flag] = True; C2: also
# DQ_ACC_LIKE_DQ[flag] = True).  Otherwise nothing changes for that flag.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
C1="pmod:DQ_CONVERT_KERNEL=True"
C2="pmod:DQ_CONVERT_KERNEL=True&mod:DQ_ACC_LIKE_DQ=True"
if [ -z "${SKIP_TESTS:-}" ]; then
  gpu_tests tests_convert ${T_TESTS:-100} -n 8 tests/test_dq_convert.py tests/test_hopper_bwd.py \
    -k "dq_convert and not fake"
fi
probe_reps ${T_BENCH:-60} --head-dims 64,128 --seqlens 2048,4096,8192 --gqa none \
  --variants "default,$C1,$C2" --variants64 "" --variants256 "" --baselines cudnn --rep 40
python3 - "$R/rep1/hopper_bwd_probe.json" "$R/rep2/hopper_bwd_probe.json" "$R/tests_convert.log" "$C1" "$C2" \
  <<'PY' | tee "$OUT/verdict.txt"
import math, sys
sys.path.insert(0, "benchmarks")
from rules import load_reps, probe_checks_ok, tests_passed
reps = load_reps(sys.argv[1:3])
tests_ok = tests_passed(sys.argv[3])
cands = {"C1": sys.argv[4], "C2": sys.argv[5]}
checks = probe_checks_ok(reps)
adopted = {}
for causal in (False, True):
    best = None
    for name, spec in cands.items():
        logs, low = [[] for _ in reps], False
        for rows in zip(*reps):
            if bool(rows[0].get("causal")) != causal:
                continue
            ratios = [r["tflops"][spec] / r["tflops"]["default"]
                      if r["tflops"].get("default") and r["tflops"].get(spec) else None for r in rows]
            shape = {k: rows[0].get(k) for k in ("b", "hq", "n", "d")}
            print(f"causal={causal} {name} {shape}: /default " + " ".join(f"{x:.3f}" if x else "-" for x in ratios)
                  + "  vs cuDNN " + " ".join(f"{r['tflops'][spec] / r['tflops']['cudnn']:.2f}"
                                            if r["tflops"].get(spec) and r["tflops"].get("cudnn") else "-" for r in rows))
            low |= not all(x is not None and x >= 0.99 for x in ratios)
            for log, x in zip(logs, ratios):
                log.append(x)
        geo = [math.exp(sum(map(math.log, log)) / len(log)) if log and all(log) else 0.0 for log in logs]
        ok = tests_ok and checks and not low and len(logs[0]) == 6 and all(g >= 1.01 for g in geo)
        print(f"causal={causal} {name}: geomean per repeat " + " ".join(f"{g:.3f}" for g in geo)
              + (" qualifies" if ok else ""))
        if ok and (best is None or sum(geo) > best[1]):
            best = (name, sum(geo))
    if best:
        adopted[causal] = best[0]
print(f"tests {'passed' if tests_ok else 'FAILED'}, checks {'ok' if checks else 'NOT ok'}")
print("RULE: " + (", ".join(f"causal={c}: adopt {n}" for c, n in adopted.items()) or "nothing changes"))
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r

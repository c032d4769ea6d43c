#!/usr/bin/env bash
# The Hopper backward's dS^T exchange through one hardware barrier of both consumer
# warpgroups (NAMED_BAR in kernels/hopper/bwd.py, _consumers_sync; written and checked
# on CPU only: compiled for sm_90, fake-driver launches, the barrier protocol simulated)
# on one H200, about 5-6 minutes.  Per query tile each consumer warpgroup drops one
# mbarrier arrival (with the bar.sync before it) and one polled mbarrier wait for a
# single bar.sync of the two warpgroups' 256 threads (compile_check --sass: per tile
# loop BAR.SYNC 5 -> 5, mbarrier ARRIVE 2 -> 1, TRYWAIT 3 -> 2; docs/hopper.md,
# "Named-barrier dS exchange").
#   1. GPU tests: tests/test_hopper_bwd.py -k named_bar (d 64/128, bf16 and fp16, the
#      reference cases: ragged N, GQA / MQA, causal both alignments, rows that see no
#      key, NaN past N; the persistent loop, a group split, a 3-stage ring, windows),
#      against float64 autograd on NaN-poisoned outputs;
#   2. timing, two repeats: default (off) against mod:HOPPER_BWD_NAMED_BAR_DEFAULT=True
#      (on), both through the cached plans, d 64/128, N 2k/4k/8k, causal and not, bf16,
#      B*N = 16k, H = 2048/d, with cuDNN in the same process.
# Rule, fixed before the run: NAMED_BAR goes on by default
# (HOPPER_BWD_NAMED_BAR_DEFAULT = True) if every test passes, every check is ok, and in
# each repeat on / off has a geometric mean >= 1.03 over the 12 rows with no row below
# 0.99; otherwise it stays off and the rows are written up.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
ON="mod:HOPPER_BWD_NAMED_BAR_DEFAULT=True"
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: timing only
gpu_tests tests_named_bar ${T_TESTS:-200} -n 8 tests/test_hopper_bwd.py -k "named_bar and not fake_driver"
fi
probe_reps ${T_BENCH:-100} --head-dims 64,128 --seqlens 2048,4096,8192 --gqa none \
  --variants "default,$ON" --variants64 "" --variants256 "" --baselines cudnn --rep 40
python3 - "$R/rep1/hopper_bwd_probe.json" "$R/rep2/hopper_bwd_probe.json" "$ON" "$R/tests_named_bar.log" <<'PY'
import math, sys
sys.path.insert(0, "benchmarks")
from rules import load_reps
reps = load_reps(sys.argv[1:3])
on = sys.argv[3]
try:
    tests_ok = open(sys.argv[4]).read().rstrip().endswith("rc=0")
except OSError:
    tests_ok = False
ok, n_rows = tests_ok, len(reps[0])
logs = [[] for _ in reps]
for rows in zip(*reps):
    r0 = rows[0]
    ratios = [r["tflops"][on] / r["tflops"]["default"] if r["tflops"].get(on) and r["tflops"].get("default") else None
              for r in rows]
    checks = all(c in ("ok", "ref") for r in rows for c in r["check"].values() if c)
    row_ok = checks and all(x is not None and x >= 0.99 for x in ratios)
    ok &= row_ok
    for log, x in zip(logs, ratios):
        log.append(x)
    cud = [r["tflops"].get("cudnn") for r in rows]
    vs = " ".join(f"{r['tflops']['default'] / c:.2f}/{r['tflops'][on] / c:.2f}" if c and r["tflops"].get("default")
                  and r["tflops"].get(on) else "-" for r, c in zip(rows, cud))
    print(f"N={r0['n']} d={r0['d']} causal={r0['causal']!s:5}: on/off " + " ".join(f"{x:.3f}" if x else "-" for x in ratios)
          + f"  off/cudnn on/cudnn {vs}" + ("" if row_ok else "  below 0.99" + ("" if checks else f" checks {r0['check']}")))
geo = []
for log in logs:
    vals = [x for x in log if x]
    geo.append(math.exp(sum(map(math.log, vals)) / len(vals)) if vals and len(vals) == len(log) else 0.0)
ok &= n_rows == 12 and all(g >= 1.03 for g in geo)
print(f"{n_rows} rows, geomean on/off " + " ".join(f"{g:.3f}" for g in geo) + f", tests {'passed' if tests_ok else 'FAILED'}; "
      "rule:", "met: NAMED_BAR on by default" if ok else "NOT met: NAMED_BAR stays off")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# GQA groups across programs in the Hopper backward (GROUP_SPLIT, kernels/hopper/bwd.py),
# the causal default, on one H200, under 5 minutes.  Session 14 (results/h200/session14):
# every group_split GPU test passed; through overrides (a launch plan made per call) the
# rule's S gave 1.16-2.38x the unsplit kernel on causal GQA rows of a millisecond or
# more, 0.94-0.98x on non-causal rows, and lost on two short causal rows where the
# override path is host-bound (its "default", through the cached plans, beat both);
# causal MHA raised in the rule's path (fixed: resolve_group_split, with a CPU test).
#   1. GPU tests: test_hopper_bwd.py -k "group_split or resolve" (-n 8);
#   2. timing, two repeats: "split-default" (HOPPER_BWD_GROUP_SPLIT_DEFAULT on, the
#      rule's S through the per-signature plans, as a user's call runs) against
#      "default" (off) on causal rows: the 12 GQA rows of session 14 call 3, its 6
#      held-out rows of call 6, two causal MHA rows (no-ops), bf16, with cuDNN.
# Rule, fixed before the run: the causal default goes on
# (HOPPER_BWD_GROUP_SPLIT_DEFAULT = {False: False, True: True}) if every test passes,
# every check is ok, split-default / default >= 0.97 on every causal row in both
# repeats, and >= 1.05 in both repeats on every causal GQA row whose rule S > 1;
# otherwise it stays off and the rows are written up.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: timing only
gpu_tests tests_gqa_split ${T_TESTS:-140} -n 8 tests/test_hopper_bwd.py -k "(group_split or resolve) and not fake_driver"
fi
G="2,16,4,4096,64,1;2,16,4,4096,128,1;8,32,8,2048,64,1;8,32,8,2048,128,1;2,32,8,8192,64,1;2,32,8,8192,128,1"
G="$G;4,16,2,2048,128,1;2,32,4,4096,64,1;1,16,4,8192,128,1;2,16,2,2048,128,1;1,32,4,2048,256,1;2,8,1,4096,128,1"
G="$G;4,16,16,4096,128,1;2,16,16,2048,64,1"
probe_reps ${T_BENCH:-100} --head-dims none --seqlens 4096 --gqa "$G" \
  --variants default,split-default --variants64 "" --variants256 "" --baselines cudnn --rep 40
python3 - "$R/rep1/hopper_bwd_probe.json" "$R/rep2/hopper_bwd_probe.json" <<'PY'
import sys
sys.path.insert(0, "benchmarks")
from rules import load_reps
reps = load_reps(sys.argv[1:])
ok, n_rows = True, len(reps[0])
for rows in zip(*reps):
    r0 = rows[0]
    ratios = [r["tflops"]["split-default"] / r["tflops"]["default"]
              if r["tflops"].get("split-default") and r["tflops"].get("default") else None for r in rows]
    checks = all(c in ("ok", "ref") for r in rows for c in r["check"].values() if c)
    split = r0.get("rule_split", 1)
    need = 1.05 if r0["hq"] != r0["hkv"] and split > 1 else 0.97
    row_ok = checks and all(x is not None and x >= need for x in ratios)
    ok &= row_ok
    cud = r0["tflops"].get("cudnn")
    print(f"B={r0['b']} Hq={r0['hq']} Hkv={r0['hkv']} N={r0['n']} d={r0['d']} causal={r0['causal']!s:5} S={split}: "
          + " ".join(f"{x:.3f}" if x else "-" for x in ratios)
          + (f"  split-default/cudnn {r0['tflops']['split-default'] / cud:.2f}" if cud and r0["tflops"].get("split-default") else "")
          + ("" if row_ok else f"  below {need}" + ("" if checks else f" checks {r0['check']}")))
print(f"{n_rows} rows; timing rule:", "met: the causal default goes on" if ok and n_rows == 14 else "NOT met: stays off",
      "(if the tests in tests_gqa_split.log passed)")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# GROUP_PARTIALS_16BIT (kernels/hopper/bwd.py): the GQA group split's partial dK / dV in
# the inputs' dtype instead of float32 (half the bytes the kernel writes and the group sum
# reads; session 29's profile: our group sums 2 x 22 us over float32 partials at the causal
# GQA variant row, cuDNN's 2 x 12 us over 16-bit ones).  One H200, about 5 minutes.
#   1. GPU tests (T_TESTS 150 s): test_hopper_bwd.py -k "group_split_matches or group_sum"
#      (both partial dtypes against float64, bf16 / fp16, d 64 / 128 / 256 / 192, S 2 / 4);
#   2. timing, two repeats (T_BENCH 120 s each): "mod:GROUP_PARTIALS_16BIT=True" against
#      "default" through the cached plans, causal rows (10 GQA with the rule's S > 1 and
#      one causal MHA guard, S = 1: the same launches), bf16, cuDNN in the same process.
# Rule, fixed before the run: GROUP_PARTIALS_16BIT becomes True if every test passes, every
# check is ok, the 16-bit / default ratio is >= 0.99 on every row in both repeats, and its
# geometric mean over the GQA rows is >= 1.01 in both repeats; otherwise it stays False.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
if [ -z "${SKIP_TESTS:-}" ]; then
gpu_tests tests_partials16 ${T_TESTS:-150} -n 8 tests/test_hopper_bwd.py -k "group_split_matches or group_sum"
fi
G="2,16,4,4096,64,1;2,16,4,4096,128,1;8,32,8,2048,128,1;2,32,8,8192,128,1;4,16,2,2048,128,1"
G="$G;1,16,4,8192,128,1;1,32,4,2048,256,1;2,8,1,4096,128,1;2,32,4,4096,64,1;2,16,4,4096,192,1;4,16,16,4096,128,1"
probe_reps ${T_BENCH:-120} --head-dims none --seqlens 4096 --gqa "$G" \
  --variants "default,mod:GROUP_PARTIALS_16BIT=True" --variants64 "" --variants256 "" --baselines cudnn --rep 40
python3 - "$R/rep1/hopper_bwd_probe.json" "$R/rep2/hopper_bwd_probe.json" <<'PY'
import math, sys
sys.path.insert(0, "benchmarks")
from rules import load_reps
reps = load_reps(sys.argv[1:])
new = "mod:GROUP_PARTIALS_16BIT=True"
ok, n_rows, logs = True, len(reps[0]), [[] for _ in reps]
for rows in zip(*reps):
    r0 = rows[0]
    ratios = [r["tflops"][new] / r["tflops"]["default"]
              if r["tflops"].get(new) and r["tflops"].get("default") else None for r in rows]
    checks = all(c in ("ok", "ref") for r in rows for c in r["check"].values() if c)
    row_ok = checks and all(x is not None and x >= 0.99 for x in ratios)
    ok &= row_ok
    if r0["hq"] != r0["hkv"] and all(ratios):
        for lg, x in zip(logs, ratios):
            lg.append(math.log(x))
    cud = r0["tflops"].get("cudnn")
    print(f"B={r0['b']} Hq={r0['hq']} Hkv={r0['hkv']} N={r0['n']} d={r0['d']} causal={r0['causal']!s:5} "
          f"S={r0.get('rule_split', 1)}: " + " ".join(f"{x:.3f}" if x else "-" for x in ratios)
          + (f"  16bit/cudnn {r0['tflops'][new] / cud:.2f} default/cudnn {r0['tflops']['default'] / cud:.2f}"
             if cud and r0["tflops"].get(new) else "")
          + ("" if row_ok else "  below 0.99" + ("" if checks else f" checks {r0['check']}")))
means = [math.exp(sum(lg) / len(lg)) if lg else 0.0 for lg in logs]
ok &= all(m >= 1.01 for m in means) and n_rows == 11
print("GQA geomeans", " ".join(f"{m:.3f}" for m in means))
print(f"{n_rows} rows; timing rule:", "met: GROUP_PARTIALS_16BIT = True" if ok else "NOT met: stays False",
      "(if the tests in tests_partials16.log passed)")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r

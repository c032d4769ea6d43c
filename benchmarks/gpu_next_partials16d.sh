#!/usr/bin/env bash
# GROUP_PARTIALS_16BIT, the deciding run (for session 31).  Session 30 timed 16-bit against
# float32 GQA partials three times (gpu_next_partials16.sh, 16b, 16c; results/h200/session30/):
# +1-6 % on the rows whose rule S >= 8, +-2 % on S = 2 / 4, but gauge rows where both
# variants run identical launches moved up to 6 % between the variants of one repeat, so
# no rule could be met.  This run times each variant in 6 separate probe processes, the
# variant order alternated between processes, and takes per row the median over the 6 of
# the 16-bit / float32 ratio: the 14 causal GQA rows of session 30 with S > 1 and three
# gauges (S = 1).  Before that, the GPU tests of the integer setting (16-bit partials
# from S = 4 on: test_hopper_bwd.py -k "group_split_matches and from-S4", T_TESTS 120 s).
# Rule, fixed before the run (all on the medians):
#   0. the tests pass and every correctness check is ok; every gauge row within
#      [0.98, 1.02] (else the method cannot resolve the effect: nothing changes);
#   1. GROUP_PARTIALS_16BIT = True if every S > 1 row is >= 0.99 and their geometric
#      mean >= 1.015;
#   2. else GROUP_PARTIALS_16BIT = 8 if every row with S >= 8 is >= 1.0 and their
#      geometric mean >= 1.02;
#   3. else it stays False.
# One H200, about 4 minutes (T_BENCH 75 s per process).
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
if [ -z "${SKIP_TESTS:-}" ]; then
gpu_tests tests_partials16d ${T_TESTS:-120} -n 8 tests/test_hopper_bwd.py -k "group_split_matches and from-S4"
fi
G="2,16,4,4096,64,1;2,16,4,4096,128,1;4,16,2,2048,128,1;1,16,4,8192,128,1;1,32,4,2048,256,1;2,8,1,4096,128,1"
G="$G;2,32,4,4096,64,1;2,16,4,4096,192,1;2,16,2,4096,128,1;1,32,4,4096,128,1;2,16,1,4096,64,1;1,16,2,8192,128,1"
G="$G;2,32,4,2048,128,1;1,8,1,8192,256,1;4,16,16,4096,128,1;8,32,8,2048,128,1;2,32,8,8192,128,1"
NEW="mod:GROUP_PARTIALS_16BIT=True"
RUNS=${RUNS:-6}
for i in $(seq 1 $RUNS); do
  mkdir -p "$R/run$i"
  if [ $((i % 2)) = 1 ]; then V="default,$NEW"; else V="$NEW,default"; fi
  timeout -k 5 ${T_BENCH:-75} python3 benchmarks/hopper_bwd_probe.py --head-dims none --seqlens 4096 --gqa "$G" \
    --variants "$V" --variants64 "" --variants256 "" --baselines "" --rep 40 --out "$R/run$i" > "$R/run$i/log.txt" 2>&1
  echo "rc=$?" >> "$R/run$i/log.txt"; el "run$i"
done
python3 - "$R" "$RUNS" <<'PY'
import glob, json, math, statistics, sys
root, runs = sys.argv[1], int(sys.argv[2])
new = "mod:GROUP_PARTIALS_16BIT=True"
reps = []
for i in range(1, runs + 1):
    try:
        reps.append(json.load(open(f"{root}/run{i}/hopper_bwd_probe.json"))["rows"])
    except (OSError, ValueError, KeyError) as exc:
        print(f"run{i}: no timing ({exc}); rule not applied"); sys.exit(0)
checks_ok, gauges_ok = True, True
split_rows, big_rows = [], []
for rows in zip(*reps):
    r0 = rows[0]
    ratios = [r["tflops"][new] / r["tflops"]["default"] for r in rows
              if r["tflops"].get(new) and r["tflops"].get("default")]
    checks_ok &= len(ratios) == runs and all(c in ("ok", "ref") for r in rows for c in r["check"].values() if c)
    med = statistics.median(ratios) if ratios else 0.0
    split = r0.get("rule_split", 1)
    tag = "gauge" if split == 1 else f"S={split}"
    if split == 1:
        gauges_ok &= 0.98 <= med <= 1.02
    else:
        split_rows.append(med)
        if split >= 8:
            big_rows.append(med)
    print(f"B={r0['b']} Hq={r0['hq']} Hkv={r0['hkv']} N={r0['n']} d={r0['d']} {tag}: median {med:.3f}  "
          + " ".join(f"{x:.3f}" for x in ratios))
gmean = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs and min(xs) > 0 else 0.0
print(f"S > 1 rows: {len(split_rows)}, geomean {gmean(split_rows):.3f}, min {min(split_rows):.3f}; "
      f"S >= 8 rows: {len(big_rows)}, geomean {gmean(big_rows):.3f}, min {min(big_rows):.3f}")
if not checks_ok:
    verdict = "NOT applied: a check failed or a run is missing a row"
elif not gauges_ok:
    verdict = "method cannot resolve it (a gauge row outside [0.98, 1.02]): stays False"
elif min(split_rows) >= 0.99 and gmean(split_rows) >= 1.015:
    verdict = "met (1): GROUP_PARTIALS_16BIT = True"
elif min(big_rows) >= 1.0 and gmean(big_rows) >= 1.02:
    verdict = "met (2): GROUP_PARTIALS_16BIT = 8"
else:
    verdict = "NOT met: stays False"
print("rule:", verdict, "(if the tests in tests_partials16d.log passed)")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r

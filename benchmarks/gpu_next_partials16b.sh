#!/usr/bin/env bash
# GROUP_PARTIALS_16BIT, second timing (session 30 call 3).  Call 2 (gpu_next_partials16.sh,
# its tests passed: 147) read 16-bit / float32 partials 1.007-1.148x on the 8 causal GQA rows
# whose rule S > 1 (geomeans 1.014 / 1.025 over all GQA rows) but 0.946-0.987x on three
# rows with S = 1, where both variants run the same launches: the variant timed second
# lost 1-5 % by order alone, and those rows failed its rule.  This run alternates the
# order (repeat 1: default first; repeat 2: 16-bit first) on the 8 rows with S > 1 and
# keeps one S = 1 row (causal MHA) as the gauge of that noise.
# Rule, fixed before the run: GROUP_PARTIALS_16BIT becomes True if, in both repeats, the
# 16-bit / default ratio is >= 0.99 on every S > 1 row, their geometric mean is >= 1.02,
# and every check is ok; otherwise it stays False.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
G="2,16,4,4096,64,1;2,16,4,4096,128,1;4,16,2,2048,128,1;1,16,4,8192,128,1;1,32,4,2048,256,1"
G="$G;2,8,1,4096,128,1;2,32,4,4096,64,1;2,16,4,4096,192,1;4,16,16,4096,128,1"
NEW="mod:GROUP_PARTIALS_16BIT=True"
for i in 1 2; do
  mkdir -p "$R/rep$i"
  if [ $i = 1 ]; then V="default,$NEW"; else V="$NEW,default"; fi
  timeout -k 5 ${T_BENCH:-110} python3 benchmarks/hopper_bwd_probe.py --head-dims none --seqlens 4096 --gqa "$G" \
    --variants "$V" --variants64 "" --variants256 "" --baselines cudnn --rep 40 --out "$R/rep$i" > "$R/rep$i/log.txt" 2>&1
  echo "rc=$?" >> "$R/rep$i/log.txt"; el "rep$i"
done
python3 - "$R/rep1/hopper_bwd_probe.json" "$R/rep2/hopper_bwd_probe.json" <<'PY'
import math, sys
sys.path.insert(0, "benchmarks")
from rules import load_reps
reps = load_reps(sys.argv[1:])
new = "mod:GROUP_PARTIALS_16BIT=True"
ok, logs, n_split = True, [[] for _ in reps], 0
for rows in zip(*reps):
    r0 = rows[0]
    ratios = [r["tflops"][new] / r["tflops"]["default"]
              if r["tflops"].get(new) and r["tflops"].get("default") else None for r in rows]
    checks = all(c in ("ok", "ref") for r in rows for c in r["check"].values() if c)
    split = r0.get("rule_split", 1)
    row_ok = checks and all(x is not None and (x >= 0.99 or split == 1) for x in ratios)
    ok &= row_ok
    if split > 1 and all(ratios):
        n_split += 1
        for lg, x in zip(logs, ratios):
            lg.append(math.log(x))
    cud = r0["tflops"].get("cudnn")
    print(f"B={r0['b']} Hq={r0['hq']} Hkv={r0['hkv']} N={r0['n']} d={r0['d']} causal={r0['causal']!s:5} "
          f"S={split}{' (gauge)' if split == 1 else ''}: " + " ".join(f"{x:.3f}" if x else "-" for x in ratios)
          + (f"  16bit/cudnn {r0['tflops'][new] / cud:.2f} default/cudnn {r0['tflops']['default'] / cud:.2f}"
             if cud and r0["tflops"].get(new) else "")
          + ("" if row_ok else "  below 0.99" + ("" if checks else f" checks {r0['check']}")))
means = [math.exp(sum(lg) / len(lg)) if lg else 0.0 for lg in logs]
ok &= all(m >= 1.02 for m in means) and n_split == 8
print("S > 1 geomeans (default first, 16-bit first):", " ".join(f"{m:.3f}" for m in means))
print("timing rule:", "met: GROUP_PARTIALS_16BIT = True" if ok else "NOT met: stays False")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r

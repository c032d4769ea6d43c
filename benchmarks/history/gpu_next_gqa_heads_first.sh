#!/usr/bin/env bash
# Heads-first grid order for causal GQA backward calls whose group is split across programs, at
# d = 128 / 64 (the Hopper backward), on one H200, about 2 minutes. Why: at d = 192 (session 34 calls
# 5-6) HEADS_FIRST=1 read 1.09-1.11x on causal GQA rows at N = 4k with S = 2 / 4 and lost at 2k
# (0.92x) and on MHA rows (0.50-0.79x); the variant table's plain causal GQA backward (d = 128, N = 4k,
# S = 4) is 0.87-0.90x SDPA.
#   hopper_bwd_probe.py, two repeats (probe_reps), causal GQA rows (B, Hq, Hkv, N, d):
#   (2,16,4,4096,128), (1,16,4,8192,128), (2,32,8,4096,128), (2,16,2,4096,128), (1,32,8,8192,128),
#   (4,16,4,2048,128), (2,32,8,4096,64), (4,32,8,2048,64); variants default, HEADS_FIRST=1.
# Rule, fixed before the run, per head dim: over the rows with rule S > 1 and N >= 4096 (at least 3 at
# d = 128; d = 64 reported only), best of two repeats, HEADS_FIRST=1 / default >= 0.99 on every such
# row with a geometric mean >= 1.03 and every check "ok": d = 128 causal calls with S > 1 and
# N_K >= 4096 take HEADS_FIRST. Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_gqa_heads_first.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
ROWS="2,16,4,4096,128,1;1,16,4,8192,128,1;2,32,8,4096,128,1;2,16,2,4096,128,1;1,32,8,8192,128,1"
ROWS="$ROWS;4,16,4,2048,128,1;2,32,8,4096,64,1;4,32,8,2048,64,1"
probe_reps ${T_PROBE:-150} --head-dims none --gqa "$ROWS" --variants "default,HEADS_FIRST=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import best_of_reps_rule, json_rows
reps = [json_rows(f"{sys.argv[1]}/rep{i}/hopper_bwd_probe.json") for i in (1, 2)]
print("rule S per row:", [(r["b"], r["hq"], r["hkv"], r["n"], r["d"], r.get("rule_split")) for r in reps[0]])
cand = {"HEADS_FIRST=1": "HEADS_FIRST=1"}
for d in (128, 64):
    sel = [[r for r in rows if r["d"] == d and (r.get("rule_split") or 1) > 1 and r["n"] >= 4096] for rows in reps]
    n = len(sel[0])
    print(f"== d={d}: {n} rows with S > 1 and N >= 4096")
    best, _ = best_of_reps_rule(sel, cand, n, 0.99, 1.03) if n else (None, {})
    if d == 128:
        print("RULE: " + ("d = 128 causal calls with S > 1 and N_K >= 4096 take HEADS_FIRST" if best and n >= 3
                          else "nothing changes"))
    rest = [[r for r in rows if r["d"] == d and not ((r.get("rule_split") or 1) > 1 and r["n"] >= 4096)]
            for rows in reps]
    if rest[0]:
        print(f"-- d={d}: the other rows (reported)")
        best_of_reps_rule(rest, cand, len(rest[0]), 0.0, 0.0)
PY
tar czf "$OUT/results.tgz" -C "$OUT" r

#!/usr/bin/env bash
# Heads-first grid order for causal GQA calls of the d = 192 / dv = 128 Hopper backward whose group
# is split across programs (GROUP_SPLIT S > 1), on one H200, about 2 minutes. Why: in
# gpu_next_dq_stage4.sh (session 34 call 5) HEADS_FIRST=1 read 1.105x on the causal GQA row (S = 2)
# and 0.50-0.79x on the MHA rows: with the group split, the S programs of one key block (its K / V
# shared in L2) and every head's longest key block start together.
#   hopper_bwd_probe.py, two repeats (probe_reps), causal GQA rows (B, Hq, Hkv, N): (2,16,4,4096),
#   (4,16,4,2048), (1,16,4,8192), (2,16,2,4096), (4,32,8,2048); variants default, HEADS_FIRST=1.
# Rule, fixed before the run: over the rows whose rule S > 1 (at least 3 of them), best of two
# repeats per row, HEADS_FIRST=1 / default >= 0.99 on every row with a geometric mean >= 1.03, every
# check "ok": d = 192 causal calls with S > 1 take HEADS_FIRST. Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_dq_stage5.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
ROWS="2,16,4,4096,192,1;4,16,4,2048,192,1;1,16,4,8192,192,1;2,16,2,4096,192,1;4,32,8,2048,192,1"
probe_reps ${T_PROBE:-150} --head-dims none --gqa "$ROWS" --variants "default,HEADS_FIRST=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
split = lambda row: (row.get("rule_split") or 1) > 1  # noqa: E731
reps_rule_verdict(sys.argv[1], {"HEADS_FIRST=1": "d = 192 causal calls with S > 1 take HEADS_FIRST"}, 4, 0.99, 1.03,
                  select=split)
PY
tar czf "$OUT/results.tgz" -C "$OUT" r

#!/usr/bin/env bash
# The d = 192 / dv = 128 Hopper backward's launch switches (kernels/hopper/bwd.py CONFIGS[192],
# PERSISTENT_DEFAULT[192]), on one H200, about 4-5 minutes. Why: its causal rows run 0.63-0.65x
# cuDNN (session 15) and the variant table's d = 192 row 0.66x SDPA (session 23); the switches the
# compile facts list (docs/hopper.md "d = 192 with dv = 128": a third ring stage fits, 215 KB; the
# persistent grid) were compiled but never timed at this head dim.
#   hopper_bwd_probe.py, two repeats in fresh processes (probe_reps), kernel-only backward TFLOP/s
#   with each variant's gradients checked against the reference: bf16, causal B*N = 16k H = 16 at
#   N 2k / 4k / 8k, the variant table's causal GQA row (B=2 Hq16 Hkv4 N=4k), and N = 4k non-causal
#   as a guard (the switches are not per mask); variants default, NUM_STAGES=3, PERSISTENT=1,
#   NUM_STAGES=3+PERSISTENT=1.
# Rule, fixed before the run (rules.best_of_reps_rule: per row a variant's faster repeat over
# default's faster repeat): a candidate passes with all 5 rows in both repeats, every check "ok",
# no row below 0.99 and a geometric mean >= 1.03; the passing one with the highest mean is adopted
# (NUM_STAGES=3: CONFIGS[192]["NUM_STAGES"] = 3; PERSISTENT=1: PERSISTENT_DEFAULT[192] = (True,
# True); both: both). Otherwise nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_bwd192_cfg.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
ROWS="8,16,16,2048,192,1;4,16,16,4096,192,1;2,16,16,8192,192,1;2,16,4,4096,192,1;4,16,16,4096,192,0"
probe_reps ${T_PROBE:-150} --head-dims none --gqa "$ROWS" \
  --variants "default,NUM_STAGES=3,PERSISTENT=1,NUM_STAGES=3+PERSISTENT=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import best_of_reps_rule, json_rows
reps = [json_rows(f"{sys.argv[1]}/rep{i}/hopper_bwd_probe.json") for i in (1, 2)]
cands = {c: c for c in ("NUM_STAGES=3", "PERSISTENT=1", "NUM_STAGES=3+PERSISTENT=1")}
best, _ = best_of_reps_rule(reps, cands, 5, 0.99, 1.03)
print("RULE: " + {None: "nothing changes",
                  "NUM_STAGES=3": 'CONFIGS[192]["NUM_STAGES"] = 3',
                  "PERSISTENT=1": "PERSISTENT_DEFAULT[192] = (True, True)",
                  "NUM_STAGES=3+PERSISTENT=1": 'CONFIGS[192]["NUM_STAGES"] = 3, '
                                               "PERSISTENT_DEFAULT[192] = (True, True)"}[best])
PY
tar czf "$OUT/results.tgz" -C "$OUT" r

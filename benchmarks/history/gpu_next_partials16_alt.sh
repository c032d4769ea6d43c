#!/usr/bin/env bash
# GROUP_PARTIALS_16BIT timed with the variant order alternated between two probe repeats
# (repeat 1: float32 partials first, repeat 2: 16-bit first), on the rows G; session 30
# calls 3 and 4 (results/h200/session30/README.md).  Call 2 (gpu_next_partials16.sh) had
# read 1.007-1.148x on the rows with S > 1 but 0.946-0.987x on rows with S = 1, where both
# variants run the same launches: the variant timed second lost by order alone.
# Rule, fixed before each call by its variables: GROUP_PARTIALS_16BIT becomes
# ${ADOPT:-True} if, in both repeats, every row whose rule S >= MIN_SPLIT reads >= ROW_MIN,
# their geometric mean >= GEO_MIN, and every check is ok.  The calls:
#   call 3: MIN_SPLIT=2 ROW_MIN=0.99 GEO_MIN=1.02 ADOPT=True, the 8 rows of call 2 with
#           S > 1 and one gauge (causal MHA);
#   call 4: MIN_SPLIT=8 ROW_MIN=1.0 GEO_MIN=1.02 ADOPT=8, six held-out rows whose rule
#           S >= 8, call 2's three S = 8 rows, one gauge.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
CALL3="2,16,4,4096,64,1;2,16,4,4096,128,1;4,16,2,2048,128,1;1,16,4,8192,128,1;1,32,4,2048,256,1"
CALL3="$CALL3;2,8,1,4096,128,1;2,32,4,4096,64,1;2,16,4,4096,192,1;4,16,16,4096,128,1"
G="${G:-$CALL3}"
probe_alternated ${T_BENCH:-110} 2 default "mod:GROUP_PARTIALS_16BIT=True" --head-dims none --seqlens 4096 \
  --gqa "$G" --variants64 "" --variants256 "" --baselines cudnn --rep 40
python3 - "$R" "${MIN_SPLIT:-2}" "${ROW_MIN:-0.99}" "${GEO_MIN:-1.02}" "${ADOPT:-True}" <<'PY'
import sys
sys.path.insert(0, "benchmarks")
from rules import load_reps, split_switch_verdict
r, min_split, row_min, geo_min, adopt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
reps = load_reps([f"{r}/rep1/hopper_bwd_probe.json", f"{r}/rep2/hopper_bwd_probe.json"])
verdict = split_switch_verdict(reps, "mod:GROUP_PARTIALS_16BIT=True", min_split, row_min, geo_min)
print("timing rule:", f"met: GROUP_PARTIALS_16BIT = {adopt}" if verdict == "met" else "NOT met: stays False")
PY
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# Fourth single-H200 call of session 10 (about 6.5 minutes):
#   1. gpu_hopper_persistent.sh (the persistent Gluon forward: correctness,
#      memcheck, default / persistent / nc3 TFLOP/s next to cuDNN, GPU tests);
#   2. hopper_bwd_probe.py (the Gluon backward: default, HEADS_FIRST, d=64
#      BLOCK_M=64, next to cuDNN; whole-API backward).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
END=270 OUT="$R/fwd" bash benchmarks/history/gpu_hopper_persistent.sh > "$R/fwd.log" 2>&1; el fwd
grep -v "^\[" "$R/fwd.log" | grep -E "FAIL|ratio|best|persistent|nc3|default|passed|failed|rc=" | cut -c1-250 | tail -45
timeout -k 5 ${T_PROBE:-130} python3 benchmarks/hopper_bwd_probe.py --out "$R/bwd" > "$R/bwd.log" 2>&1
echo "rc=$?" >> "$R/bwd.log"; el bwd; cut -c1-400 "$R/bwd.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r

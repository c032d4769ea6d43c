#!/usr/bin/env bash
# Device call 3 of 2026-12-01 (second session): config table entries for packed
# batches (tune.py --variants varlen, d=128, causal), then the per-kernel varlen
# and GQA backward profile (one-pass GQA partial sum) and bench_varlen with the
# new entries, three batches.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/r"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/r/env.txt"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
( timeout -k 5 ${TT:-200} python3 benchmarks/tune.py --out flashattn_triton/kernels/configs/sm90.json --merge --variants varlen \
  --causal causal --head-dims 128 --seqlens 2048,8192 --kernels FWD,BWD_DKDV,BWD_DQ --log "$OUT/r/tune_varlen.json" \
  > "$OUT/r/tune_varlen.log" 2>&1; echo "tune rc=$?" >> "$OUT/r/tune_varlen.log" )
cp flashattn_triton/kernels/configs/sm90.json "$OUT/r/sm90.json"
el tune
( timeout -k 5 ${TP:-60} python3 benchmarks/profile_bwd.py --out "$OUT/r" --cases varlen,gqa --sweep "" > "$OUT/r/profile_bwd.log" 2>&1; echo "profile rc=$?" >> "$OUT/r/profile_bwd.log" )
el profile
( timeout -k 5 ${TV:-100} python3 benchmarks/bench_varlen.py --batches 3 --out "$OUT/r" > "$OUT/r/bench_varlen.log" 2>&1; echo "varlen rc=$?" >> "$OUT/r/bench_varlen.log" )
el varlen
tar -C "$OUT" -czf "$OUT/results.tgz" r
grep -h "rc=" "$OUT"/r/*.log
grep -v "^\s*$" "$OUT/r/tune_varlen.log" | cut -c1-200
grep -v "Warning\|warn" "$OUT/r/profile_bwd.log" | cut -c1-300
sed -n '/short:begin/,/short:end/p' "$OUT/r/bench_varlen.md"

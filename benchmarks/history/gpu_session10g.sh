#!/usr/bin/env bash
# Last call of session 10 (under 4 minutes): the d=256 Hopper backward
# (gpu_hopper_bwd256.sh: smoke, tests, probe), then the memory benchmark with
# the Hopper backward's float32 dQ buffer (ours and SDPA flash, B=1, H=16,
# d=128, causal, N 1k-64k).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
OUT="$R/d256" bash benchmarks/history/gpu_hopper_bwd256.sh > "$R/d256.log" 2>&1; el d256
cut -c1-330 "$R/d256.log" | grep -v "^\[" | tail -30
timeout -k 3 ${T_MEM:-35} python3 benchmarks/bench_memory.py --providers flashattn_triton,sdpa_flash \
  --seqlens 1024,4096,16384,65536 --no-plot --out "$R/mem" > "$R/mem.log" 2>&1
echo "rc=$?" >> "$R/mem.log"; el mem
sed -n '/short:begin/,/short:end/p' "$R/mem/bench_memory.md" 2>/dev/null | cut -c1-200
tar -C "$OUT" -czf "$OUT/results.tgz" r

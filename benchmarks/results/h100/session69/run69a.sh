#!/usr/bin/env bash
# Session 69 call 1 (as run; trees .devtree_base / _S / _P made by hand, see README.md): the packed
# Hopper paths' tail zeroing timed, base / S (consumers zero) / P (the backward's producer zeroes).
set -u
R="$OUT"; mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$R/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" | tee -a "$R/gpu.txt"
for t in base S P; do (cd .devtree_$t && PYTHONPATH=. timeout 300 python3 benchmarks/varlen_tail_probe.py --label warm_$t --reps 1 > "$R/warm_$t.log" 2>&1) & done; wait
echo "warm done $(date +%T)"
for round in 1 2; do
  order="base S P"; [ "$round" = 2 ] && order="P S base"
  for t in $order; do
    (cd .devtree_$t && PYTHONPATH=. timeout 120 python3 benchmarks/varlen_tail_probe.py --label "$t" --reps 3) >> "$R/probe.jsonl" 2>> "$R/probe.err"
  done
done
cat "$R/probe.jsonl"
echo "timing done $(date +%T)"

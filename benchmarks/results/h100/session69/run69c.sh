#!/usr/bin/env bash
# Session 69 call 3: the final tail zeroing (Z: consumer-side forward and backward, dQ staging
# rows zeroed): the packed Hopper tests while the caches warm, then one base / Z timing round.
set -u
R="$OUT"; mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$R/gpu.txt"
for t in base Z; do (cd .devtree_$t && PYTHONPATH=. timeout 150 python3 benchmarks/varlen_tail_probe.py --label warm_$t --reps 1 > "$R/warm_$t.log" 2>&1) & done
(cd .devtree_Z && FLASHATTN_TRITON_TEST_DEVICE=cuda PYTHONPATH=. timeout 150 python3 -m pytest -q -p no:cacheprovider -n 6 tests/test_hopper_varlen.py > "$R/tests_Z.log" 2>&1) &
wait
echo "warm + tests done $(date +%T)"
tail -4 "$R/tests_Z.log"
for t in Z base; do
  (cd .devtree_$t && PYTHONPATH=. timeout 50 python3 benchmarks/varlen_tail_probe.py --label "$t" --reps 2) >> "$R/probe.jsonl" 2>> "$R/probe.err"
done
cat "$R/probe.jsonl"
echo "timing done $(date +%T)"

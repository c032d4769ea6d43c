#!/usr/bin/env bash
# Session 69 call 2 (as run; the trees .devtree_base / _S / _F were checkouts made by hand, see README.md):
# the packed Hopper paths' tail zeroing: tests (F: producer-side forward,
# consumer-side backward; base: the new NaN test, expected to fail) while the compile caches warm,
# then the timing rounds of base / S (consumer-side both) / F.
set -u
R="$OUT"; mkdir -p "$R"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$R/gpu.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" | tee -a "$R/gpu.txt"
for t in base S F; do (cd .devtree_$t && PYTHONPATH=. timeout 300 python3 benchmarks/varlen_tail_probe.py --label warm_$t --reps 1 > "$R/warm_$t.log" 2>&1) & done
(cd .devtree_F && FLASHATTN_TRITON_TEST_DEVICE=cuda PYTHONPATH=. timeout 330 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_hopper_varlen.py > "$R/tests_F.log" 2>&1) &
(cd .devtree_base && FLASHATTN_TRITON_TEST_DEVICE=cuda PYTHONPATH=. timeout 300 python3 -m pytest -q -p no:cacheprovider -n 2 tests/test_hopper_varlen.py -k nan_stays > "$R/tests_base_nan.log" 2>&1) &
wait
echo "warm + tests done $(date +%T)"
tail -3 "$R/tests_F.log"; tail -3 "$R/tests_base_nan.log"
for round in 1 2; do
  order="base S F"; [ "$round" = 2 ] && order="F S base"
  for t in $order; do
    (cd .devtree_$t && PYTHONPATH=. timeout 100 python3 benchmarks/varlen_tail_probe.py --label "$t" --reps 2) >> "$R/probe.jsonl" 2>> "$R/probe.err"
  done
done
cat "$R/probe.jsonl"
echo "timing done $(date +%T)"

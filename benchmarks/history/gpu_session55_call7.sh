#!/usr/bin/env bash
# Session 55 call 7: the d = 64 short-batch rule (_dispatch.HOPPER_VARLEN_SHORT = {64: 1024}, from call 6):
# the packed Hopper tests again (they lift the rule), and bench_varlen at d = 64 with documents up to
# 1024 (the default row now portable: equal to the portable one) and up to 2048 (the rule's edge).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
echo "call 7 of session 55: the d = 64 short-batch rule"
gpu_tests hvarlen 150 -n 8 tests/test_hopper_varlen.py
i=0
for spec in "64,1024 causal" "64,1024 full" "64,2048 causal" "64,2048 full"; do
  set -- $spec; i=$((i + 1))
  extra=""; [ "$2" = full ] && extra="--no-causal"
  timeout -k 5 60 python3 benchmarks/bench_varlen.py --batches 1 --head-dim 64 --doc-lengths "$1" $extra \
    --providers "ours varlen,ours varlen hopper" --out "$R/v$i" > "$R/v$i.log" 2>&1; echo "rc=$?" >> "$R/v$i.log"
  el "v$i d=64 $spec"; grep -E "^\| 0 \| ours" "$R/v$i/bench_varlen.md" 2>/dev/null | cut -c1-120
done
tar -C "$OUT" -czf "$OUT/results.tgz" r

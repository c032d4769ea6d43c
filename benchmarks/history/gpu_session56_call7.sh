#!/usr/bin/env bash
# Session 56 call 7: packed plans without HEADS_FIRST and the packed Hopper backward at every
# length (no d = 64 bound): test_hopper_varlen, then bench_varlen's "ours varlen" with the defaults
# against the portable backward (FLASHATTN_TRITON_HOPPER_VARLEN_BWD=0), separate processes.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests hvarlen 200 -n 8 tests/test_hopper_varlen.py
for lens in 64,4096 64,8192 64,2048; do
  for tier in default portable_bwd; do
    n="d64_${lens/,/_}_$tier"; env=""; [ $tier = portable_bwd ] && env="FLASHATTN_TRITON_HOPPER_VARLEN_BWD=0"
    env $env timeout -k 5 70 python3 benchmarks/bench_varlen.py --batches 2 --head-dim 64 --doc-lengths $lens \
      --providers "ours varlen" --out "$R/$n" > "$R/$n.log" 2>&1
    echo "rc=$?" >> "$R/$n.log"; el "$n"
    sed -n '/^| seed/,/^$/p' "$R/$n/bench_varlen.md" | grep -v -e '^|---' -e '^| seed' | cut -d'|' -f2-9
  done
done
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# Session 56 call 4: the packed Hopper backward on by default (HOPPER_VARLEN_BWD_DEFAULT "1",
# HOPPER_VARLEN_BWD_LONG {64: 2048}) and the forward's bound moved (HOPPER_VARLEN_SHORT {64: 2048}):
# the packed tests with the defaults, then bench_varlen's default rows (d = 128) and the d = 64 rows
# either side of the bounds, "ours varlen" (the defaults) against FLASHATTN_TRITON_HOPPER_VARLEN=0
# with FLASHATTN_TRITON_HOPPER_VARLEN_BWD=0 (the portable tier) in separate processes.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests packed 330 -n 8 tests/test_hopper_varlen.py tests/test_varlen.py tests/test_varlen_paged.py \
  tests/test_integrations.py
for cfg in "128 64,8192" "64 64,2048" "64 64,4096"; do
  for tier in default portable; do
    set -- $cfg; n="d$1_${2/,/_}_$tier"; env=""
    [ $tier = portable ] && env="FLASHATTN_TRITON_HOPPER_VARLEN=0 FLASHATTN_TRITON_HOPPER_VARLEN_BWD=0"
    env $env timeout -k 5 70 python3 benchmarks/bench_varlen.py --batches 2 --head-dim "$1" --doc-lengths "$2" \
      --providers "ours varlen" --out "$R/$n" > "$R/$n.log" 2>&1
    echo "rc=$?" >> "$R/$n.log"; el "$n"
    sed -n '/^| seed/,/^$/p' "$R/$n/bench_varlen.md" | grep -v -e '^|---' -e '^| seed' | cut -d'|' -f2-9
  done
done
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# Session 56 call 3: where the packed Hopper paths pay, by head dim and document length.
# Each config is one bench_varlen process (2 seeds) with FLASHATTN_TRITON_HOPPER_VARLEN=0 outside,
# so "ours varlen" is the portable forward + backward, "ours varlen hopper" the Hopper forward
# (unless _dispatch.HOPPER_VARLEN_SHORT keeps a short d = 64 batch portable) + the portable
# backward, "ours varlen hopper bwd" both Hopper paths.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
P="ours varlen,ours varlen hopper,ours varlen hopper bwd"
for cfg in "64 64,1024 c" "64 64,2048 c" "64 64,4096 c" "64 64,2048 n" "128 64,1024 c" "128 64,8192 n" "64 64,8192 c"; do
  set -- $cfg; n="d$1_${2/,/_}_$3"; extra=""; [ "$3" = n ] && extra="--no-causal"
  FLASHATTN_TRITON_HOPPER_VARLEN=0 timeout -k 5 80 python3 benchmarks/bench_varlen.py --batches 2 --head-dim "$1" \
    --doc-lengths "$2" --providers "$P" $extra --out "$R/$n" > "$R/$n.log" 2>&1
  echo "rc=$?" >> "$R/$n.log"; el "$n"
  sed -n '/^| seed/,/^$/p' "$R/$n/bench_varlen.md" | grep -v -e '^|---' -e '^| seed' | cut -d'|' -f2-9
done
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# First call of session 11 (under 9.5 minutes):
#   1. where a first call's host time goes: bench_overhead.py --cprofile for
#      "ours" and "ours, no prefetch" (cold and warm Triton cache, cProfile of
#      the first forward and backward on the main thread);
#   2. the persistent Hopper backward (gpu_hopper_bwd_persistent.sh: smoke,
#      -k persistent tests, probe default vs PERSISTENT=true);
#   3. the dynamic forward tile scheduler (gpu_hopper_dynamic.sh: probe,
#      -k dynamic tests).
# Decision rules are in the two scripts' headers.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
timeout -k 3 ${T_OVH:-75} python3 benchmarks/bench_overhead.py --out "$R/overhead" --cprofile --skip-host \
  --only "ours;ours, no prefetch" > "$R/overhead.log" 2>&1
echo "rc=$?" >> "$R/overhead.log"; el overhead; cut -c1-200 "$R/overhead.log" | tail -12
OUT="$R/bwdp" bash benchmarks/history/gpu_hopper_bwd_persistent.sh > "$R/bwdp.log" 2>&1; el bwd-persistent
cut -c1-330 "$R/bwdp.log" | tail -40
END=${END_DYN:-220} OUT="$R/dyn" bash benchmarks/history/gpu_hopper_dynamic.sh > "$R/dyn.log" 2>&1; el dynamic
cut -c1-330 "$R/dyn.log" | tail -45
rm -f "$R"/*/results.tgz
tar -C "$OUT" -czf "$OUT/results.tgz" r

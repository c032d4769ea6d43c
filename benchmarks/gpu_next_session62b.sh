#!/usr/bin/env bash
# Session 62, second call (about 5 minutes): the decode plans' host-time changes of 5344359 (one-pass
# environment read in the replay's world check; split counters keyed by (device index, raw stream)
# with a cached view per size; the reserve check without the lock after the first eager call).
#  * history/host_profile_decode.py on this tree and on the tree before it (../.devold, 28e0361),
#    alternating, two repeats each: eager one-token decode host time per call, planned and with the
#    plans off (the old tree read 73.0 / 95.7 us on the H100 in session 61).
#  * bench_overhead.py --skip-first-call (the README's host-time row).
#  * test_kvcache.py + test_kvcache_chunk.py (-n 4) and test_plans.py + test_fastlaunch.py on the GPU.
# Commit under results/<gpu>/session62/ with the environment, then move this script to history
# (fix its `source` to ../gpu_lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
NEW=$PWD; OLD=$(cd ../.devold && pwd)
for rep in 1 2; do
  for tree in new old; do
    dir=$NEW; [ "$tree" = old ] && dir=$OLD
    (cd "$dir" && PYTHONPATH="$dir" timeout -k 5 60 python3 "$NEW/benchmarks/history/host_profile_decode.py") \
      > "$R/host_${tree}_$rep.log" 2>&1
    echo "rc=$?" >> "$R/host_${tree}_$rep.log"; el "host $tree $rep"
    grep -e ' host ' -e 'replay' -e '^rc' "$R/host_${tree}_$rep.log"
  done
done
timeout -k 5 120 python3 benchmarks/bench_overhead.py --skip-first-call --out "$R/overhead" > "$R/overhead.log" 2>&1
echo "rc=$?" >> "$R/overhead.log"; el overhead
grep -e 'kvcache' -e 'torch SDPA' -e '^rc' "$R/overhead.log"
gpu_tests kvcache 170 -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py
gpu_tests plans 150 -n 4 tests/test_plans.py tests/test_fastlaunch.py
tar -C "$OUT" -czf "$OUT/results.tgz" r

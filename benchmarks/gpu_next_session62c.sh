#!/usr/bin/env bash
# Session 62: gpu_next_session62b.sh and gpu_next_session62.sh in one call of under 600 s (few
# machines came this session): the GPU tests of the decode plan changes first, then their host time
# (this tree against ../.devold, 28e0361, alternating, two repeats), then the batch-1 probe at 2k only
# ([ -n "${SKIP_PROBE:-}" ] && exit 0  # (a call with little device time left)
ROWS62="decode:1:2048"). Commit under results/<gpu>/session62/, then move the scripts to history.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
NEW=$PWD; OLD=$(cd ../.devold && pwd)
gpu_tests kvcache 150 -n 4 tests/test_kvcache.py tests/test_kvcache_chunk.py
gpu_tests plans 140 -n 4 tests/test_plans.py tests/test_fastlaunch.py
for rep in 1 2; do
  for tree in new old; do
    dir=$NEW; [ "$tree" = old ] && dir=$OLD
    (cd "$dir" && PYTHONPATH="$dir" timeout -k 5 40 python3 "$NEW/benchmarks/history/host_profile_decode.py") \
      > "$R/host_${tree}_$rep.log" 2>&1
    echo "rc=$?" >> "$R/host_${tree}_$rep.log"; el "host $tree $rep"
    grep -e ' host ' -e 'replay' -e '^rc' "$R/host_${tree}_$rep.log"
  done
done
tar -C "$OUT" -czf "$OUT/results.tgz" r
ROWS62="decode:1:2048" OUT="$OUT/probe" timeout -k 5 200 bash benchmarks/gpu_next_session62.sh > "$R/probe.log" 2>&1
echo "rc=$?" >> "$R/probe.log"; el probe; tail -30 "$R/probe.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r probe/r 2>/dev/null || tar -C "$OUT" -czf "$OUT/results.tgz" r

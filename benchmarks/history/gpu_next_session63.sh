#!/usr/bin/env bash
# Ran in session 63 on an H100 (results/h100/session63/call1/); its 140 s limit on the plan tests
# was too short for a fresh machine's first compiles (rerun in call 2 with 330 s: 108 passed).
# Queued by session 62 (no machine came in eleven attempts; its device time went to failed starts).
# One call of about 450 s, on an H200 if one comes: `OUT=$OUT bash benchmarks/gpu_next_session63.sh`,
# with the tree before session 62's decode change as ../.devold (`git archive 28e0361`, carried), or
# SKIP_PROBE=1 for a call of about 330 s.
#  * test_kvcache.py + test_kvcache_chunk.py (-n 4) and test_plans.py + test_fastlaunch.py on the GPU:
#    session 62's decode plan change (one-pass environment read in the replay's world check; the
#    split counters keyed by (device index, raw stream), a cached view per size, the reserve check
#    without the lock after the first eager call) and test_gpu_two_devices_default_streams (skips
#    on one GPU).
#  * history/host_profile_decode.py on this tree and on ../.devold, alternating, two repeats each:
#    eager one-token decode host time per call, planned and with the plans off (the old tree read
#    73.0 / 95.7 us on the H100 in session 61).
#  * then gpu_next_session62.sh at 2k only (the batch-1 probe: Nsight Compute's active cycles per SM
#    under four decode plans, to tell the merging tail from the program start).
# Commit under results/<gpu>/session63/ with the environment, then move this script and
# gpu_next_session62.sh to history (fix their `source` to ../gpu_lib.sh and this one's path to it).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
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
ROWS62="decode:1:2048" OUT="$OUT/probe" timeout -k 5 200 bash benchmarks/history/gpu_next_session62.sh > "$R/probe.log" 2>&1
echo "rc=$?" >> "$R/probe.log"; el probe; tail -30 "$R/probe.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r probe/r 2>/dev/null || tar -C "$OUT" -czf "$OUT/results.tgz" r

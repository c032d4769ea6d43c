#!/usr/bin/env bash
# Queued by session 70 (one GPU, H100 or H200, about 4 minutes, at most 9 by its timeouts): compute-sanitizer's racecheck
# on the packed Hopper kernels with the isolation switch FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE
# off and on (the review item of sessions 69-70: with it on, each consumer warpgroup of the
# forward zeroes the last V tile's rows past n_k, so one may rewrite those rows, with the same
# zeros, while the other's P V reads them; kernels/hopper/fwd.py _zero_rows_from).
# OUT=$OUT bash benchmarks/gpu_next_session71.sh
# For each setting: one case of tests/test_hopper_varlen.py,
# test_hopper_varlen_backward_matches_reference[gqa-tiles-causal-128] (lengths 1, 127, 128, 0,
# 129, 700, 64, 300, GQA 4 / 2, bf16; the test asserts that the Hopper packed forward and
# backward took the call, and reads the switch per call), once plainly ($R/plain_SETTING.log) and
# once under `compute-sanitizer --tool racecheck` ($R/racecheck_SETTING.log); summary lines printed.
# Reading, fixed before the run: the switch adds no hazard if racecheck reports no more hazards
# with it on than off; a hazard that only the "on" run reports, at the zeroing (its SASS
# location in _zero_rows_from*, _zero_pair_rows_from, _zero_dq_tail), is a finding to fix
# before the switch could become the default. Racecheck tracks shared memory through
# __syncthreads-style barriers; if both runs report hazards at mbarrier / TMA hand-overs alike,
# only the difference counts.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
CASE="tests/test_hopper_varlen.py::test_hopper_varlen_backward_matches_reference[gqa-tiles-causal-128]"
export FLASHATTN_TRITON_TEST_DEVICE=cuda
for on in 0 1; do
  FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=$on timeout -k 5 100 python3 -m pytest -q -p no:cacheprovider -rfE \
    "$CASE" > "$R/plain_$on.log" 2>&1
  echo "rc=$?" >> "$R/plain_$on.log"; el "plain, switch $on"; tail -2 "$R/plain_$on.log"
  FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=$on timeout -k 5 170 compute-sanitizer --tool racecheck \
    --error-exitcode 3 python3 -m pytest -q -p no:cacheprovider -rfE "$CASE" > "$R/racecheck_$on.log" 2>&1
  echo "rc=$?" >> "$R/racecheck_$on.log"; el "racecheck, switch $on"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|passed|failed|^rc=" "$R/racecheck_$on.log" | tail -6
  grep -E "hazard" "$R/racecheck_$on.log" | sort | uniq -c | sort -rn | head -5
done
tar -C "$OUT" -czf "$OUT/results.tgz" r

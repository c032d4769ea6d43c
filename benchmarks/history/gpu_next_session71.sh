#!/usr/bin/env bash
# Queued by session 70 (one GPU, H100 or H200, about 4 minutes, at most 9 by its timeouts): compute-sanitizer's racecheck
# on the packed Hopper kernels with the isolation switch FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE
# off and on (the review item of sessions 69-70: with it on, each consumer warpgroup of the
# forward zeroes the last V tile's rows past n_k, so one may rewrite those rows, with the same
# zeros, while the other's P V reads them; kernels/hopper/fwd.py _zero_rows_from).
# OUT=$OUT bash benchmarks/history/gpu_next_session71.sh
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
# (The loop below ran as written out here in session 72; it is gpu_lib.sh's racecheck_isolate
# now, which also prints the count of hazard sites at _zero_rows_from.)
racecheck_isolate "tests/test_hopper_varlen.py::test_hopper_varlen_backward_matches_reference[gqa-tiles-causal-128]" 0 1
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# Queued by session 72 (one GPU, H100 or H200, about 6 minutes, at most 9 by its timeouts): the
# forward's zeroing under FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=1 (IS_VARLEN 2) in session 72's
# form: the last consumer warpgroup alone zeroes a sequence's last V tile past n_k, and the
# consumers that reach that tile meet at a named barrier (VARLEN_TAIL_BAR_ID, a run-time thread
# count) before P V (kernels/hopper/fwd.py). Before, every consumer zeroed the slot itself, and
# session 72's racecheck (history/gpu_next_session71.sh, results/h100/session72/) reported 9
# hazards inside _zero_rows_from.
# OUT=$OUT bash benchmarks/history/gpu_next_session72.sh (SETTINGS=1: step 2 with the switch on only, about 4 minutes)
# 1. tests/test_hopper_varlen.py with the switch on for every test ($R/varlen_on.log): the NaN
#    cases and all the packed forward / backward cases (d 64 with three consumers, 128, 256,
#    192:128; causal, windows, GQA) then take the zeroing path wherever a tile reaches past n_k.
# 2. The racecheck case of session 72 with the switch on and off, plainly and under
#    compute-sanitizer --tool racecheck ($R/plain_SETTING.log, $R/racecheck_SETTING.log).
# Reading, fixed before the run: the form is right if (1) passes with no hang (a wrong thread
# count or a consumer missing from the barrier hangs the kernel, and the step's timeout ends it
# with rc 124) and (2) reports no hazard at fwd.py's _zero_rows_from lines with the switch on. Hazards
# at the kernel's def, barrier-init and warp_specialize lines, or at mbarrier-ordered pairs, are
# in both runs and are racecheck's view of the partition hand-over (results/h100/session72/README.md).
# Then the README's "Packed batches" note on the race is replaced by the result; the switch stays
# opt-in for its cost (session 70's rule).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
# (test_varlen_launches_on_a_fake_driver checks the default's IS_VARLEN 1 first: it fails with the
# variable set, by design, as it does on CPU.)
FLASHATTN_TRITON_HOPPER_VARLEN_ISOLATE=1 gpu_tests varlen_on 240 -n 4 tests/test_hopper_varlen.py \
  --deselect tests/test_hopper_varlen.py::test_varlen_launches_on_a_fake_driver
racecheck_isolate "tests/test_hopper_varlen.py::test_hopper_varlen_backward_matches_reference[gqa-tiles-causal-128]" \
  ${SETTINGS:-1 0}
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# Session 56 call 2 (run as one command line; its d = 64 bench_varlen rows named a provider that does
# not exist, "varlen", and timed nothing: dropped from the results): the packed tests with the
# packed Hopper backward switched on, before its default changed.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
export FLASHATTN_TRITON_HOPPER_VARLEN_BWD=1
gpu_tests packed 300 -n 8 tests/test_varlen.py tests/test_varlen_paged.py tests/test_integrations.py \
  tests/test_hopper_varlen.py
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# Session 67, after "longtiles" joined the defaults (gpu_next_session67b.sh's rule met on an H100):
# the decode GPU tests and bench_decode.py's issue 11 table at the new defaults. One GPU, about
# 4 minutes. OUT=$OUT bash benchmarks/gpu_next_session67c.sh; commit $R/decode/ as
# results/<gpu>/decode/.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
decode_tests_and_table
tar -C "$OUT" -czf "$OUT/results.tgz" r

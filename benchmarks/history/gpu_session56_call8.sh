#!/usr/bin/env bash
# Session 56 call 8 (run as one command line): the packed tests at the session's last kernel change
# (1c2e1b8: packed plans without HEADS_FIRST, the packed Hopper backward on at every length).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests packed 300 -n 8 tests/test_varlen.py tests/test_varlen_paged.py tests/test_integrations.py
tar -C "$OUT" -czf "$OUT/results.tgz" r

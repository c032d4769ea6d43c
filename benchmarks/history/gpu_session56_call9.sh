#!/usr/bin/env bash
# Session 56 call 9 (run as one command line): test_integrations.py at 15fb2c5, with the new GPU test
# of a packed 16k-token step's peak memory (Transformers' documents mask left unbuilt).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests integ 200 -n 8 tests/test_integrations.py
tar -C "$OUT" -czf "$OUT/results.tgz" r

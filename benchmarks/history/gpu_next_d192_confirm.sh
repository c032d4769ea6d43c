#!/usr/bin/env bash
# After a d = 192 / dv = 128 backward form enters CONFIGS[192]: its GPU tests at the new default
# (tests/test_hopper_bwd.py -k 192: every split Q K^T variant, the API path, GQA, the group split;
# float64 references on NaN-poisoned outputs) and the variant table (gpu_next_variants.sh: the
# d = 192 row next to SDPA, the other rows as a record). One H200, about 6-7 minutes. No decision:
# a record of the adopted default (tests.log must end rc=0; the table's d = 192 row is the figure).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_d192_confirm.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-300} tests/test_hopper_bwd.py -k 192 -n 6
run_each variants:gpu_next_variants
tar czf "$OUT/results.tgz" -C "$OUT" r

#!/usr/bin/env bash
# Queued by session 49 (one call, about 3 minutes): its host changes that no GPU ran.
#  1. flash_attn_varlen_qkvpacked_func / _kvpacked_func (d1d1e8d) and the Transformers
#     flash-kwargs path for packed documents (1487870), with the autograd-options and
#     second-order tests of 293723a again.
# Rule: every test passes (a failure is a bug to fix, not a result).  Then, on an H200
# (none came in sessions 47-49): the variant table (gpu_next_variants.sh) and the decode
# table, to re-time sessions 47-49 (host changes, and the float-bias LSE_LO builds: +1.7 %
# backward on the H100 in session 48).
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
gpu_tests session49 200 -n 8 tests/test_varlen.py tests/test_integrations.py tests/test_ops.py \
  tests/test_variants.py tests/test_kvcache.py \
  -k "packed or flash_kwargs or modernbert or modified_in_place or double_backward or combine or garbage_outside"

#!/usr/bin/env bash
# d = 64 causal Hopper forward on two 240-register consumers (kernels/hopper/fwd.py CAUSAL_CONFIGS,
# empty until this rule), on one H200, about 4 minutes. Why: the d = 64 causal rows are the
# forward's largest gap to cuDNN (0.82-0.87x at N = 2k / 4k in the session 21 sweep). Its three
# 160-register consumers spill in the masked step (compile_check --hopper --d 64 --cases causal:
# 108 B, 20 local loads / stores in the GEMM loops; two 240-register consumers on the dynamic grid:
# 0 B, 5,224 SASS instructions against 8,072); Nsight counted 424-430 thousand local-memory
# requests per call there (session 17). Session 10 timed two consumers on the persistent grid at
# 325 TFLOP/s against three's 309 at N = 2k, before the dynamic scheduler and the sections.
#   1. correctness: hopper_fwd_probe.py --stage correct --variant nc2_dynamic --dims 64 (O and
#      LSE against float64: ragged lengths, batch > 1, GQA, causal both alignments, rows with no
#      key, NaN past N in the inputs, sentinels past N in the output; the dynamic grid's shapes);
#   2. timing, two repeats in fresh processes: --stage bench --rows causal64_gqa (bf16, B*N = 16k,
#      d = 64, H = 32, causal, N 1k / 2k / 4k / 8k, and Hq 32 / Hkv 4 at 4k) with the variants
#      default, nc2_causal_plans (CAUSAL_CONFIGS[64] = two 240-register consumers) and
#      nc2_sec16_plans (that and SECTION_MB_DEFAULT[64] = (0, 16)) through the cached plans,
#      next to cuDNN.
# Rule, fixed before the run: a candidate qualifies if step 1 passed (rc=0, its RESULT ok) and in
# each repeat every one of the 5 rows has a time for it and default, its TFLOP/s over default's
# geometric mean over the 5 rows is >= 1.03, and no row is below 0.98. The qualifying candidate
# with the larger sum of the two means is adopted: CAUSAL_CONFIGS[64] = {NUM_CONSUMERS: 2,
# CONSUMER_REGS: 240}, and for nc2_sec16_plans also SECTION_MB_DEFAULT[64] = (0, 16). Otherwise
# nothing changes.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_nc2_causal.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
fwd_probe_ab nc2_dynamic default,nc2_causal_plans,nc2_sec16_plans causal64_gqa sdpa:cudnn
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import rules; print(rules.nc2_causal_verdict('$R'))" \
  | tee "$OUT/verdict.txt"
tar -C "$OUT" -czf "$OUT/results.tgz" r

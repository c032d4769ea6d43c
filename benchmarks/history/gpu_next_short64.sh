#!/usr/bin/env bash
# d = 64 non-causal Hopper forward at short lengths on two 240-register consumers (kernels/hopper/fwd.py
# SHORT_CONFIGS, empty until this rule), on one H200, about 3-4 minutes. Why: fwd d = 64 full N = 1k is
# the forward's one row under FlexAttention (0.987x in both dtypes, sessions 26 / 27); d = 64 runs three
# consumers, 192 rows per program, so N = 1024 takes 6 m-blocks of which the last is a third full (1152
# rows computed), where Flex's and two consumers' 128-row programs divide it exactly; session 25's
# profile has our kernel +20 us over Flex's there; session 24 timed two consumers at causal 1k at 1.11x.
#   1. correctness: hopper_fwd_probe.py --stage correct --variant nc2 --dims 64 (O and LSE against
#      float64: ragged lengths, batch > 1, GQA, causal both alignments, rows with no key, NaN past N in
#      the inputs, sentinels past N in the output);
#   2. timing, two repeats in fresh processes: --stage bench --rows full64_short (bf16, B*N = 16k,
#      d = 64, H = 32, not causal, N 512 / 1024 / 1536 / 2048, and Hq 32 / Hkv 4 at 1k) with the variants
#      default and nc2_short_plans (SHORT_CONFIGS[(64, False)] = (2048, two consumers), through the
#      cached plans), next to cuDNN and FlexAttention.
# Rule, fixed before the run: with step 1 passed (rc=0, its RESULT ok) and both repeats complete,
# n_max is the largest N such that every row of length <= N (the GQA row at 1k included) reads
# nc2_short_plans / default >= 1.02 in both repeats; if there is one, SHORT_CONFIGS[(64, False)] =
# (n_max, {NUM_CONSUMERS: 2, CONSUMER_REGS: 240}); otherwise nothing changes (rules.short64_verdict).
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_short64.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
fwd_probe_ab nc2 default,nc2_short_plans full64_short sdpa:cudnn,flex
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import rules; print(rules.short64_verdict('$R'))" \
  | tee "$OUT/verdict.txt"
tar -C "$OUT" -czf "$OUT/results.tgz" r

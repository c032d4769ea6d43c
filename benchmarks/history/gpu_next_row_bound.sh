#!/usr/bin/env bash
# The Hopper forward's and backward's masked causal steps with one compare per score
# (kernels/hopper/fwd.py and bwd.py ROW_BOUND; each module's ROW_BOUND_DIMS empty until this
# rule), on one H200, about 6-7 minutes. Why: the masked
# step is 1.5-1.7x the unmasked one in SASS (d = 64: 792 against 457 instructions, with 20 of the
# kernel's spill loads / stores; d = 128: 762 / 496); a key column c of a causal tile is kept where
# c < N_K - start_n and c <= i + causal_shift - start_n, which ROW_BOUND tests as one compare
# against the row's min of the two (compile_check, Triton 3.6: 698 and 671 instructions, spills
# 108 -> 84 B at d = 64, loop spills 20 -> 10; whole causal kernels 4-8% shorter; the default
# builds' SASS byte-identical). The d = 64 causal rows are the forward's largest gap to cuDNN
# (0.87-0.90x at 2k / 4k, session 24).
#   1. correctness: hopper_fwd_probe.py --stage correct --variant row_bound --dims 64,128,256,192
#      (O and LSE against float64 on the probe's cases), then the GPU tests
#      tests/test_hopper.py tests/test_hopper_bwd.py -k row_bound (forward: every causal case of
#      CASES, both alignments, d 64 / 128 / 256 / 192:128, bf16 and fp16, the causal window cases
#      at d 64 / 128; backward: every causal case at d 64 / 128 / 256 / 192, the group split, the
#      persistent loop, SPLIT_D at d = 128).
#   2. timing, two repeats in fresh processes: --stage bench --rows causal (bf16, B*N = 16k,
#      H = 2048 / d, causal, d 64 / 128 / 256, N 1k / 2k / 4k / 8k) with the variants default and
#      row_bound_plans (ROW_BOUND_DIMS = every head dim, through the cached plans), next to cuDNN.
#   3. the backward, kernel-only (hopper_bwd_probe.py, two repeats in fresh processes, gradients
#      checked against the reference): bf16 causal B*N = 16k, d = 64 (H 32) at N 2k / 4k / 8k,
#      d = 128 (H 16) at 2k / 4k / 8k and the GQA row B=2 Hq16 Hkv4 N=4k; default and ROW_BOUND=1.
# Rule, fixed before the run (rules.row_bound_verdict): a head dim of 64 / 128 / 256 joins
# ROW_BOUND_DIMS when step 1 passed (both logs rc=0, the probe's RESULT ok) and in each repeat its 4
# rows have a time for both, none below 0.98x default and their geometric mean >= 1.01x. d = 192
# (no row here) stays out. Otherwise nothing changes. Backward (rules.row_bound_bwd_verdict): a
# head dim of 64 / 128 joins bwd.ROW_BOUND_DIMS when the GPU tests passed and, best of the two
# repeats per row, every row's check is ok, none is below 0.99x default and the geometric mean
# is >= 1.01x.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_row_bound.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
timeout -k 5 ${T_CORRECT:-150} python3 benchmarks/hopper_fwd_probe.py --stage correct --variant row_bound \
  --dims 64,128,256,192 > "$R/correct.log" 2>&1
echo "rc=$?" >> "$R/correct.log"; el correct; grep '"kind": "correct"' "$R/correct.log" | cut -c1-300
gpu_tests tests_rb ${T_TESTS:-200} -n 8 tests/test_hopper.py tests/test_hopper_bwd.py -k row_bound
for rep in 1 2; do
  timeout -k 5 $([ $rep = 1 ] && echo ${T_AB1:-150} || echo ${T_AB2:-100}) python3 benchmarks/hopper_fwd_probe.py \
    --stage bench --variants default,row_bound_plans --rows causal --baselines sdpa:cudnn > "$R/ab$rep.log" 2>&1
  echo "rc=$?" >> "$R/ab$rep.log"; el "ab$rep"
done
ROWS="8,32,32,2048,64,1;4,32,32,4096,64,1;2,32,32,8192,64,1;8,16,16,2048,128,1;4,16,16,4096,128,1;2,16,16,8192,128,1;2,16,4,4096,128,1"
probe_reps ${T_PROBE:-110} --head-dims none --gqa "$ROWS" --variants "default,ROW_BOUND=1" --variants64 "" \
  --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import rules; print(rules.row_bound_verdict('$R')); \
print(rules.row_bound_bwd_verdict('$R'))" | tee "$OUT/verdict.txt"
tar -C "$OUT" -czf "$OUT/results.tgz" r

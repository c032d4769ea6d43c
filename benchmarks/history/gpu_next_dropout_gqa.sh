#!/usr/bin/env bash
# Session 22 call 2: why the keys x queries path with shared Philox calls
# (DROPOUT_SHARED_CALLS) ran the GQA row (B=2 Hq16 Hkv4 N=4k d=128 causal, GROUP_SPLIT's
# rule S = 2) at 87 TFLOP/s, 0.34x the default, while it gained 1.04-1.13x on the four d=128
# MHA rows (call 1, gpu_next_dropout_shared.sh). compile_check (Triton 3.6, sm_90) finds the
# GROUP_SPLIT=2 build no worse than S = 1 (spill 492 B vs 496 B). Rows (bf16, dropout 0.1,
# kernel-only backward TFLOP/s, hopper_bwd_probe.py, two repeats): GQA d = 128 and d = 64
# (B=2 Hq16 Hkv4 N=4k causal), GQA non-causal d = 128, and MHA B=2 H16 N=4k d=128 causal;
# variants: default, own calls, shared calls at the rule's S, shared with GROUP_SPLIT=1 and 4.
# Rule, fixed before the run: DROPOUT_CONFIGS[64] (shared calls since call 1) stays on GQA
# rows only if shared at the rule's S is >= 0.97x default on both GQA d=64 rows' repeats;
# otherwise the shared build is restricted to calls where it was measured faster.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
KF="SPLIT_D=0+BLOCK_N=128+BLOCK_M=64+DQ_CHUNK=0+NUM_STAGES=2"
SH="$KF+DROPOUT_SHARED_CALLS=1"
probe_reps ${T_PROBE:-110} --dropout 0.1 --head-dims none \
  --gqa "2,16,4,4096,128,1;2,16,4,4096,64,1;2,16,4,4096,128,0;2,16,16,4096,128,1" \
  --variants "default,$KF,$SH,$SH+GROUP_SPLIT=1,$SH+GROUP_SPLIT=4" --variants64 "" --variants256 "" \
  --baselines "" --rep ${REP:-40}
for i in 1 2; do grep -E "^B=" "$R/rep$i/log.txt" | sed "s/SPLIT_D=0+BLOCK_N=128+BLOCK_M=64+DQ_CHUNK=0+NUM_STAGES=2/KF/g" | cut -c1-400; tail -2 "$R/rep$i/log.txt"; done

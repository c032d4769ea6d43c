#!/usr/bin/env bash
# Ran in session 43 (call 3): nothing adopted. DQ_STAGE_BUFS = 0 was removed in session 45 (last in 385b20b):
# _make_plan declines its three variants now, so a run of this script at a later commit fails them.
# Forms of the d = 192 / dv = 128 backward's 128-row step (CONFIGS[192], Q_HALVES=1) against the
# default, on one H200, about 7-8 minutes. Why: the row reads 0.86x SDPA (session 40 call 3); session
# 36's warp-state samples (h200/session36/call3_ncu_source_summary.md) put about a fifth of the main
# kernel's samples on the dQ staging (store 6.6 %, fence 5.3 %, reduce-add issue 9.5 %) and 2.9 % on
# the P^T / dS^T exchange wait.
#   OWN_FIRST=1: each consumer's column products over its own half of the rows (dV, dK, dK1) issued
#     right after its ds_ready arrival, the wait for the other half only before that half's. SASS of
#     a step: P^T / dS^T stores, fence, bar.sync, arrival, bar.sync, three HGMMA, the poll, three
#     HGMMA, the first dQ piece.
#   DQ_STAGE_BUFS=0: no staging: each dQ piece added into the float32 buffer from registers by relaxed
#     atomics (REDG.E.ADD.F32, two columns per instruction; rows past N_Q, zeros, into the last row):
#     no shared store, fence, bar.sync pair, store_wait or TMA issue per piece, 64 KB of shared memory
#     free (157,168 B). The L2 takes the same bytes as from the TMA reduce-adds (about 3 GB per call
#     on the causal 4k row); whether it takes them as fast from 8-byte atomics is what this measures.
#   DQ_STAGE_BUFS=0+DS_BUFS=2: with a second P^T / dS^T buffer in the freed memory (189,936 B);
#     and that with OWN_FIRST=1.
# Compile facts (compile_check --hopper-bwd --d 192:128 --sass, Triton 3.6; "gemm loops": each
# consumer's masked / unmasked step loop, instructions : local accesses): full default 725:0 615:0
# 720:8 632:2 (4,080 instructions, spill 80 B); OWN_FIRST 733:0 615:0 726:6 632:2 (76 B);
# DQ_STAGE_BUFS=0 660:3 576:2 665:0 556:0 (156 B); +DS_BUFS=2 599:0 545:0 578:0 529:0 (3,592, 44 B);
# +OWN_FIRST=1 592:0 542:0 571:0 522:0 (3,560, 44 B). Causal: 792:1 615:0 781:6 636:2 (104 B);
# 800:1 615:0 791:6 635:2; 737:11 578:2 738:14 543:0 (232 B); 668:0 546:0 643:0 530:0 (44 B);
# 660:0 543:0 640:0 522:0 (44 B).
#   1. GPU tests: tests/test_hopper_bwd.py -k "split_qk_variants and (OWN_FIRST or DQ_STAGE_BUFS and 0)"
#      (float64 reference, NaN-poisoned outputs; the group split, persistent, one and two P^T / dS^T
#      buffers, OWN_FIRST with the late 'free' arrival and with the atomics).
#   2. hopper_bwd_probe.py, two repeats, the 5 rows of gpu_next_q_halves.sh; variants default,
#      OWN_FIRST=1, DQ_STAGE_BUFS=0, DQ_STAGE_BUFS=0+DS_BUFS=2, DQ_STAGE_BUFS=0+DS_BUFS=2+OWN_FIRST=1;
#      cuDNN beside.
# Rule, fixed before the run (rules.reps_rule_verdict): a candidate passes with every test of step 1
# passing, all 5 rows in both repeats, every check "ok", no row below 0.99 and a geometric mean
# >= 1.02; the passing one with the highest mean goes into CONFIGS[192] (OWN_FIRST=True, or
# DQ_STAGE_BUFS=0, or DQ_STAGE_BUFS=0 with DS_BUFS=2, and OWN_FIRST=True). Otherwise nothing changes. If an atomic form
# wins, the keys-as-M forms (test_keys_as_m_variants, d = 64 / 128) are the next question.
#
#     OUT=/tmp/out bash benchmarks/history/gpu_next_d192_forms.sh
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests tests ${T_TESTS:-200} tests/test_hopper_bwd.py -k "split_qk_variants and (OWN_FIRST or DQ_STAGE_BUFS and 0)" -n 4
ROWS="8,16,16,2048,192,1;4,16,16,4096,192,1;2,16,16,8192,192,1;2,16,4,4096,192,1;4,16,16,4096,192,0"
probe_reps ${T_PROBE:-150} --head-dims none --gqa "$ROWS" \
  --variants "default,OWN_FIRST=1,DQ_STAGE_BUFS=0,DQ_STAGE_BUFS=0+DS_BUFS=2,DQ_STAGE_BUFS=0+DS_BUFS=2+OWN_FIRST=1" \
  --variants64 "" --variants256 "" --baselines cudnn --rep ${REP:-30}
python3 - "$R" <<'PY' | tee "$OUT/verdict.txt"
import sys
sys.path.insert(0, "benchmarks")
from rules import reps_rule_verdict
reps_rule_verdict(sys.argv[1], {c: f"CONFIGS[192] takes {c}"
                                for c in ("OWN_FIRST=1", "DQ_STAGE_BUFS=0", "DQ_STAGE_BUFS=0+DS_BUFS=2",
                                          "DQ_STAGE_BUFS=0+DS_BUFS=2+OWN_FIRST=1")},
                  5, 0.99, 1.02, "tests.log")
PY
tar czf "$OUT/results.tgz" -C "$OUT" r

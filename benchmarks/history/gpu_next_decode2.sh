#!/usr/bin/env bash
# Record: its candidates measured slower and were removed in session 45 (last in 385b20b); at a later
# commit FLASHATTN_TRITON_DECODE_VARIANT refuses their names (ValueError), so this script no longer runs.
# Batch-1 decoding, second round (kernels/decode.py VARIANTS, FLASHATTN_TRITON_DECODE_VARIANT):
# four candidates, each off by default, timed on top of today's default (deep+fill+pdl+reserve),
# on one H200: about 2.5 minutes, at most 5.5 under the timeouts.  docs/decode.md, "Batch 1 on the H200".
#   merge:    the fused merge keeps 7 partials in flight instead of 2 (the last split's tail);
#   gather:   the fused merge loads the partials of up to 16 splits as one tile, the tile's
#             real rows only (one L2 round trip per 16 splits, no per-split CTA barriers);
#   prefetch: with pdl, before griddepcontrol.wait each program asks L2 for the first 2 tiles
#             its split reads in a full contiguous cache (the first DRAM round trip hidden
#             behind the previous kernel's tail);
#   pair:     two programs per SM at small batch (64-key tiles x 4 stages, 102 KiB; the split
#             rule counts two per SM: 22 / 32 splits at 4k / 8k+), timed with merge and with
#             gather (its merge is twice as long).
# Steps: gpu_next_decode.sh with the settings below (it runs the GPU tests of the variants,
# test_kvcache.py -k "variant or cuda_graph or reserve or split_counters", then two timing
# repeats of bench_decode.py, B = 1 and 8, N = 1k, 4k, 8k, 16k, 64k, contiguous, with SDPA
# flash and cuDNN; Hq=32, Hkv=8, d=128, bf16, one query token, CUDA graphs), then its config
# sweep (exploratory, not in the rule) at B=1, 16k and 64k, with the default variants: deep's
# own tiles (BLOCK_N=64, 5 stages) against 128-key tiles x 3 stages x 8 warps, the one config
# of session 16's sweep that read more than deep at 64k (3577 GB/s, a single sample).
# Rule, fixed before the run.  For each candidate V, ratio = V's GB/s / the default's GB/s on
# the same row of the same repeat.  V qualifies if no GPU test failed that names one of V's
# parts or no variant at all (and the test run finished), and in both repeats ratio >= 1.03
# on every B=1 row with 4k <= N <= 16k (where the fixed cost is 30-70% of the call), ratio
# >= 0.98 on the other B=1 rows (1k, 64k), and ratio >= 0.98 on every B=8 row (no candidate
# changes batch 8's launch: this floor only catches a broken small-batch gate; session 16
# measured identical B=8 launches at 0.984-1.046x).  The qualifying V with the highest
# geometric mean ratio over B=1, N >= 4k (both repeats) joins DEFAULT_VARIANTS; if none
# qualifies the default stays and the rows go into docs/decode.md.  Also printed: the issue's
# bars (>= 3570 GB/s at N >= 8k, >= every peer at B=1 and B=8) for the default and the winner.
# SKIP_TESTS=1 times only (then nothing qualifies).
D=deep+fill+pdl+reserve
export VARIANTS=${VARIANTS:-"default,$D+merge,$D+gather,$D+prefetch,$D+merge+prefetch,$D+gather+prefetch,$D+pair+merge,$D+pair+gather"}
export T_TESTS=${T_TESTS:-110}  # 11 variants x 3 layouts and 6 graph cases to compile
export GAIN=1.03 GAIN_FROM=4096 GAIN_TO=16384 FLOOR_B1=0.98 FLOOR_B8=0.98
export SWEEP_CONFIGS="BLOCK_N=64,num_stages=5;BLOCK_N=128,num_stages=3,num_warps=8"
exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu_next_decode.sh"

#!/usr/bin/env bash
# Nsight Compute of every row still short of issue 7's and issue 8's bars in the session 24
# sweep (benchmarks/results/h200/session24/, bf16; the fp16 rows short are the same shapes),
# at the current code: the profiles that explain those rows (their done-when asks one for a
# row that stays short), in place of session 17's, which predate the head sections, the
# group split, the one-launch and whole-tile backward forms. A diagnostic through
# gpu_ncu_short_rows.sh (its sections, metrics, marker windows and sum check); one H200.
#   PART=cudnn (default; about 3 minutes, session 17's 12 rows took 222 s; BUDGET 420 s): ours and cuDNN on the rows below
#     cuDNN's bar (forward 1.0x, backward 0.9x; d = 64 / 128, N >= 2k), largest gap first:
#     bwd d128 causal 2k (0.82x), fwd d64 causal 4k (0.90x), fwd d64 causal 2k (0.90x),
#     bwd d64 causal 2k (0.88x), bwd d128 full 2k (0.89x), fwd d128 full 2k (0.98x),
#     fwd d64 full 2k (0.98x), fwd d128 full 16k (0.98x) as an extra row.
#   PART=flex (about 4 minutes, session 20's one Flex row took 59 s; BUDGET 540 s; Flex compiles in-process under ncu,
#     TORCHINDUCTOR_COMPILE_THREADS=1, into a fresh cache): ours, Flex and cuDNN on the rows
#     below Flex: bwd d128 full 512 (0.92x), bwd d128 causal 1k (0.96x), bwd d128 causal
#     512 (0.98x), fwd d64 full 1k (0.99x).
# Rule, fixed before the run (gpu_ncu_short_rows.sh's): "VERDICT: complete" when every row
# named above but the extra one is profiled for ours and the peer (cuDNN; Flex for
# PART=flex) and each call's kernel time is 0.80-1.25x the session 24 sweep's time of that
# row; else "VERDICT: incomplete", naming the rows. Which kernel and stall make each gap is
# read from summary.md afterwards into docs/performance.md.
#
#     OUT=/tmp/out [PART=flex] bash benchmarks/history/gpu_next_ncu_gaps.sh
# Both in one device call (the device returns at most 8 files; the reports stay behind):
#     PART=flex OUT=$OUT/flex bash benchmarks/history/gpu_next_ncu_gaps.sh; OUT=$OUT/cudnn \
#       bash benchmarks/history/gpu_next_ncu_gaps.sh; rm -f $OUT/*/reps.tgz*
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export BENCH=${BENCH:-benchmarks/results/h200/session24/call2/flexbf16/r/bench/bench_attention.json}
if [ "${PART:-cudnn}" = flex ]; then
  export TORCHINDUCTOR_COMPILE_THREADS=1 TORCHINDUCTOR_CACHE_DIR=/tmp/flex_ncu_inductor
  rm -rf "$TORCHINDUCTOR_CACHE_DIR"
  ROWS="bwd:128:512:full bwd:128:1024:causal bwd:128:512:causal fwd:64:1024:full" EXTRA_ROWS="" \
    PROVIDERS="ours,flex,cudnn" PEER=flex T_ROW=${T_ROW:-170} BUDGET=${BUDGET:-540} \
    exec bash benchmarks/gpu_ncu_short_rows.sh
fi
ROWS="bwd:128:2048:causal fwd:64:4096:causal fwd:64:2048:causal bwd:64:2048:causal bwd:128:2048:full \
fwd:128:2048:full fwd:64:2048:full" EXTRA_ROWS="fwd:128:16384:full" PROVIDERS="ours,cudnn" PEER=cudnn \
  T_ROW=${T_ROW:-75} BUDGET=${BUDGET:-420} exec bash benchmarks/gpu_ncu_short_rows.sh

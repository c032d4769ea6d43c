#!/usr/bin/env bash
# Nsight Compute on the rows of issue 10's variant table where our backward trails its peer
# (session 28, benchmarks/results/h200/session28/call2_variants: B = 2, N = 4k, Hq 16 / Hkv 4,
# d = 128, bf16, causal): dropout 0.1 (0.76x SDPA), d = 192 / dv = 128 (0.67x SDPA), window
# (1024, 0) (0.95x Flex), plain (0.90x SDPA). benchmarks/gpu_ncu_short_rows.sh with its rows
# replaced by ncu_cases.py --variant rows: ours and the peer, every kernel of one backward
# each; no sweep to add up against (BENCH empty), so a row is complete when both calls hold a
# kernel. One H200 on Firecracker, about 6-7 minutes. A record: which kernel and which stalls
# make each gap is read from summary.md afterwards.
export ROWS=${ROWS:-"bwd:dropout:4096:causal bwd:d192:4096:causal bwd:window:4096:causal bwd:plain:4096:causal"}
export EXTRA_ROWS=${EXTRA_ROWS-""} PROVIDERS=ours,peer PEER=peer BENCH=""
exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu_ncu_short_rows.sh"

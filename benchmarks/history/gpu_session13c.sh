#!/usr/bin/env bash
# Session 13 call 3 (under 10 minutes on one H200): the two kernel paths
# written this session on CPU, each script with its decision rule in its header:
#   1. benchmarks/history/gpu_next_window_bwd.sh: sliding windows in the Hopper backward;
#   2. benchmarks/history/gpu_next_mla.sh: d = 192 / dv = 128 (split Q K^T) in the Hopper forward.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
OUT="$R/window_bwd" bash benchmarks/history/gpu_next_window_bwd.sh > "$R/window_bwd.log" 2>&1; el window_bwd; tail -14 "$R/window_bwd.log" | cut -c1-300
OUT="$R/mla" bash benchmarks/history/gpu_next_mla.sh > "$R/mla.log" 2>&1; el mla; tail -24 "$R/mla.log" | cut -c1-400
tar -C "$OUT" -czf "$OUT/results.tgz" r

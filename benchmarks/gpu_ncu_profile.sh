#!/usr/bin/env bash
# Nsight Compute profiles of the Hopper kernels where they trail cuDNN most
# (needs a Firecracker H200, where ncu reads the counters; about 4 minutes):
#   * backward, d = 128, N = 2k, bf16, full and causal (0.78-0.87x cuDNN);
#   * forward, d = 64 and d = 128, N = 2k, bf16, causal (0.82-0.86x);
#   * cuDNN (PyTorch SDPA) on the backward d=128 causal and forward d=64
#     causal rows, for comparison (every kernel of a call: LC launches).
# One launch of each kernel (after warm-up launches), sections: speed of
# light, occupancy, launch stats, warp state and scheduler statistics,
# compute and memory workload. Clocks left alone (--clock-control none).
# Results: $OUT/r/<case>.ncu-rep and <case>.txt (the details page).
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"; "$NCU" --version | tail -1
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis"
prof() {  # name, kernel regex, case arguments
  local name=$1 kern=$2; shift 2
  timeout -k 5 ${T_CASE:-75} "$NCU" --clock-control none --target-processes all -k "regex:$kern" \
    --launch-skip 2 --launch-count ${LC:-1} $SECTIONS -o "$R/$name" -f \
    python3 benchmarks/ncu_cases.py "$@" > "$R/$name.log" 2>&1
  echo "rc=$?" >> "$R/$name.log"
  "$NCU" --import "$R/$name.ncu-rep" --page details > "$R/$name.txt" 2>&1
  el "$name"; grep -E "Context [0-9]|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|No Eligible|Issued Warp" \
    "$R/$name.txt" | head -$((12 * ${LC:-1}))
}
prof bwd_d128_2k_full _attn_bwd_hopper --case bwd --d 128 --n 2048
prof bwd_d128_2k_causal _attn_bwd_hopper --case bwd --d 128 --n 2048 --causal
prof fwd_d64_2k_causal _attn_fwd_hopper --case fwd --d 64 --n 2048 --causal
prof fwd_d128_2k_causal _attn_fwd_hopper --case fwd --d 128 --n 2048 --causal
LC=4 prof cudnn_bwd_d128_2k_causal "cudnn|sdpa|prop|fmha" --case bwd --d 128 --n 2048 --causal --provider cudnn
LC=2 prof cudnn_fwd_d64_2k_causal "cudnn|sdpa|prop|fmha" --case fwd --d 64 --n 2048 --causal --provider cudnn
tar -C "$OUT" -czf "$OUT/results.tgz" r

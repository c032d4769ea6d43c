#!/usr/bin/env bash
# Second device call on nvidia-h200-x2, session 9:
#   1. the two ring-check cases the first call's time limit cut (d=256; 128k tokens);
#   2. bench_ring at 128k (ring and local timed alternately) with NCCL's default
#      communicator, one with a high-priority stream, one limited to 4 CTAs, and
#      both: how much the transfers slow the attention kernels they overlap
#      (ring - local) against the transfers alone.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version())" > "$R/env.txt" 2>&1; cat "$R/env.txt"
timeout -k 10 ${TC:-130} torchrun --nproc_per_node=2 -m flashattn_triton.distributed.check --cases 6,7 > "$R/ring_check67.log" 2>&1
echo "check rc=$?" >> "$R/ring_check67.log"; el check; grep -E "PASS|FAIL|rc=" "$R/ring_check67.log" | cut -c1-250
ring() {  # label, then bench_ring options
  local label=$1; shift
  timeout -k 10 ${TB:-75} torchrun --nproc_per_node=2 benchmarks/bench_ring.py --out "$R/ring_$label" \
    --seqlens ${SEQLENS:-128k} --no-contiguous --single-max 1 --max-seconds 60 "$@" > "$R/ring_$label.log" 2>&1
  echo "rc=$?" >> "$R/ring_$label.log"; el "ring $label"
  sed -n '/short:begin/,/short:end/p' "$R/ring_$label/bench_ring.md" 2>/dev/null | grep "^| [0-9]" | cut -c1-150
}
ring default
ring hiprio --high-priority
ring ctas4 --max-ctas 4
ring hiprio_ctas4 --high-priority --max-ctas 4
tar -C "$OUT" -czf "$OUT/results.tgz" r

#!/usr/bin/env bash
# Device call on the 2-GPU machine (nvidia-h200-x2), session 9:
#   1. ring attention against single-device attention over NCCL (torchrun, 2 ranks);
#   2. bench_ring.py, 64k..512k tokens (B=1, H=32, d=128, bf16, causal, zigzag);
#   3. then the two GPUs apart, side by side: GPU 0 the decode benchmark with the
#      per-SM split count, GPU 1 the KV-cache tests.
# Results: $OUT/results.tgz (r/...) plus the logs' tails on stdout.
#     OUT=/tmp/out bash benchmarks/history/gpu_x2_session9.sh
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{ python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.device_count(), torch.cuda.get_device_name())"
  nvidia-smi -L; nvidia-smi topo -m; nvidia-smi nvlink -s 2>/dev/null | head -8; } > "$R/env.txt" 2>&1
cat "$R/env.txt"
timeout -k 10 ${TC:-150} torchrun --nproc_per_node=2 -m flashattn_triton.distributed.check > "$R/ring_check.log" 2>&1
echo "check rc=$?" >> "$R/ring_check.log"; el check; grep -E "PASS|FAIL|rc=" "$R/ring_check.log" | cut -c1-220
timeout -k 10 ${TB:-360} torchrun --nproc_per_node=2 benchmarks/bench_ring.py --out "$R" \
  --seqlens ${SEQLENS:-64k,128k,256k,512k} --max-seconds ${MAXS:-320} > "$R/bench_ring.log" 2>&1
echo "bench rc=$?" >> "$R/bench_ring.log"; el bench_ring
( CUDA_VISIBLE_DEVICES=0 timeout -k 5 ${TD:-100} python3 benchmarks/bench_decode.py --out "$R" --batches 1,8 \
    --seqlens 1024,4096,16384,65536 --splits 0,16 --max-seconds 80 > "$R/bench_decode.log" 2>&1; echo "decode rc=$?" >> "$R/bench_decode.log" ) &
( CUDA_VISIBLE_DEVICES=1 FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${TK:-100} python3 -m pytest -q -p no:cacheprovider \
    -rfE --tb=short -n 4 tests/test_kvcache.py > "$R/test_kvcache.log" 2>&1; echo "tests rc=$?" >> "$R/test_kvcache.log" ) &
wait; el decode
tar -C "$OUT" -czf "$OUT/results.tgz" r
tail -14 "$R/bench_ring.log" | cut -c1-250
tail -3 "$R/test_kvcache.log"
tail -22 "$R/bench_decode.log" | cut -c1-200

#!/usr/bin/env bash
# One device call on the 2-GPU machine: ring attention correctness and
# benchmark over NCCL, then (on GPU 0) the KV-cache decode tests and benchmark.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/ring" "$OUT/decode"
nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -4
timeout -k 10 200 torchrun --nproc_per_node=2 -m flashattn_triton.distributed.check 2>&1 | tee "$OUT/ring/check.log" | tail -12
timeout -k 10 230 torchrun --nproc_per_node=2 benchmarks/bench_ring.py --out "$OUT/ring" --seqlens 64k,128k,256k --max-seconds 170 2>&1 | tail -16
export CUDA_VISIBLE_DEVICES=0 FLASHATTN_TRITON_TEST_DEVICE=cuda
timeout -k 10 100 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_kvcache.py > "$OUT/decode/test_kvcache.log" 2>&1; tail -4 "$OUT/decode/test_kvcache.log"
timeout -k 10 150 python3 benchmarks/bench_decode.py --out "$OUT/decode" --max-seconds 120 2>&1 | tail -30

#!/usr/bin/env bash
# Device call 2 of 2026-12-01 (second session): the Hugging Face example again
# (weights on the device, generation in float32), the CLI (info, quick bench,
# CLI tests on the GPU), a per-kernel profile of the varlen backward with a
# dK/dV config sweep, a decode config/split sweep at batch 1, and GPU tests of
# the backward (bitwise reproducibility) and the Hopper tier forced.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/r/bench"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/r/env.txt"
git log -1 --format=%h 2>/dev/null >> "$OUT/r/env.txt"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
( time timeout -k 5 ${TH:-130} python3 examples/hf_model.py --device cuda > "$OUT/r/example_hf_model_cuda.log" 2>&1; echo "hf_model rc=$?" >> "$OUT/r/example_hf_model_cuda.log" ) 2>> "$OUT/r/example_hf_model_cuda.log"
el hf_model
{
  python3 -m flashattn_triton info
  python3 -m flashattn_triton info --shape 4,4096,32,128 --kv-heads 8 --dtype bf16 --causal
  python3 -m flashattn_triton info --shape 1,16384,8,256 --causal --window 4095,0
} > "$OUT/r/cli_info.txt" 2>&1
( timeout -k 5 ${TB:-150} python3 -m flashattn_triton bench --out "$OUT/r/bench" > "$OUT/r/cli_bench.log" 2>&1; echo "bench rc=$?" >> "$OUT/r/cli_bench.log" )
el bench
( FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${TC:-90} python3 -m pytest -q -p no:cacheprovider -rfE --tb=line -n 4 \
  tests/test_cli.py tests/test_typing.py > "$OUT/r/tests_cli.log" 2>&1; echo "cli tests rc=$?" >> "$OUT/r/tests_cli.log" )
el cli tests
( timeout -k 5 ${TP:-80} python3 benchmarks/profile_bwd.py --out "$OUT/r" --cases varlen,gqa --sweep-case "varlen 32k docs H32/8 d128 causal" \
  --sweep "64,128,8,3;64,128,8,2;128,128,8,2;64,64,4,3;128,64,8,2" > "$OUT/r/profile_bwd.log" 2>&1; echo "profile rc=$?" >> "$OUT/r/profile_bwd.log" )
el profile
( timeout -k 5 ${TD:-80} python3 benchmarks/bench_decode.py --out "$OUT/r/decode" --batches 1 --seqlens 1024,4096,16384 --layouts contiguous \
  --peers sdpa_cudnn --splits 0,8,16 --configs "BLOCK_N=64,num_stages=3;BLOCK_N=32,num_stages=3;BLOCK_N=128,num_stages=2;BLOCK_N=64,num_stages=2,num_warps=4" \
  > "$OUT/r/decode_sweep.log" 2>&1; echo "decode rc=$?" >> "$OUT/r/decode_sweep.log" )
el decode
( FLASHATTN_TRITON_TEST_DEVICE=cuda FLASHATTN_TRITON_BACKEND=hopper timeout -k 5 ${TT:-110} python3 -m pytest -q -p no:cacheprovider -rfE --tb=line -n 12 \
  -m "not gpu" tests/test_hopper.py tests/test_backward.py tests/test_attention.py > "$OUT/r/tests_hopper_forced.log" 2>&1; echo "tests rc=$?" >> "$OUT/r/tests_hopper_forced.log" )
el tests
cp "$OUT"/r/bench/*.md "$OUT/r/" 2>/dev/null
tar -C "$OUT" -czf "$OUT/results.tgz" r
grep -h "rc=" "$OUT"/r/*.log
tail -8 "$OUT/r/example_hf_model_cuda.log"; tail -25 "$OUT/r/cli_bench.log"; tail -4 "$OUT/r/tests_cli.log"
grep -v "^\s*$" "$OUT/r/profile_bwd.log" | cut -c1-400
grep -A30 "short:begin" "$OUT"/r/decode/*.md 2>/dev/null | head -40
tail -6 "$OUT/r/tests_hopper_forced.log"

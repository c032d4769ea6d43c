#!/usr/bin/env bash
# One device call for the command line (issue 12): `info` for a few shapes on the
# real GPU, the quick `bench` (progress, tables, plot), and tests/test_cli.py on the GPU.
# Usage, from the repository root: bash benchmarks/gpu_cli.sh   (results in $OUT)
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/bench"
[ -d .hopper_cache ] && export TRITON_CACHE_DIR="$PWD/.hopper_cache"
{
  python3 -m flashattn_triton info
  python3 -m flashattn_triton info --shape 4,4096,32,128 --kv-heads 8 --dtype bf16 --causal
  python3 -m flashattn_triton info --shape 2,8192,16,64 --dtype fp16
  python3 -m flashattn_triton info --shape 1,16384,8,256 --causal --window 4095,0
} 2>&1 | tee "$OUT/info.txt"
timeout -k 5 ${T_BENCH:-240} python3 -m flashattn_triton bench --out "$OUT/bench" 2>&1 | tee "$OUT/bench.log" | tail -40
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${T_TESTS:-200} python3 -m pytest -q -p no:cacheprovider -n 4 \
  tests/test_cli.py tests/test_typing.py 2>&1 | tail -15 | tee "$OUT/test_cli.log"
ls -l "$OUT" "$OUT/bench"

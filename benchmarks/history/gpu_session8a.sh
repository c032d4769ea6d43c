#!/usr/bin/env bash
# Device call 1 of 2026-12-01 (second session): the examples at real size that
# had not run on the GPU (hf_model, train_gpt), the varlen benchmark with three
# batches, and the host-cost breakdown by section (profile_host.py).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/r"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/r/env.txt"
t0=$(date +%s)
( time timeout -k 5 ${TH:-200} python3 examples/hf_model.py --device cuda > "$OUT/r/example_hf_model_cuda.log" 2>&1; echo "hf_model rc=$?" >> "$OUT/r/example_hf_model_cuda.log" ) 2>> "$OUT/r/example_hf_model_cuda.log"
( time timeout -k 5 ${TG:-200} python3 examples/train_gpt.py --device cuda --out "$OUT/r" > "$OUT/r/example_train_gpt_cuda.log" 2>&1; echo "train_gpt rc=$?" >> "$OUT/r/example_train_gpt_cuda.log" ) 2>> "$OUT/r/example_train_gpt_cuda.log"
( timeout -k 5 ${TV:-100} python3 benchmarks/bench_varlen.py --batches 3 --out "$OUT/r" > "$OUT/r/bench_varlen.log" 2>&1; echo "varlen rc=$?" >> "$OUT/r/bench_varlen.log" )
( timeout -k 5 ${TP:-60} python3 benchmarks/profile_host.py --out "$OUT/r" > "$OUT/r/profile_host.log" 2>&1; echo "profile rc=$?" >> "$OUT/r/profile_host.log" )
echo "total $(( $(date +%s) - t0 )) s"
rm -f "$OUT"/r/*.pt
tar -C "$OUT" -czf "$OUT/results.tgz" r
grep -h "rc=\|real" "$OUT"/r/*.log
tail -12 "$OUT/r/example_hf_model_cuda.log"; tail -12 "$OUT/r/example_train_gpt_cuda.log"
cat "$OUT/r/bench_varlen.md" 2>/dev/null | sed -n '/short:begin/,/short:end/p'
tail -40 "$OUT/r/profile_host.log"

#!/usr/bin/env bash
# Device call: GPU tests of the kernels the variant-config / mask-load change
# touches, the backward profile (GQA dK/dV with a compile-time head count),
# and offline tuning of the variant keys merged into the committed table.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/env.txt"
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$OUT/env.txt"
cp flashattn_triton/kernels/configs/sm90.json "$OUT/sm90_before.json"
( timeout -k 5 ${TP:-90} python3 benchmarks/profile_bwd.py --out "$OUT" --sweep "64,128,8,3;64,128,8,2;32,128,8,2" > "$OUT/profile_bwd.log" 2>&1; echo "profile rc=$?" >> "$OUT/profile_bwd.log" )
( FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 ${TT:-150} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 12 -m "not gpu" \
  tests/test_attention.py tests/test_variants.py tests/test_varlen.py tests/test_configs.py > "$OUT/tests.log" 2>&1; echo "tests rc=$?" >> "$OUT/tests.log" )
T=flashattn_triton/kernels/configs/sm90.json
( timeout -k 5 ${TU1:-140} python3 benchmarks/tune.py --out $T --merge --variants mask --causal full --head-dims 128 --seqlens 4096,16384 --log "$OUT/tune_mask.json" > "$OUT/tune.log" 2>&1;
  echo "tune mask rc=$?" >> "$OUT/tune.log"
  timeout -k 5 ${TU2:-190} python3 benchmarks/tune.py --out $T --merge --variants window,softcap,alibi --causal causal --head-dims 128 --seqlens 4096,16384 --log "$OUT/tune_causal.json" >> "$OUT/tune.log" 2>&1;
  echo "tune causal rc=$?" >> "$OUT/tune.log" )
cp $T "$OUT/sm90.json"
tail -4 "$OUT/tests.log"; grep -v Warn "$OUT/profile_bwd.log" | cut -c1-250 | tail -20; tail -30 "$OUT/tune.log"

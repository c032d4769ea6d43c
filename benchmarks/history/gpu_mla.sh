#!/usr/bin/env bash
# MLA head dims (d = 192, dv = 128) on one H200, about 4 minutes:
#   1. tune.py for the "d256v128" keys (FWD, BWD_DKDV, BWD_DQ; causal and
#      full; N = 4096) merged into a copy of the committed table, $OUT/sm90.json;
#   2. that table copied over kernels/configs/sm90.json on this machine;
#   3. bench_variants.py's "d=192, dv=128" row (the known baseline with the
#      d256 entries: 0.664 ms fwd = 0.48x SDPA, 2.525 ms bwd = 0.46x);
#   4. the GPU tests of d != dv (test_variants.py) and of the config table
#      (test_configs.py: the new key tests, the two candidates added for
#      these head dims).
# Results under $OUT (default /tmp/out): sm90.json (to commit if the row
# improved), tune.log / tune_mla.json (every candidate's time), variants/,
# tests.log, tests_configs.log.  BEFORE=1 first times the row with the committed table (+40 s).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
TABLE=flashattn_triton/kernels/configs/sm90.json
ROW="d=192"  # bench_variants --only splits at commas: the row "d=192, dv=128"

if [ "${BEFORE:-0}" = 1 ]; then
  timeout -k 5 60 python3 benchmarks/bench_variants.py --only "$ROW" --out "$OUT/variants_before" \
    > "$OUT/variants_before.log" 2>&1; echo "rc=$?" >> "$OUT/variants_before.log"; el "bench before"
  sed -n '/| variant/,/^$/p' "$OUT/variants_before/bench_variants.md" 2>/dev/null | cut -c1-200
fi

cp "$TABLE" "$OUT/sm90.json"
timeout -k 5 "${T_TUNE:-130}" python3 benchmarks/tune.py --head-dims 192:128 --seqlens 4096 \
  --kernels FWD,BWD_DKDV,BWD_DQ --causal both --jobs "${JOBS:-14}" --merge \
  --out "$OUT/sm90.json" --log "$OUT/tune_mla.json" > "$OUT/tune.log" 2>&1
echo "rc=$?" >> "$OUT/tune.log"; el tune
grep -E "best|compiled|wrote|rc=" "$OUT/tune.log" | cut -c1-200
if grep -q "d256v128" "$OUT/sm90.json"; then
  cp "$OUT/sm90.json" "$TABLE"
else
  echo "no d256v128 entries were tuned: the committed table stays"
fi

timeout -k 5 "${T_BENCH:-50}" python3 benchmarks/bench_variants.py --only "$ROW" --out "$OUT/variants" \
  > "$OUT/variants.log" 2>&1
echo "rc=$?" >> "$OUT/variants.log"; el bench
sed -n '/| variant/,/^$/p' "$OUT/variants/bench_variants.md" 2>/dev/null | cut -c1-200
tail -2 "$OUT/variants.log"

# d != dv in test_variants.py (the tuned table in place), and beside it the
# config-table tests with the two candidates added for these head dims
T=tests/test_configs.py
C=$T::test_every_candidate_config
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 "${T_TESTS:-70}" python3 -m pytest -q -p no:cacheprovider \
  -rfE --tb=short -n 4 -k "head_dims or dv or everything" tests/test_variants.py > "$OUT/tests.log" 2>&1 &
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 "${T_TESTS:-70}" python3 -m pytest -q -p no:cacheprovider \
  -rfE --tb=short -n 2 "$T::test_table_entries_are_candidates" "$T::test_split_head_dim_lookup_falls_back_to_the_wider_key" \
  "$T::test_launcher_keys_the_config_by_both_head_dims" "$T::test_kernels_pass_both_padded_head_dims" \
  "$C[BWD_DKDV-BLOCK_M=64,BLOCK_N=64,num_warps=8,num_stages=3]" \
  "$C[BWD_DQ-BLOCK_M=128,BLOCK_N=64,num_warps=8,num_stages=2]" > "$OUT/tests_configs.log" 2>&1
echo "rc=$?" >> "$OUT/tests_configs.log"
wait $!; echo "rc=$?" >> "$OUT/tests.log"; el tests
tail -3 "$OUT/tests.log" "$OUT/tests_configs.log"

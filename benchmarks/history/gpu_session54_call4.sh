# Session 54 call 4 (H200 wanted): the Transformers position_ids packing tests on the GPU, then the tables of
# call 3 (variants, paged varlen, decode) on the issues' card.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests packed 90 -n 4 tests/test_integrations.py -k "packed or pack_documents"
mkdir -p "$R/bench"
timeout -k 5 200 python3 benchmarks/bench_variants.py --skip-sweep --rep 30 --out "$R/bench" > "$R/bench_variants.log" 2>&1
echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
sed -n '/^| variant/,/^$/p' "$R/bench/bench_variants.md" 2>/dev/null | head -24 | cut -c1-160
timeout -k 5 80 python3 benchmarks/bench_varlen.py --batches 2 --out "$R/varlen" > "$R/bench_varlen.log" 2>&1
echo "rc=$?" >> "$R/bench_varlen.log"; el bench_varlen; grep -E "ours varlen|paged|flex" "$R/bench_varlen.log" | cut -c1-120
timeout -k 5 130 python3 benchmarks/bench_decode.py --out "$R/decode" --max-seconds 90 > "$R/bench_decode.log" 2>&1
echo "rc=$?" >> "$R/bench_decode.log"; el bench_decode
sed -n '/^| B |/,/^$/p' "$R/decode/bench_decode.md" 2>/dev/null | head -30 | cut -c1-200
tar -C "$OUT" -czf "$OUT/results.tgz" r

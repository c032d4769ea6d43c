# Session 54 call 3 (on an H200 if one starts): the variant table (chunked row, float-bias / d = 512 fused peers),
# bench_varlen's paged rows, then the decode table as far as the time goes.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
mkdir -p "$R/bench"
timeout -k 5 270 python3 benchmarks/bench_variants.py --skip-sweep --rep 30 --out "$R/bench" > "$R/bench_variants.log" 2>&1
echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
sed -n '/^| variant/,/^$/p' "$R/bench/bench_variants.md" 2>/dev/null | head -24 | cut -c1-220
timeout -k 5 130 python3 benchmarks/bench_varlen.py --batches 2 --out "$R/varlen" > "$R/bench_varlen.log" 2>&1
echo "rc=$?" >> "$R/bench_varlen.log"; el bench_varlen; tail -14 "$R/bench_varlen.log" | cut -c1-200
timeout -k 5 170 python3 benchmarks/bench_decode.py --out "$R/decode" --max-seconds 120 > "$R/bench_decode.log" 2>&1
echo "rc=$?" >> "$R/bench_decode.log"; el bench_decode
sed -n '/^| B |/,/^$/p' "$R/decode/bench_decode.md" 2>/dev/null | head -30 | cut -c1-200
tar -C "$OUT" -czf "$OUT/results.tgz" r

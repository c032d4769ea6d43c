# Session 54 call 5 (warm H100): the fixed packed test; the chunked and window rows twice (Flex read 0.389 / 0.141 ms fwd in calls 3 / 4).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests packed 60 -n 4 tests/test_integrations.py -k "packed or pack_documents"
for i in 1 2; do mkdir -p "$R/v$i"; timeout -k 5 70 python3 benchmarks/bench_variants.py --only "chunked,window" --rep 30 --out "$R/v$i" > "$R/v$i.log" 2>&1
echo "rc=$?" >> "$R/v$i.log"; el v$i; sed -n '/^| variant/,/^$/p' "$R/v$i/bench_variants.md" | cut -c1-160; done
tar -C "$OUT" -czf "$OUT/results.tgz" r

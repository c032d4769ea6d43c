# Session 54 call 1: paged read-ahead (77acb49) GPU tests + the session-53 new groups whole, then bench_varlen (paged rows), self-check.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests session53_new 300 -n 8 tests/test_varlen_paged.py tests/test_chunk.py tests/test_kvcache_chunk.py \
  tests/test_integrations.py
timeout -k 5 150 python3 benchmarks/bench_varlen.py --batches 2 --out "$R/varlen" > "$R/bench_varlen.log" 2>&1
echo "rc=$?" >> "$R/bench_varlen.log"; el bench_varlen; tail -14 "$R/bench_varlen.log" | cut -c1-200
timeout -k 5 100 python3 -m flashattn_triton check --no-bench > "$R/check.log" 2>&1; echo "rc=$?" >> "$R/check.log"; tail -3 "$R/check.log"
tar -C "$OUT" -czf "$OUT/results.tgz" r

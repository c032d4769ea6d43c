#!/usr/bin/env bash
# Session 57 call 3: the chunked row's host / device probe, then the tables session 56 queued (history/gpu_session56_call5.sh without its test
# file, which call 2 ran): on an H200 bench_varlen at d = 128 and 64 with the defaults (the packed Hopper
# forward and backward), the variant table and the decode table.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
h200=0; grep -q H200 "$R/env.txt" && h200=1
# the chunked row with a shorter last chunk (call 2: N 5000 forward 0.264 ms, N 5120 0.108): host or device?
timeout -k 5 120 python3 benchmarks/history/chunked_host_probe.py > "$R/chunked_probe.log" 2>&1
echo "rc=$?" >> "$R/chunked_probe.log"; el chunked_probe; grep -e '^N ' -e '^rc' "$R/chunked_probe.log"
gpu_tests chunk 150 -n 4 tests/test_chunk.py -k gpu
timeout -k 5 150 python3 benchmarks/bench_variants.py --only chunked --shapes "2,5000,16,4,128,1;2,5120,16,4,128,1" \
  --out "$R/chunked" > "$R/chunked.log" 2>&1
echo "rc=$?" >> "$R/chunked.log"; el chunked
grep '^| chunked' "$R/chunked/bench_variants.md" | head -2
since() { echo $(( $(date +%s) - t0 )); }
# (the tables only while the call's time allows: session 57 had about 500 s of device time left)
if [ $h200 = 1 ] && [ "$(since)" -lt 250 ]; then
  timeout -k 5 200 python3 benchmarks/bench_variants.py --skip-sweep --rep 30 --out "$R/bench" > "$R/bench_variants.log" 2>&1
  echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
fi
if [ $h200 = 1 ] && [ "$(since)" -lt 330 ]; then
  timeout -k 5 130 python3 benchmarks/bench_decode.py --out "$R/decode" --max-seconds 90 > "$R/bench_decode.log" 2>&1
  echo "rc=$?" >> "$R/bench_decode.log"; el bench_decode
fi
{ [ $h200 = 1 ] && [ "$(since)" -lt 360 ]; } && varlen_tables 128 64  # (session 56 call 5 ran them on an H100)
tar -C "$OUT" -czf "$OUT/results.tgz" r

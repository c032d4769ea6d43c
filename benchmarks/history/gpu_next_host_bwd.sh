#!/usr/bin/env bash
# Session 29: the unplanned backward's host time (benchmarks/bench_sinks_bwd.py --host-probe: a sync check
# and cProfile of the variant table's causal GQA backward, plain / plans off / sinks / dropout),
# then profile_host.py's real-GPU sections of forward + backward at its tiny shape (Hopper tier).
# PORTABLE=1 adds the forced portable tier's GPU tests of test_attention / test_backward. One H200,
# about 2 minutes (+4 with PORTABLE=1). A record, no decision.
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
timeout -k 5 ${T_PROBE:-150} python3 benchmarks/bench_sinks_bwd.py --host-probe --out "$R" > "$R/host_bwd_probe.log" 2>&1
echo "rc=$?" >> "$R/host_bwd_probe.log"; el host_bwd_probe
grep -E "^==|sync check|^    |function calls" "$R/host_bwd_probe.log" | cut -c1-200 | head -60
timeout -k 5 ${T_HOST:-150} python3 benchmarks/profile_host.py --backward --backends hopper --calls 300 --repeats 3 \
  --out "$R/profile_host" > "$R/profile_host.log" 2>&1
echo "rc=$?" >> "$R/profile_host.log"; el profile_host
grep -E "^###|rc=" "$R/profile_host.log" | head -20
# the forced portable tier on the GPU (PORTABLE=1; T_PORT seconds)
if [ "${PORTABLE:-0}" = 1 ]; then
  FLASHATTN_TRITON_BACKEND=portable gpu_tests tests_portable ${T_PORT:-240} -n 8 -m "not gpu" tests/test_attention.py tests/test_backward.py
fi
tar -C "$OUT" -czf "$OUT/results.tgz" r

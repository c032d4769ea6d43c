#!/usr/bin/env bash
# (Done in session 54 on an H100, results/h100/session54/, but for the H200 tables: gpu_next_session54.sh.)
# Queued by session 50 (H100 only there, like sessions 47-49): what an H200 owes the issues.
#  000. Session 53 (one H100 call, one H200 call of 340 s, results/h100|h200/session53/): the
#     chunk / paged-varlen / integration tests ran 264 of 283 on the H200 before a 150 s limit
#     (no failure) and the forced Hopper tier 182 of ~207 (no failure): run both whole (they
#     compile everything on a cold machine: give them 300 s). The paged varlen forward
#     (flash_attn_varlen_func(block_table=)) read 0.76x the packed call on an H100
#     (bench_varlen); after that run (77acb49, no GPU since) each loop reads the next tile's page
#     numbers a step ahead (compile: the packed build's 128 KiB of staging instead of 96): its
#     GPU tests (test_varlen_paged.py, first group) and its time (bench_varlen's paged rows).
#  00. Session 52 (no device started: refused from 23:24 to 01:00 UTC): chunked attention
#     (attention_chunk: MASK_CHUNK in the shared helpers of the portable forward / backward,
#     never the Hopper tier) has run in the interpreter only: tests/test_chunk.py and the
#     Transformers Llama 4 tests on the GPU first (GPU integer division and the tile ranges
#     compiled), then the variant table's new "chunked 1024" row against Flex's block mask.
#  0. Session 51 (no GPU lent): bench_variants.py's float-bias and d = 512 SDPA peers with K/V repeated
#     (they ran SDPA's math path before), gradients reset before each timed backward, peer_kernels
#     (read which SDPA kernels those two peers ran: a fused one, or the math path again); the KV
#     cache's append checks and read-only op kvcache_attn (its CUDA-graph tests are gpu-marked),
#     create_graph gradients by detach, the one-launch backward without its by-kind order, the
#     self-check's interpreter probe, the removals of FUSED_DQ / decode `wide` (0378f21) and
#     the test-rigor commit's NaN-poisoned scratch (fastlaunch.POISON) under the GPU tests.
#  1. The variant table at today's defaults (issue 10's benchmark; last on an H200 in session 43:
#     d = 192 backward 0.87x SDPA; session 50 on an H100: 0.83x) and the decode table (issue 11;
#     last in session 33) after the host changes of sessions 47-50 and the float-bias LSE_LO builds.
#     On an H100, step 1 is a record only (the issues' bars are the H200's).
#  2. Session 50's host changes after its call 3 (368e58d), which no GPU ran (the device would not
#     start for its last call): nn.MultiheadAttention's is_causal + key_padding_mask through the
#     kernels' causal mask and a (B, 1, 1, S) padding mask (33ec4fa), the import-time switches'
#     helpers (bebff35, 00efcf1: env_switch_or, env_choice, check_softcap_range, parsed when
#     kernels/bwd.py and kernels/hopper/bwd.py are imported), test_cli's results-file tests (skip
#     without benchmarks/results).
# Rule: the tests pass (a failure is a bug to fix); the tables are records (commit them with the
# environment beside the previous H200 ones: results/h200/session53/).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests session53_new 300 -n 8 tests/test_chunk.py tests/test_kvcache_chunk.py tests/test_varlen_paged.py \
  tests/test_integrations.py
( export FLASHATTN_TRITON_BACKEND=hopper; gpu_tests hopper_forced 200 -n 8 tests/test_attention.py )
gpu_tests session50_host 300 -n 8 -m "not gpu" tests/test_nn.py tests/test_dq_convert.py tests/test_configs.py \
  tests/test_cli.py tests/test_backward.py
python3 -m flashattn_triton check --no-bench > "$R/check.log" 2>&1; echo "rc=$?" >> "$R/check.log"; tail -3 "$R/check.log"
mkdir -p "$R/bench"
T_BENCH=${T_BENCH:-240} timeout -k 5 ${T_BENCH:-240} python3 benchmarks/bench_variants.py --skip-sweep --rep 30 \
  --out "$R/bench" > "$R/bench_variants.log" 2>&1
echo "rc=$?" >> "$R/bench_variants.log"; el bench_variants
sed -n '/^| variant/,/^$/p' "$R/bench/bench_variants.md" 2>/dev/null | head -14
timeout -k 5 ${T_DECODE:-300} python3 benchmarks/bench_decode.py --out "$R/decode" --max-seconds ${DECODE_S:-270} \
  > "$R/bench_decode.log" 2>&1
echo "rc=$?" >> "$R/bench_decode.log"; el bench_decode
sed -n '/^| B |/,/^$/p' "$R/decode/bench_decode.md" 2>/dev/null | head -30
timeout -k 5 150 python3 benchmarks/bench_varlen.py --batches 2 --out "$R/varlen" > "$R/bench_varlen.log" 2>&1
echo "rc=$?" >> "$R/bench_varlen.log"; el bench_varlen; tail -14 "$R/bench_varlen.log" | cut -c1-200
tar -C "$OUT" -czf "$OUT/results.tgz" r

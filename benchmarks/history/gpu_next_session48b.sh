#!/usr/bin/env bash
# Session 48's second GPU run (one call, about 5 minutes): this session's changes.
#  1. The compensated LSE of float-bias calls (LSE_LO: new kernel builds of the
#     forward, the three backward forms and the sinks gradient): the float-mask
#     tests, the huge finite mask rows first.
#  2. The host-side fixes: Transformers mask builder / refusals (transformers
#     5.17 here), nn modules, plans with slopes that require grad, jit.trace,
#     the decode counters after an interrupted launch.
#  3. If time is left: the float-bias row of the variant table, this tree and
#     the tree before the compensated LSE ($OLD, carried as .devold), one
#     after the other (the LSE_LO builds spill more: 660 -> 1016 B in the
#     causal dK/dV build at d = 128, compile_check).
# Rule: every test passes (a failure is a bug to fix, not a result).
source "$(dirname "${BASH_SOURCE[0]}")/../gpu_lib.sh"
gpu_tests lse_lo 150 -n 8 tests/test_variants.py \
  -k "huge_finite or float_bias or sdpa_mask or fully_masked or nan_in_float or mask_gqa or sinks or opcheck or compile_fullgraph"
gpu_tests host 120 -n 8 tests/test_integrations.py tests/test_nn.py tests/test_plans.py tests/test_ops.py tests/test_kvcache.py \
  -k "not gpu and (test_integrations or test_nn or slopes_that_require or jit_trace or interrupted_launch)"
OLD="${OLD:-}"
for tree in . $OLD; do
  [ -d "$tree" ] || continue
  ( cd "$tree" && PYTHONPATH="$PWD" timeout -k 5 60 python3 benchmarks/bench_variants.py --only "float bias,+ grad" \
      --skip-sweep --no-peer --out "$R/bench_$(basename "$tree")" > "$R/bench_$(basename "$tree").log" 2>&1 )
  el "bench $tree"; tail -6 "$R/bench_$(basename "$tree").log" | cut -c1-200
done

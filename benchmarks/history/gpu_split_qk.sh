#!/usr/bin/env bash
# Split Q K^T (kernels/fwd.py SPLIT_QK, kernels/bwd.py SPLIT_QK) on one H200,
# about 4 minutes (PARTS="tests fwd bwd" by default; e.g. PARTS=bwd for one):
#   1. GPU tests of the split and of odd head dims (test_attention.py
#      split_qk / head_dims, test_backward.py split_qk, test_variants.py
#      head_dims / everything);
#   2. forward time with the split on and off, same process, bf16, B=2,
#      Hq=16, Hkv=4, N=4096, d = 96, 160, 192/dv=128 (and 112 as a control:
#      portable, never split), causal and full, with the table's config; plus the
#      largest |out_on - out_off| (float32 sums in another order: ~1 ulp of bf16);
#   3. backward time (autograd.grad of a recorded forward) with the backward's
#      split on and off (bwd.SPLIT_QK, SPLIT_QK_MIN_PAD = 0 so that d=96 is
#      timed too; the forward keeps its default), same shapes, d = 192/128
#      causal and full, 160 and 96 causal; plus the largest relative
#      |grad_on - grad_off| of dq, dk, dv.
# Results under $OUT (default /tmp/out): tests.log, split_qk.log, split_qk.json,
# split_qk_bwd.log, split_qk_bwd.json.
# Look for: tests rc=0; "speedup" (off / on) > 1 for the split rows, ~1.00
# for d=112.  Below 1: leave fwd.SPLIT_QK = False and report.  Backward: by
# default it splits d_pad >= 256 only (d = 160, 192/128): speedup >= 1 there
# keeps that; d=96 clearly > 1 -> lower bwd.SPLIT_QK_MIN_PAD to 128; 160 or
# 192 below 1 -> bwd.SPLIT_QK = False.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

PARTS="${PARTS:-tests fwd bwd}"
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if part tests; then
FLASHATTN_TRITON_TEST_DEVICE=cuda timeout -k 5 "${T_TESTS:-100}" python3 -m pytest -q -p no:cacheprovider \
  -rfE --tb=short -n 4 tests/test_attention.py::test_split_qk_forward tests/test_attention.py::test_head_dims \
  tests/test_backward.py tests/test_variants.py -k "split_qk or head_dims or everything" > "$OUT/tests.log" 2>&1
echo "rc=$?" >> "$OUT/tests.log"; el tests; tail -3 "$OUT/tests.log"
fi

if part fwd; then
timeout -k 5 "${T_BENCH:-90}" python3 - "$OUT/split_qk.json" > "$OUT/split_qk.log" 2>&1 <<'EOF'
import json, sys
import torch
from triton.testing import do_bench
import flashattn_triton as fat
from flashattn_triton import ops
from flashattn_triton.kernels import fwd

ops.PLANS_ENABLED = False  # a recorded replay would keep the first binary
b, hq, hkv, n = 2, 16, 4, 4096
rows = []
for d, dv in ((96, 96), (160, 160), (192, 128), (112, 112)):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, n, hq, d, device="cuda", generator=g).bfloat16()
    k = torch.randn(b, n, hkv, d, device="cuda", generator=g).bfloat16()
    v = torch.randn(b, n, hkv, dv, device="cuda", generator=g).bfloat16()
    for causal in (False, True):
        res = {}
        for split in (False, True):
            fwd.SPLIT_QK = split
            res[split] = (fat.flash_attn_func(q, k, v, causal=causal).float(),
                          do_bench(lambda: fat.flash_attn_func(q, k, v, causal=causal), warmup=25, rep=200))
        flops = 2 * b * hq * n * n * (d + dv) / (2 if causal else 1)
        row = dict(d=d, dv=dv, causal=causal, ms_off=res[False][1], ms_on=res[True][1],
                   tflops_on=flops / res[True][1] * 1e-9, speedup=res[False][1] / res[True][1],
                   split=fwd.split_qk(d, 1 << (d - 1).bit_length()),
                   max_diff=(res[True][0] - res[False][0]).abs().max().item())
        rows.append(row)
        print(f"d={d:3d} dv={dv:3d} causal={causal!s:5} split={row['split']!s:5} off {row['ms_off']:.3f} ms  "
              f"on {row['ms_on']:.3f} ms  speedup {row['speedup']:.3f}  ({row['tflops_on']:.0f} TFLOP/s)  "
              f"max|on-off| {row['max_diff']:.2e}", flush=True)
fwd.SPLIT_QK = True
json.dump(dict(gpu=torch.cuda.get_device_name(), rows=rows), open(sys.argv[1], "w"), indent=1)
EOF
echo "rc=$?" >> "$OUT/split_qk.log"; el bench; cat "$OUT/split_qk.log"
fi

if part bwd; then
timeout -k 5 "${T_BWD:-80}" python3 - "$OUT/split_qk_bwd.json" > "$OUT/split_qk_bwd.log" 2>&1 <<'EOF'
import json, sys
import torch
from triton.testing import do_bench
import flashattn_triton as fat
from flashattn_triton import ops
from flashattn_triton.kernels import bwd

ops.PLANS_ENABLED = False
bwd.SPLIT_QK_MIN_PAD = 0  # time d=96 too (not split by default)
b, hq, hkv, n = 2, 16, 4, 4096
rows = []
for d, dv, causal in ((192, 128, True), (192, 128, False), (160, 160, True), (96, 96, True)):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, n, hq, d, device="cuda", generator=g).bfloat16().requires_grad_()
    k = torch.randn(b, n, hkv, d, device="cuda", generator=g).bfloat16().requires_grad_()
    v = torch.randn(b, n, hkv, dv, device="cuda", generator=g).bfloat16().requires_grad_()
    out = fat.flash_attn_func(q, k, v, causal=causal)
    do = torch.randn(out.shape, device="cuda", generator=g).bfloat16()
    res = {}
    for split in (False, True):
        bwd.SPLIT_QK = split

        def step():
            return torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
        res[split] = ([t.float() for t in step()], do_bench(step, warmup=25, rep=150))
    flops = 2 * b * hq * n * n * (3 * d + 2 * dv) / (2 if causal else 1)  # Q K^T, dO V^T, dV, dK, dQ
    diff = {name: ((on - off).abs().max() / off.abs().max()).item()
            for name, on, off in zip(("dq", "dk", "dv"), res[True][0], res[False][0])}
    row = dict(d=d, dv=dv, causal=causal, ms_off=res[False][1], ms_on=res[True][1],
               tflops_on=flops / res[True][1] * 1e-9, speedup=res[False][1] / res[True][1],
               default_split=d > 128, max_rel_diff=diff)
    rows.append(row)
    print(f"bwd d={d:3d} dv={dv:3d} causal={causal!s:5} default_split={row['default_split']!s:5} "
          f"off {row['ms_off']:.3f} ms  on {row['ms_on']:.3f} ms  speedup {row['speedup']:.3f}  "
          f"({row['tflops_on']:.0f} TFLOP/s)  max rel |on-off| "
          + " ".join(f"{k} {x:.1e}" for k, x in diff.items()), flush=True)
    json.dump(dict(gpu=torch.cuda.get_device_name(), rows=rows), open(sys.argv[1], "w"), indent=1)
bwd.SPLIT_QK, bwd.SPLIT_QK_MIN_PAD = True, 256
EOF
echo "rc=$?" >> "$OUT/split_qk_bwd.log"; el bwd; cat "$OUT/split_qk_bwd.log"
fi

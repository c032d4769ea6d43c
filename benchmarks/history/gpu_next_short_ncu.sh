#!/usr/bin/env bash
# Nsight Compute of the short backward row furthest below FlexAttention (session 19 sweep:
# bf16 d = 128 N = 512 non-causal, B = 32, H = 16; ours 0.86x Flex): why Flex's one backward
# kernel (triton_tem_fused_flex_attention_backward_*, the 7 tile-GEMMs of a score tile in one
# program: ~452 TFLOP/s of tile-GEMMs in session 19 call 5's profile) outruns our dK/dV kernel
# (4 of the 7, ~374) and our dQ kernel (the other 3, ~417). A diagnostic: no decision rule.
# One H200 (ncu must read the counters), about 3-4 minutes: gpu_ncu_short_rows.sh on that one
# row (ROWS="bwd:128:512:full") with providers ours (forced onto the portable backward,
# FLASHATTN_TRITON_HOPPER_BWD=0: _bwd_preprocess, _bwd_dkdv, _bwd_dq), flex (torch.compile'd
# flex_attention, as the sweep runs it; Inductor compiles in-process,
# TORCHINDUCTOR_COMPILE_THREADS=1, into a fresh cache dir) and cudnn (the fastest at this row,
# for reference), each call's every kernel under the sections and metrics of that script
# (duration, SM throughput, tensor pipe, IPC, achieved / theoretical occupancy, registers,
# shared memory per block, block and grid, waves per SM, issue slots busy, eligible cycles,
# warp stall reasons, L2 hit rate, DRAM bytes); T_ROW 170 s, BUDGET 200 s. The sum check uses
# session 19 call 4's sweep (bench_attention.json from call4_flex_bf16.tgz) with Flex as the
# peer (ncu_summary.py --peer flex).
# Then: Flex's generated backward kernel (Inductor's module with its BLOCK_M1 / N1 / M2 / N2,
# num_warps, num_stages) and the Triton cache's metadata (.json: num_warps, num_stages, shared)
# and TTGIR of Flex's and our backward kernels go into flex_code.tgz; printed: Flex's launch
# configuration, each kernel's warp_group_dot (wgmma) count, and one line per profiled kernel
# with its tile-GEMM TFLOP/s (GEMMs per score tile: dK/dV 4, dQ 3, Flex 7; 2*B*H*N^2*d each).
# $OUT: results.tgz, reps.tgz (parts if large), summary.md, verdict.txt (gpu_ncu_short_rows.sh's),
# flex_code.tgz, kernels.txt.
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
SWEEP=/tmp/s19_sweep; mkdir -p "$SWEEP"
tar -xzf benchmarks/results/h200/session19/call4_flex_bf16.tgz -C "$SWEEP" r/bench/bench_attention.json 2>/dev/null
export FLASHATTN_TRITON_HOPPER_BWD=0 TORCHINDUCTOR_COMPILE_THREADS=1 TORCHINDUCTOR_CACHE_DIR=/tmp/flex_ncu_inductor \
  TORCH_LOGS=output_code  # (the generated modules into the row's log too: a second place to read Flex's config from)
rm -rf "$TORCHINDUCTOR_CACHE_DIR"
ROWS="bwd:128:512:full" EXTRA_ROWS="" PROVIDERS="ours,flex,cudnn" PEER=flex T_ROW=${T_ROW:-170} BUDGET=${BUDGET:-200} \
  BENCH="$SWEEP/r/bench/bench_attention.json" OUT="$OUT" bash benchmarks/gpu_ncu_short_rows.sh

# Flex's generated code and the Triton cache entries of the backward kernels
C=/tmp/flex_code; rm -rf "$C"; mkdir -p "$C/inductor" "$C/triton"
grep -rl --include='*.py' "def triton_tem_fused_flex_attention_backward" "$TORCHINDUCTOR_CACHE_DIR" 2>/dev/null \
  | head -4 | while read -r f; do cp "$f" "$C/inductor/"; done
for cache in "$TORCHINDUCTOR_CACHE_DIR" "${TRITON_CACHE_DIR:-$HOME/.triton/cache}"; do
  find "$cache" -type f \( -name '*flex_attention_backward*.json' -o -name '*flex_attention_backward*.ttgir' \
    -o -name '_bwd_dkdv.json' -o -name '_bwd_dkdv.ttgir' -o -name '_bwd_dq.json' -o -name '_bwd_dq.ttgir' \
    -o -name '_bwd_preprocess.json' \) -printf '%T@ %p\n' 2>/dev/null
done | sort -rn | head -40 | while read -r _ f; do
  d="$C/triton/$(basename "$(dirname "$f")")"; mkdir -p "$d"; cp "$f" "$d/"
done
tar -C /tmp -czf "$OUT/flex_code.tgz" flex_code
python3 - "$OUT/results.tgz" "$C" <<'PY' 2>&1 | tee "$OUT/kernels.txt"
import glob, json, os, re, sys, tarfile, tempfile
sys.path.insert(0, "benchmarks")
import ncu_summary as S
code = sys.argv[2]
tmp = tempfile.mkdtemp()
try:
    with tarfile.open(sys.argv[1]) as t:
        t.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
except (OSError, tarfile.TarError) as exc:
    print(f"no results.tgz: {exc}")
print("== Flex's backward kernel (Inductor's generated module; else the row's log, TORCH_LOGS=output_code)")
sources = sorted(glob.glob(f"{code}/inductor/*.py")) or sorted(glob.glob(f"{tmp}/r/bwd_*512*.log"))
for f in sources:
    text = open(f, errors="replace").read()
    at = text.find("def triton_tem_fused_flex_attention_backward")
    if at < 0:
        continue
    end = text.find("async_compile.", at)  # (a wrapper module: the next kernel's source)
    text = text[max(0, text.rfind("@triton_heuristics.template", 0, at)):None if end < 0 else end]
    m = re.search(r"def (triton_tem_fused_flex_attention_backward\w*)\(", text)
    wanted = re.findall(r"^\s*((?:num_stages|num_warps)=\d+|(?:BLOCK_[MN][12]|SPARSE_Q_BLOCK_SIZE|SPARSE_KV_BLOCK_SIZE"
                        r"|PRESCALE_QK|BLOCKS_ARE_CONTIGUOUS|IS_DIVISIBLE|SM_SCALE|GQA_SHARED_HEADS|QK_HEAD_DIM|"
                        r"V_HEAD_DIM)\s*:\s*tl\.constexpr\s*=\s*\S+)", text, re.M)
    print(f"{os.path.basename(f)}: {m.group(1) if m else '?'}: " + ", ".join(dict.fromkeys(w.strip() for w in wanted)))
if not sources:
    print("no generated module found")
print("== Triton cache (the newest 40 files; other specializations too): metadata, wgmma ops in the TTGIR")
for f in sorted(glob.glob(f"{code}/triton/*/*.json")):
    try:
        meta = json.load(open(f))
    except ValueError:
        continue
    ttgir = f[:-5] + ".ttgir"
    ir = open(ttgir).read() if os.path.exists(ttgir) else None
    dots = "-" if ir is None else f"{ir.count('warp_group_dot ')} (tt.dot {ir.count('tt.dot ')})"
    print(f"{meta.get('name', os.path.basename(f))}: num_warps {meta.get('num_warps')}, num_stages "
          f"{meta.get('num_stages')}, shared {meta.get('shared')} B, warp_group_dot {dots}  "
          f"({os.path.basename(os.path.dirname(f))[:12]})")
print("== per kernel (ncu)")
rows = S.load_rows([f"{tmp}/r"])
row = rows.get("bwd_bf16_d128_512_full")
if row is None:
    sys.exit("row bwd_bf16_d128_512_full not profiled")
gemm = 2 * 32 * 16 * 512 * 512 * 128
per_tile = {"_bwd_dkdv": 4, "_bwd_dq": 3, "triton_tem_fused_flex_attention_backward": 7}
for p in S.ordered(row.calls):
    for k in row.calls[p]:
        us = k.num(*S.DURATION)
        n = next((v for key, v in per_tile.items() if k.name.startswith(key)), None)
        tf = f"{n * gemm / us / 1e6:.0f} TFLOP/s ({n} GEMMs)" if n and us else "-"
        cells = S.launch_cells(S.PROVIDER_NAMES.get(p, p), k)
        b = S.dram_bytes(k)
        print(f"{cells[0]:5} {cells[1][:44]:44} {S.fmt(us)} us, {tf}; SM {S.fmt(k.num(*S.SM_PCT))}%, tensor "
              f"{S.tensor_cell(k)}%, occ {cells[9]}% (theor. {cells[8]}), regs {cells[5]}, smem {cells[6]} KiB, "
              f"block {cells[2]}, grid {cells[3]}, waves {cells[4]}, issue busy {cells[10]}%, "
              f"stalls {S.stall_cell(k)}, DRAM {S.fmt(None if b is None else b / 1e6)} MB, L2 hit {S.fmt(k.num(*S.L2_HIT))}%")
PY
ls -la "$OUT"

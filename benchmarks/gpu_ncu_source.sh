#!/usr/bin/env bash
# Nsight Compute warp-state sampling per SASS instruction (the SourceCounters section) on the
# backward rows that trail cuDNN: where in the kernel the warps wait, not only why (the earlier
# profiles, gpu_ncu_short_rows.sh / gpu_ncu_variants.sh, gave the stall reasons of the whole
# kernel). One H200 on Firecracker, about 4-6 minutes.
#   Rows (ROWS; ncu_cases.py's, bf16): bwd d128 causal 2k, bwd d128 full 2k (issue 8's rows under
#   0.9x cuDNN), the d192 variant row (issue 10, B 2, N 4k, Hq 16 / Hkv 4, causal).
#   Each row is one process under ncu: ours and the peer warmed up, then one call each between
#   cudaProfilerStart / Stop; only the main backward kernels are profiled (KERNELS: ours
#   _attn_bwd_hopper, the peer's whose name holds "bprop", "fmha_cutlassB" or "flash_bwd", at most
#   LAUNCHES of them), sections SourceCounters and WarpStateStats, the Python sources imported.
#   Exports per row: <row>.sass.csv (page source, SASS, one line per instruction with its
#   samples), <row>.src.csv (the same with the source lines, where ncu resolves them),
#   <row>.txt (details page). benchmarks/ncu_source_summary.py then sums the samples by
#   instruction class (mbarrier waits, named-barrier syncs, wgmma waits, ...) and by source line.
#   A row decode:B:N profiles one decoding step instead (ncu_cases.py --case decode: B sequences,
#   one query token of Hq 32 / Hkv 8, d 128 against N cached keys), with KERNELS set to the
#   decoding kernels (session 61: KERNELS="regex:_decode_fwd|cudnn|flash_fwd_splitkv", ours, cuDNN's
#   main kernel and SDPA flash's; the filter reads a kernel's base name, so cuDNN's
#   lean_reduction_kernel needs its own pattern).
# PROVIDERS (numeric and decode rows; default ours,cudnn), KERNELS (the ncu -k filter) and NCU_EXTRA
# (more ncu options, e.g. "--warp-sampling-interval 0" for short kernels) may be set by a caller.
# No rule: a record for the next kernel change (docs/performance.md).
#
#     OUT=/tmp/out bash benchmarks/gpu_ncu_source.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
ROWS=${ROWS:-"bwd:128:2048:causal bwd:128:2048:full bwd:d192:4096:causal"}
KERNELS=${KERNELS:-"regex:_attn_bwd_hopper|bprop|fmha_cutlassB|flash_bwd"}
T_ROW=${T_ROW:-150}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
[ -x "$NCU" ] || { echo "ncu not found"; exit 1; }
"$NCU" --version | tail -1 | tee -a "$R/env.txt"
for r in $ROWS; do
  IFS=: read -r mode d n mask <<< "$r"
  case "$mode:$d" in
    decode:*) name="decode_b${d}_$((n / 1024))k"
              args=(--case decode --batch "$d" --n "$n" --providers "${PROVIDERS:-ours,cudnn}") ;;
    *:[0-9]*) name="${mode}_d${d}_$((n / 1024))k_${mask}"
            args=(--case "$mode" --d "$d" --n "$n" --providers "${PROVIDERS:-ours,cudnn}"); [ "$mask" = causal ] && args+=(--causal) ;;
    *) name="${mode}_variant_${d}_$((n / 1024))k"; args=(--case "$mode" --variant "$d" --n "$n" --providers ours,peer) ;;
  esac
  timeout -k 5 "$T_ROW" "$NCU" --clock-control none --target-processes all --profile-from-start off \
    -k "$KERNELS" --launch-count "${LAUNCHES:-4}" --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --import-source yes ${NCU_EXTRA:-} -o "$R/$name" -f \
    python3 benchmarks/ncu_cases.py "${args[@]}" --windows-json "$R/$name.windows.json" > "$R/$name.log" 2>&1
  echo "rc=$?" >> "$R/$name.log"
  el "$name: $(tail -1 "$R/$name.log"), $(grep -c '==PROF== Profiling' "$R/$name.log") kernels profiled"
  grep -E "==ERROR==|==WARNING==" "$R/$name.log" | head -3 | cut -c1-300
  [ -s "$R/$name.ncu-rep" ] || continue
  timeout 60 "$NCU" --import "$R/$name.ncu-rep" --page source --csv --print-source sass > "$R/$name.sass.csv" 2> "$R/$name.sass.err"
  timeout 60 "$NCU" --import "$R/$name.ncu-rep" --page source --csv --print-source cuda,sass > "$R/$name.src.csv" 2> "$R/$name.src.err"
  timeout 60 "$NCU" --import "$R/$name.ncu-rep" --page details > "$R/$name.txt" 2>&1
  ls -la "$R/$name".* | awk '{print $5, $9}'
done
python3 benchmarks/ncu_source_summary.py "$R" > "$R/summary.md" 2> "$R/summary.err"; head -120 "$R/summary.md"
tail -5 "$R/summary.err"
tar -C "$OUT" -czf "$OUT/results.tgz" --exclude='*.ncu-rep' r
(cd "$R" && ls *.ncu-rep >/dev/null 2>&1 && tar -czf "$OUT/reps.tgz" *.ncu-rep)
[ -f "$OUT/reps.tgz" ] && [ "$(stat -c %s "$OUT/reps.tgz")" -gt 40000000 ] && rm "$OUT/reps.tgz" && echo "reports too large"
el done

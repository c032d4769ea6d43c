#!/usr/bin/env python3
"""Measured HBM (DRAM) traffic of one attention forward: flashattn_triton against
standard three-kernel attention (S = q k^T * scale; P = softmax(S); O = P v), at the
FlashAttention paper's GPT-2 medium shape (N=1024, d=64, H=16; B=8 here), fp16.

The script re-runs itself under Nsight Compute, once per op:

    ncu --clock-control none --profile-from-start off --csv --print-units base \\
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \\
        python bench_io.py --worker ours|standard ...

The worker warms up (autotuning, cuBLAS handles) with the profiler off, then runs
--calls calls between cudaProfilerStart/Stop (each call also in an NVTX range), so
only those launches are profiled. The kernels of one call are summed. ncu flushes
the caches before each profiled kernel, so every kernel starts from a cold L2.

Where ncu is missing or fails, the script says so and falls back to a computed IO
model, labelled as such: standard = read Q, K + write S + read S + write P + read
P, V + write O; ours = read Q once, K and V once per query tile (Nq / BLOCK_M
times, i.e. no L2 reuse), write O and the fp32 log-sum-exp.
Writes bench_io.json and bench_io.md into --out.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402
from ncu_summary import details_rows  # noqa: E402

METRICS = "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"
WORKER_DONE = "BENCH_IO_WORKER_DONE"
# FlashAttention (Dao et al., 2022), Fig. 2 left: attention forward + backward of
# GPT-2 medium (N=1024, d=64, 16 heads, batch 64) on an A100.
PAPER = {"standard_gb": 40.3, "flash_gb": 4.4, "ratio": round(40.3 / 4.4, 1),
         "setting": "GPT-2 medium attention forward+backward (N=1024, d=64, 16 heads, batch 64), "
                    "A100, FlashAttention paper Fig. 2 (left)"}
BYTE_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
              "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30}
TIME_UNITS = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=C.DEFAULT_OUT, help="results folder (default: %(default)s)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", choices=C.DTYPE_NAMES, default="fp16")
    p.add_argument("--causal", action="store_true", help="causal attention (default: full)")
    p.add_argument("--block-m", type=int, default=128, help="query tile assumed by the IO model of ours")
    p.add_argument("--calls", type=int, default=3, help="profiled calls per op (default %(default)s)")
    p.add_argument("--warmup-calls", type=int, default=3)
    p.add_argument("--ncu", help="path to ncu (default: PATH, then /opt/nvidia/nsight-compute/*/ncu)")
    p.add_argument("--worker-timeout", type=float, default=50.0, help="seconds per ncu run")
    p.add_argument("--no-time", action="store_true", help="skip the do_bench timing of both ops")
    p.add_argument("--model-only", action="store_true", help="only the computed IO model (no GPU needed)")
    p.add_argument("--worker", choices=["ours", "standard"], help=argparse.SUPPRESS)
    return p.parse_args(argv)


def shape_args(args) -> list[str]:
    out = ["--batch", str(args.batch), "--heads", str(args.heads), "--seqlen", str(args.seqlen),
           "--head-dim", str(args.head_dim), "--dtype", args.dtype, "--calls", str(args.calls),
           "--warmup-calls", str(args.warmup_calls)]
    return out + (["--causal"] if args.causal else [])


# --------------------------------------------------------------------------- ops

def make_op(which: str, args):
    """A no-argument callable running one forward of the chosen op on fresh random data."""
    import torch

    dtype = C.torch_dtype(args.dtype)
    b, h, n, d = args.batch, args.heads, args.seqlen, args.head_dim
    if which == "ours":
        from flashattn_triton import flash_attn_func

        q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=dtype) for _ in range(3))
        return lambda: flash_attn_func(q, k, v, causal=args.causal)
    # Standard attention, plainly: three kernels (two cuBLAS batched matmuls and a
    # softmax). The scale is folded into q once, outside the measured calls, so no
    # fourth elementwise kernel appears; the causal variant adds a masking kernel.
    q, k, v = (torch.randn(b * h, n, d, device="cuda", dtype=dtype) for _ in range(3))
    q = q * d**-0.5
    mask = (torch.ones(n, n, device="cuda", dtype=torch.bool).triu(1) if args.causal else None)

    def standard():
        s = torch.bmm(q, k.transpose(1, 2))
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        return torch.bmm(p, v)
    return standard


def run_worker(args) -> int:
    C.require_cuda("bench_io.py --worker")
    import torch

    torch.manual_seed(0)
    op = make_op(args.worker, args)
    with torch.no_grad():
        for _ in range(args.warmup_calls):
            op()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()  # ncu --profile-from-start off: profile from here
        for i in range(args.calls):
            with nvtx_range(f"bench_io_{args.worker}_call{i}"):
                op()
                torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print(f"{WORKER_DONE} calls={args.calls}", flush=True)
    return 0


@contextlib.contextmanager
def nvtx_range(name: str):
    """NVTX range as a label for the profile; silently absent if NVTX is unavailable."""
    import torch

    try:
        torch.cuda.nvtx.range_push(name)
        pushed = True
    except Exception:  # noqa: BLE001
        pushed = False
    try:
        yield
    finally:
        if pushed:
            torch.cuda.nvtx.range_pop()


# --------------------------------------------------------------------------- ncu

def find_ncu(explicit: str | None) -> str | None:
    if explicit:
        return explicit if Path(explicit).exists() or shutil.which(explicit) else None
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))
    candidates += sorted(glob.glob("/usr/local/cuda*/bin/ncu"))
    return candidates[-1] if candidates else None


def ncu_command(ncu: str, which: str, args, log_file: Path, base_units: bool = True) -> list[str]:
    units = ["--print-units", "base"] if base_units else []  # else parsed from the unit column
    return [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", METRICS,
            "--csv", *units, "--log-file", str(log_file),
            sys.executable, str(Path(__file__).resolve()), "--worker", which, *shape_args(args)]


def to_number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[dict]:
    """ncu --csv (details page, one row per kernel and metric) -> one dict per kernel, in order."""
    kernels: dict[str, dict] = {}
    for row in details_rows(text):
        k = kernels.setdefault(row["ID"], {"name": row.get("Kernel Name", "?"), "read": 0.0,
                                           "write": 0.0, "time_s": 0.0})
        metric, unit = row.get("Metric Name", ""), (row.get("Metric Unit") or "").strip().lower()
        value = to_number(row.get("Metric Value", ""))
        if value is None:
            continue
        if metric == "dram__bytes_read.sum":
            k["read"] += value * BYTE_UNITS.get(unit, 1)
        elif metric == "dram__bytes_write.sum":
            k["write"] += value * BYTE_UNITS.get(unit, 1)
        elif metric == "gpu__time_duration.sum":
            k["time_s"] += value * TIME_UNITS.get(unit, 1e-9)
    return [kernels[i] for i in sorted(kernels, key=lambda s: int(s) if s.isdigit() else s)]


def per_call(kernels: list[dict], calls: int) -> dict:
    """Sum the kernels of each call (the calls launch the same kernels); median call."""
    if calls > 0 and len(kernels) % calls == 0:
        size = len(kernels) // calls
        groups = [kernels[i * size:(i + 1) * size] for i in range(calls)]
    else:  # odd count: average over calls
        groups = [kernels]
        size = len(kernels) / max(calls, 1)
    totals = sorted(({"read": sum(k["read"] for k in g), "write": sum(k["write"] for k in g),
                      "time_s": sum(k["time_s"] for k in g)} for g in groups),
                    key=lambda t: t["read"] + t["write"])
    mid = totals[len(totals) // 2]
    scale = 1.0 if len(groups) == calls else 1.0 / max(calls, 1)
    return {"source": "ncu", "bytes_read": mid["read"] * scale, "bytes_write": mid["write"] * scale,
            "bytes_total": (mid["read"] + mid["write"]) * scale, "kernel_time_ms": mid["time_s"] * scale * 1e3,
            "kernels_per_call": size, "kernel_names": sorted({k["name"] for k in groups[0]}),
            "calls": calls}


def measure_with_ncu(ncu: str, which: str, args) -> dict:
    result = run_ncu(ncu, which, args, base_units=True)
    if "error" in result and "option" in result.get("ncu_output_tail", "").lower():
        print("retrying without --print-units base", flush=True)  # an older ncu
        result = run_ncu(ncu, which, args, base_units=False)
    return result


def run_ncu(ncu: str, which: str, args, base_units: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_io_") as tmp:
        log_file = Path(tmp) / "ncu.log"
        cmd = ncu_command(ncu, which, args, log_file, base_units)
        print("running: " + " ".join(cmd), flush=True)
        t0 = time.monotonic()
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.worker_timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"ncu run timed out after {args.worker_timeout:.0f} s"}
        except OSError as exc:
            return {"error": f"could not start ncu: {C.short_error(exc)}"}
        log = log_file.read_text(errors="replace") if log_file.exists() else ""
        kernels = parse_ncu_csv(log) or parse_ncu_csv(res.stdout)
        tail = (log + "\n" + res.stdout + "\n" + res.stderr).strip()[-1500:]
        if res.returncode != 0 or WORKER_DONE not in res.stdout or not kernels:
            why = (f"ncu exit code {res.returncode}" if res.returncode != 0 else
                   "worker did not finish" if WORKER_DONE not in res.stdout else "no kernels in ncu output")
            return {"error": why, "ncu_output_tail": tail}
        result = per_call(kernels, args.calls)
        result["wall_s"] = round(time.monotonic() - t0, 1)
        return result


# --------------------------------------------------------------------------- model

def io_model(args) -> dict:
    """Bytes each op must move with no cache reuse across kernels (see module docstring)."""
    elem = 2 if args.dtype in ("bf16", "fp16") else 4
    b, h, n, d = args.batch, args.heads, args.seqlen, args.head_dim
    mat = b * h * n * d * elem  # one of Q, K, V, O
    scores = b * h * n * n * elem  # one of S, P
    tiles = math.ceil(n / args.block_m)
    standard = {"bytes_read": 2 * mat + scores + scores + mat, "bytes_write": scores + scores + mat}
    ours = {"bytes_read": mat + 2 * mat * tiles, "bytes_write": mat + b * h * n * 4}
    ideal = {"bytes_read": 3 * mat, "bytes_write": mat + b * h * n * 4}
    for m in (standard, ours, ideal):
        m["bytes_total"] = m["bytes_read"] + m["bytes_write"]
        m["source"] = "model"
    ours["assumption"] = f"BLOCK_M={args.block_m}: K and V read {tiles} times, no L2 reuse"
    ideal["assumption"] = "every input read once (perfect L2 reuse of K, V): the lower bound"
    return {"standard": standard, "ours": ours, "ours_ideal": ideal}


# --------------------------------------------------------------------------- timing

def time_ops(args) -> dict:
    """do_bench median of each op's forward (in this process, outside ncu)."""
    import torch

    out = {}
    for which in ("standard", "ours"):
        try:
            op = make_op(which, args)
            with torch.no_grad():
                op()
                torch.cuda.synchronize()
                out[which] = C.bench_ms(op)
        except Exception as exc:  # noqa: BLE001
            out[which] = None
            out[f"{which}_error"] = C.short_error(exc)
        C.free_cuda_memory()
    return out


# --------------------------------------------------------------------------- report

def gb(x: float | None) -> str:
    return "" if x is None else f"{x / 1e9:.3f}"


def ratio(a: dict | None, b: dict | None) -> float | None:
    if not a or not b or not a.get("bytes_total") or not b.get("bytes_total"):
        return None
    return a["bytes_total"] / b["bytes_total"]


def markdown(result: dict) -> str:
    cfg, meas, model, timing = result["config"], result["measured"], result["model"], result["timing_ms"]
    rows = []
    for which, name in (("standard", "standard attention (matmul, softmax, matmul)"),
                        ("ours", "flashattn_triton forward")):
        m = meas.get(which) or {}
        if "error" not in m and m:
            rows.append([name, "measured (ncu)", gb(m["bytes_read"]), gb(m["bytes_write"]),
                         gb(m["bytes_total"]), f"{m['kernel_time_ms']:.3f}", m["kernels_per_call"],
                         C.fmt_num(timing.get(which), 3)])
        else:
            rows.append([name, f"not measured: {m.get('error', 'ncu unavailable')}", "", "", "", "", "",
                         C.fmt_num(timing.get(which), 3)])
    for which, name in (("standard", "standard attention"),
                        ("ours", f"flashattn_triton forward, K/V re-read per {cfg['block_m_model']}-row tile"),
                        ("ours_ideal", "flashattn_triton forward, each input read once")):
        m = model[which]
        rows.append([name, "IO MODEL (computed, not measured)", gb(m["bytes_read"]), gb(m["bytes_write"]),
                     gb(m["bytes_total"]), "", "", ""])
    r_meas, r_model = result["ratio"]["measured"], result["ratio"]["model"]
    text = (f"HBM traffic of ONE attention forward, B={cfg['batch']}, H={cfg['heads']}, N={cfg['seqlen']}, "
            f"d={cfg['head_dim']}, {cfg['dtype']}, {'causal' if cfg['causal'] else 'non-causal'} "
            f"(the kernels of one call summed; ncu flushes L2 before each kernel):\n\n"
            + C.md_table(["op", "source", "read GB", "write GB", "total GB", "kernel time ms (ncu)",
                          "kernels", "do_bench ms"], rows)
            + "\n\n"
            + "- Ratio standard / flashattn_triton: measured "
            + (f"**{r_meas:.1f}x**" if r_meas else "n/a (no ncu measurement)")
            + (f", IO model {r_model:.1f}x (tile re-reads) to "
               f"{ratio(model['standard'], model['ours_ideal']):.1f}x (inputs read once)" if r_model else "")
            + ".\n"
            + f"- Paper: {PAPER['standard_gb']} GB vs {PAPER['flash_gb']} GB (~{PAPER['ratio']}x) for "
            + PAPER["setting"] + ". Those numbers are for a different GPU, batch and for forward AND "
              "backward; ours is one forward here, so only the ratio is roughly comparable.\n")
    if result.get("ncu_note"):
        text += f"- {result['ncu_note']}\n"
    return text


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return run_worker(args)
    t0 = time.monotonic()
    model = io_model(args)
    measured: dict = {}
    timing: dict = {}
    note = None
    if args.model_only:
        note = "--model-only: nothing measured, the IO model only."
        env = C.collect_env()
    else:
        C.require_cuda("bench_io.py")
        env = C.collect_env()
        print(C.env_line(env), flush=True)
        ncu = find_ncu(args.ncu)
        if ncu is None:
            note = "ncu not found (PATH, /opt/nvidia/nsight-compute/*/ncu): falling back to the IO model."
        else:
            for which in ("standard", "ours"):
                measured[which] = measure_with_ncu(ncu, which, args)
                if "error" in measured[which]:
                    print(f"ncu measurement of {which} failed: {measured[which]['error']}\n"
                          f"{measured[which].get('ncu_output_tail', '')}", flush=True)
            if any("error" in m for m in measured.values()):
                note = f"ncu ({ncu}) failed for some op: see measured.*.error; the IO model is shown too."
        if not args.no_time and time.monotonic() - t0 < 50:
            timing = time_ops(args)
    if note:
        print(note, flush=True)
    ok = {k: m for k, m in measured.items() if m and "error" not in m}
    result = {
        "env": env,
        "config": {"batch": args.batch, "heads": args.heads, "seqlen": args.seqlen, "head_dim": args.head_dim,
                   "dtype": args.dtype, "causal": args.causal, "block_m_model": args.block_m,
                   "calls": args.calls, "metrics": METRICS},
        "source": "ncu" if len(ok) == 2 else "model",
        "measured": measured,
        "model": model,
        "timing_ms": timing,
        "ratio": {"measured": ratio(ok.get("standard"), ok.get("ours")),
                  "model": ratio(model["standard"], model["ours"]), "paper": PAPER["ratio"]},
        "paper": PAPER,
        "ncu_note": note,
        "wall_s": round(time.monotonic() - t0, 1),
    }
    C.write_json(args.out / "bench_io.json", result)
    text = markdown(result)
    C.write_markdown(args.out / "bench_io.md", "HBM traffic: flashattn_triton vs standard attention",
                     env, text)
    print(text)
    print(f"wrote {args.out / 'bench_io.json'} and {args.out / 'bench_io.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

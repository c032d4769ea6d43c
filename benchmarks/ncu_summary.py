#!/usr/bin/env python3
"""Nsight Compute details pages -> markdown tables per benchmark row, ours next to cuDNN
(or the provider of --peer: flash, flex).

    python benchmarks/ncu_summary.py RESULTS... [--bench bench_attention.json]
        [--require STEM,STEM...] [--peer cudnn] [--out summary.md]

RESULTS are files or directories (a directory stands for its *.csv and *.txt files) holding
the details page of ncu reports, as text (``ncu --import x.ncu-rep --page details``) or CSV
(``... --page details --csv --print-units base``; where a stem has both, the CSV is read),
and <stem>.raw.csv, the raw page (``--page raw --csv --print-units base``), whose metrics are
added to the details page's kernels (the stall reasons are there even where the explicit
metrics were left out).
benchmarks/gpu_ncu_short_rows.sh writes one report per benchmark row: each provider's call
comes after a marker kernel ``_ncu_window`` launched on grid (window, 1, 1), and
<stem>.windows.json (benchmarks/ncu_cases.py) says which provider each window is. A report
without markers is one window whose provider comes from its file name (``cudnn_*``: cuDNN,
otherwise ours), the way session 12 named its files (results/h200/session12/call2/); files
``X`` and ``cudnn_X`` then make one row.

Per kernel: duration and share of its call, SM throughput, tensor-pipe utilisation, executed
IPC, achieved occupancy, registers per thread, cycles with no eligible warp, warp cycles per
issued instruction with the top three stall reasons, L2 hit rate, DRAM throughput and bytes;
a second table with the launch: threads per block, blocks, waves per SM, registers per
thread, shared memory per block (dynamic + static), the blocks per SM that registers and
shared memory allow, theoretical and achieved occupancy, issue slots busy and cycles with
an eligible warp; then per row the gap, ours minus the peer, split into the main kernels
(the longest of each call) and the rest. docs/performance.md, "Nsight Compute on the short rows", says what each
column is. --bench adds the sweep's times of the row and the check below.

--require names the rows that must be there: a row is PROFILED when both its calls (ours,
the peer) hold a kernel with a duration, and ADDS UP when each call's kernel time is 0.80-1.25x
the sweep's time of that row (checked only with --bench). The last line printed is
"VERDICT: complete" when every required row is profiled and adds up, else "VERDICT:
incomplete" with the rows that are not. Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "_ncu_window"
PROVIDER_NAMES = {"ours": "ours", "cudnn": "cuDNN", "flash": "FA2", "flex": "Flex",
                  "peer": "peer"}  # peer: ncu_cases.py --variant's (its windows JSON names it)
BENCH_PROVIDERS = {"ours": "flashattn_triton", "cudnn": "sdpa_cudnn", "flash": "sdpa_flash", "flex": "flex"}
ADDS_UP = (0.80, 1.25)

# Each column: metric names (raw page, CSV, the "Command line profiler metrics" section),
# then details-page labels ("Section/Label", then the label alone, the one of its first
# section; "Memory Throughput", in two sections, by its unit); first found wins.
DURATION = ("gpu__time_duration.sum", "GPU Speed Of Light Throughput/Duration", "Duration")
SM_PCT = ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "GPU Speed Of Light Throughput/Compute (SM) Throughput",
          "Compute (SM) Throughput")
IPC = ("sm__inst_executed.avg.per_cycle_active", "Compute Workload Analysis/Executed Ipc Active", "Executed Ipc Active")
OCCUPANCY = ("sm__warps_active.avg.pct_of_peak_sustained_active", "Occupancy/Achieved Occupancy", "Achieved Occupancy")
REGISTERS = ("launch__registers_per_thread", "Launch Statistics/Registers Per Thread", "Registers Per Thread")
NO_ELIGIBLE = ("Scheduler Statistics/No Eligible", "No Eligible")
ONE_ELIGIBLE = ("smsp__issue_active.avg.pct_of_peak_sustained_active", "Scheduler Statistics/One or More Eligible",
                "One or More Eligible")
CYCLES_PER_ISSUE = ("smsp__average_warp_latency_per_inst_issued.ratio",
                    "Warp State Statistics/Warp Cycles Per Issued Instruction", "Warp Cycles Per Issued Instruction")
L2_HIT = ("lts__t_sector_hit_rate.pct", "Memory Workload Analysis/L2 Hit Rate", "L2 Hit Rate")
DRAM_PCT = ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "GPU Speed Of Light Throughput/DRAM Throughput",
            "DRAM Throughput")
DRAM_RATE = ("dram__bytes.sum.per_second", "Memory Workload Analysis/Memory Throughput", "Memory Throughput [byte/s]")
# The launch table: block and grid (from the kernel line), waves, shared memory per block
# (bytes), occupancy limits and issue-slot use.
WAVES = ("launch__waves_per_multiprocessor", "Launch Statistics/Waves Per SM", "Waves Per SM")
SMEM_DYNAMIC = ("launch__shared_mem_per_block_dynamic", "Launch Statistics/Dynamic Shared Memory Per Block",
                "Dynamic Shared Memory Per Block")
SMEM_STATIC = ("launch__shared_mem_per_block_static", "Launch Statistics/Static Shared Memory Per Block",
               "Static Shared Memory Per Block")
THEORETICAL = ("sm__maximum_warps_per_active_cycle_pct", "Occupancy/Theoretical Occupancy", "Theoretical Occupancy")
LIMIT_REGS = ("launch__occupancy_limit_registers", "Occupancy/Block Limit Registers", "Block Limit Registers")
LIMIT_SMEM = ("launch__occupancy_limit_shared_mem", "Occupancy/Block Limit Shared Mem", "Block Limit Shared Mem")
ISSUE_BUSY = ("sm__inst_issued.avg.pct_of_peak_sustained_active", "Compute Workload Analysis/Issue Slots Busy",
              "Issue Slots Busy")
# Tensor pipe, % of active cycles: the wgmma pipe first (Hopper), then the whole tensor pipe,
# then the mma.sync one.
TENSOR = ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
          "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
          "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")
STALL_METRIC = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
# Without the stall metrics (a text page of the sections alone), ncu's WarpStateStats rules
# name the largest stalls in words: "... spends 5.8 cycles being stalled waiting for ...".
RULE_STALL = re.compile(r"spends ([\d.]+) cycles being stalled (.*?)\.")
RULE_STALL_WORDS = (("CTA barrier", "barrier"), ("scoreboard dependency on a L1TEX", "long_scoreboard"),
                    ("scoreboard dependency on a MIO", "short_scoreboard"), ("MIO", "mio_throttle"),
                    ("fixed latency", "wait"), ("math pipe", "math_pipe_throttle"),
                    ("L1 instruction queue", "lg_throttle"), ("memory barrier", "membar"),
                    ("branch", "branch_resolving"), ("dispatch", "dispatch_stall"))
RULE_PIPE = re.compile(r"(\w[\w ()/-]*?) is the highest-utilized pipeline \(([\d.]+)%\)")

TIME_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
              "s": 1e6, "second": 1e6}
SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
BYTES_UNIT = re.compile(r"^([KMGTP]?)(?:byte|B)(/s|/second|/block)?$")


@dataclass
class Kernel:
    name: str
    grid: tuple = ()
    block: tuple = ()
    metrics: dict = field(default_factory=dict)  # key -> float (canonical unit) or str
    rules: list = field(default_factory=list)    # the rules' paragraphs (OPT / INF / WRN)

    def num(self, *keys):
        for key in keys:
            value = self.metrics.get(key)
            if isinstance(value, float):
                return value
        return None


def to_float(text: str):
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def canonical(value: str, unit: str) -> tuple:
    """(value in microseconds, bytes or bytes/s, others unchanged; text stays text, unit)."""
    number = to_float(value)
    if number is None:
        return (None if value.strip() in ("", "n/a", "no data") else value.strip()), unit
    unit = unit.strip()
    if unit in TIME_TO_US:
        return number * TIME_TO_US[unit], "us"
    m = BYTES_UNIT.match(unit)
    if m:
        return number * SI[m.group(1)], "byte/s" if m.group(2) in ("/s", "/second") else "byte"
    return number, unit


def put(kernel: Kernel, section: str, label: str, unit: str, value: str) -> None:
    v, unit = canonical(value, unit)
    kernel.metrics[f"{section}/{label}"] = v
    kernel.metrics.setdefault(label, v)
    kernel.metrics.setdefault(f"{label} [{unit}]", v)


def dims(text: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", text))


# --------------------------------------------------------------------------- parsing

KERNEL_LINE = re.compile(r"^  (?P<name>\S.*?) \((?P<grid>\d+, \d+, \d+)\)x\((?P<block>\d+, \d+, \d+)\), "
                         r"Context \d+, Stream \d+")
SECTION_LINE = re.compile(r"^\s+Section: (?P<title>.+?)\s*$")
DASH_LINE = re.compile(r"^\s*-+( -+)+\s*$")
RULE_LINE = re.compile(r"^    (OPT|INF|WRN|ERR)\s+(?P<text>\S.*)$")


def parse_details_text(text: str) -> list[Kernel]:
    """``ncu --page details`` text -> one Kernel per profiled launch, in order."""
    kernels: list[Kernel] = []
    kernel = section = spans = None
    dashes = 0
    rule = None
    for line in text.splitlines():
        m = KERNEL_LINE.match(line)
        if m:
            kernel = Kernel(m["name"], dims(m["grid"]), dims(m["block"]))
            kernels.append(kernel)
            section, rule = None, None
            continue
        if kernel is None:
            continue
        m = SECTION_LINE.match(line)
        if m:
            section, dashes, rule = m["title"], 0, None
            continue
        if section is not None and dashes < 3 and DASH_LINE.match(line):
            dashes += 1
            spans = [(d.start(), d.end()) for d in re.finditer(r"-+", line)]
            continue
        if section is not None and dashes == 2 and len(spans) >= 3 and line.strip():
            label = line[:spans[0][1]].strip()
            unit = line[spans[1][0]:spans[1][1]].strip()
            put(kernel, section, label, unit, line[spans[2][0]:])
            continue
        m = RULE_LINE.match(line)
        if m:
            rule = [m["text"].strip()]
            kernel.rules.append(rule)
        elif rule is not None and line.startswith(" " * 10) and line.strip():
            rule.append(line.strip())
        else:
            rule = None
    for k in kernels:
        k.rules = [" ".join(r) if isinstance(r, list) else r for r in k.rules]
    return kernels


def details_rows(text: str) -> list[dict]:
    """The rows of an ``ncu --page details --csv`` export (one per kernel and
    metric, from its "ID" header on; the header repeated inside is skipped),
    whatever ncu printed around it; [] without one."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    return [row for row in csv.DictReader(lines[start:]) if row.get("ID") and row.get("ID") != "ID"]


def parse_details_csv(text: str) -> list[Kernel]:
    """``ncu --page details --csv`` (one row per kernel and metric) -> Kernels in ID order."""
    by_id: dict[str, Kernel] = {}
    for row in details_rows(text):
        kid = row["ID"]
        k = by_id.get(kid)
        if k is None:
            k = by_id[kid] = Kernel(row.get("Kernel Name", "?"), dims(row.get("Grid Size", "")),
                                    dims(row.get("Block Size", "")))
        label = row.get("Metric Name") or ""
        if label:
            put(k, row.get("Section Name") or "", label, row.get("Metric Unit") or "", row.get("Metric Value") or "")
        desc = (row.get("Rule Description") or "").strip()
        if desc and desc not in k.rules:
            k.rules.append(desc)
    return [by_id[i] for i in sorted(by_id, key=lambda s: int(s) if s.isdigit() else 0)]


def parse_raw_csv(text: str) -> list[Kernel]:
    """``ncu --page raw --csv`` (a header of metric names, a row of units, one row per
    kernel) -> Kernels in order, every collected metric by name (the sections' chart
    metrics too, which the details page leaves out)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"') and '"Kernel Name"' in ln), None)
    if start is None:
        return []
    kernels, units = [], {}
    for row in csv.DictReader(lines[start:]):
        if not row.get("ID"):  # the units row
            units = {key: value or "" for key, value in row.items()}
            continue
        k = Kernel(row.get("Kernel Name", "?"), dims(row.get("Grid Size", "")), dims(row.get("Block Size", "")))
        for key, value in row.items():
            if key and "__" in key and value is not None:
                k.metrics[key] = canonical(value, units.get(key, ""))[0]
        kernels.append(k)
    return kernels


def parse_file(path: Path) -> list[Kernel]:
    text = path.read_text(errors="replace")
    if path.name.endswith(".raw.csv"):
        return parse_raw_csv(text)
    return parse_details_csv(text) if path.suffix == ".csv" else parse_details_text(text)


# --------------------------------------------------------------------------- per kernel

def short_name(name: str) -> str:
    n = re.sub(r"^void ", "", name)
    n = n.replace("cudnn_generated_fort_native_sdpa_", "")
    n = re.sub(r"_cga\d+x\d+x\d+", "", n)
    n = re.sub(r"_kernel\d+_\d+$", "", n)
    functor = re.search(r"(\w*Functor\w*)", n)
    base = re.split(r"[<(]", n, maxsplit=1)[0].split("::")[-1] or n
    if functor and functor.group(1) != base:
        base += f"<{functor.group(1)}>"
    return base[:64]


def stalls(k: Kernel) -> tuple:
    """(warp cycles per issued instruction, [(reason, cycles)] largest first, 'selected' left out)."""
    per_reason = {}
    for key, value in k.metrics.items():
        m = STALL_METRIC.match(key)
        if m and isinstance(value, float):
            per_reason[m.group(1)] = value
    total = k.num(*CYCLES_PER_ISSUE)
    if total is None and per_reason:
        total = sum(per_reason.values())
    if not per_reason:  # the rules' words: the stalls they name (the largest ones)
        for text in k.rules:
            m = RULE_STALL.search(text)
            if m:
                reason = next((r for words, r in RULE_STALL_WORDS if words in m.group(2)), "other")
                per_reason[reason] = float(m.group(1))
    top = sorted(((r, c) for r, c in per_reason.items() if r != "selected"), key=lambda rc: -rc[1])
    return total, top


def tensor_pct(k: Kernel):
    """(value, how): a tensor-pipe metric, else the rule's highest pipeline (an upper bound)."""
    value = k.num(*TENSOR)
    if value is not None:
        return value, "metric"
    for text in k.rules:
        m = RULE_PIPE.search(text)
        if m:
            return float(m.group(2)), ("rule" if m.group(1).strip() == "Tensor" else "bound")
    return None, ""


def dram_bytes(k: Kernel):
    read, write = k.num("dram__bytes_read.sum"), k.num("dram__bytes_write.sum")
    if read is not None and write is not None:
        return read + write
    total = k.num("dram__bytes.sum")
    if total is not None:
        return total
    rate, us = k.num(*DRAM_RATE), k.num(*DURATION)
    return rate * us * 1e-6 if rate is not None and us is not None else None


def no_eligible(k: Kernel):
    value = k.num(*NO_ELIGIBLE)
    if value is None:
        one = k.num(*ONE_ELIGIBLE)
        value = None if one is None else 100.0 - one
    return value


def fmt(x, digits: int = 1, suffix: str = "") -> str:
    return "-" if x is None else f"{x:,.{digits}f}{suffix}"


def stall_cell(k: Kernel) -> str:
    total, top = stalls(k)
    if not top:
        return fmt(total)
    parts = [f"{r.replace('scoreboard', 'sb')} {c / total * 100:.0f}%" if total else f"{r} {c:.1f}"
             for r, c in top[:3]]
    return f"{fmt(total)}: " + ", ".join(parts)


def tensor_cell(k: Kernel) -> str:
    value, how = tensor_pct(k)
    return {"metric": fmt(value), "rule": fmt(value), "bound": "<=" + fmt(value)}.get(how, "-")


# --------------------------------------------------------------------------- rows

# N in thousands ("2k") or, where not a multiple of 1024, as is ("512")
STEM = re.compile(r"(?P<mode>fwd|bwd)_(?:(?P<dtype>bf16|fp16)_)?d(?P<d>\d+)_(?P<n>\d+)(?P<k>k?)_(?P<mask>causal|full)")


@dataclass
class Row:
    key: str
    config: dict = field(default_factory=dict)  # mode, dtype, head_dim, causal, seqlen_q, batch, heads_q
    calls: dict = field(default_factory=dict)   # provider -> [Kernel]
    errors: dict = field(default_factory=dict)  # provider -> why it has no call
    files: list = field(default_factory=list)

    def title(self) -> str:
        c = self.config
        if not c:
            return self.key
        extra = f" (B={c['batch']}, H={c['heads_q']})" if "batch" in c else ""
        if c.get("variant"):  # ncu_cases.py --variant's row
            extra = f" (B={c['batch']}, Hq={c['heads_q']} / Hkv={c['heads_kv']}, peer {c.get('peer')})"
            return f"{c['mode']} variant {c['variant']} d={c['head_dim']} N={c['seqlen_q']}{extra}"
        return (f"{c['mode']} {c['dtype']} d={c['head_dim']} {'causal' if c['causal'] else 'full'} "
                f"N={c['seqlen_q']}{extra}")


def config_from_stem(stem: str) -> dict:
    m = STEM.search(stem)
    if not m:
        return {}
    n = int(m["n"]) * (1024 if m["k"] else 1)
    return {"mode": m["mode"], "dtype": m["dtype"] or "bf16", "head_dim": int(m["d"]),
            "causal": m["mask"] == "causal", "seqlen_q": n}


def split_windows(kernels: list[Kernel]) -> list[tuple]:
    """[(window, [kernels])]: a marker kernel opens window grid.x; kernels before any marker are window 0."""
    windows: list[tuple] = []
    for k in kernels:
        if k.name.endswith(MARKER):
            windows.append((k.grid[0] if k.grid else len(windows) + 1, []))
        else:
            if not windows:
                windows.append((0, []))
            windows[-1][1].append(k)
    return windows


def input_files(paths: list[str]) -> dict:
    """stem -> {"csv" / "txt": its details page, "raw": its raw page}."""
    found: dict[str, dict] = {}
    for p in map(Path, paths):
        for f in (sorted(p.iterdir()) if p.is_dir() else [p]):
            kind = "raw" if f.name.endswith(".raw.csv") else f.suffix[1:]
            if kind in ("raw", "csv", "txt"):
                stem = f.name[:-len(".raw.csv")] if kind == "raw" else f.stem
                found.setdefault(stem, {})[kind] = f
    return found


def read_report(files: dict) -> tuple:
    """(the file read, its kernels): the details page (CSV before text, as a CSV export that
    failed leaves the text), with the raw page's metrics added launch by launch; or the
    raw page alone."""
    raw = parse_file(files["raw"]) if "raw" in files else []
    for kind in ("csv", "txt"):
        kernels = parse_file(files[kind]) if kind in files else []
        if kernels:
            if len(raw) == len(kernels):
                for k, r in zip(kernels, raw):
                    for key, value in r.metrics.items():
                        k.metrics.setdefault(key, value)
            return files[kind], kernels
    return files.get("raw"), raw


def load_rows(paths: list[str]) -> dict:
    rows: dict[str, Row] = {}
    for stem, files in sorted(input_files(paths).items()):
        path, kernels = read_report(files)
        if not kernels:
            continue
        unmarked = "cudnn" if stem.startswith("cudnn_") else "ours"
        key = stem[len("cudnn_"):] if stem.startswith("cudnn_") else stem
        meta_path = path.with_name(stem + ".windows.json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        row = rows.setdefault(key, Row(key))
        row.config = row.config or meta.get("row") or config_from_stem(key)
        row.errors.update(meta.get("errors", {}))
        row.files.append(path.name)
        names = {int(w["window"]): w["provider"] for w in meta.get("windows", [])}
        for window, ks in split_windows(kernels):
            provider = names.get(window, unmarked if window == 0 else f"window {window}")
            row.calls.setdefault(provider, []).extend(ks)
    return rows


def bench_ms(bench: list | None, config: dict, provider: str):
    if not bench or not config:
        return None
    want = BENCH_PROVIDERS.get(provider, provider)
    for r in bench:
        if (r.get("provider") == want and r.get("mode") == config["mode"] and r.get("status") == "ok"
                and r.get("dtype") == config["dtype"] and r.get("head_dim") == config["head_dim"]
                and bool(r.get("causal")) == bool(config["causal"]) and r.get("seqlen_q") == config["seqlen_q"]
                and r.get("heads_q") == r.get("heads_kv")):
            return r.get("ms")
    return None


def call_us(kernels: list[Kernel]) -> float:
    return sum(k.num(*DURATION) or 0.0 for k in kernels)


def ordered(providers) -> list:
    return sorted(providers, key=lambda p: (list(PROVIDER_NAMES).index(p) if p in PROVIDER_NAMES else 9, p))


COLUMNS = ["who", "kernel", "grid", "us", "share", "SM %", "tensor %", "IPC", "occ %", "regs", "no-elig %",
           "cyc/issue: top stalls", "L2 hit %", "DRAM %", "DRAM MB"]


def kernel_cells(who: str, k: Kernel, total_us: float) -> list:
    us = k.num(*DURATION)
    grid = "x".join(str(g) for g in k.grid) if k.grid else "-"
    share = fmt(us / total_us * 100 if us is not None and total_us else None, 0, "%")
    b = dram_bytes(k)
    regs = k.num(*REGISTERS)
    return [who, short_name(k.name), grid, fmt(us), share, fmt(k.num(*SM_PCT)), tensor_cell(k), fmt(k.num(*IPC), 2),
            fmt(k.num(*OCCUPANCY)), fmt(regs, 0), fmt(no_eligible(k)), stall_cell(k), fmt(k.num(*L2_HIT)),
            fmt(k.num(*DRAM_PCT)), fmt(None if b is None else b / 1e6)]


def gap_line(row: Row, peer_name: str = "cudnn") -> str:
    ours, peer = row.calls.get("ours"), row.calls.get(peer_name)
    who = PROVIDER_NAMES.get(peer_name, peer_name)
    if not ours or not peer:
        return f"gap: - (ours or {who}'s call missing)"
    t_ours, t_peer = call_us(ours), call_us(peer)
    main_o = max(ours, key=lambda k: k.num(*DURATION) or 0.0)
    main_p = max(peer, key=lambda k: k.num(*DURATION) or 0.0)
    mo, mp = main_o.num(*DURATION) or 0.0, main_p.num(*DURATION) or 0.0
    rest_o, rest_p = t_ours - mo, t_peer - mp
    pct = f" ({(t_ours / t_peer - 1) * 100:+.0f}%)" if t_peer else ""
    return (f"gap ours - {who}: {t_ours - t_peer:+,.1f} us{pct} = main kernels {mo - mp:+,.1f} us "
            f"({short_name(main_o.name)} {mo:,.1f} vs {short_name(main_p.name)} {mp:,.1f}) "
            f"+ other kernels {rest_o - rest_p:+,.1f} us (ours {len(ours) - 1}: {rest_o:,.1f}, "
            f"{who} {len(peer) - 1}: {rest_p:,.1f})")


LAUNCH_COLUMNS = ["who", "kernel", "block", "grid", "waves/SM", "regs", "smem KiB/block", "blocks/SM by regs, smem",
                  "theor. occ %", "occ %", "issue busy %", "1+ eligible %"]


def launch_cells(who: str, k: Kernel) -> list:
    threads = 1
    for x in k.block:
        threads *= x
    blocks = 1
    for x in k.grid:
        blocks *= x
    dyn, static = k.num(*SMEM_DYNAMIC), k.num(*SMEM_STATIC)
    smem = None if dyn is None and static is None else ((dyn or 0.0) + (static or 0.0)) / 1024
    lr, ls = k.num(*LIMIT_REGS), k.num(*LIMIT_SMEM)
    limits = "-" if lr is None and ls is None else f"{fmt(lr, 0)}, {fmt(ls, 0)}"
    return [who, short_name(k.name), str(threads) if k.block else "-", str(blocks) if k.grid else "-",
            fmt(k.num(*WAVES), 2), fmt(k.num(*REGISTERS), 0), fmt(smem), limits, fmt(k.num(*THEORETICAL)),
            fmt(k.num(*OCCUPANCY)), fmt(k.num(*ISSUE_BUSY)), fmt(k.num(*ONE_ELIGIBLE))]


def render_row(row: Row, bench: list | None, peer: str = "cudnn") -> str:
    totals = {p: call_us(ks) for p, ks in row.calls.items()}
    head = ", ".join(f"{PROVIDER_NAMES.get(p, p)} {totals[p]:,.1f} us" for p in ordered(row.calls))
    out = [f"### {row.title()}: {head}", "", "| " + " | ".join(COLUMNS) + " |",
           "|" + "---|" * len(COLUMNS)]
    for p in ordered(row.calls):
        who = PROVIDER_NAMES.get(p, p)
        for k in row.calls[p]:
            out.append("| " + " | ".join(kernel_cells(who, k, totals[p])) + " |")
        b = [dram_bytes(k) for k in row.calls[p]]
        mb = fmt(sum(x for x in b if x is not None) / 1e6) if any(x is not None for x in b) else "-"
        n = len(row.calls[p])
        out.append(f"| {who} | **call** ({n} kernel{'s' if n != 1 else ''}) | | **{totals[p]:,.1f}** | 100% |"
                   + " |" * (len(COLUMNS) - 6) + f" {mb} |")
    out += ["", "| " + " | ".join(LAUNCH_COLUMNS) + " |", "|" + "---|" * len(LAUNCH_COLUMNS)]
    for p in ordered(row.calls):
        out += ["| " + " | ".join(launch_cells(PROVIDER_NAMES.get(p, p), k)) + " |" for k in row.calls[p]]
    out += ["", gap_line(row, peer)]
    for p, why in sorted(row.errors.items()):
        out.append(f"{PROVIDER_NAMES.get(p, p)}: no call profiled: {why}")
    times = {p: bench_ms(bench, row.config, p) for p in ordered(row.calls)}
    if any(t is not None for t in times.values()):
        parts = [f"{PROVIDER_NAMES.get(p, p)} {t * 1e3:,.1f} us (ncu sum / sweep {totals[p] / (t * 1e3):.2f})"
                 for p, t in times.items() if t]
        out.append("sweep: " + ", ".join(parts))
    out.append(f"files: {', '.join(row.files)}")
    return "\n".join(out) + "\n"


def check(rows: dict, required: list[str], bench: list | None, peer: str = "cudnn") -> list[str]:
    lines, bad = [], []
    pair = ("ours", peer)
    for stem in required:
        row = rows.get(stem)
        calls = row.calls if row else {}
        missing = [p for p in pair if not calls.get(p) or not call_us(calls[p])]
        if missing:
            bad.append(stem)
            lines.append(f"{stem}: NOT PROFILED (no kernels for {', '.join(missing)})")
            continue
        ratios = {p: (call_us(calls[p]) / (bench_ms(bench, row.config, p) * 1e3)
                      if bench_ms(bench, row.config, p) else None) for p in pair}
        names = {p: PROVIDER_NAMES.get(p, p) for p in pair}
        desc = ", ".join(f"{names[p]} {len(calls[p])} kernels {call_us(calls[p]):,.1f} us" for p in ratios)
        if bench is None or any(r is None for r in ratios.values()):
            lines.append(f"{stem}: profiled ({desc}); sums not checked (no sweep row)")
            if bench is not None:
                bad.append(stem)
            continue
        ok = all(ADDS_UP[0] <= r <= ADDS_UP[1] for r in ratios.values())
        if not ok:
            bad.append(stem)
        lines.append(f"{stem}: profiled ({desc}); ncu sum / sweep ours {ratios['ours']:.2f}, "
                     f"{names[peer]} {ratios[peer]:.2f}: {'adds up' if ok else 'DOES NOT ADD UP'}")
    verdict = (f"VERDICT: complete ({len(required)}/{len(required)} required rows profiled"
               + (" and adding up)" if bench is not None else "; no sweep JSON, sums not checked)"))
    if bad:
        verdict = f"VERDICT: incomplete ({len(required) - len(bad)}/{len(required)}; not: {', '.join(bad)})"
    return lines + [verdict]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="details pages (.txt / .csv) or directories of them")
    ap.add_argument("--bench", help="bench_attention.json of the sweep (adds its times and the sums' check)")
    ap.add_argument("--require", default="", help="comma-separated row stems that must be profiled")
    ap.add_argument("--out", help="write the markdown here too")
    ap.add_argument("--peer", default="cudnn", choices=sorted(PROVIDER_NAMES),
                    help="the provider the gap and the check compare ours with (default cudnn)")
    args = ap.parse_args(argv)
    rows = load_rows(args.inputs)
    bench = None
    if args.bench and Path(args.bench).exists():
        bench = json.loads(Path(args.bench).read_text()).get("rows", [])
    required = [s for s in args.require.split(",") if s]
    order = sorted(rows, key=lambda k: (required.index(k) if k in required else len(required), k))
    text = "\n".join(render_row(rows[k], bench, args.peer) for k in order)
    if not rows:
        text = "no kernels found in " + ", ".join(args.inputs) + "\n"
    if required:
        text += "\n" + "\n".join(check(rows, required, bench, args.peer)) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())

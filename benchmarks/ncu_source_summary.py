"""Warp-state samples per SASS instruction, summed by instruction class (benchmarks/
gpu_ncu_source.sh's exports; no GPU needed).

    python benchmarks/ncu_source_summary.py DIR [--top N] > summary.md

DIR holds ``<row>.sass.csv`` files: Nsight Compute's source page (``--page source --csv
--print-source sass``), one table per profiled kernel, one line per SASS instruction with
its address, its text and the sampling columns (every column whose name holds
"Sampling"). The first of those is taken as the sample count. Per kernel this prints the
total, the share of each instruction class (CLASSES: the first pattern that matches the
opcode names it) and the instructions with the most samples.

Where the stall_* columns are there (one per stall reason), each class and
instruction shows its top reasons. ``<row>.src.csv`` (``--print-source cuda,sass``), when
present, gives the same per source line of the first kernel (ours: its Python lines).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

# (class, regex on the opcode with its modifiers), the first match wins
CLASSES = [
    ("NOP (ours: mostly the worker warps' register re-allocation wait)", r"^NOP"),
    ("mbarrier wait (SYNCS try-wait)", r"^SYNCS\..*TRYWAIT|^SYNCS\.PHASECHK"),
    ("mbarrier arrive / other SYNCS", r"^SYNCS"),
    ("named / CTA barrier (BAR)", r"^BAR"),
    ("wgmma wait (WARPGROUP.DEPBAR)", r"^WARPGROUP\.DEPBAR"),
    ("wgmma fence / arrive (WARPGROUP)", r"^WARPGROUP"),
    ("wgmma (HGMMA)", r"^HGMMA"),
    ("exp2 (MUFU)", r"^MUFU"),
    ("shared load (LDS / LDSM)", r"^LDS|^LDSM"),
    ("shared store (STS / STSM)", r"^STS|^STSM"),
    ("local memory (LDL / STL)", r"^LDL|^STL"),
    ("global load (LDG)", r"^LDG"),
    ("global store / reduce (STG / RED / ATOM)", r"^STG|^RED|^ATOM"),
    ("TMA / bulk copy (UBLKCP / UTMA*)", r"^UBLK|^UTM|^UTMA"),
    ("fence / membar", r"^FENCE|^MEMBAR|^CCTL"),
    ("branch / control", r"^BRA|^BSYNC|^BSSY|^EXIT|^RET|^CALL|^WARPSYNC|^YIELD|^NANOSLEEP|^BPT"),
    ("conversion (F2F / F2FP / I2F)", r"^F2F|^F2FP|^I2F|^F2I"),
    ("float math (FFMA / FMUL / FADD / FMNMX / FSEL / FSETP)", r"^F(FMA|MUL|ADD|MNMX|SEL|SETP|CHK)"),
    ("integer / move / predicate", r"^(I|U|L|S|P|R|M|V)"),
]


def opcode(sass: str) -> str:
    s = sass.strip()
    s = re.sub(r"^@!?U?P[T0-9]+\s+", "", s)  # predicate guard
    return s.split()[0] if s else ""


def klass(op: str) -> str:
    for name, pat in CLASSES:
        if re.search(pat, op):
            return name
    return "other"


def tables(path: Path):
    """(kernel label, header, rows) per table of one source-page CSV."""
    label, cur, header, rows, out = "", "", None, [], []
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec:
                continue
            if "Address" in rec and "Source" in rec:
                if header is not None:
                    out.append((cur, header, rows))
                header, rows, cur = rec, [], label
                continue
            if header is None or len(rec) != len(header):
                label = " ".join(x for x in rec if x)[:160] or label  # a kernel name line, if any
                continue
            rows.append(rec)
    if header is not None:
        out.append((cur, header, rows))
    return out


def num(x: str) -> float:
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def reasons(header: list) -> list:
    """(index, name) of the per-reason sample columns (all samples, not the 'Not Issued' ones)."""
    return [(j, h[len("stall_"):]) for j, h in enumerate(header) if h.startswith("stall_") and "(" not in h]


def top_reasons(vals: dict, total: float, k: int = 3) -> str:
    best = sorted(vals.items(), key=lambda kv: -kv[1])[:k]
    return ", ".join(f"{n} {100 * v / max(total, 1):.0f} %" for n, v in best if v > 0)


def summarize(path: Path, top: int) -> None:
    for i, (label, header, rows) in enumerate(tables(path)):
        cols = [j for j, h in enumerate(header) if "Sampling" in h]
        if not cols:
            print(f"\n## {path.name} table {i}: no sampling column ({header[:8]})")
            continue
        a, s, c = header.index("Address"), header.index("Source"), cols[0]
        why = reasons(header)
        total = sum(num(r[c]) for r in rows)
        print(f"\n## {path.name}, kernel {i}: {label}")
        print(f"{len(rows)} instructions, {total:.0f} samples ({header[c]})")
        by = defaultdict(lambda: defaultdict(float))
        for r in rows:
            k = klass(opcode(r[s]))
            by[k]["samples"] += num(r[c])
            for j, n in why:
                by[k][n] += num(r[j])
        mix = defaultdict(float)
        for r in rows:
            for j, n in why:
                mix[n] += num(r[j])
        print(f"Stall reasons, whole kernel: {top_reasons(mix, total, 6)}")
        print("\n| class | samples | share | top reasons (share of the class) |\n|---|---|---|---|")
        for k, v in sorted(by.items(), key=lambda kv: -kv[1]["samples"]):
            t = v.pop("samples")
            print(f"| {k} | {t:.0f} | {100 * t / max(total, 1):.1f} % | {top_reasons(v, t)} |")
        print(f"\nTop {top} instructions:\n\n| address | SASS | samples | share | top reasons |\n|---|---|---|---|---|")
        for r in sorted(rows, key=lambda r: -num(r[c]))[:top]:
            t = num(r[c])
            print(f"| {r[a][-5:]} | `{r[s].strip()[:80]}` | {t:.0f} | {100 * t / max(total, 1):.1f} % | "
                  f"{top_reasons({n: num(r[j]) for j, n in why}, t)} |")


def summarize_lines(path: Path, top: int) -> None:
    """Per source line, from the ``cuda,sass`` export: its file blocks hold one row per
    line (Line No, its text, then the line's sums) followed by its instructions."""
    per, header, file = {}, None, ""
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec:
                continue
            if rec[0] == "File Path":
                file = Path(rec[1]).name
            elif rec[0] == "Line No":
                header = rec
            elif header and rec[0] and len(rec) == len(header):
                per[(file, rec[0])] = (rec[1].strip(), rec)
    if not header:
        print(f"\n## {path.name}: no source lines")
        return
    cols = [j for j, h in enumerate(header) if "Sampling" in h]
    why = reasons(header)
    total = sum(num(r[cols[0]]) for _, r in per.values())
    print(f"\n## {path.name}: {len(per)} source lines, {total:.0f} samples (the first kernel of the report)")
    print(f"\nTop {top} lines:\n\n| line | source | samples | share | top reasons |\n|---|---|---|---|---|")
    for (file, ln), (text, r) in sorted(per.items(), key=lambda kv: -num(kv[1][1][cols[0]]))[:top]:
        t = num(r[cols[0]])
        print(f"| {file}:{ln} | `{text[:70]}` | {t:.0f} | {100 * t / max(total, 1):.1f} % | "
              f"{top_reasons({n: num(r[j]) for j, n in why}, t)} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    files = sorted(args.dir.glob("*.sass.csv"))
    if not files:
        print(f"no *.sass.csv in {args.dir}", file=sys.stderr)
        return 1
    print("# Warp-state samples per instruction class (benchmarks/ncu_source_summary.py)")
    for p in files:
        summarize(p, args.top)
        src = p.with_name(p.name.replace(".sass.csv", ".src.csv"))
        if src.exists():
            summarize_lines(src, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())

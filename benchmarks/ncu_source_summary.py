"""Warp-state samples per SASS instruction, summed by instruction class (benchmarks/
gpu_ncu_source.sh's exports; no GPU needed).

    python benchmarks/ncu_source_summary.py DIR [--lines LINES.json] > summary.md

DIR holds ``<row>.sass.csv`` files: Nsight Compute's source page (``--page source --csv
--print-source sass``), one table per profiled kernel, one line per SASS instruction with
its address, its text and the sampling columns (every column whose name holds
"Sampling"). The first of those is taken as the sample count. Per kernel this prints the
total, the share of each instruction class (CLASSES: the first pattern that matches the
opcode names it) and the instructions with the most samples.

--lines: a JSON {kernel name substring: {address (int, as in the CSV): "file:line"}} made
from a local build of the same kernel (nvdisasm -g on the cubin: the same ptxas, so the
same addresses), to sum the samples of our kernels by source line too.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

# (class, regex on the opcode with its modifiers), the first match wins
CLASSES = [
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
    label, header, rows, out = "", None, [], []
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec:
                continue
            if "Address" in rec and "Source" in rec:
                if header is not None:
                    out.append((label, header, rows))
                header, rows = rec, []
                continue
            if header is None or len(rec) != len(header):
                label = " ".join(x for x in rec if x)[:160] or label  # a kernel name line, if any
                continue
            rows.append(rec)
    if header is not None:
        out.append((label, header, rows))
    return out


def num(x: str) -> float:
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def summarize(path: Path, lines: dict, top: int) -> None:
    for i, (label, header, rows) in enumerate(tables(path)):
        cols = [j for j, h in enumerate(header) if "Sampling" in h]
        if not cols:
            print(f"\n## {path.name} table {i}: no sampling column ({header[:8]})")
            continue
        a, s, c = header.index("Address"), header.index("Source"), cols[0]
        total = sum(num(r[c]) for r in rows)
        print(f"\n## {path.name}, kernel {i}: {label}")
        print(f"{len(rows)} instructions, {total:.0f} samples ({header[c]}); other sampling columns: "
              + ", ".join(header[j] for j in cols[1:]))
        by = defaultdict(lambda: [0.0] * len(cols))
        for r in rows:
            k = klass(opcode(r[s]))
            for t, j in enumerate(cols):
                by[k][t] += num(r[j])
        print("\n| class | " + " | ".join(header[j] for j in cols) + " | share |")
        print("|---|" + "---|" * (len(cols) + 1))
        for k, v in sorted(by.items(), key=lambda kv: -kv[1][0]):
            print(f"| {k} | " + " | ".join(f"{x:.0f}" for x in v) + f" | {100 * v[0] / max(total, 1):.1f} % |")
        print(f"\nTop {top} instructions:\n\n| address | SASS | samples | share |\n|---|---|---|---|")
        for r in sorted(rows, key=lambda r: -num(r[c]))[:top]:
            print(f"| {r[a]} | `{r[s].strip()[:90]}` | {num(r[c]):.0f} | {100 * num(r[c]) / max(total, 1):.1f} % |")
        table = next((m for key, m in lines.items() if key in label), None)
        if table:
            per = defaultdict(float)
            for r in rows:
                addr = int(r[a], 16) if r[a].startswith("0x") else int(num(r[a]))
                per[table.get(str(addr), "?")] += num(r[c])
            print(f"\nBy source line (top {top}):\n\n| line | samples | share |\n|---|---|---|")
            for ln, v in sorted(per.items(), key=lambda kv: -kv[1])[:top]:
                print(f"| {ln} | {v:.0f} | {100 * v / max(total, 1):.1f} % |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--lines", type=Path)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    lines = json.loads(args.lines.read_text()) if args.lines else {}
    files = sorted(args.dir.glob("*.sass.csv"))
    if not files:
        print(f"no *.sass.csv in {args.dir}", file=sys.stderr)
        return 1
    print("# Warp-state samples per instruction class (benchmarks/ncu_source_summary.py)")
    for p in files:
        summarize(p, lines, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())

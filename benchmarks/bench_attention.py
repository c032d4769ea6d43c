#!/usr/bin/env python3
"""Attention throughput: flashattn_triton against PyTorch SDPA (each backend forced),
FlexAttention (torch.compile) and a naive PyTorch implementation.

The sweep itself is flashattn_triton/bench/attention.py, also behind the
installed ``flashattn-triton bench`` command (quick by default there); this
script runs the full sweep by default and writes into benchmarks/results/h200/.

Examples (from the repository root, PYTHONPATH=.):
  python benchmarks/bench_attention.py --dry-run
  python benchmarks/bench_attention.py --quick
  python benchmarks/bench_attention.py --providers flashattn_triton,sdpa_flash --modes fwd
  python benchmarks/bench_attention.py --smoke --out /tmp/smoke        # CPU plumbing check
  python benchmarks/bench_attention.py --compare old.json --against new.json   # no GPU needed
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402

from flashattn_triton.bench.attention import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(default_out=C.DEFAULT_OUT))

"""Helpers shared by the kernel families: tile loads/stores, the dot wrapper,
launch configuration (autotune lists, pruning, env overrides)."""

from __future__ import annotations

import os
from typing import Dict, List, Optional

import torch
import triton
import triton.language as tl

# Read (never set) at import: Triton decides at decoration time whether
# @triton.jit gives a compiled or an interpreted function.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

# The kernels write log2(e) = 1.4426950408889634 (exp(x) == exp2(x * log2(e)))
# and ln(2) = 0.6931471805599453 (log(x) == log2(x) * ln(2)) as literals.

# Names of the arguments the autotuner keys on (besides the tensor dtypes,
# which Triton adds itself).
AUTOTUNE_KEYS = ["HEAD_DIM_PAD", "IS_CAUSAL", "SEQ_BUCKET"]

# Environment knobs (read at call time).
ENV_AUTOTUNE = "FLASHATTN_TRITON_AUTOTUNE"  # "0": no tuning, first valid config
ENV_CONFIG_PREFIX = "FLASHATTN_TRITON_CONFIG_"  # + FWD / BWD_DKDV / BWD_DQ


def head_dim_pad(head_dim: int) -> int:
    """Tiles are a power of two wide along d (at least 16, the smallest dot K)."""
    return max(16, triton.next_power_of_2(head_dim))


def seq_bucket(n: int) -> int:
    """Autotune bucket of a sequence length: a power of two, capped.

    Triton specialises integer arguments only on divisibility by 16 (and on
    the value 1), so passing this value does not trigger recompiles."""
    return min(triton.next_power_of_2(max(n, 16)), 16384)


def dot_precision(dtype: torch.dtype) -> str:
    """float32 inputs must not silently drop to tf32."""
    return "ieee" if dtype == torch.float32 else "tf32"


def make_configs(entries) -> List[triton.Config]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) tuples -> triton.Config list."""
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, w, s in entries]


# Shared memory per multiprocessor a block may use on Hopper (227 KiB), less
# a little for Triton's own scratch.
SMEM_BUDGET = 227 * 1024 - 1024
MAX_ACC_REGS = 128  # float32 accumulator registers per thread before spilling


def footprint(cfg: triton.Config, resident: str, n_resident: int, n_acc: int,
              head_dim_pad_: int, elem_bytes: int):
    """(shared-memory bytes, accumulator registers per thread) of a kernel
    that keeps ``n_resident`` tiles of the ``resident`` block (BLOCK_M or
    BLOCK_N) on chip, streams two tiles of the other block per pipeline stage
    and holds ``n_acc`` float32 accumulators of the resident block."""
    streamed = "BLOCK_N" if resident == "BLOCK_M" else "BLOCK_M"
    own, other = cfg.kwargs[resident], cfg.kwargs[streamed]
    smem = elem_bytes * head_dim_pad_ * (n_resident * own + 2 * max(cfg.num_stages, 1) * other)
    regs = n_acc * own * head_dim_pad_ // (32 * cfg.num_warps)
    return smem, regs


def prune_configs(configs: List[triton.Config], shape, head_dim_pad_: int,
                  elem_bytes: int) -> List[triton.Config]:
    """Drop configs that do not fit (see footprint); keep the last one if none does.
    shape: (resident block name, resident tiles, accumulators)."""
    kept = [c for c in configs
            if all(a <= b for a, b in zip(footprint(c, *shape, head_dim_pad_, elem_bytes),
                                          (SMEM_BUDGET, MAX_ACC_REGS)))]
    return kept or configs[-1:]


def config_from_env(name: str) -> Optional[triton.Config]:
    """Parse e.g. FLASHATTN_TRITON_CONFIG_FWD="BLOCK_M=128,BLOCK_N=64,num_warps=8,num_stages=3"."""
    text = os.environ.get(ENV_CONFIG_PREFIX + name)
    if not text:
        return None
    fields: Dict[str, int] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        fields[key.strip()] = int(value)
    try:
        return triton.Config({"BLOCK_M": fields["BLOCK_M"], "BLOCK_N": fields["BLOCK_N"]},
                             num_warps=fields.get("num_warps", 4),
                             num_stages=fields.get("num_stages", 2))
    except KeyError as exc:
        raise ValueError(f"{ENV_CONFIG_PREFIX + name}={text!r} must set BLOCK_M and BLOCK_N") from exc


def autotune_enabled() -> bool:
    return os.environ.get(ENV_AUTOTUNE, "1") != "0" and not INTERPRET


class Launcher:
    """Chooses how a kernel is launched: interpreter config, env override,
    autotuned, or the first valid config of the list (autotune off)."""

    def __init__(self, kernel, name: str, configs: List[triton.Config], shape,
                 interpret_config: triton.Config, preferred: Optional[Dict[int, tuple]] = None):
        """shape: (resident block, resident tiles, accumulators), see footprint.
        preferred: {max HEAD_DIM_PAD: (BLOCK_M, BLOCK_N, num_warps, num_stages)}, the
        measured best config of a head-dim class, tried first when not autotuning."""
        self.kernel = kernel
        self.name = name
        self.configs = configs
        self.shape = shape
        self.interpret_config = interpret_config
        self.preferred = sorted((preferred or {}).items())
        self.tuned = triton.autotune(
            configs=configs, key=AUTOTUNE_KEYS,
            prune_configs_by={"early_config_prune": self._prune})(kernel)

    @staticmethod
    def _elem_bytes(nargs) -> int:
        return nargs["Q"].element_size()

    def _prune(self, configs, nargs, **kwargs):
        return prune_configs(configs, self.shape, kwargs["HEAD_DIM_PAD"], self._elem_bytes(nargs))

    def fixed_config(self, head_dim_pad_: int, elem_bytes: int) -> Optional[triton.Config]:
        cfg = config_from_env(self.name)
        if cfg is not None:
            return cfg
        if INTERPRET:
            return self.interpret_config
        if not autotune_enabled():
            return self.default_config(head_dim_pad_, elem_bytes)
        return None

    def default_config(self, head_dim_pad_: int, elem_bytes: int) -> triton.Config:
        """The preferred config of the head-dim class if it fits, else the first that fits."""
        candidates = [entry for bound, entry in self.preferred if head_dim_pad_ <= bound][:1]
        ordered = make_configs(candidates) + self.configs
        return prune_configs(ordered, self.shape, head_dim_pad_, elem_bytes)[0]

    def __call__(self, grid, *args, **kwargs):
        """grid: callable of the chosen meta-parameters, as in Triton."""
        cfg = self.fixed_config(kwargs["HEAD_DIM_PAD"], args[0].element_size())
        if cfg is None:
            return self.tuned[grid](*args, **kwargs)
        return self.kernel[grid](*args, **kwargs, **cfg.all_kwargs())


# ---------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------

@triton.jit
def load_tile(ptrs, rows, n_rows, offs_d, HEAD_DIM: tl.constexpr,
              CHECK_ROWS: tl.constexpr, EVEN_D: tl.constexpr):
    """Load a (rows, HEAD_DIM_PAD) tile; out-of-range rows and padded
    columns read as 0 (padded columns then add 0 to every dot)."""
    if CHECK_ROWS:
        if EVEN_D:
            x = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
        else:
            x = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_DIM), other=0.0)
    else:
        if EVEN_D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
    return x


@triton.jit
def store_tile(ptrs, x, rows, n_rows, offs_d, HEAD_DIM: tl.constexpr, EVEN_D: tl.constexpr):
    if EVEN_D:
        tl.store(ptrs, x, mask=rows[:, None] < n_rows)
    else:
        tl.store(ptrs, x, mask=(rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_DIM))


@triton.jit
def mma(a, b, acc, DOT_PRECISION: tl.constexpr, INTERPRET: tl.constexpr):
    """acc + a @ b with float32 accumulation.

    Triton's interpreter stores bfloat16 as raw uint16 and multiplies those
    bits, so interpreted runs upcast the operands first (products of two
    16-bit floats are exact in float32, so the result is what the GPU gives)."""
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=DOT_PRECISION)

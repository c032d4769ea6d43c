"""Launch configurations: candidate lists, a shared-memory/register model that
prunes them, a committed per-GPU table tuned offline, and opt-in autotuning.

How a kernel's (BLOCK_M, BLOCK_N, num_warps, num_stages) is chosen, first match wins:
  1. FLASHATTN_TRITON_CONFIG_<KERNEL> (e.g. "BLOCK_M=128,BLOCK_N=64,num_warps=8,num_stages=3");
  2. under Triton's interpreter, a small fixed config;
  3. FLASHATTN_TRITON_AUTOTUNE=1: Triton's autotuner over the candidate list,
     its results cached on disk across processes;
  4. the table ``configs/sm<major><minor>.json`` (or the one in
     FLASHATTN_TRITON_TABLE_DIR) keyed by (kernel, dtype,
     padded head dims, causal, variant, length bucket), written by
     benchmarks/tune.py on that GPU; a variant without entries of its own
     (``variant_tag``) takes the plain entry, and a value head dim that pads
     differently from the query's (MLA's 192 / 128: key "d256v128") without
     entries takes those of the larger one ("d256");
  5. the preferred config of the head-dim class, else the first candidate that
     fits the model.
A call never tunes unless asked (3).  Choices are cached per key, so the host
cost of a call is a dict lookup.  A config that the GPU refuses to load for
want of shared memory (Triton's OutOfResources, raised before the kernel runs:
a GPU whose limit the model misjudges, or a build the model undercounts, such
as every score variant at once) is replaced at that first launch by the next
of ``smaller_config`` that loads, remembered for later calls, with a warning.
The one-launch backward (PairLauncher, "BWD_ONE") combines two kernels'
configs; its table entries hold six fields (PAIR_FIELDS).
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
import triton
from triton.runtime.errors import OutOfResources

from . import fastlaunch

# Read (never set) at import: Triton decides at decoration time whether
# @triton.jit gives a compiled or an interpreted function.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

ENV_AUTOTUNE = "FLASHATTN_TRITON_AUTOTUNE"  # "1": autotune (opt-in)
ENV_CONFIG_PREFIX = "FLASHATTN_TRITON_CONFIG_"  # + FWD / BWD_DKDV / BWD_DQ / BWD_ONE
# A directory whose sm<major><minor>.json replaces the committed table (e.g. a
# copy that benchmarks/tune.py --merge added entries to); read at each table
# lookup, and a kernel's choice is cached per key: set it before the first call.
ENV_TABLE_DIR = "FLASHATTN_TRITON_TABLE_DIR"
TABLE_DIR = Path(__file__).with_name("configs")

# Names of the arguments the autotuner keys on (besides the tensor dtypes).
AUTOTUNE_KEYS = ["HEAD_DIM_PAD", "HEAD_DIM_V_PAD", "MASK_LEFT", "MASK_RIGHT", "MASK_CHUNK", "IS_VARLEN",
                 "SEQ_BUCKET"]

# Candidates per kernel, (BLOCK_M, BLOCK_N, num_warps, num_stages), in order of
# preference (the H200 sweeps in benchmarks/results/h200/ ranked them).
CANDIDATES: Dict[str, List[Tuple[int, int, int, int]]] = {
    "FWD": [(128, 64, 8, 3), (128, 64, 4, 3), (64, 64, 4, 4), (128, 128, 8, 3), (128, 64, 8, 4),
            (128, 128, 4, 3), (128, 32, 8, 2), (64, 32, 4, 2), (64, 64, 4, 2), (32, 32, 4, 2),
            (32, 16, 4, 2)],  # last: head dim 512 in float32
    # BLOCK_M: query loop, BLOCK_N: owned keys
    "BWD_DKDV": [(64, 128, 8, 3), (64, 128, 8, 2), (32, 64, 4, 2), (32, 128, 4, 2), (64, 128, 4, 2),
                 (64, 64, 4, 3), (64, 64, 8, 2), (64, 64, 8, 3), (32, 64, 8, 2), (16, 64, 4, 2),
                 (16, 32, 4, 2), (16, 32, 8, 2), (16, 16, 8, 1)],  # last two: head dim 512
    # BLOCK_M: owned queries, BLOCK_N: key loop
    "BWD_DQ": [(128, 64, 8, 3), (128, 64, 8, 2), (64, 64, 4, 3), (128, 32, 8, 3), (128, 64, 4, 2),
               (128, 32, 8, 2), (64, 32, 4, 2), (64, 64, 8, 2), (32, 32, 4, 2),
               (16, 16, 4, 2)],  # last: d 512, fp32
}
# Measured best of a head-dim class (max padded head dim -> config), used
# when the table has no entry: tune_sweep_1.log on the H200.
PREFERRED = {"FWD": {64: (128, 64, 4, 3)}, "BWD_DKDV": {64: (32, 64, 4, 2)}, "BWD_DQ": {64: (64, 64, 4, 3)}}
INTERPRET_CONFIG = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=4, num_stages=1)
# Compile options that every portable launch passes (the decode, combine and
# helper kernels too).  enable_fp_fusion: the kernels were written, tuned and
# validated with multiply-adds contracted into FMAs (e.g. the 16-bit builds'
# exp2 argument s * scale - m; the float32 builds round s * scale first,
# score.score_tile's ROUND_SCALED), Triton's default up to 3.9; 3.9 warns that
# the default turns off in 3.10, so it is asked for by name.  Same compiled
# code on 3.4-3.9.
COMPILE_OPTIONS = {"enable_fp_fusion": True}

# The model's shared-memory budget: what a block may use on the GPU (the
# opt-in per-block limit Triton checks when it loads a kernel: 227 KiB on
# Hopper, 163 KiB on A100, 99 KiB on sm_86 / sm_89 / sm_120), less a little
# for Triton's own scratch.  SMEM_BUDGET is Hopper's, for callers that name no
# device (tools, tests); a launch takes its device's (smem_budget).
SMEM_SCRATCH = 1024
SMEM_BUDGET = 227 * 1024 - SMEM_SCRATCH
MAX_ACC_REGS = 128  # float32 accumulator registers per thread before spilling


# Per-block shared-memory limits (bytes, opt-in) of CUDA architectures, for
# answering without the GPU (``flashattn-triton info --arch``,
# benchmarks/compile_check.py --chosen); a launch asks the device itself
# (smem_budget).
SMEM_LIMIT_BY_ARCH = {"sm80": 166912, "sm86": 101376, "sm87": 166912, "sm89": 101376, "sm90": 232448,
                      "sm100": 232448, "sm103": 232448, "sm120": 101376}


def arch_budget(arch: str) -> int:
    """The model's budget on a GPU of this arch ("sm89"); Hopper's for an
    arch not in SMEM_LIMIT_BY_ARCH."""
    return SMEM_LIMIT_BY_ARCH.get(arch, SMEM_BUDGET + SMEM_SCRATCH) - SMEM_SCRATCH


@functools.lru_cache(maxsize=None)
def smem_budget(device_index: int) -> int:
    """SMEM_BUDGET for the CUDA device of this index: its per-block shared
    memory limit (Triton's driver, max_shared_mem) less SMEM_SCRATCH; Hopper's
    where no GPU driver is active (tools and tests that simulate a GPU)."""
    try:
        props = triton.runtime.driver.active.utils.get_device_properties(device_index)
    except RuntimeError:  # no active driver: no GPU here
        return SMEM_BUDGET
    return int(props["max_shared_mem"]) - SMEM_SCRATCH


def cuda_index(device: torch.device) -> int:
    """The CUDA device index of ``device`` (the current device for a bare "cuda")."""
    return device.index if device.index is not None else torch.cuda.current_device()


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # (absent from CPU builds)


def current_stream_handle(index: int) -> int:
    """The handle of device ``index``'s current CUDA stream, without making a
    Stream object (0 for every device's default stream: a key per stream and
    device needs the index too)."""
    if _RAW_STREAM is None:
        return torch.cuda.current_stream(index).cuda_stream
    return _RAW_STREAM(index)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1), for host code: triton.next_power_of_2
    is a constexpr_function, slower to call."""
    return 1 << (n - 1).bit_length()


def head_dim_pad(head_dim: int) -> int:
    """Tiles are a power of two wide along d (at least 16, the smallest dot K)."""
    return max(16, next_power_of_2(head_dim))


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for grid sizes (triton.cdiv is a constexpr_function: slower to call)."""
    return -(-a // b)


def seq_bucket(n: int) -> int:
    """Length bucket: a power of two, capped (a table/autotune key, not a shape)."""
    return min(1 << (max(n, 16) - 1).bit_length(), 16384)


def dot_precision(dtype: torch.dtype) -> str:
    """float32 inputs must not silently drop to tf32."""
    return "ieee" if dtype == torch.float32 else "tf32"


def make_config(entry) -> triton.Config:
    bm, bn, w, s = entry
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)


# The fields of a table entry (and of FLASHATTN_TRITON_CONFIG_<kernel>): one
# kernel's tiles, or, for the kernels that run two kernels' programs in one
# launch (PairLauncher), the first part's tiles and the second's.
ENTRY_FIELDS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
PAIR_FIELDS = ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "num_warps", "num_stages")
PAIR_KERNELS = ("BWD_ONE",)


def entry_fields(kernel: str) -> Tuple[str, ...]:
    return PAIR_FIELDS if kernel in PAIR_KERNELS else ENTRY_FIELDS


def check_entry(key: str, value, where: str = "config table") -> Tuple[int, ...]:
    """A table entry as a tuple: as many positive integers as its key's
    kernel (the key's first field) takes (entry_fields); else ValueError
    naming the key."""
    fields = entry_fields(key.split("|", 1)[0])
    if (not isinstance(value, (list, tuple)) or len(value) != len(fields)
            or not all(type(x) is int and x > 0 for x in value)):
        raise ValueError(f"{where}: entry {key!r} is {value!r}, not [{', '.join(fields)}] "
                         f"({len(fields)} positive integers)")
    return tuple(value)


# What each kernel keeps on chip (see footprint): (resident block, resident
# tiles, float32 accumulator tiles), each tile "d" (as wide as the query/key
# head dim) or "v" (the value head dim).
RESIDENT = {
    "FWD": ("BLOCK_M", ("d",), ("v",)),  # Q; O
    "BWD_DKDV": ("BLOCK_N", ("d", "v"), ("d", "v")),  # K, V; dK, dV
    "BWD_DQ": ("BLOCK_M", ("d", "v"), ("d",)),  # Q, dO; dQ
}


def footprint(entry, resident, d_pad: int, elem_bytes: int, dv_pad: Optional[int] = None):
    """(shared-memory bytes, accumulator registers per thread) of a kernel
    that keeps the resident tiles of the resident block (BLOCK_M or BLOCK_N)
    on chip, streams one tile of each head dim (d and v) of the other block
    per pipeline stage and holds the float32 accumulator tiles of the
    resident block (resident as in RESIDENT; dv_pad None: d_pad)."""
    name, tiles, accs = resident
    bm, bn, warps, stages = entry
    own, other = (bm, bn) if name == "BLOCK_M" else (bn, bm)
    width = {"d": d_pad, "v": d_pad if dv_pad is None else dv_pad}
    smem = elem_bytes * (own * sum(width[t] for t in tiles)
                         + max(stages, 1) * other * (width["d"] + width["v"]))
    regs = own * sum(width[t] for t in accs) // (32 * warps)
    return smem, regs


def fits(entry, resident, d_pad: int, elem_bytes: int, dv_pad: Optional[int] = None,
         budget: int = SMEM_BUDGET) -> bool:
    """Whether entry's modelled footprint fits budget bytes of shared memory
    and MAX_ACC_REGS accumulator registers.  The model holds num_stages tiles
    of the streamed block where Triton's pipeliner keeps num_stages - 1 (and
    some scratch): for the plain kernels it overestimates, so an entry it
    accepts loads (benchmarks/compile_check.py --arch 89 --chosen compiles
    the chosen entries for a GPU and fails a build over its limit).  Builds
    with every score variant on at once can exceed it (docs/api.md, "GPUs
    other than Hopper")."""
    smem, regs = footprint(entry, resident, d_pad, elem_bytes, dv_pad)
    return smem <= budget and regs <= MAX_ACC_REGS


_ENV_KEYS: Dict[str, object] = {}


def env_raw(name: str):
    """The value of an environment variable as os.environ stores it (bytes on
    POSIX), or None: a lookup in os.environ's backing dict, without the key
    encoding that os.environ.get does on every call (about 2 us).  For
    comparing values; env_value gives the string."""
    environ = os.environ
    data = getattr(environ, "_data", None)
    if type(data) is not dict:
        return environ.get(name)
    key = _ENV_KEYS.get(name)
    if key is None:
        key = _ENV_KEYS[name] = environ.encodekey(name)  # type: ignore[attr-defined]
    return data.get(key)


_SNAPSHOT_KEYS: Dict[tuple, tuple] = {}


def env_snapshot(names: tuple) -> tuple:
    """(env_raw(name) for name in names), in one pass: a cache key of the
    switches that some host code reads."""
    environ = os.environ
    data = getattr(environ, "_data", None)
    if type(data) is not dict:
        return tuple(map(environ.get, names))
    keys = _SNAPSHOT_KEYS.get(names)
    if keys is None:
        keys = _SNAPSHOT_KEYS[names] = tuple(map(environ.encodekey, names))  # type: ignore[attr-defined]
    return tuple(map(data.get, keys))


def env_value(name: str) -> Optional[str]:
    """os.environ.get(name), faster (env_raw)."""
    raw = env_raw(name)
    if raw is None or isinstance(raw, str):
        return raw
    return os.environ.decodevalue(raw)  # type: ignore[attr-defined]


def env_choice(name: str, choices: Tuple[str, ...]) -> Optional[str]:
    """A variable that takes one of ``choices`` (spaces ignored): its value,
    None when unset or empty; anything else ValueError naming it."""
    value = env_value(name)
    text = "" if value is None else value.strip()
    if text and text not in choices:
        raise ValueError(f"{name}={value!r}: must be {', '.join(choices[:-1])} or {choices[-1]}, or unset")
    return text or None


def parse_switch(name: str, value: Optional[str]) -> Optional[bool]:
    """An on/off variable's value: None when unset or empty, True for "1",
    False for "0" (spaces ignored); anything else ValueError naming it (a
    "true" or "off" read as one or the other would differ per variable)."""
    if value is None:
        return None
    text = value.strip()
    if text in ("", "0", "1"):
        return None if not text else text == "1"
    raise ValueError(f"{name}={value!r}: must be 0 (off) or 1 (on), or unset")


def env_switch(name: str) -> Optional[bool]:
    """parse_switch of the variable's current value."""
    return parse_switch(name, env_value(name))


def env_switch_or(name: str, default):
    """The switch's value where set, else ``default`` (any object: a rule by shape)."""
    value = env_switch(name)
    return default if value is None else value


def env_fields(name: str) -> Optional[Dict[str, int]]:
    """FLASHATTN_TRITON_CONFIG_<name> ("KEY=VALUE,...") as a dict, None if
    unset; ValueError naming the variable for anything but KEY=positive int
    pairs, with tiles (BLOCK_*) and num_warps powers of two."""
    var = ENV_CONFIG_PREFIX + name
    text = env_value(var)
    if not text:
        return None
    fields: Dict[str, int] = {}
    for part in text.split(","):
        key, eq, value = (s.strip() for s in part.partition("="))
        try:
            number = int(value) if eq and key else None
        except ValueError:
            number = None
        if number is None:
            raise ValueError(f"{var}={text!r}: {part.strip()!r} is not KEY=INTEGER (for example "
                             f"BLOCK_M=64,BLOCK_N=32,num_warps=4,num_stages=2)")
        if number < 1 or ((key.startswith("BLOCK") or key == "num_warps") and number & (number - 1)):
            kind = "a power of two" if key.startswith("BLOCK") or key == "num_warps" else "a positive integer"
            raise ValueError(f"{var}={text!r}: {key} must be {kind}, got {number}")
        fields[key] = number
    return fields


def config_from_env(name: str) -> Optional[triton.Config]:
    """Parse FLASHATTN_TRITON_CONFIG_<name> (ENTRY_FIELDS; BLOCK_M and BLOCK_N required)."""
    fields = env_fields(name)
    if fields is None:
        return None
    var = ENV_CONFIG_PREFIX + name
    unknown = sorted(set(fields) - set(ENTRY_FIELDS))
    if unknown:
        raise ValueError(f"{var}={env_value(var)!r}: unknown fields {unknown} (allowed: {list(ENTRY_FIELDS)})")
    if "BLOCK_M" not in fields or "BLOCK_N" not in fields:
        raise ValueError(f"{var}={env_value(var)!r} must set BLOCK_M and BLOCK_N")
    return make_config((fields["BLOCK_M"], fields["BLOCK_N"], fields.get("num_warps", 4),
                        fields.get("num_stages", 2)))


def autotune_enabled() -> bool:
    return env_switch(ENV_AUTOTUNE) is True and not INTERPRET


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def load_table(arch: str) -> Dict[str, Tuple[int, ...]]:
    """{key: config} of a GPU (arch "sm90"), {} if none is committed (or in
    FLASHATTN_TRITON_TABLE_DIR, when set)."""
    folder = env_value(ENV_TABLE_DIR)
    if folder and not Path(folder).is_dir():
        raise ValueError(f"{ENV_TABLE_DIR}={folder!r} is not a directory (it names the folder of the per-GPU "
                         "tables, e.g. sm90.json)")
    return _read_table(Path(folder or TABLE_DIR) / f"{arch}.json")


@functools.lru_cache(maxsize=None)
def _read_table(path: Path) -> Dict[str, Tuple[int, ...]]:
    """A committed table's entries; {} if the file does not exist; ValueError
    naming the file for one that cannot be read as {"configs": {key: entry}}."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"config table {path}: cannot be read as JSON ({type(e).__name__}: {e})") from None
    configs = data.get("configs") if isinstance(data, dict) else None
    if not isinstance(configs, dict):
        raise ValueError(f"config table {path}: expected an object with a 'configs' object of entries, got "
                         f"{type(data).__name__}" + (f" with keys {sorted(data)}" if isinstance(data, dict) else ""))
    return {k: check_entry(k, v, str(path)) for k, v in configs.items()}


# Variants that change a kernel's register pressure enough to want configs of
# their own (a mask tile, Philox, tanh, ...), most demanding first; last, packed
# batches, whose many short documents favour other tiles and pipeline depths
# than one long sequence (the H200's varlen backward: dK/dV 4.9 -> 4.4 ms with
# 2 stages instead of the plain table's 3, session8/profile_bwd.json).
VARIANT_TAGS = ("mask", "dropout", "softcap", "alibi", "window", "varlen")


def variant_tag(mods, window_left, varlen: bool = False, chunk: int = 0) -> str:
    """The table's variant of a launch: "" (plain) or the first of VARIANT_TAGS
    that the score modifications (kernels.score.KernelMods), a left window
    edge (or chunked attention's chunks, whose starts are left edges too) or
    a packed batch turn on."""
    # in VARIANT_TAGS order (a chain of tests: this runs on every launch)
    if mods.bias is not None:
        return "mask"
    if mods.dropout_p > 0:
        return "dropout"
    if mods.softcap > 0:
        return "softcap"
    if mods.alibi is not None:
        return "alibi"
    if window_left is not None or chunk:
        return "window"
    return "varlen" if varlen else ""


def table_key(kernel: str, dtype: torch.dtype, d_pad: int, causal: bool, bucket: int,
              tag: str = "", dv_pad: Optional[int] = None) -> str:
    """The table's key; the head-dim field is "d<d_pad>", or "d<d_pad>v<dv_pad>"
    when the value head dim pads to another width."""
    mode = ("causal" if causal else "full") + (f"+{tag}" if tag else "")
    dims = f"d{d_pad}" if dv_pad is None or dv_pad == d_pad else f"d{d_pad}v{dv_pad}"
    return f"{kernel}|{_dtype_name(dtype)}|{dims}|{mode}|n{bucket}"


@functools.lru_cache(maxsize=None)
def _arch(device_index: int) -> str:
    major, minor = torch.cuda.get_device_capability(device_index)
    return f"sm{major}{minor}"


def table_lookup(kernel: str, arch: str, dtype: torch.dtype, d_pad: int, causal: bool,
                 bucket: int, tag: str = "", dv_pad: Optional[int] = None
                 ) -> Optional[Tuple[int, ...]]:
    """The table's config for this key; fp16 and bf16 stand in for each other,
    the nearest tuned length bucket for an untuned one, the plain entry for a
    variant without entries, and, for head dims that pad differently (dv_pad
    != d_pad) without entries, those of the larger padded head dim."""
    table = load_table(arch)
    if not table:
        return None
    dtypes = [dtype] + ([torch.bfloat16 if dtype == torch.float16 else torch.float16]
                        if dtype in (torch.float16, torch.bfloat16) else [])
    dims = [(d_pad, d_pad)]
    if dv_pad is not None and dv_pad != d_pad:
        dims = [(d_pad, dv_pad), (max(d_pad, dv_pad),) * 2]
    for dq, dv in dims:
        for t in ([tag, ""] if tag else [""]):
            for dt in dtypes:
                prefix = table_key(kernel, dt, dq, causal, 0, t, dv).rsplit("|", 1)[0] + "|n"
                buckets = sorted(int(k[len(prefix):]) for k in table if k.startswith(prefix))
                if buckets:
                    best = min(buckets, key=lambda b: (abs(b.bit_length() - bucket.bit_length()), -b))
                    return table[prefix + str(best)]
    return None


_CONFIG_KWARGS: Dict[int, Tuple[triton.Config, dict]] = {}


def _config_kwargs(cfg: triton.Config) -> dict:
    """cfg.all_kwargs() and COMPILE_OPTIONS, built once per config object
    (choose() returns the same objects)."""
    hit = _CONFIG_KWARGS.get(id(cfg))
    if hit is None or hit[0] is not cfg:
        if len(_CONFIG_KWARGS) > 256:  # configs from the environment are new objects per call
            _CONFIG_KWARGS.clear()
        hit = _CONFIG_KWARGS[id(cfg)] = (cfg, {**cfg.all_kwargs(), **COMPILE_OPTIONS})
    return hit[1]


def smaller_config(cfg: triton.Config) -> Optional[triton.Config]:
    """The next config to try when cfg needs more shared memory than the GPU
    has, None when nothing is left: one pipeline stage fewer down to two
    (each stage holds one streamed tile of each head dim); then the widest
    BLOCK_* tile halved, down to 16 (every kernel takes power-of-two tiles of
    16 and up; the dropout bits need multiples of 16); then one stage (no
    pipelining)."""
    stages = cfg.num_stages
    blocks = {k: v for k, v in cfg.kwargs.items() if k.startswith("BLOCK_")}
    widest = max(blocks, key=lambda k: blocks[k], default=None)
    if stages > 2:
        stages -= 1
    elif widest is not None and blocks[widest] > 16:
        blocks[widest] //= 2
    elif stages > 1:
        stages = 1
    else:
        return None
    return triton.Config({**cfg.kwargs, **blocks}, num_warps=cfg.num_warps, num_stages=stages)


def _describe(cfg: triton.Config) -> str:
    fields = [f"{k}={v}" for k, v in cfg.kwargs.items()]
    return ",".join(fields + [f"num_warps={cfg.num_warps}", f"num_stages={cfg.num_stages}"])


class Launcher:
    """Launches one kernel with the config chosen as the module doc says."""

    def __init__(self, kernel, name: str, resident=None):
        """resident: what the kernel keeps on chip (RESIDENT[name] if None), see footprint."""
        self.kernel = fastlaunch.install(kernel)
        self.name = name
        self.resident = RESIDENT[name] if resident is None else resident
        self.candidates = CANDIDATES[name]
        self._tuned = None
        # configs the GPU refused (OutOfResources) -> the smaller one launched instead
        self._smaller: Dict[tuple, Tuple[triton.Config, triton.Config]] = {}

    def tuned(self):
        if self._tuned is None:
            kwargs = dict(configs=[make_config(c) for c in self.candidates], key=AUTOTUNE_KEYS,
                          prune_configs_by={"early_config_prune": self._prune})
            try:  # on-disk cache of tuning results (Triton >= 3.4)
                self._tuned = triton.autotune(**kwargs, cache_results=True)(self.kernel)
            except TypeError:
                self._tuned = triton.autotune(**kwargs)(self.kernel)
        return self._tuned

    def _prune(self, configs, nargs, **kwargs):
        q = nargs["Q"]
        budget = smem_budget(cuda_index(q.device))
        kept = [c for c in configs if fits((c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps,
                                            c.num_stages), self.resident, kwargs["HEAD_DIM_PAD"],
                                           q.element_size(), kwargs["HEAD_DIM_V_PAD"], budget)]
        return kept or configs[-1:]

    def default_entry(self, d_pad: int, elem_bytes: int, dv_pad: Optional[int] = None,
                      budget: int = SMEM_BUDGET):
        """The preferred config of the head-dim class (the larger padded head
        dim) if it fits budget, else the first that fits."""
        widest = d_pad if dv_pad is None else max(d_pad, dv_pad)
        preferred = [e for bound, e in sorted(PREFERRED.get(self.name, {}).items()) if widest <= bound][:1]
        ordered = preferred + self.candidates
        for entry in ordered:
            if fits(entry, self.resident, d_pad, elem_bytes, dv_pad, budget):
                return entry
        return ordered[-1]

    def entry_for(self, arch: str, budget: int, dtype: torch.dtype, d_pad: int, causal: bool,
                  bucket: int, tag: str = "", dv_pad: Optional[int] = None) -> Tuple[int, ...]:
        """The entry of 4-5 in the module doc for a GPU of this arch
        ("sm90") and shared-memory budget: the table's if it fits, else
        default_entry."""
        elem = dtype.itemsize
        entry = table_lookup(self.name, arch, dtype, d_pad, causal, bucket, tag, dv_pad)
        if entry is None or not fits(entry, self.resident, d_pad, elem, dv_pad, budget):
            entry = self.default_entry(d_pad, elem, dv_pad, budget)
        return entry

    @functools.lru_cache(maxsize=1024)
    def choose(self, device_index: int, dtype: torch.dtype, d_pad: int, causal: bool,
               bucket: int, tag: str = "", dv_pad: Optional[int] = None) -> triton.Config:
        return make_config(self.entry_for(_arch(device_index), smem_budget(device_index), dtype, d_pad,
                                          causal, bucket, tag, dv_pad))

    def config(self, device: torch.device, dtype: torch.dtype, d_pad: int, causal: bool,
               bucket: int, tag: str = "", dv_pad: Optional[int] = None) -> Optional[triton.Config]:
        """The config to launch with, or None to autotune."""
        cfg = config_from_env(self.name)
        if cfg is not None:
            return cfg
        if INTERPRET or device.type != "cuda":
            return INTERPRET_CONFIG
        if autotune_enabled():
            return None
        return self.choose(cuda_index(device),
                           dtype, d_pad, causal, bucket, tag, dv_pad)

    def __call__(self, grid, key, *args, **kwargs):
        """grid: callable of the chosen meta-parameters, as in Triton;
        key: (dtype, padded head dim, causal, length bucket, variant tag,
        padded value head dim) for the config choice."""
        device = fastlaunch.compile_only_device() or args[0].device  # meta tensors when compiling only
        cfg = self.config(device, *key)
        if cfg is None:
            if fastlaunch.compile_only_device() is not None:
                return None  # autotuning needs real launches
            fastlaunch.not_replayable()  # benchmarks, then the tuned config: nothing to repeat as is
            return self.tuned()[grid](*args, **kwargs, **COMPILE_OPTIONS)
        if self._smaller:
            cfg = self._smaller.get((id(cfg), device.index), (cfg, cfg))[1]
        try:
            return self._launch(cfg, grid, args, kwargs)
        except OutOfResources as exc:
            return self._launch_smaller(cfg, device, exc, grid, args, kwargs)

    def _launch(self, cfg: triton.Config, grid, args, kwargs):
        run = self.kernel.run
        if fastlaunch.SUPPORTED and isinstance(run, fastlaunch.FastRun):
            return run.launch(args, {**kwargs, **_config_kwargs(cfg)}, grid)
        return run(*args, grid=grid, warmup=False, **kwargs, **_config_kwargs(cfg))

    def _launch_smaller(self, cfg: triton.Config, device, exc: OutOfResources, grid, args, kwargs):
        """Launch with the first of smaller_config(cfg), smaller_config of that,
        ... that the GPU loads (OutOfResources is raised when the compiled
        kernel is loaded, before it runs); later launches of cfg on this device
        take it (__call__).  Re-raises when nothing smaller is left."""
        tried = cfg
        while True:
            smaller = smaller_config(tried)
            if smaller is None:
                raise exc
            try:
                out = self._launch(smaller, grid, args, kwargs)
            except OutOfResources:
                tried = smaller
                continue
            self._smaller[(id(cfg), device.index)] = (cfg, smaller)  # cfg kept alive: its id stays unique
            warnings.warn(f"flashattn_triton: {self.name} config {_describe(cfg)} needs more shared memory "
                          f"than this GPU has ({exc}); using {_describe(smaller)}", RuntimeWarning, stacklevel=2)
            return out


class PairLauncher(Launcher):
    """Launches a kernel that does the work of two Launchers' kernels in one
    grid (kernels/bwd.py _bwd_dkdv_dq): the first part's tiles as BLOCK_M1 /
    BLOCK_N1, the second's as BLOCK_M2 / BLOCK_N2, and one num_warps and
    num_stages for both (PAIR_FIELDS).  The config, first match wins:
      1. FLASHATTN_TRITON_CONFIG_<name> (e.g. "num_warps=8,num_stages=2")
         overrides any of the six fields of what follows;
      2. a part's config forced by its own variable, or under Triton's
         interpreter: the parts' configs combined (4);
      3. the table's <name> entry (benchmarks/tune.py --kernels <name>), if
         both parts fit the model at its warps and stages (entry_fits);
      4. the parts' configs combined: each part's tiles, the larger num_warps,
         the first part's num_stages (the longer programs'), lowered until
         both parts fit the shared-memory model (fits, each part's resident).
    No autotuning: config() raises when a part would tune (the caller
    launches the parts separately then)."""

    # Tuning candidates (pair_candidates): tiles at least this wide, and these
    # pipeline depths.  The 16-wide tiles of CANDIDATES serve head dims of 512
    # (and float32), which the one launch is not tuned for.
    MIN_TILE = 32
    STAGES = (2, 3)

    def __init__(self, kernel, name: str, first: Launcher, second: Launcher):
        self.kernel = fastlaunch.install(kernel)
        self.name = name
        self.parts = (first, second)
        self.resident = None
        self.candidates = []
        self._tuned = None
        self._configs: Dict[tuple, triton.Config] = {}
        self._smaller = {}
        self._forced = tuple(ENV_CONFIG_PREFIX + p.name for p in self.parts)

    def tuned(self):
        raise RuntimeError(f"{self.name}: the one-launch form is not autotuned")

    def entry_fits(self, entry, d_pad: int, elem_bytes: int, dv_pad: Optional[int] = None,
                   budget: int = SMEM_BUDGET) -> bool:
        """Both parts of a six-field entry fit the model at its warps and stages."""
        bm1, bn1, bm2, bn2, warps, stages = entry
        return all(fits(part, p.resident, d_pad, elem_bytes, dv_pad, budget)
                   for part, p in zip(((bm1, bn1, warps, stages), (bm2, bn2, warps, stages)), self.parts))

    def pair_candidates(self, d_pad: int, elem_bytes: int, dv_pad: Optional[int] = None) -> List[tuple]:
        """Six-field entries to tune: each part's candidate tiles (at least
        MIN_TILE wide, in the parts' order of preference) paired with those of
        the other part's candidates of the same num_warps, at each of STAGES
        where both parts fit the model."""
        def tiles(part, warps):
            return list(dict.fromkeys((bm, bn) for bm, bn, w, _ in part.candidates
                                      if w == warps and min(bm, bn) >= self.MIN_TILE))
        first, second = self.parts
        out = []
        for warps in dict.fromkeys(w for *_, w, _ in first.candidates):
            for stages in self.STAGES:
                for a in tiles(first, warps):
                    for b in tiles(second, warps):
                        entry = (*a, *b, warps, stages)
                        if self.entry_fits(entry, d_pad, elem_bytes, dv_pad):
                            out.append(entry)
        return out

    def combine(self, a: triton.Config, b: triton.Config, d_pad: int, elem_bytes: int,
                dv_pad: Optional[int] = None, budget: int = SMEM_BUDGET) -> tuple:
        """The six fields of the parts' configs a and b combined (4 in the class doc)."""
        warps, stages = max(a.num_warps, b.num_warps), a.num_stages
        entry = (a.kwargs["BLOCK_M"], a.kwargs["BLOCK_N"], b.kwargs["BLOCK_M"], b.kwargs["BLOCK_N"])
        while stages > 1 and not self.entry_fits((*entry, warps, stages), d_pad, elem_bytes, dv_pad, budget):
            stages -= 1
        return (*entry, warps, stages)

    @functools.lru_cache(maxsize=1024)
    def table_entry(self, device_index: int, dtype: torch.dtype, d_pad: int, causal: bool,
                    bucket: int, tag: str = "", dv_pad: Optional[int] = None) -> Optional[tuple]:
        """The table's entry for this key (3 in the class doc), or None."""
        entry = table_lookup(self.name, _arch(device_index), dtype, d_pad, causal, bucket, tag, dv_pad)
        elem = dtype.itemsize
        fit = entry is not None and self.entry_fits(entry, d_pad, elem, dv_pad, smem_budget(device_index))
        return entry if fit else None

    def config(self, device: torch.device, dtype: torch.dtype, d_pad: int, causal: bool,
               bucket: int, tag: str = "", dv_pad: Optional[int] = None) -> Optional[triton.Config]:
        a, b = (p.config(device, dtype, d_pad, causal, bucket, tag, dv_pad) for p in self.parts)
        if a is None or b is None:
            raise RuntimeError(f"{self.name}: the one-launch form is not autotuned")
        entry = None
        budget = SMEM_BUDGET
        if not INTERPRET and device.type == "cuda":
            index = cuda_index(device)
            budget = smem_budget(index)
            if not any(env_snapshot(self._forced)):
                entry = self.table_entry(index, dtype, d_pad, causal, bucket, tag, dv_pad)
        fields = env_fields(self.name)
        key = (entry, a.kwargs["BLOCK_M"], a.kwargs["BLOCK_N"], a.num_warps, a.num_stages,
               b.kwargs["BLOCK_M"], b.kwargs["BLOCK_N"], b.num_warps, b.num_stages,
               None if fields is None else tuple(sorted(fields.items())), dtype, d_pad, dv_pad, budget)
        cfg = self._configs.get(key)
        if cfg is None:
            if entry is None:
                entry = self.combine(a, b, d_pad, dtype.itemsize, dv_pad, budget)
            meta = dict(zip(PAIR_FIELDS, entry))
            unknown = set(fields or ()) - set(meta)
            if unknown:
                raise ValueError(f"{ENV_CONFIG_PREFIX + self.name}: unknown fields {sorted(unknown)} "
                                 f"(allowed: {sorted(meta)})")
            meta.update(fields or {})
            warps, stages = meta.pop("num_warps"), meta.pop("num_stages")
            cfg = self._configs[key] = triton.Config(meta, num_warps=warps, num_stages=stages)
        return cfg

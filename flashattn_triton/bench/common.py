"""The benchmark harness: FLOP convention, providers (ours and PyTorch's
attentions), timing, environment capture, JSON/markdown writers, progress.

Shared by ``flashattn-triton bench`` (:mod:`flashattn_triton.bench.attention`)
and the scripts in the repository's ``benchmarks/`` folder (through
``benchmarks/common.py``, which re-exports this module). torch and triton are
imported inside the functions that need them.

Timing runs on CUDA (``triton.testing.do_bench``); ``set_device("cpu")``
switches to a wall-clock median, for plumbing smoke runs on machines
without a GPU (the numbers then say nothing about speed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The checkout that holds this package (for `git rev-parse`); an installed
# copy has no .git there and the commit comes from BENCH_GIT_COMMIT.
SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent

OURS = "flashattn_triton"
# Ours with deterministic=True (the portable backward without atomics; the
# forward is the same as OURS): to state what determinism costs.
OURS_DET = "flashattn_triton_det"
# Ours on the portable kernels (FLASHATTN_TRITON_BACKEND=portable around its
# calls): the tier the Hopper kernels are judged against, row by row.
OURS_PORTABLE = "flashattn_triton_portable"
# Ours on the Hopper kernels (FLASHATTN_TRITON_BACKEND=hopper): where the
# default picks the portable tier (short sequences), the data for that rule.
OURS_HOPPER = "flashattn_triton_hopper"
OURS_ALL = (OURS, OURS_DET, OURS_PORTABLE, OURS_HOPPER)
PROVIDERS = (OURS, "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math", "flex", "naive", OURS_DET,
             OURS_PORTABLE, OURS_HOPPER)
PEERS = PROVIDERS[1:]
DEVICE = "cuda"  # set_device("cpu") for smoke runs of the plumbing
MODES = ("fwd", "bwd", "fwd_bwd")
DTYPE_NAMES = ("bf16", "fp16", "fp32")

SHORT_BEGIN = "<!-- short:begin -->"
SHORT_END = "<!-- short:end -->"


# --------------------------------------------------------------------------- FLOPs

def attended_pairs(seqlen_q: int, seqlen_k: int, causal: bool = False, window=(-1, -1)) -> int:
    """(query, key) pairs a mask keeps, flash-attn semantics: bottom-right
    aligned, key j visible from row i iff i + Nk - Nq - left <= j <= i + Nk - Nq
    + right (causal: right = 0; -1: unbounded).  Rows with no key count 0."""
    left, right = window
    if causal:
        right = 0
    shift, total = seqlen_k - seqlen_q, 0
    for i in range(seqlen_q):
        hi = seqlen_k - 1 if right < 0 else min(seqlen_k - 1, i + shift + right)
        lo = 0 if left < 0 else max(0, i + shift - left)
        total += max(0, hi - lo + 1)
    return total


def attn_flops(batch: int, heads_q: int, seqlen_q: int, seqlen_k: int, head_dim: int,
               causal: bool, mode: str = "fwd", window=(-1, -1), head_dim_v: int | None = None) -> float:
    """The single FLOP convention used by every benchmark.

    fwd = 4 * B * Hq * Nq * Nk * d (two matmuls, 2 FLOPs per multiply-add),
    halved when causal; bwd = 2.5 x fwd; fwd_bwd = 3.5 x fwd.  The halving is
    the papers' convention for square causal shapes (Nq = Nk, no window);
    otherwise the count is the attended pairs (bottom-right causal, sliding
    window), as a halved Nq * Nk is wrong by up to Nq / Nk there.  With
    head_dim_v (MLA, d != dv) fwd = 2 * B * Hq * pairs * (d + dv).
    """
    dv = head_dim if head_dim_v is None else head_dim_v
    if causal and seqlen_q == seqlen_k and tuple(window) == (-1, -1):
        pairs = seqlen_q * seqlen_k / 2
    elif not causal and tuple(window) == (-1, -1):
        pairs = seqlen_q * seqlen_k
    else:
        pairs = attended_pairs(seqlen_q, seqlen_k, causal, window)
    fwd = 2.0 * batch * heads_q * pairs * (head_dim + dv)
    factor = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}[mode]
    return fwd * factor


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


# --------------------------------------------------------------------------- configs

@dataclasses.dataclass(frozen=True)
class AttnConfig:
    dtype: str
    head_dim: int
    causal: bool
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int

    @property
    def gqa(self) -> bool:
        return self.heads_q != self.heads_kv

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def label(self) -> str:
        heads = f"H={self.heads_q}" if not self.gqa else f"Hq={self.heads_q}/Hkv={self.heads_kv}"
        return (f"{self.dtype} d={self.head_dim} {'causal' if self.causal else 'full'} "
                f"B={self.batch} {heads} N={self.seqlen_q}")

    def flops(self, mode: str) -> float:
        return attn_flops(self.batch, self.heads_q, self.seqlen_q, self.seqlen_k,
                          self.head_dim, self.causal, mode)

    def scores_fp32_bytes(self) -> int:
        """Size of the full B x Hq x Nq x Nk score matrix in fp32."""
        return self.batch * self.heads_q * self.seqlen_q * self.seqlen_k * 4


CONFIG_KEYS = tuple(f.name for f in dataclasses.fields(AttnConfig))


def row_key(row: dict) -> tuple:
    """Identifies one (config, mode) across providers and runs."""
    return (row["mode"],) + tuple(row[k] for k in CONFIG_KEYS)


# --------------------------------------------------------------------------- CUDA guards

def have_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def require_cuda(script: str) -> None:
    if not have_cuda():
        sys.exit(f"{script} needs a CUDA GPU (torch with CUDA not available here). "
                 "Use --help, or --dry-run where offered, on a CPU-only machine.")


def set_device(name: str) -> None:
    """"cuda" (the default) or "cpu": where inputs are made and how time is taken."""
    global DEVICE
    if name not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {name!r}")
    DEVICE = name


def is_oom(exc: BaseException) -> bool:
    try:
        import torch
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:
        pass
    text = str(exc).lower()
    return "out of memory" in text or "cublas_status_alloc_failed" in text


def free_cuda_memory() -> None:
    gc.collect()
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass


def cuda_still_usable() -> tuple[bool, str]:
    """After an exception: a sticky CUDA error (e.g. illegal address) poisons the context."""
    if DEVICE != "cuda":
        return True, ""
    try:
        import torch
        torch.cuda.synchronize()
        torch.zeros(1, device=DEVICE).add_(1).item()
        return True, ""
    except Exception as exc:  # noqa: BLE001
        return False, short_error(exc)


def short_error(exc: BaseException, limit: int = 300) -> str:
    """Type and the first lines of the message (wrappers such as inductor's
    BackendCompilerFailed put the real cause on the following lines)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {' / '.join(lines[:3])}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- timing

def bench_ms(fn, warmup: int = 25, rep: int = 100, grad_to_none=None) -> float:
    """Median time of fn in ms (triton's do_bench: CUDA events, L2 flushed per run).

    On the CPU (set_device("cpu")): the median wall time of a few calls."""
    if DEVICE != "cuda":
        return wall_ms(fn, rep, grad_to_none)
    import triton.testing

    from .. import _prefetch
    # A backward prefetch started by fn's first call compiles in background
    # threads; timing meanwhile measures the contention, not fn.
    _prefetch.wait_pending()
    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                                         return_mode="median"))


def wall_ms(fn, rep_ms: float = 100, grad_to_none=None, max_calls: int = 5) -> float:
    """Median wall time of fn in ms over up to max_calls calls within about rep_ms."""
    times: list[float] = []
    deadline = time.perf_counter() + rep_ms * 1e-3
    while len(times) < max_calls and (not times or time.perf_counter() < deadline):
        for t in grad_to_none or ():
            t.grad = None
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return float(statistics.median(times))


class Budget:
    """Wall-clock budget: stop starting new work after max_seconds."""

    def __init__(self, max_seconds: float | None):
        self.start = time.monotonic()
        self.max_seconds = max_seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def exhausted(self) -> bool:
        return self.max_seconds is not None and self.elapsed() > self.max_seconds


# --------------------------------------------------------------------------- environment

def _run(cmd: list[str], timeout: float = 20.0) -> str | None:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=SOURCE_ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def collect_env() -> dict:
    env: dict = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpu": None, "driver": None, "torch": None, "triton": None,
        "cuda": None, "cudnn": None, "flashattn_triton": None, "git_commit": None,
    }
    smi = shutil.which("nvidia-smi") and _run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if smi:
        name, driver, mem = [s.strip() for s in smi.splitlines()[0].split(",")][:3]
        env.update(gpu=name, driver=driver, gpu_memory=mem)
    try:
        import torch
        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env["gpu"] = env["gpu"] or props.name
            env["compute_capability"] = f"{props.major}.{props.minor}"
            env["sm_count"] = props.multi_processor_count
    except ImportError:
        pass
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        import flashattn_triton
        env["flashattn_triton"] = getattr(flashattn_triton, "__version__", "unknown")
    except Exception as exc:  # noqa: BLE001 - report, never fail env collection
        env["flashattn_triton"] = f"import failed: {short_error(exc, 120)}"
    knobs = {k: v for k, v in os.environ.items() if k.startswith("FLASHATTN_TRITON_")}
    if knobs:
        env["flashattn_triton_env"] = knobs
    commit = _run(["git", "rev-parse", "--short", "HEAD"]) if (SOURCE_ROOT / ".git").exists() else None
    if commit:
        dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
        env["git_commit"] = commit + ("-dirty" if dirty else "")
    else:  # the device runs a copy of the tree without .git: the caller names the commit
        env["git_commit"] = os.environ.get("BENCH_GIT_COMMIT")
    return env


def env_line(env: dict) -> str:
    return (f"GPU {env.get('gpu')} (driver {env.get('driver')}), torch {env.get('torch')}, "
            f"triton {env.get('triton')}, CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}, "
            f"Python {env.get('python')}, commit {env.get('git_commit')}, {env.get('date')}")


# --------------------------------------------------------------------------- output

def write_json(path: Path, payload: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def md_table(headers: list[str], rows: list[list]) -> str:
    def cell(v):
        return "" if v is None else str(v).replace("|", "\\|")
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def write_markdown(path: Path, title: str, env: dict, short: str, details: str = "") -> None:
    """Markdown with a delimited short part (run_gpu.sh prints only that part)."""
    text = (f"## {title}\n\n{env_line(env)}\n\n{SHORT_BEGIN}\n{short.strip()}\n{SHORT_END}\n")
    if details.strip():
        text += "\n" + details.strip() + "\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)


def fmt_num(x: float | None, digits: int = 1) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def n_label(n: int) -> str:
    """512, 1k, 2k, ... for axis ticks and tables."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def import_pyplot():
    """matplotlib with the Agg backend, or None (with a message) if it is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: skipping plots")
        return None
    return plt


class Progress:
    """A progress bar with result lines printed above it.

    On a terminal: tqdm's bar when tqdm is installed, else a plain text bar
    redrawn in place. In logs and pipes (or with enabled=False): a
    ``[i/total elapsed]`` counter in front of each result line, which reads
    better in a log than a bar."""

    WIDTH = 30

    def __init__(self, total: int, desc: str, enabled: bool = True, stream=None):
        self.total, self.n, self.desc = total, 0, desc
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self._bar = None
        self._text_bar = False
        self._note = ""
        if enabled and self.stream.isatty():
            try:
                from tqdm import tqdm
                self._bar = tqdm(total=total, desc=desc, dynamic_ncols=True, file=self.stream)
            except ImportError:
                self._text_bar = True
                self._draw()
        if self._bar is None and not self._text_bar:
            print(f"{desc}: {total} measurements", flush=True)

    def _draw(self) -> None:
        done = self.WIDTH * self.n // max(self.total, 1)
        bar = "#" * done + "." * (self.WIDTH - done)
        self.stream.write(f"\r\033[K{self.desc} [{bar}] {self.n}/{self.total} "
                          f"{self.elapsed():.0f}s {self._note}"[:200])
        self.stream.flush()

    def update(self, k: int = 1, note: str = "") -> None:
        self.n += k
        if self._bar is not None:
            self._bar.update(k)
            if note:
                self._bar.set_postfix_str(note, refresh=False)
        elif self._text_bar:
            self._note = note
            self._draw()

    def write(self, msg: str) -> None:
        if self._bar is not None:
            self._bar.write(msg)
        elif self._text_bar:
            self.stream.write("\r\033[K")
            self.stream.flush()
            print(msg, flush=True)
            self._draw()
        else:
            width = len(str(self.total))
            print(f"[{self.n + 1:>{width}}/{self.total} {self.elapsed():4.0f}s] {msg}", flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._text_bar:
            self.stream.write("\n")
            self.stream.flush()


# --------------------------------------------------------------------------- providers

def torch_dtype(name: str):
    import torch
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def provider_layout(provider: str) -> str:
    """Ours takes (B, N, H, d); SDPA, flex and naive take (B, H, N, d)."""
    return "bnhd" if provider in OURS_ALL else "bhnd"


def make_qkv(cfg: AttnConfig, layout: str, requires_grad: bool = True):
    """Fresh random inputs, created directly in the provider's layout."""
    import torch

    dtype = torch_dtype(cfg.dtype)

    def rand(heads: int, seqlen: int):
        shape = ((cfg.batch, seqlen, heads, cfg.head_dim) if layout == "bnhd"
                 else (cfg.batch, heads, seqlen, cfg.head_dim))
        return torch.randn(shape, device=DEVICE, dtype=dtype, requires_grad=requires_grad)

    return (rand(cfg.heads_q, cfg.seqlen_q), rand(cfg.heads_kv, cfg.seqlen_k),
            rand(cfg.heads_kv, cfg.seqlen_k))


def causal_mask(seqlen_q: int, seqlen_k: int):
    """Bool (Nq, Nk) mask, True where masked out; bottom-right aligned like ours."""
    import torch

    rows = torch.arange(seqlen_q, device=DEVICE)[:, None] + (seqlen_k - seqlen_q)
    cols = torch.arange(seqlen_k, device=DEVICE)[None, :]
    return cols > rows


def naive_attention(q, k, v, mask=None):
    """Textbook attention on (B, H, N, d): matmul, masked softmax, matmul."""
    import torch

    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


_FLEX = {}
_BLOCK_MASKS = {}


def compiled_flex(dynamic: bool = False):
    """torch.compile(flex_attention), made once; dynamo then compiles once per shape."""
    if dynamic in _FLEX:
        return _FLEX[dynamic]
    import torch
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    # One graph per shape/dtype/mask: lift dynamo's small default recompile limits.
    for name, value in (("recompile_limit", 512), ("cache_size_limit", 512),
                        ("accumulated_recompile_limit", 8192),
                        ("accumulated_cache_size_limit", 8192)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)
    # The backward benchmark calls out.backward(retain_graph=True) repeatedly, which
    # AOTAutograd refuses when the graph donates saved buffers.
    with contextlib.suppress(Exception):
        import torch._functorch.config as functorch_config
        functorch_config.donated_buffer = False
    _FLEX[dynamic] = torch.compile(flex_attention, dynamic=dynamic)
    return _FLEX[dynamic]


def flex_block_mask(seqlen_q: int, seqlen_k: int):
    """Causal (bottom-right) block mask, built once per shape outside timed regions."""
    key = (seqlen_q, seqlen_k)
    if key not in _BLOCK_MASKS:
        from torch.nn.attention.flex_attention import create_block_mask

        offset = seqlen_k - seqlen_q

        def causal(b, h, q_idx, kv_idx):
            return q_idx + offset >= kv_idx

        _BLOCK_MASKS[key] = create_block_mask(causal, None, None, seqlen_q, seqlen_k, device=DEVICE)
    return _BLOCK_MASKS[key]


SDPA_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION", "sdpa_math": "MATH"}


def build_attention(provider: str, cfg: AttnConfig, flex_dynamic: bool = False):
    """Return (attn(q, k, v) -> out, factory of a context manager to hold around calls).

    Everything that is not part of the measured op (imports, masks, block masks)
    is done here, outside the timed region. Note: SDPA's is_causal is top-left
    aligned and ours bottom-right; identical for the square shapes benchmarked.
    """
    import torch

    null = contextlib.nullcontext
    if provider == OURS:
        from flashattn_triton import flash_attn_func

        return (lambda q, k, v: flash_attn_func(q, k, v, causal=cfg.causal)), null
    if provider == OURS_DET:
        from flashattn_triton import flash_attn_func

        return (lambda q, k, v: flash_attn_func(q, k, v, causal=cfg.causal, deterministic=True)), null
    if provider in (OURS_PORTABLE, OURS_HOPPER):
        from flashattn_triton import flash_attn_func

        tier = "portable" if provider == OURS_PORTABLE else "hopper"
        return (lambda q, k, v: flash_attn_func(q, k, v, causal=cfg.causal)), \
            (lambda: env_set("FLASHATTN_TRITON_BACKEND", tier))
    if provider in SDPA_BACKENDS:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        if cfg.causal and cfg.seqlen_q != cfg.seqlen_k:
            # SDPA's is_causal is top-left aligned, ours, flex's and naive's bottom-right:
            # the row would time a different mask (and other FLOPs) for this provider.
            raise ValueError(f"{provider}: is_causal is top-left aligned; Nq != Nk needs a lower-right mask")

        kwargs = {"is_causal": cfg.causal}
        if cfg.gqa:
            kwargs["enable_gqa"] = True
        sdpa = torch.nn.functional.scaled_dot_product_attention
        backend = getattr(SDPBackend, SDPA_BACKENDS[provider])
        return (lambda q, k, v: sdpa(q, k, v, **kwargs)), (lambda: sdpa_kernel(backend))
    if provider == "flex":
        flex = compiled_flex(flex_dynamic)
        kwargs = {"block_mask": flex_block_mask(cfg.seqlen_q, cfg.seqlen_k) if cfg.causal else None}
        if cfg.gqa:
            kwargs["enable_gqa"] = True
        return (lambda q, k, v: flex(q, k, v, **kwargs)), null
    if provider == "naive":
        mask = causal_mask(cfg.seqlen_q, cfg.seqlen_k) if cfg.causal else None
        return (lambda q, k, v: naive_attention(q, k, v, mask)), null
    raise ValueError(f"unknown provider {provider!r}")


@contextlib.contextmanager
def env_set(name: str, value: str):
    """The environment variable name set to value inside the block, restored after."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def parse_list(text: str | None, cast=str, allowed=None, what: str = "value") -> list | None:
    """Comma-separated CLI list -> list (None stays None)."""
    if text is None:
        return None
    items = [cast(t.strip()) for t in text.split(",") if t.strip()]
    if allowed is not None:
        bad = [t for t in items if t not in allowed]
        if bad:
            raise SystemExit(f"unknown {what}: {', '.join(map(str, bad))} "
                             f"(choose from {', '.join(map(str, allowed))})")
    return items


def positive_int_list(text: str) -> list[int]:
    """argparse ``type=`` of a comma list of integers >= 1 ("512,1024"): a
    bad list is a usage error naming the option (exit status 2)."""
    import argparse
    items = [t.strip() for t in text.split(",") if t.strip()]
    values = []
    for t in items:
        try:
            value = int(t)
        except ValueError:
            value = 0
        if value < 1:
            bad = "" if t == text.strip() else f": {t!r}"
            raise argparse.ArgumentTypeError(f"expected a comma list of integers >= 1, got {text!r}{bad}")
        values.append(value)
    if not values:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers >= 1, got {text!r}")
    return values

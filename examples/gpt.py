"""A compact GPT with switchable attention, and a text corpus that ships with Python.

Used by examples/train_gpt.py and benchmarks/bench_e2e.py; importable on its own:

    from gpt import GPT, GPTConfig, load_corpus
    model = GPT(GPTConfig.preset("gpt2-small"), attn="ours")   # 124M parameters

* ``attn``: "ours" (flashattn_triton.flash_attn_func), "sdpa"
  (torch.nn.functional.scaled_dot_product_attention: PyTorch picks its flash /
  cuDNN / memory-efficient kernel), "eager" (matmul, softmax in float32,
  matmul, as Hugging Face's eager attention).  The three share one parameter
  layout, so the same seed gives the same initial weights.
* The model is GPT-2's (pre-LayerNorm blocks, GELU MLP, tied embeddings) with
  rotary position embeddings instead of a learned position table, so any
  context length can be trained without resizing a table.
* The corpus is the source of the Python standard library, read from the
  running interpreter's installation (no download), tokenised by a byte-level
  tokenizer or by a GPT-2-like one whose vocabulary (the most frequent
  GPT-2-style pieces plus 256 byte fallbacks) is built from the corpus itself.
"""

from __future__ import annotations

import collections
import math
import os
import re
import sysconfig
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from flashattn_triton.nn import Attention

ATTENTION_CHOICES = ("ours", "sdpa", "eager")


# ---------------------------------------------------------------------------
# Attention variants: one parameter layout, three kernels
# ---------------------------------------------------------------------------

class SDPAAttention(Attention):
    """PyTorch's fused SDPA (flash / cuDNN / memory-efficient, PyTorch's choice)."""

    def attend(self, q, k, v):
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=self.causal, scale=self.softmax_scale,
                                             enable_gqa=self.n_heads != self.n_kv_heads)
        return out.transpose(1, 2)


class EagerAttention(Attention):
    """Standard attention: the (N, N) score and probability matrices are materialised."""

    def attend(self, q, k, v):
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.n_heads != self.n_kv_heads:
            k = k.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
            v = v.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
        scale = self.softmax_scale or q.shape[-1] ** -0.5
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        if self.causal:
            n_q, n_k = scores.shape[-2:]
            mask = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).triu(n_k - n_q + 1)
            scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(probs, v).transpose(1, 2)


_ATTN_CLASSES = {"ours": Attention, "sdpa": SDPAAttention, "eager": EagerAttention}


# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------

@dataclass
class GPTConfig:
    vocab_size: int = 50304  # GPT-2's 50257 rounded up to a multiple of 64
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: Optional[int] = None  # GQA when smaller than n_head
    n_embd: int = 768
    rope_base: float = 10000.0

    @staticmethod
    def preset(name: str, **over) -> "GPTConfig":
        presets = {
            "gpt2-small": GPTConfig(),  # 124M parameters with the 50304 vocabulary
            "toy": GPTConfig(vocab_size=256, n_layer=2, n_head=4, n_embd=64),
        }
        if name not in presets:
            raise ValueError(f"unknown preset {name!r}; choose from {sorted(presets)}")
        return replace(presets[name], **over)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, attn: str):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = _ATTN_CLASSES[attn](cfg.n_embd, cfg.n_head, cfg.n_kv_head, causal=True, rotary=True,
                                        rope_base=cfg.rope_base)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 with rotary positions.  ``attn`` in ATTENTION_CHOICES."""

    def __init__(self, cfg: GPTConfig, attn: str = "ours"):
        super().__init__()
        if attn not in _ATTN_CLASSES:
            raise ValueError(f"attn must be one of {ATTENTION_CHOICES}, got {attn!r}")
        self.cfg, self.attn = cfg, attn
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg, attn) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("attn.out.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None, loss_chunk: int = 32768):
        """idx (B, N) int64 -> logits (B, N, vocab) without targets, else the mean
        cross-entropy.  With more than ``loss_chunk`` tokens the loss is computed in
        checkpointed chunks, so the (tokens, vocab) logits never exist at once."""
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if targets is None:
            return self.lm_head(x)
        h, t = x.reshape(-1, x.shape[-1]), targets.reshape(-1)
        if h.shape[0] <= loss_chunk:
            return F.cross_entropy(self.lm_head(h).float(), t)
        total = h.new_zeros((), dtype=torch.float32)
        for i in range(0, h.shape[0], loss_chunk):
            total = total + checkpoint(_ce_sum, h[i:i + loss_chunk], self.lm_head.weight, t[i:i + loss_chunk],
                                       use_reentrant=False)
        return total / h.shape[0]


def _ce_sum(h, weight, t):
    return F.cross_entropy(F.linear(h, weight).float(), t, reduction="sum")


# ---------------------------------------------------------------------------
# Corpus and tokenizers
# ---------------------------------------------------------------------------

def stdlib_files() -> List[Path]:
    """The .py files of the running Python's standard library, sorted (site-packages excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts]
    return sorted(files)


def load_corpus(max_bytes: Optional[int] = None) -> str:
    """The standard library's source, concatenated in sorted path order."""
    parts, size = [], 0
    for path in stdlib_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(text)
        size += len(text)
        if max_bytes is not None and size >= max_bytes:
            break
    text = "\n".join(parts)
    return text if max_bytes is None else text[:max_bytes]


class ByteTokenizer:
    """UTF-8 bytes, vocabulary 256."""

    vocab_size = 256

    def encode(self, text: str) -> torch.Tensor:
        return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).to(torch.int64)

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


# GPT-2's pre-tokenisation pattern, with Python's re classes in place of \p{L} / \p{N}
# and "_" counted as a letter (identifiers stay whole).  Every character is
# matched by one alternative, so decode(encode(text)) == text.
_PIECE = re.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


class PieceTokenizer:
    """GPT-2-like tokenizer without merges: text is split into GPT-2-style pieces
    (words with their leading space, numbers, punctuation runs, whitespace); the
    ``vocab_size - 256`` most frequent pieces of the training text are tokens,
    every other piece is spelled as its UTF-8 bytes (ids 0..255)."""

    def __init__(self, text: str, vocab_size: int = 50304):
        counts = collections.Counter(_PIECE.findall(text))
        # single bytes are already tokens
        common = [p for p, _ in counts.most_common() if len(p.encode("utf-8")) > 1][:vocab_size - 256]
        self.vocab_size = vocab_size
        self.pieces = common
        self.index: Dict[str, int] = {p: 256 + i for i, p in enumerate(common)}

    def encode(self, text: str) -> torch.Tensor:
        ids: List[int] = []
        index = self.index
        for piece in _PIECE.findall(text):
            i = index.get(piece)
            if i is None:
                ids.extend(piece.encode("utf-8"))
            else:
                ids.append(i)
        return torch.tensor(ids, dtype=torch.int64)

    def decode(self, ids) -> str:
        out = bytearray()
        for i in ids:
            i = int(i)
            out.extend(bytes([i]) if i < 256 else self.pieces[i - 256].encode("utf-8"))
        return out.decode("utf-8", errors="replace")


def tokenize_corpus(kind: str, max_bytes: Optional[int], vocab_size: int = 50304,
                    cache_dir: Optional[str] = None) -> Tuple[torch.Tensor, object]:
    """(token ids (n,) int64, tokenizer) for the stdlib corpus; kind "bytes" or "pieces".
    With cache_dir the ids are cached there (keyed by the arguments)."""
    cache = None
    if cache_dir:
        import hashlib
        import sys
        key = hashlib.sha1(f"{kind}-{max_bytes}-{vocab_size}-{sys.version}".encode()).hexdigest()[:12]
        cache = Path(cache_dir) / f"stdlib_tokens_{key}.pt"
    text = load_corpus(max_bytes)
    tok = ByteTokenizer() if kind == "bytes" else PieceTokenizer(text, vocab_size)
    if cache is not None and cache.exists():
        return torch.load(cache), tok
    ids = tok.encode(text)
    if cache is not None:
        os.makedirs(cache.parent, exist_ok=True)
        torch.save(ids, cache)
    return ids, tok


class Batches:
    """Random windows of a token stream, reproducible from the seed: every
    attention variant sees the same batches in the same order."""

    def __init__(self, ids: torch.Tensor, batch_size: int, seq_len: int, device, seed: int = 0,
                 val_fraction: float = 0.05):
        n_val = max(int(len(ids) * val_fraction), seq_len + 1)
        if len(ids) - n_val <= seq_len + 1:
            raise ValueError(f"corpus of {len(ids)} tokens is too short for seq_len={seq_len}")
        self.train, self.val = ids[:-n_val], ids[-n_val:]
        self.batch_size, self.seq_len, self.device = batch_size, seq_len, device
        self.gen = torch.Generator().manual_seed(seed)

    def _take(self, data, starts):
        x = torch.stack([data[s:s + self.seq_len] for s in starts.tolist()])
        y = torch.stack([data[s + 1:s + 1 + self.seq_len] for s in starts.tolist()])
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def next(self):
        starts = torch.randint(0, len(self.train) - self.seq_len - 1, (self.batch_size,), generator=self.gen)
        return self._take(self.train, starts)

    def val_batches(self, n: int):
        """n fixed validation batches (the same for every run)."""
        gen = torch.Generator().manual_seed(12345)
        hi = len(self.val) - self.seq_len - 1
        return [self._take(self.val, torch.randint(0, max(hi, 1), (self.batch_size,), generator=gen))
                for _ in range(n)]


# ---------------------------------------------------------------------------
# Training loop (shared by examples/train_gpt.py and benchmarks/bench_e2e.py)
# ---------------------------------------------------------------------------

def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.1):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    kw = {"fused": True} if next(model.parameters()).is_cuda else {}
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95), **kw)


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warmup, then cosine decay to lr / 10."""
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t)))


def train(model: GPT, batches: Batches, steps: int, lr: float, amp_dtype: Optional[torch.dtype] = None,
          warmup: Optional[int] = None, log_every: int = 0, label: str = "") -> Dict[str, list]:
    """Train for ``steps``; returns {"loss": [per step], "time": [seconds since start, per step]}.
    Reading each step's loss syncs the device once per step (the timing in
    bench_e2e.py's throughput section does not use this loop)."""
    import time

    device_type = next(model.parameters()).device.type
    opt = make_optimizer(model, lr)
    warmup = max(1, steps // 10) if warmup is None else warmup
    losses, times = [], []
    t0 = time.perf_counter()
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        x, y = batches.next()
        with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"{label}step {step:5d}  loss {losses[-1]:.4f}  {times[-1]:.1f}s", flush=True)
    return {"loss": losses, "time": times}


@torch.no_grad()
def evaluate(model: GPT, batches: List[Tuple[torch.Tensor, torch.Tensor]],
             amp_dtype: Optional[torch.dtype] = None) -> float:
    model.eval()
    device_type = next(model.parameters()).device.type
    total = 0.0
    for x, y in batches:
        with torch.autocast(device_type, dtype=amp_dtype, enabled=amp_dtype is not None):
            total += float(model(x, y))
    model.train()
    return total / max(1, len(batches))


def smooth(values: List[float], alpha: float = 0.9) -> List[float]:
    """Exponential moving average (bias-corrected), for plotting noisy losses."""
    out, avg = [], 0.0
    for i, v in enumerate(values):
        avg = alpha * avg + (1 - alpha) * v
        out.append(avg / (1 - alpha ** (i + 1)))
    return out

"""Compile the portable kernels for a GPU target without a GPU (Triton's
ahead-of-time path): catches compile errors and reports registers, spills
and shared memory per config before any device time is spent.  --sass adds
instruction counts (from the cubin's SASS and the PTX), the instructions of
each loop body (the per-tile cost), and the classes that show layout
conversions (shuffles, barriers, shared-memory stores / loads) or Philox
rounds (mul.hi: 2 per round, 20 per dropout call), to compare code changes
without a GPU, and a sha256 of the SASS listing (sass_hash; equal hashes:
the same machine code, e.g. a change that must leave other builds alone).
For the Gluon kernels it also counts the synchronisation instructions
(sync_report: BAR.SYNC, BAR.ARV, mbarrier arrivals and polls), in the whole
kernel and per query-tile loop, and each query-tile loop's instructions and
local loads / stores (gemm_loop_report, "gemm loops n:l ...", one pair per
partition's masked / unmasked step loop: which consumer spills, and where).

    python benchmarks/compile_check.py [--arch 90] [--d 64,128,256]   (d:dv, e.g. 192:128, for a value head dim of its own)
    python benchmarks/compile_check.py --d 128 --cases causal --mods HAS_DROPOUT --sass \
        --kernels FWD,BWD_DKDV,BWD_DQ --configs "128,64,8,3"

--whole-q builds the portable dK/dV kernels as dense calls with whole query tiles take
them under kernels/bwd.py WHOLE_Q_TILES (EVEN_M: no row checks in the masked loops):

    python benchmarks/compile_check.py --d 128 --cases causal --kernels BWD_DKDV --whole-q --sass

--hopper compiles the Gluon forward of kernels/hopper/fwd.py instead (Triton
3.6): per head dim, mask (--cases full,causal) and variant (--hopper-variants:
names of benchmarks/hopper_fwd_probe.py's VARIANTS, or KEY=VALUE overrides
joined by '+', e.g. PERSISTENT=1+NUM_CONSUMERS=3+CONSUMER_REGS=160), shared
memory, ptxas registers / spill bytes and the SASS local loads / stores:

    python benchmarks/compile_check.py --hopper --d 64,128,256 --hopper-variants default,persistent

--d 192:128 builds the split Q K^T (d = 192, dv = 128: Q and K in 128 + 64
columns, HEAD_DIM_V):

    python benchmarks/compile_check.py --hopper --d 192:128 --cases full,causal \
        --hopper-variants default,bn64,persistent,dynamic --sass

--window builds them with a left window bound (HAS_WINDOW, the sliding-window
path: fwd.py's _key_start, the masked head loop and the head release):

    python benchmarks/compile_check.py --hopper --window --d 64,128,256 --cases full,causal \
        --hopper-variants default,dynamic,persistent --sass

--dropout (with --hopper or --hopper-bwd) builds the dropout paths
(HAS_DROPOUT, kernels/hopper/dropout.py's Philox draws; DROPOUT_CONFIGS):

    python benchmarks/compile_check.py --hopper --dropout --d 64,128,256 --cases full,causal --sass
    python benchmarks/compile_check.py --hopper-bwd --dropout --d 64,128,256 --cases full,causal --sass

--mask (with --hopper) builds the boolean-mask path (HAS_MASK: the mask
bytes loaded in the S accumulator's layout; MASK_CONFIGS), the mask's
pointer and row / head / batch strides taken as 16-divisible, as the JIT
specializes a contiguous mask of Nk % 16 == 0:

    python benchmarks/compile_check.py --hopper --mask --d 64,128,256 --cases full,causal --sass

--hopper-bwd compiles the Gluon backward of kernels/hopper/bwd.py (Triton
3.6; head dims of CONFIGS_UNVERIFIED included), variants as KEY=VALUE
overrides joined by '+':

    python benchmarks/compile_check.py --hopper-bwd --d 64,128,256 --cases full,causal --sass \
        --hopper-variants default,NUM_STAGES=1+DS_BUFS=2+DQ_CHUNK=128

GROUP_SPLIT=S (S > 1: a GQA group's query heads over S programs, float32
partial dK / dV) builds the split form:

    python benchmarks/compile_check.py --hopper-bwd --d 64,128,256 --cases full,causal --sass \
        --hopper-variants GROUP_SPLIT=2,GROUP_SPLIT=2+PERSISTENT=1

and with --window its sliding-window builds (HAS_WINDOW: bwd.py's _query_end,
the window edge's masked query tiles; WINDOW_CONFIGS):

    python benchmarks/compile_check.py --hopper-bwd --window --d 64,128,256 --cases full,causal \
        --hopper-variants default,PERSISTENT=1 --sass

--kernels DECODE,COMBINE compiles the KV-cache decode kernel (kernels/decode.py)
and the combine kernel (kernels/combine.py) from the launches that
decode_attention itself makes (meta-device tensors; Triton's own binder
specializes the arguments), so the builds are the GPU's default configs
(decode_config): one query token, 8 KV heads, causal, cache_seqlens given;
per head dim, cache layout (--decode-caches contiguous,paged16,paged256: a
16-token page is looked up per key, a 256-token page per tile), split mode
(--decode-splits one,fused,separate: one split writes the result, several
merge in the decode kernel, or in COMBINE, its only launch; gathered /
gathered16: 4 / 16 merged by GATHER, combine.py's gathered merge) and sinks off /
on; --decode-rows: query rows per KV head (default 4, Hq=32 over Hkv=8:
BLOCK_M=16; 32 or 64 rows take BLOCK_M 32 or 64, and the warps follow);
--mods HAS_SOFTCAP, HAS_ALIBI, HAS_WINDOW_LEFT, HAS_LEFTPAD, ROTARY, MASK_CHUNK
(attention_chunk=8192) turn on launch options:

    python benchmarks/compile_check.py --kernels DECODE,COMBINE --d 64,128,256
    python benchmarks/compile_check.py --kernels DECODE --d 64 --decode-rows 8 --mods HAS_WINDOW_LEFT --sass

--decode-variants builds the candidate small-batch variants of decode.VARIANTS
(FLASHATTN_TRITON_DECODE_VARIANT; '+' joins several, 'default' is none) as
they launch at batch 1 on the H200's 132 SMs, where they apply (every
--decode-variants build, 'default' included, is made at batch 1, 132 SMs):

    python benchmarks/compile_check.py --kernels DECODE --d 128 --decode-caches contiguous,paged16 \
        --decode-splits fused --decode-variants default,deep,fill,pdl --sass

(--sass also prints each build's SASS hash, sass_hash.)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import inspect
import itertools
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from flashattn_triton.kernels import bwd, fwd
from flashattn_triton.kernels.launch import (CANDIDATES, COMPILE_OPTIONS, RESIDENT, SMEM_LIMIT_BY_ARCH,
                                             arch_budget, fits, head_dim_pad, make_config)


def _sig(kernel, dtype: str, constexprs: dict):
    sig = {}
    for name in kernel.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name[0].isupper() and not name.startswith(("N_", "H_", "GROUP", "SEQ_", "RNG_")):
            sig[name] = "*i32" if name.startswith("CU_") or name == "BLOCK_TABLE" else "*i64" if name == "SEED" else (
                "*fp32" if name in ("LSE", "DELTA", "DLSE", "ALIBI", "SINKS", "DSINKS", "BIAS", "DBIAS")
                else f"*{dtype}")
        elif name in ("sm_scale", "softcap", "dropout_scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


# Unit strides (the last dim of every tensor, the key dim of a mask) become
# the constant 1 when the JIT specializes them; every other stride and every
# pointer is assumed 16-divisible, as it is for the usual contiguous layouts.
# Without these hints the loads do not vectorize and the register counts
# mean nothing.
UNIT_STRIDES = re.compile(r"stride_(q|k|v|o|do|dq|dk|dv)k$|stride_bn$|stride_dbn$")


def specialize(kernel, sig: dict, constexprs: dict):
    """(signature, constexprs, attrs) as the JIT would specialize a typical launch."""
    sig, constexprs, attrs = dict(sig), dict(constexprs), {}
    for i, name in enumerate(kernel.arg_names):
        if name in constexprs:
            continue
        if UNIT_STRIDES.search(name):
            sig[name] = "constexpr"
            constexprs[name] = 1
        elif sig[name].startswith("*") or name.startswith("stride_"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, constexprs, attrs


def compile_one(kernel, dtype, constexprs, target, num_warps=4, num_stages=2, overrides=None):
    sig = _sig(kernel, dtype, constexprs)
    sig.update(overrides or {})
    sig, constexprs, attrs = specialize(kernel, sig, constexprs)
    src = ASTSource(fn=kernel, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=target, options=dict(num_warps=num_warps, num_stages=num_stages,
                                                           **COMPILE_OPTIONS))


def ptxas_report(compiled, arch: int) -> str:
    """'regs R, spill S B' from ptxas -v on the kernel's PTX (Triton's bundled ptxas)."""
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.path.exists(ptxas):
        return "ptxas not found"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(compiled.asm["ptx"])
        res = subprocess.run([ptxas, f"-arch=sm_{arch}a", "-v", src, "-o", os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True)
    regs = re.search(r"Used (\d+) registers", res.stderr)
    spill = re.search(r"(\d+) bytes spill stores", res.stderr)
    return f"regs {regs.group(1) if regs else '?'}, spill {spill.group(1) if spill else '?'} B"


SASS_CLASSES = ("HGMMA", "SHFL", "BAR", "STS", "LDS", "IMAD", "LOP3", "ISETP", "PRMT", "STL", "LDL")
PTX_CLASSES = ("shfl", "bar", "st.shared", "ld.shared", "mul.hi", "mad")
_SASS_LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*)")


def _sass_listing(compiled) -> str:
    """The kernel's SASS listing (cuobjdump -sass on the cubin)."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        return subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout


def sass_ops(compiled):
    """[(address, opcode, operands)] of the kernel's SASS (cuobjdump on the cubin)."""
    text = _sass_listing(compiled)
    return [(int(m.group(1), 16), m.group(2), m.group(3)) for m in map(_SASS_LINE.match, text.splitlines()) if m]


def sass_hash(compiled) -> str:
    """The first 16 hex digits of the sha256 of the kernel's SASS listing
    (cuobjdump -sass, instructions only: addresses and encodings kept, the
    file header dropped): equal hashes mean the same machine code, to check
    that a change leaves other builds alone.  Not every different hash is a
    code change: the line information Triton emits takes part in ptxas'
    scheduling, so an edit that only moves a kernel's source lines (a
    comment, a docstring line) can reorder its instructions, with the same
    count, registers and spill (session 35: the d = 192 backward's builds
    flipped between two orders; session 36 saw them flip with no edit, from
    a cached build against a fresh one and between processes, while moving
    every line by three left a fresh d = 192 build's hash alone: treat d =
    192 hashes as two-valued); compare with lines unmoved."""
    text = _sass_listing(compiled)
    body = "\n".join(line.strip() for line in text.splitlines() if line.strip().startswith("/*"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def hgmma_work(op: str, rest: str) -> int:
    """An HGMMA's n * k / 256 (its m is 64): the MACs of a wgmma in units of
    m64n16k16, so that a product cut in two narrower ones counts the same."""
    shape = re.match(r"(?:\.\d+)?x(\d+)x(\d+)", op[len("HGMMA.64"):] + rest.split(" ")[0]) \
        if op.startswith("HGMMA.64") else None
    return int(shape.group(1)) * int(shape.group(2)) // 256 if shape else 0


def loop_bodies(ops):
    """Instruction counts of the loops: from a backward branch's target to the
    branch, as 'N' or 'N[g:w]' with g the loop's HGMMA (Hopper wgmma) count
    and w their work (hgmma_work: the padded MACs)."""
    sizes = []
    for addr, op, rest in ops:
        target = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) < addr:
            lo = int(target.group(1), 16)
            body = [(o, r) for a, o, r in ops if lo <= a <= addr]
            mma = sum(1 for o, _ in body if o.startswith("HGMMA"))
            work = sum(hgmma_work(o, r) for o, r in body)
            sizes.append(f"{len(body)}[{mma}:{work}]" if mma else str(len(body)))
    return sizes


def gemm_loops(ops):
    """[(first, last address)] of the innermost loops that issue HGMMA (loops
    with HGMMA that hold no other such loop): the per-tile bodies."""
    loops = []
    for addr, op, rest in ops:
        target = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) < addr:
            lo = int(target.group(1), 16)
            body = [op for a, op, _ in ops if lo <= a <= addr]
            # A branch back from the out-of-line mbarrier retry blocks at the
            # end of the code spans an EXIT: not a loop of the source.
            if any(op.startswith("HGMMA") for op in body) and not any(op.startswith(("EXIT", "RET")) for op in body):
                loops.append((lo, addr))
    return [(lo, hi) for lo, hi in loops if not any(lo <= a and b <= hi and (a, b) != (lo, hi) for a, b in loops)]


def gemm_loop_report(ops) -> str:
    """'gemm loops n:l ...': per innermost HGMMA loop (gemm_loops, in code
    order: each partition's step loops), its instructions n and its local
    loads / stores l."""
    return "gemm loops " + " ".join(
        f"{sum(1 for a, _, _ in ops if lo <= a <= hi)}:"
        f"{sum(1 for a, op, _ in ops if lo <= a <= hi and op.startswith(('LDL', 'STL')))}"
        for lo, hi in gemm_loops(ops))


def local_in_gemm_loops(ops) -> int:
    """Local loads / stores (spills) inside the innermost loops that issue
    HGMMA (gemm_loops): the per-tile cost of spilling, as opposed to spills
    around the loops."""
    return sum(1 for lo, hi in gemm_loops(ops) for a, op, _ in ops if lo <= a <= hi and op.startswith(("LDL", "STL")))


# Synchronisation opcodes: hardware barriers (bar.sync / barrier.sync, bar.arrive)
# and mbarrier arrivals / polls (SYNCS.ARRIVE*: mbarrier.arrive[.expect_tx];
# SYNCS.PHASECHK: the try_wait of a polling loop).
SYNC_CLASSES = (("BAR.SYNC", "BAR.SYNC"), ("BAR.ARV", "BAR.ARV"), ("ARRIVE", "SYNCS.ARRIVE"),
                ("TRYWAIT", "SYNCS.PHASECHK"))


def store_report(ops) -> str:
    """'stores STG.E.U16 n STG.E n ... RED n; BSSY n': the global stores by
    access width, the reductions / atomics, and the branch-region starts
    (BSSY): a masked store the compiler could not vectorize shows as many
    16-bit stores, each in a branch region of its own (session 36: the
    Hopper backward's dK / dV gl.store)."""
    count = collections.Counter(op for _, op, _ in ops)
    stg = sorted((op, n) for op, n in count.items() if op.startswith("STG"))
    other = sum(n for op, n in count.items() if op.startswith(("RED", "ATOM", "UBLKRED", "UTMAREDG", "UTMASTG")))
    return ("stores " + " ".join(f"{op} {n}" for op, n in stg) + f" RED/ATOM/TMA {other}; BSSY "
            f"{sum(n for op, n in count.items() if op.startswith('BSSY'))}")


def sync_report(ops) -> str:
    """'sync BAR.SYNC n BAR.ARV n ARRIVE n TRYWAIT n; per GEMM loop a/b/c/d ...':
    the synchronisation instructions of the kernel, then of each innermost
    GEMM loop (gemm_loops: one query tile of one partition) as BAR.SYNC /
    BAR.ARV / ARRIVE / TRYWAIT counts (static counts: a polled wait is one
    TRYWAIT)."""
    def counts(sel):
        return [sum(1 for a, op, _ in ops if sel(a) and op.startswith(prefix)) for _, prefix in SYNC_CLASSES]
    total = " ".join(f"{name} {n}" for (name, _), n in zip(SYNC_CLASSES, counts(lambda a: True)))
    loops = " ".join("/".join(map(str, counts(lambda a, lo=lo, hi=hi: lo <= a <= hi))) for lo, hi in gemm_loops(ops))
    return f"sync {total}; per GEMM loop (BAR.SYNC/BAR.ARV/ARRIVE/TRYWAIT) {loops or '-'}"


def instruction_report(compiled) -> str:
    """'sass N (loops a/b/..) CLASS n ..; ptx class n ..': SASS opcodes by
    prefix (IMAD counts IMAD.WIDE, IMAD.MOV, ...), PTX by prefix."""
    try:
        ops = sass_ops(compiled)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"sass unavailable ({type(exc).__name__})"
    count = collections.Counter(op for _, op, _ in ops)
    sass = " ".join(f"{c} {sum(n for op, n in count.items() if op.startswith(c))}" for c in SASS_CLASSES)
    ptx = [m.group(1) for m in re.finditer(r"^\s*(?:@!?%p\d+\s+)?([a-z][a-z0-9_.]*)", compiled.asm["ptx"], re.M)]
    ptx_counts = " ".join(f"{c} {sum(1 for op in ptx if op.startswith(c))}" for c in PTX_CLASSES)
    loops = "/".join(str(n) for n in loop_bodies(ops))
    return f"sass {len(ops)} (loops {loops or '-'}) {sass}; ptx {ptx_counts}"


def _hopper_overrides(spec: str) -> dict:
    """A probe variant name, or KEY=VALUE overrides joined by '+'."""
    if "=" not in spec:
        from hopper_fwd_probe import VARIANTS  # benchmarks/ is this script's directory
        return dict(VARIANTS[spec][0])
    from common import parse_overrides
    return parse_overrides(spec)


def _compile_gluon(kernel, constexprs: dict, descs: dict, scalars: dict, head_dim: int, arch: int,
                   divisible=()):
    """triton.compile of a Gluon kernel for sm_<arch> without a GPU.  descs:
    argument name -> (block, torch dtype) of a tensor descriptor (layout as
    the launchers make it: NVMMASharedLayout.get_default_for); scalars:
    argument name -> type string ("*fp32", "fp32", ...); other arguments i32;
    divisible: names of arguments taken as 16-divisible (the JIT's
    specialization of such pointers and integers; none by default)."""
    from triton.runtime.jit import mangle_type
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    import torch

    gl_dtypes = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}
    sig = {}
    for name in kernel.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in descs:
            block, tdt = descs[name]
            t = torch.empty(1, 1, 256, head_dim, dtype=tdt)  # only the dtype and the block matter
            layout = gl.NVMMASharedLayout.get_default_for(block, gl_dtypes[tdt])
            sig[name] = mangle_type(TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout))
        else:
            sig[name] = scalars.get(name, "i32")
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names) if name in divisible}
    src = GluonASTSource(kernel, sig, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4})


_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def _split_qk_args(has_split: bool, constexprs: dict, descs: dict, meta: dict, d: int, dv: int, tdt, what: str):
    """The split Q K^T's arguments, in place: HEAD_DIM_V = dv and, with dv
    != d, descriptors of Q's and K's columns [dv, d) (q1_desc, k1_desc), else
    None constexprs for them; has_split: the kernel takes them (a checkout
    from before the split Q K^T does not: there dv != d is an error, what
    naming the kernel)."""
    if has_split:
        constexprs["HEAD_DIM_V"] = dv
        if dv != d:  # Q's and K's columns [dv, d): descriptors of their own
            descs["q1_desc"] = ([1, 1, meta["BLOCK_M"], d - dv], tdt)
            descs["k1_desc"] = ([1, 1, meta["BLOCK_N"], d - dv], tdt)
        else:  # None at the launch: constexprs, no parameters
            constexprs.update(q1_desc=None, k1_desc=None)
    elif dv != d:
        raise ValueError(f"d={d}, dv={dv}: {what} has no HEAD_DIM_V")


def compile_hopper(d: int, causal: bool, overrides: dict, arch: int = 90, dtype: str = "bf16", dv=None):
    """The Gluon forward for sm_<arch> as its launcher would build it
    (CONFIGS / SCHEDULE, WINDOW_CONFIGS when overrides set HAS_WINDOW,
    DROPOUT_CONFIGS when they set HAS_DROPOUT, plus overrides); dv: the
    value head dim (default d; d = 192 with dv = 128: split Q K^T,
    HEAD_DIM_V); returns (compiled, meta)."""
    import torch
    from flashattn_triton.kernels.hopper import fwd as hfwd

    masked = bool(overrides.get("HAS_MASK"))
    if hasattr(hfwd, "default_meta"):
        meta = hfwd.default_meta(d, causal, bool(overrides.get("HAS_WINDOW")), bool(overrides.get("HAS_DROPOUT")),
                                 masked)
    else:  # a checkout from before default_meta (SASS comparisons across commits)
        meta = dict(hfwd.CONFIGS[d], **hfwd.SCHEDULE[causal])
        meta["PERSISTENT"] = getattr(hfwd, "PERSISTENT_DEFAULT", {}).get(d, (False, False))[causal]
        meta["DYNAMIC"] = getattr(hfwd, "DYNAMIC_DEFAULT", {}).get(d, (False, False))[causal]
        for on, name in ((overrides.get("HAS_WINDOW"), "WINDOW_CONFIGS"),
                         (overrides.get("HAS_DROPOUT"), "DROPOUT_CONFIGS"), (masked, "MASK_CONFIGS")):
            if on:
                meta.update(getattr(hfwd, name, {}).get(d, {}))
    meta.update(overrides)
    if "HAS_WINDOW" in hfwd._attn_fwd_hopper.arg_names:  # (a checkout from before the window has none)
        meta.setdefault("HAS_WINDOW", False)
    if "HAS_DROPOUT" in hfwd._attn_fwd_hopper.arg_names:  # (nor one from before dropout)
        meta.setdefault("HAS_DROPOUT", False)
    if "HAS_MASK" in hfwd._attn_fwd_hopper.arg_names:  # (nor one from before the mask)
        meta.setdefault("HAS_MASK", False)
    # (checkouts of sessions 17-44 have the early Q release, EARLY_Q, and its O arguments)
    early_q = bool(meta.get("EARLY_Q", getattr(hfwd, "EARLY_Q_DEFAULT", {}).get(d, (False, False))[causal]))
    if "EARLY_Q" in hfwd._attn_fwd_hopper.arg_names:  # (nor one from before the early Q release)
        meta["EARLY_Q"] = early_q
    if meta["DYNAMIC"]:
        meta["PERSISTENT"] = True
    meta.pop("NUM_SMS", None)  # host-side only
    meta.pop("SECTION_MB", None)  # host-side only (the launcher turns it into HEAD_SECTION by N)
    if "HEAD_SECTION" in hfwd._attn_fwd_hopper.arg_names:  # always passed, as the launcher does
        meta.setdefault("HEAD_SECTION", 0)
    if "ROW_BOUND" in hfwd._attn_fwd_hopper.arg_names:  # likewise
        meta["ROW_BOUND"] = bool(meta.get("ROW_BOUND")) and causal
    if "IS_VARLEN" in hfwd._attn_fwd_hopper.arg_names:  # likewise (packed batches: the grid of one block each)
        # (1: packed; 2: packed with the rows past each sequence zeroed, IS_VARLEN=2)
        meta["IS_VARLEN"] = _varlen_level(meta)
        if meta["IS_VARLEN"]:
            meta.update(PERSISTENT=False, DYNAMIC=False, HEAD_SECTION=0)
    if meta["NUM_CONSUMERS"] == 1:
        meta["PINGPONG"] = False
    tdt = getattr(torch, _TORCH_DTYPES[dtype])
    dv = d if dv is None else dv
    q_block, kv_block = [1, 1, meta["BLOCK_M"], dv], [1, 1, meta["BLOCK_N"], dv]
    descs = {"q_desc": (q_block, tdt), "k_desc": (kv_block, tdt), "v_desc": (kv_block, tdt),
             "o_desc": (q_block, tdt)}
    constexprs = dict(meta, HEAD_DIM=d, IS_CAUSAL=causal)
    _split_qk_args("HEAD_DIM_V" in hfwd._attn_fwd_hopper.arg_names, constexprs, descs, meta, d, dv, tdt,
                   "this kernel")
    scalars = {"LSE": "*fp32", "TILE_COUNTER": "*i32", "qk_scale": "fp32", "SEED": "*i64",
               "dropout_scale": "fp32"}
    if "MASK" in hfwd._attn_fwd_hopper.arg_names:  # without a mask the launcher passes LSE there (unused)
        scalars["MASK"] = "*fp32"
    divisible = ()
    if masked:
        scalars["MASK"] = "*u8"
        divisible = ("MASK", "stride_mz", "stride_mh", "stride_mm")
    if "O" in hfwd._attn_fwd_hopper.arg_names:
        # EARLY_Q: O (16-bit) with 16-divisible strides, as a contiguous O of
        # d = 64-256 has; without it the launcher passes LSE there (unused).
        scalars["O"] = ("*bf16" if dtype == "bf16" else "*fp16") if early_q else "*fp32"
        if early_q:
            divisible += ("O", "stride_oz", "stride_oh", "stride_om")
    if meta.get("IS_VARLEN"):
        # A packed batch: the offsets (int32) and O (16-bit) for the rows of a
        # block that reaches past its sequence (kernels/hopper/fwd.py).
        scalars.update(CU_SEQLENS_Q="*i32", CU_SEQLENS_K="*i32", O="*bf16" if dtype == "bf16" else "*fp16")
    compiled = _compile_gluon(hfwd._attn_fwd_hopper, constexprs, descs, scalars, d, arch, divisible)
    return compiled, meta


def _varlen_level(meta: dict):
    """IS_VARLEN as the launchers pass it: False (padded batch), 1 (packed) or
    2 (packed, the rows past each sequence zeroed); --hopper-variants gives it as text."""
    return int(meta.get("IS_VARLEN") or 0) or False


def compile_hopper_bwd(d: int, causal: bool, overrides: dict, arch: int = 90, dtype: str = "bf16", dv=None):
    """The Gluon backward (kernels/hopper/bwd.py) for sm_<arch> as its
    launcher would build it (CONFIGS, or CONFIGS_UNVERIFIED for head dims
    not yet in CONFIGS, SCHEDULE, plus overrides); dv: the value head dim
    (default d; d = 192 with dv = 128: split Q K^T, HEAD_DIM_V); returns
    (compiled, meta)."""
    import torch
    from flashattn_triton.kernels.hopper import bwd as hbwd

    if hasattr(hbwd, "DROPOUT_CONFIGS"):
        meta = hbwd.kernel_meta(d, causal, overrides, unverified=True, windowed=bool(overrides.get("HAS_WINDOW")),
                                dropout=bool(overrides.get("HAS_DROPOUT")))
        dq_cols = hbwd.dq_block_cols(d, **meta)
    elif hasattr(hbwd, "WINDOW_CONFIGS"):
        meta = hbwd.kernel_meta(d, causal, overrides, unverified=True, windowed=bool(overrides.get("HAS_WINDOW")))
        dq_cols = hbwd.dq_block_cols(d, **meta)
    elif hasattr(hbwd, "kernel_meta"):  # a checkout from before the window
        meta = hbwd.kernel_meta(d, causal, overrides, unverified=True)
        dq_cols = hbwd.dq_block_cols(d, **meta)
    else:  # a checkout from before CONFIGS_UNVERIFIED (to compare builds)
        meta = dict(hbwd.CONFIGS[d], **hbwd.SCHEDULE[causal], **overrides)
        dq_cols = d // meta["NUM_CONSUMERS"]
    if "GROUP_SPLIT" in hbwd._attn_bwd_hopper.arg_names:  # (a checkout from before the group split has none)
        meta.setdefault("GROUP_SPLIT", 1)  # a constexpr, as the launcher passes it
    varlen = bool(meta.get("IS_VARLEN"))
    if "IS_VARLEN" in hbwd._attn_bwd_hopper.arg_names:  # (a checkout from before packed batches has none)
        # a constexpr, as the launcher passes it (2: the rows past each sequence zeroed)
        meta["IS_VARLEN"] = _varlen_level(meta)
        if varlen:  # as hopper_backward_varlen: the 2-D grid, whole groups, dK / dV by gl.store
            meta.update(PERSISTENT=False, GROUP_SPLIT=1, TMA_DKV=False)
    tdt = getattr(torch, _TORCH_DTYPES[dtype])
    dv = d if dv is None else dv
    if dv != d:  # the dQ pieces are DQ_CHUNK wide (dq_block_cols of dv)
        dq_cols = hbwd.dq_block_cols(dv, **meta)
    q_block, kv_block = [1, 1, meta["BLOCK_M"], dv], [1, 1, meta["BLOCK_N"], dv]
    # dQ's rows per block as the launcher plans them (the 128-row step of d = 192 reduces 64-row
    # pieces; Triton 3.9 checks that the staged tile and the block match, 3.6 did not)
    dq_rows = hbwd.dq_block_rows(**meta) if hasattr(hbwd, "dq_block_rows") else meta["BLOCK_M"]
    descs = {"q_desc": (q_block, tdt), "do_desc": (q_block, tdt), "k_desc": (kv_block, tdt),
             "v_desc": (kv_block, tdt), "dq_desc": ([1, 1, dq_rows, dq_cols], torch.float32)}
    constexprs = dict(meta, HEAD_DIM=d, IS_CAUSAL=causal)
    _split_qk_args("q1_desc" in hbwd._attn_bwd_hopper.arg_names, constexprs, descs, meta, d, dv, tdt,
                   "this backward")
    # GROUP_SPLIT = S > 1: dK / dV are the float32 partials of a group's slices
    out = "fp32" if meta.get("GROUP_SPLIT", 1) > 1 else dtype
    if "dk_desc" in hbwd._attn_bwd_hopper.arg_names:  # TMA_DKV: dK / dV by TMA stores (16-bit)
        has_dk1 = "dk1_desc" in hbwd._attn_bwd_hopper.arg_names  # (a checkout from before the split Q K^T's)
        if meta.get("TMA_DKV"):
            descs["dk_desc"] = descs["dv_desc"] = (hbwd.dkv_block(dv, **meta), tdt)
            if dv != d:  # the split Q K^T: dK's second chunk
                descs["dk1_desc"] = (hbwd.dkv_block(d - dv, **meta), tdt)
            elif has_dk1:
                constexprs.update(dk1_desc=None)
        else:  # None at the launch: constexprs, no parameters
            constexprs.update(dk_desc=None, dv_desc=None, **({"dk1_desc": None} if has_dk1 else {}))
    scalars = {"LSE": "*fp32", "DELTA": "*fp32", "DK": f"*{out}", "DV": f"*{out}",
               "qk_scale": "fp32", "sm_scale": "fp32", "SEED": "*i64", "dropout_scale": "fp32"}
    divisible: tuple = ()
    if "DQ_ACC" in hbwd._attn_bwd_hopper.arg_names:  # (sessions 41-44's checkouts: DQ_STAGE_BUFS = 0)
        dq_args = ("DQ_ACC", "stride_qaz", "stride_qah", "stride_qam")
        if meta.get("DQ_STAGE_BUFS") == 0:  # dQ by atomics: the buffer and its strides (16-divisible, as a launch's)
            scalars["DQ_ACC"] = "*fp32"
            divisible = dq_args
        else:  # None at the launch: constexprs, no parameters
            constexprs.update(dict.fromkeys(dq_args))
    if "CU_SEQLENS_Q" in hbwd._attn_bwd_hopper.arg_names:  # (dense launches pass LSE there, unused)
        scalars.update(CU_SEQLENS_Q="*i32" if varlen else "*fp32", CU_SEQLENS_K="*i32" if varlen else "*fp32")
    compiled = _compile_gluon(hbwd._attn_bwd_hopper, constexprs, descs, scalars, d, arch, divisible)
    return compiled, meta


def _gluon_sweep(args, title: str, specs, build, describe) -> int:
    """Compile and report one Gluon kernel per head dim, mask and variant:
    build(d, causal, spec) -> (compiled, meta), or None to skip the variant at
    this d; describe(d, meta, compiled) -> the report's kernel-specific parts
    (after "ok", and at the end of the line)."""
    failures = 0
    cases = {"full": False, "causal": True}
    for d, dv in ((int(x.partition(":")[0]), int(x.partition(":")[2] or x.partition(":")[0]))
                  for x in args.d.split(",")):
        for case in args.cases.split(","):
            if case not in cases:
                continue
            for spec in specs:
                label = f"{title} d={d:3d}{'' if dv == d else f'/{dv}'} {case:6s} {spec}"
                try:
                    # build(d, causal, spec[, dv=]): dv only where it differs (d:dv in --d)
                    built = build(d, cases[case], spec) if dv == d else build(d, cases[case], spec, dv=dv)
                    if built is None:
                        continue
                    k, meta = built
                    ops = sass_ops(k)
                    local = collections.Counter(op.split(".")[0] for _, op, _ in ops if op.startswith(("LDL", "STL")))
                    head, tail = describe(d, meta, k)
                    print(f"{label}: ok{head}, {ptxas_report(k, args.arch)}, "
                          f"LDL {local['LDL']} STL {local['STL']} ({local_in_gemm_loops(ops)} in GEMM loops), "
                          f"sass {len(ops)}{tail}", flush=True)
                    if args.sass:
                        print(f"    {instruction_report(k)}")
                        print(f"    {gemm_loop_report(ops)}")
                        print(f"    {sync_report(ops)}")
                        print(f"    {store_report(ops)}")
                        print(f"    sass sha256 {sass_hash(k)}")
                except Exception as exc:  # noqa: BLE001
                    failures += 1
                    print(f"{label}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    print("failures:", failures)
    return failures


def hopper_main(args) -> int:
    """--hopper: the Gluon forward per head dim, mask and probe variant (or
    KEY=VALUE+... overrides)."""
    def build(d, causal, spec, dv=None):
        from hopper_fwd_probe import VARIANTS  # benchmarks/ is this script's directory
        if spec in VARIANTS and d not in VARIANTS[spec][1]:
            return None
        overrides = _hopper_overrides(spec)
        if args.window:
            overrides["HAS_WINDOW"] = True
        if args.dropout:
            overrides["HAS_DROPOUT"] = True
        if args.mask:
            overrides["HAS_MASK"] = True
        return compile_hopper(d, causal, overrides, args.arch, args.dtype, dv)

    def describe(d, meta, k):
        return f", smem {k.metadata.shared}", f", consumers {meta['NUM_CONSUMERS']}x{meta['CONSUMER_REGS']} regs"

    return _gluon_sweep(args, "HOPPER", args.hopper_variants.split(","), build, describe)


def hopper_bwd_main(args) -> int:
    """--hopper-bwd: per head dim, mask and variant (KEY=VALUE+... overrides
    or 'default'): shared memory (compiled, and the launcher's model against
    its limit), ptxas registers / spills, SASS local loads / stores."""
    from flashattn_triton.kernels.hopper import bwd as hbwd

    def build(d, causal, spec, dv=None):
        overrides = {} if spec == "default" else _hopper_overrides(spec)
        if args.window:
            overrides["HAS_WINDOW"] = True
        if args.dropout:
            overrides["HAS_DROPOUT"] = True
        k, meta = compile_hopper_bwd(d, causal, overrides, args.arch, args.dtype, dv)
        return k, dict(meta, head_dim_v=dv or d)

    def describe(d, meta, k):
        tier = "CONFIGS" if d in hbwd.CONFIGS else "CONFIGS_UNVERIFIED"
        model = hbwd.smem_bytes(d, **meta) if "head_dim_v" in inspect.signature(hbwd.smem_bytes).parameters \
            else hbwd.smem_bytes(d, **{k: v for k, v in meta.items() if k != "head_dim_v"})
        return (f" ({tier}), smem {k.metadata.shared} (model {model}, limit "
                f"{hbwd.SMEM_LIMIT})"), ""

    return _gluon_sweep(args, "HOPPER-BWD", (args.hopper_variants or "default").split(","), build, describe)


# ---------------------------------------------------------------------------
# KV-cache decoding (kernels/decode.py, kernels/combine.py): built from the
# launcher's own calls
# ---------------------------------------------------------------------------

DECODE_KERNELS = ("DECODE", "COMBINE", "GATHER")
DECODE_CACHES = ("contiguous", "paged16", "paged256")
# Split mode -> (split count asked for, FLASHATTN_TRITON_DECODE_COMBINE):
# one split writes the result (SPLIT_MODE 0); several merge in the decode
# kernel (2) or in the combine kernel (1, the only launch of COMBINE).
# "auto": the plan's own split count (with --decode-variants: batch 1 on 132 SMs, a 4k cache).
DECODE_SPLITS = {"one": (1, "fused"), "fused": (4, "fused"), "separate": (4, "separate"), "auto": (0, "fused"),
                 "gathered": (4, "gathered"), "gathered16": (16, "gathered")}
# --mods for the decode launch: switch -> decode_attention keyword arguments
# (tensors made on the meta device by _decode_mod_kwargs).
DECODE_MODS = ("HAS_SOFTCAP", "HAS_ALIBI", "HAS_WINDOW_LEFT", "HAS_LEFTPAD", "ROTARY", "MASK_CHUNK")


class _LaunchRecorder:
    """Stands in for a triton.jit kernel: ``kernel[grid](*args, **kwargs)``
    appends (kernel, args, kwargs) to ``launches`` instead of running it."""

    def __init__(self, kernel, launches: list):
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((self.kernel, args, kwargs))


@contextlib.contextmanager
def recorded_launches(owners):
    """Within the block, the kernels named by ``owners`` ((module, attribute)
    pairs) record their launches in the yielded list instead of running."""
    launches: list = []
    saved = [(module, name, getattr(module, name)) for module, name in owners]
    try:
        for module, name, kernel in saved:
            setattr(module, name, _LaunchRecorder(kernel, launches))
        yield launches
    finally:
        for module, name, kernel in saved:
            setattr(module, name, kernel)


def compile_launch(kernel, args, kwargs, target):
    """triton.compile of one recorded launch, specialized by Triton's own
    binder as the JIT would at that launch (ints equal to 1 become constants,
    ints and pointers divisible by 16 get the divisibility hint, a kernel's
    do_not_specialize is respected; meta tensors count as 16-byte aligned,
    as CUDA allocations are).  Uses the JIT's internals of Triton 3.6."""
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    src = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=target, options=options.__dict__)


def _decode_mod_kwargs(mods, h_q: int, d: int, cap: int, batch: int) -> dict:
    """decode_attention keyword arguments that turn on the --mods switches."""
    import torch

    meta = dict(device="meta")
    kw: dict = {}
    if "HAS_SOFTCAP" in mods:
        kw["softcap"] = 30.0
    if "HAS_ALIBI" in mods:
        kw["alibi_slopes"] = torch.empty(h_q, dtype=torch.float32, **meta)
    if "HAS_WINDOW_LEFT" in mods:
        kw["window_left"] = 127  # gpt-oss's sliding window
    if "HAS_LEFTPAD" in mods:
        kw["cache_leftpad"] = torch.empty(batch, dtype=torch.int32, **meta)
    if "MASK_CHUNK" in mods:
        kw["attention_chunk"] = 8192  # Llama 4's chunked layers
    if "ROTARY" in mods:  # full-width rotary tables of the cache's length
        kw["rotary_cos"] = torch.empty(cap, d // 2, dtype=torch.bfloat16, **meta)
        kw["rotary_sin"] = torch.empty(cap, d // 2, dtype=torch.bfloat16, **meta)
    return kw


def decode_launches(d: int, cache: str, sinks: bool, split: str, rows: int, dtype: str, mods=(),
                    variant: str = "", arch: int = 90):
    """The kernel launches (kernel, args, kwargs) of one decode step as
    decode.decode_attention makes them on a GPU: meta-device tensors (so
    decode_config picks the GPU config), one query token per sequence and
    ``rows`` query heads per KV head (8 KV heads), a 4k-token cache
    (contiguous or paged) with one token appended, cache_seqlens given,
    causal.  ``variant`` (a decode.ENV_VARIANT value, '+' for ','): batch 1
    on 132 SMs (the H200) with those variants on.  The plan sees a GPU of
    this arch: its shared-memory budget (launch.arch_budget) and PDL from
    sm_90 only."""
    import torch
    from flashattn_triton.kernels import combine as combine_mod, decode as decode_mod

    tdt = getattr(torch, _TORCH_DTYPES.get(dtype, "float32"))
    batch, h_kv, cap = (1 if variant else 2), 8, 4096
    h_q = rows * h_kv
    meta = dict(device="meta")
    q = torch.empty(batch, 1, h_q, d, dtype=tdt, **meta)
    table = None
    if cache == "contiguous":
        k_cache = torch.empty(batch, cap, h_kv, d, dtype=tdt, **meta)
    else:
        page = int(cache[len("paged"):])
        table = torch.empty(batch, cap // page, dtype=torch.int32, **meta)
        k_cache = torch.empty(batch * (cap // page), page, h_kv, d, dtype=tdt, **meta)
    kw = dict(cache_seqlens=torch.empty(batch, dtype=torch.int32, **meta), cache_batch_idx=None,
              cache_leftpad=None, block_table=table, rotary_cos=None, rotary_sin=None,
              rotary_interleaved=True, rotary_q_per_token=True, alibi_slopes=None, n_new=1,
              softmax_scale=d ** -0.5, window_left=-1, window_right=0, softcap=0.0,
              num_splits=DECODE_SPLITS[split][0],
              sinks=torch.empty(h_q, dtype=torch.float32, **meta) if sinks else None)
    kw.update(_decode_mod_kwargs(mods, h_q, d, cap, batch))
    out = torch.empty_like(q)
    lse = torch.empty(batch, h_q, 1, dtype=torch.float32, **meta)
    owners = [(decode_mod, "_decode_fwd"), (combine_mod, "_combine_fwd")]
    env = {decode_mod.ENV_COMBINE: DECODE_SPLITS[split][1]}
    if variant:
        env[decode_mod.ENV_VARIANT] = variant.replace("+", ",")
    saved_env = {name: os.environ.get(name) for name in env}
    saved = {name: getattr(decode_mod, name) for name in ("sm_count", "device_smem_budget", "pdl_supported")}
    os.environ.update(env)
    if variant:
        decode_mod.sm_count = lambda device: 132
    decode_mod.device_smem_budget = lambda device: arch_budget(f"sm{arch}")
    decode_mod.pdl_supported = lambda device, _pdl=saved["pdl_supported"]: arch >= 90 and _pdl(device)
    try:
        with recorded_launches(owners) as launches:
            decode_mod.decode_attention(q, k_cache, torch.empty_like(k_cache), out, lse, **kw)
    finally:
        for name, value in saved.items():
            setattr(decode_mod, name, value)
        for name, value in saved_env.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
    return launches


def _launch_tag(kwargs: dict) -> str:
    """'(BLOCK_M,BLOCK_N,warps,stages)' of a launch: '-' for a tile size the
    kernel does not have, the backend's default for an option it leaves out."""
    from triton.backends.nvidia.compiler import CUDAOptions

    options = dict(num_warps=CUDAOptions.num_warps, num_stages=CUDAOptions.num_stages)
    options.update({k: v for k, v in kwargs.items() if k in options})
    tiles = [str(kwargs.get(k, "-")) for k in ("BLOCK_M", "BLOCK_N")]
    return f"({','.join(tiles)},{options['num_warps']},{options['num_stages']})"


def decode_sweep(args, names) -> int:
    """--kernels DECODE,COMBINE: the decode kernel per head dim, cache
    layout, split mode and sinks off / on, and the combine kernel of the
    'separate' split mode, each as the launcher builds it (decode_launches);
    a build shared by several cases (the combine kernel does not see the
    cache layout) is compiled once.  Returns the failure count."""
    target = GPUTarget("cuda", args.arch, 32)
    kernel_names = {"_decode_fwd": "DECODE", "_combine_fwd": "COMBINE"}
    mods = [m for m in args.mods.split(",") if m in DECODE_MODS]
    seen, failures = set(), 0
    dims = [int(x.partition(":")[0]) for x in args.d.split(",")]
    variants = args.decode_variants.split(",") if args.decode_variants else [""]
    cases = itertools.product(variants, dims, args.decode_rows.split(","), args.decode_caches.split(","),
                              args.decode_splits.split(","), (False, True))
    for variant, d, rows, cache, split, sinks in cases:
        label = f"d={d:3d} rows={rows:>2s} {cache:10s} {split:8s} sinks={sinks!s:5}"
        if variant:
            label = f"{variant:14s} {label}"
        try:
            launches = decode_launches(d, cache, sinks, split, int(rows), args.dtype, mods, variant, args.arch)
        except Exception as exc:  # noqa: BLE001
            failures += 1
            print(f"DECODE    {label}: FAILED to launch: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        for kernel, kargs, kwargs in launches:
            name = kernel_names[kernel.__name__]
            name = "GATHER" if name == "COMBINE" and kwargs.get("PARTS") else name  # (the gathered merge)
            key = (name, variant, d, rows, cache if name == "DECODE" else "",
                   split if name in ("DECODE", "GATHER") else "", sinks)
            if name not in names or key in seen:
                continue
            seen.add(key)
            where = label if name == "DECODE" else f"{variant}{' ' if variant else ''}d={d:3d} rows={rows:>2s} sinks={sinks!s:5}"
            where += f" {split}" if name == "GATHER" else ""
            line = f"{name:9s} {where} {_launch_tag(kwargs)}" + (" pdl" if kwargs.get("launch_pdl") else "")
            try:
                k = compile_launch(kernel, kargs, kwargs, target)
                over = over_limit(k.metadata.shared, args.arch)
                failures += bool(over)
                print(f"{line}: {over or 'ok'}, smem {k.metadata.shared}, {ptxas_report(k, args.arch)}",
                      flush=True)
                if args.sass:
                    print(f"    {instruction_report(k)}; sass sha256 {sass_hash(k)}")
                    print(f"    {store_report(sass_ops(k))}")
            except Exception as exc:  # noqa: BLE001
                failures += 1
                print(f"{line}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--d", default="64,128,256", help="comma-separated head dims, d or d:dv")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--all-configs", action="store_true")
    ap.add_argument("--chosen", action="store_true",
                    help="the entry the launchers choose on a GPU of --arch (its table and shared-memory "
                         "budget; a 4096-key call) instead of the first candidate; a build over the arch's "
                         "shared-memory limit counts as a failure (any sweep)")
    ap.add_argument("--variants", action="store_true", help="every score-modification switch on")
    ap.add_argument("--mods", default="", help="comma-separated switches to turn on, e.g. "
                    "HAS_MASK,MASK_BOOL (a bool mask), HAS_DROPOUT, MASK_LEFT (a window), "
                    "HAS_MASK,LSE_LO (a float bias: the compensated LSE), MASK_CHUNK (chunked attention), "
                    "PAGED,PAGE_SIZE=16 (FWD on a paged K / V: NAME=INT sets a value)")
    ap.add_argument("--configs", default="", help="semicolon-separated BM,BN,W,S to compile "
                    "instead of the first candidate; for BWD_ONE also BM1,BN1,BM2,BN2,W,S (a table "
                    "entry: the dK/dV tiles, the dQ tiles, one num_warps and num_stages)")
    ap.add_argument("--kernels", default="FWD,BWD_DKDV,BWD_DQ",
                    help="portable kernels FWD, BWD_DKDV, BWD_DQ, BWD_ONE (both backward "
                    "kernels in one launch: a BM,BN,W,S config is the dK/dV part, with the first dQ candidate's "
                    "tiles, as launch.PairLauncher combines them; --all-configs: its tuning candidates, "
                    "PairLauncher.pair_candidates); the KV-cache decode "
                    "kernels DECODE, COMBINE (module doc)")
    ap.add_argument("--whole-q", action="store_true",
                    help="dense query lengths that are multiples of 128 with kernels/bwd.py WHOLE_Q_TILES on "
                         "(the dK/dV kernels' EVEN_M: no row checks in the masked loops); default: as the "
                         "library's WHOLE_Q_TILES says")
    ap.add_argument("--cases", default="full,causal,varlen",
                    help="which of full / causal / varlen (causal, packed) to compile")
    ap.add_argument("--sass", action="store_true", help="also count instructions (module doc)")
    ap.add_argument("--split-qk", choices=("auto", "on", "off"), default="auto",
                    help="Q K^T (and in the backward dQ, dK) in two column chunks (kernels/fwd.py "
                    "split_qk) as the launch would choose it (fwd.SPLIT_QK, bwd.use_split_qk), always "
                    "(where allowed) or never")
    ap.add_argument("--decode-caches", default=",".join(DECODE_CACHES),
                    help="DECODE: cache layouts among %(default)s")
    ap.add_argument("--decode-splits", default="one,fused,separate",
                    help="DECODE: split modes among %(default)s (one split; 4 merged in the "
                    "decode kernel; 4 merged by COMBINE), auto (the plan's count, fused), gathered / "
                    "gathered16 (4 / 16 merged by GATHER)")
    ap.add_argument("--decode-variants", default="",
                    help="DECODE / COMBINE: candidate variants (decode.VARIANTS, '+' joins several, "
                    "'default' none), each built at batch 1 on 132 SMs, comma-separated")
    ap.add_argument("--decode-rows", default="4",
                    help="DECODE / COMBINE: query rows per KV head (query heads per KV head x query "
                    "tokens; decode_config's BLOCK_M and warps follow), comma-separated")
    ap.add_argument("--hopper", action="store_true", help="the Gluon forward (module doc)")
    ap.add_argument("--hopper-bwd", action="store_true", help="the Gluon backward (module doc)")
    ap.add_argument("--window", action="store_true",
                    help="with --hopper or --hopper-bwd: the sliding-window builds (HAS_WINDOW: a left "
                    "window bound)")
    ap.add_argument("--mask", action="store_true",
                    help="with --hopper: the boolean-mask builds (HAS_MASK)")
    ap.add_argument("--dropout", action="store_true",
                    help="with --hopper or --hopper-bwd: the dropout builds (HAS_DROPOUT; the bwd's "
                    "DROPOUT_CONFIGS)")
    ap.add_argument("--hopper-variants", default=None,
                    help="with --hopper: probe variant names or KEY=VALUE+KEY=VALUE overrides "
                    "(default: default,persistent); with --hopper-bwd: 'default' or overrides")
    args = ap.parse_args()
    if args.sass and "TRITON_CACHE_DIR" not in os.environ:
        # Fresh builds for --sass: in session 36 a build from Triton's cache hashed
        # otherwise than a fresh build of the same source (d = 192, 72e745a0 against
        # d501cc72), and the d = 192 builds' hashes also moved between processes
        # that compiled other builds before them; d = 64 / 128 / 256 stayed put.
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="compile_check_")
    if args.hopper_bwd:
        return hopper_bwd_main(args)
    if args.hopper:
        args.hopper_variants = args.hopper_variants or "default,persistent"
        return hopper_main(args)
    names = args.kernels.split(",")
    failures = decode_sweep(args, names) if set(names) & set(DECODE_KERNELS) else 0
    failures += portable_sweep(args, names)
    print("failures:", failures)
    return failures


def over_limit(shared: int, arch: int) -> str:
    """'' if a build's shared memory loads on a GPU of this arch (the
    per-block limit, launch.SMEM_LIMIT_BY_ARCH), else the reason."""
    limit = SMEM_LIMIT_BY_ARCH.get(f"sm{arch}")
    return "" if limit is None or shared <= limit else f"OVER the sm_{arch} limit of {limit} B"


def chosen_entry(name: str, arch: int, dtype: str, d_pad: int, dv_pad: int, causal: bool) -> tuple:
    """The entry the launchers choose on a GPU of this arch (its table and its
    shared-memory budget, launch.arch_budget) for a call of 4096 keys: as
    Launcher.entry_for, and for BWD_ONE the parts' entries combined as
    PairLauncher.config does without a table entry."""
    import torch
    launchers = {"FWD": fwd._launch_fwd, "BWD_DKDV": bwd._launch_dkdv, "BWD_DQ": bwd._launch_dq}
    tdt = getattr(torch, _TORCH_DTYPES.get(dtype, "float32"))
    budget, sm = arch_budget(f"sm{arch}"), f"sm{arch}"
    dv = None if dv_pad == d_pad else dv_pad
    if name == "BWD_ONE":
        a, b = (make_config(p.entry_for(sm, budget, tdt, d_pad, causal, 4096, "", dv)) for p in bwd._launch_one.parts)
        return bwd._launch_one.combine(a, b, d_pad, tdt.itemsize, dv, budget)
    return launchers[name].entry_for(sm, budget, tdt, d_pad, causal, 4096, "", dv)


def portable_sweep(args, names) -> int:
    """The portable kernels among ``names`` per head dim, case and config;
    returns the failure count."""
    target = GPUTarget("cuda", args.arch, 32)
    kernels = {"FWD": fwd._attn_fwd, "BWD_DKDV": bwd._bwd_dkdv, "BWD_DQ": bwd._bwd_dq}
    if hasattr(bwd, "_bwd_dkdv_dq"):
        kernels["BWD_ONE"] = bwd._bwd_dkdv_dq
    kernels = {k: v for k, v in kernels.items() if k in names}
    mods = [m for m in args.mods.split(",") if m]
    overrides = {}
    if "HAS_MASK" in mods:  # the mask's element type: uint8 for a bool mask, else the input's
        overrides["BIAS"] = "*u8" if "MASK_BOOL" in mods else f"*{args.dtype}"
    failures = 0
    dims = [(int(d), int(dv or d)) for d, _, dv in (x.partition(":") for x in args.d.split(","))]
    elem = 4 if args.dtype == "fp32" else 2
    for (d, dv), (name, kernel) in itertools.product(dims, kernels.items()):
        cases = {"full": (False, False), "causal": (True, False), "varlen": (True, True)}
        d_pad, dv_pad = head_dim_pad(d), head_dim_pad(dv)
        for causal, varlen in (cases[c] for c in args.cases.split(",")):
            # BWD_ONE (the dK/dV and dQ programs in one launch): six-field
            # entries (dK/dV tiles, dQ tiles, warps, stages) as given, or a
            # four-field dK/dV config combined with the first dQ candidate as
            # launch.PairLauncher combines them (the larger num_warps, the
            # dK/dV stages lowered until the dQ tiles fit)
            table = CANDIDATES["BWD_DKDV" if name == "BWD_ONE" else name]
            if name == "BWD_ONE" and args.all_configs:
                table = bwd._launch_one.pair_candidates(d_pad, elem, dv_pad)
            cands = table if args.all_configs else table[:1]
            if args.chosen:
                cands = [chosen_entry(name, args.arch, args.dtype, d_pad, dv_pad, causal)]
            if args.configs:
                cands = [tuple(int(x) for x in c.split(",")) for c in args.configs.split(";")]
            for cand in cands:
                bm2 = bn2 = 0
                if name == "BWD_ONE" and len(cand) == 4:
                    dq = make_config(CANDIDATES["BWD_DQ"][0])
                    cand = bwd._launch_one.combine(make_config(cand), dq, d_pad, elem, dv_pad)
                if len(cand) == 6 and name == "BWD_ONE":
                    bm, bn, bm2, bn2, w, s = cand
                elif len(cand) == 4:
                    bm, bn, w, s = cand
                else:
                    raise SystemExit(f"--configs: {cand} is not BM,BN,W,S"
                                     + (" or BM1,BN1,BM2,BN2,W,S" if name == "BWD_ONE" else ""))
                meta = dict(HEAD_DIM=d, HEAD_DIM_PAD=d_pad, EVEN_D=d == d_pad, HEAD_DIM_V=dv,
                            HEAD_DIM_V_PAD=dv_pad, EVEN_DV=dv == dv_pad, IS_VARLEN=varlen,
                            MASK_LEFT=False, MASK_RIGHT=causal,
                            DOT_PRECISION="tf32", INTERPRET=False, BLOCK_M=bm, BLOCK_N=bn,
                            HAS_SOFTCAP=False, FAST_TANH=False, HAS_ALIBI=False, HAS_MASK=False,
                            MASK_BOOL=False, HAS_SINKS=False, HAS_DROPOUT=False, HAS_DBIAS=False,
                            HEADS_PER_PROGRAM=1,
                            EVEN_M=not varlen and (args.whole_q or bwd.by_causal(bwd.WHOLE_Q_TILES, causal)),
                            BLOCK_M1=bm, BLOCK_N1=bn, BLOCK_M2=bm2, BLOCK_N2=bn2,
                            LSE_LO=False, MASK_CHUNK=False, PAGED=False, PAGE_SIZE=0)
                if args.variants:
                    meta.update(HAS_SOFTCAP=True, HAS_ALIBI=True, HAS_SINKS=True, HAS_DROPOUT=True,
                                HAS_MASK=True)
                # a switch, or NAME=INT for a value (PAGED,PAGE_SIZE=16: the paged forward)
                meta.update({m.partition("=")[0]: int(m.partition("=")[2]) if "=" in m else True for m in mods})
                if name == "FWD":
                    meta["REVERSE_M"] = causal
                allowed = getattr(fwd, "split_qk", lambda *_: False)(d, d_pad)
                if name == "FWD":
                    default = getattr(fwd, "SPLIT_QK", False)
                else:
                    default = getattr(bwd, "use_split_qk", lambda *_: False)(d, d_pad)
                meta["SPLIT_QK"] = allowed and (args.split_qk == "on" or
                                                (args.split_qk == "auto" and default))
                meta = {k: v for k, v in meta.items() if k in kernel.arg_names}
                if name == "BWD_ONE":
                    fit = bwd._launch_one.entry_fits((bm, bn, bm2, bn2, w, s), d_pad, elem, dv_pad)
                else:
                    fit = fits((bm, bn, w, s), RESIDENT[name], d_pad, elem, dv_pad)
                model = "fits" if fit else "unfit"
                split = " split" if meta.get("SPLIT_QK") else ""
                tiles = f"{bm},{bn}+{bm2},{bn2}" if name == "BWD_ONE" else f"{bm},{bn}"
                label = (f"{name:9s} d={d:3d}{f'/{dv}' if dv != d else ''}{split} causal={causal!s:5} "
                         f"varlen={varlen!s:5} ({tiles},{w},{s}) model {model:5s}")
                try:
                    ov = {n: t for n, t in overrides.items() if n in kernel.arg_names}
                    k = compile_one(kernel, args.dtype, meta, target, w, s, ov)
                    over = over_limit(k.metadata.shared, args.arch)
                    failures += bool(over)
                    print(f"{label}: {over or 'ok'}, smem {k.metadata.shared}, {ptxas_report(k, args.arch)}")
                    if args.sass:
                        print(f"    {instruction_report(k)}")
                        print(f"    {store_report(sass_ops(k))}")
                        print(f"    sass sha256 {sass_hash(k)}")
                except Exception as exc:  # noqa: BLE001
                    failures += 1
                    print(f"{label}: FAILED {type(exc).__name__}: {str(exc)[:300]}")
    return failures


if __name__ == "__main__":
    raise SystemExit(main())

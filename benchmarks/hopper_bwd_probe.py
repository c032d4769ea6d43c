"""Variants of the Hopper backward (kernels/hopper/bwd.py) side by side with
SDPA's cuDNN backward, in one process on the H200.

For each shape (bf16, B*N = 16k tokens, H = 2048/d; d of --head-dims, N of
--seqlens, causal and not, none with --head-dims none; the GQA rows of
--gqa, ';'-separated) it runs the Hopper forward for
O and lse2, then times ``hopper_attention_backward`` (the dQ buffer's zeroing
and conversion included, the preprocess not) for each variant of --variants
(CONFIGS overrides, ``KEY=VALUE`` joined by '+', "default" for none; plus
--variants64 / --variants256 at those head dims), the library's whole
backward (``torch.autograd.grad`` of ``flash_attn_func``, preprocess
included), the library's backward with the Hopper backward turned off
(``portable``: FLASHATTN_TRITON_HOPPER_BWD=0 around the backward call, the
portable kernels; ``api/portable`` and ``default/portable`` compare), SDPA's
cuDNN backward and SDPA's flash (FlashAttention-2) backward (--baselines
picks among api, portable, cudnn, fa2).  Each variant's gradients are checked against the default
variant's (max |diff| / max |ref| <= 2e-2, a broken variant shows as FAIL).
A head dim with a value head dim of its own in the backward's HEAD_DIM_V
(d = 192: dv = 128, the split Q K^T; as a grid head dim or in a --gqa row)
gets V and dO of dv columns.
TFLOP/s = 2 * B * H * N^2 * (3 d + 2 dv) / t (= 2.5 * 4 * B * H * N^2 * d
with dv = d; halved when causal; t is do_bench's median, --stat); the ratios in
parentheses are to cuDNN, and ``default/fa2`` is the default variant's ratio
to SDPA flash.

Head dims of the backward's CONFIGS_UNVERIFIED (configs not yet run on a GPU;
verified it) are timed too: the probe passes UNVERIFIED=True and sets
FLASHATTN_TRITON_HOPPER_BWD_UNVERIFIED=1, so the "api" column is what
flash_attn_func does once they move into CONFIGS.

    PYTHONPATH=. python benchmarks/hopper_bwd_probe.py --out /tmp/out
    PYTHONPATH=. python benchmarks/hopper_bwd_probe.py --head-dims 256 --gqa 2,8,2,8192,256,1
    PYTHONPATH=. python benchmarks/hopper_bwd_probe.py --head-dims none --variants default --variants64 "" \
        --variants256 "" --baselines api,portable,cudnn --gqa "4,16,16,4096,192,0;4,16,16,4096,192,1"
    PYTHONPATH=. python benchmarks/hopper_bwd_probe.py --variants default,PERSISTENT=true \
        --variants64 "" --variants256 "" --head-dims 64,128,256

Each variant other than "default" also shows its ratio to the default
variant (``spec/default``).  GQA groups across programs (GROUP_SPLIT=S;
0: the launcher's group_split rule; an S that does not divide a row's group
runs as its largest divisor below, MHA as 1).  Overrides make a launch plan
per call (host time that shows on short kernels); "split-default" times the
rule through the per-signature plans, as "default" is timed, by turning
HOPPER_BWD_GROUP_SPLIT_DEFAULT on for that variant ("mod:NAME=VALUE" sets any
of the module's switches so, e.g. mod:DQ_ACC_LIKE_DQ=False; "pmod:NAME=VALUE"
one of kernels/bwd.py's, the portable backward's module, whose helpers the
Hopper backward calls, e.g. pmod:DQ_CONVERT_KERNEL=True):

    PYTHONPATH=. python benchmarks/hopper_bwd_probe.py --head-dims none \
        --variants default,split-default,GROUP_SPLIT=2,GROUP_SPLIT=0 --variants64 "" --variants256 "" \
        --gqa "2,16,4,4096,128,1;2,16,4,4096,128,0" --baselines cudnn

``--rows window`` times sliding windows instead (window_size (left, 0),
causal, left of --windows; d of --head-dims, N of --seqlens, bf16, B*N =
16k tokens, H = 2048/d), the backward of one forward (the portable one's
O and LSE) in one process: ``api:window`` (flash_attn_func's backward with
FLASHATTN_TRITON_HOPPER_WINDOW=1: the Hopper backward, preprocess and dQ
conversion included), ``api:portable`` (the same without the opt-in: the
portable backward), ``hopper:kernel`` (hopper_attention_backward alone, as
the variants above) and ``flex`` (FlexAttention, compiled, with the
sliding-window block mask; its backward).  TFLOP/s count the visible pairs
(hopper_fwd_probe.visible_pairs), 2.5 * 4 * B * H * pairs * d; ``win/port``
is api:window / api:portable, ``win/flex`` api:window / flex.  The Hopper
gradients are checked against the portable ones (max |diff| / max |ref| <=
2e-2, else FAIL):

    PYTHONPATH=. python benchmarks/hopper_bwd_probe.py --rows window --head-dims 64,128 \
        --seqlens 2048,8192 --windows 256,1024

``--window-shapes "B,Hq,Hkv,N,d[,left/left...]"`` (';'-separated) times
those shapes (GQA where Hkv < Hq) instead of the head-dims x seqlens grid,
each at --windows or at the '/'-separated left bounds of its sixth field;
``--no-flex`` leaves FlexAttention out (a repeat that needs only the two
API arms).  The api:portable arm sets FLASHATTN_TRITON_HOPPER_WINDOW=0, so
it stays the portable backward whatever _dispatch's size rule
(HOPPER_BWD_WINDOW_MIN_LEFT) would take:

    PYTHONPATH=. python benchmarks/hopper_bwd_probe.py --rows window --windows 512,1024 \
        --window-shapes "4,16,4,4096,128;2,16,4,4096,128,1024" --no-flex
"""
import argparse
import json
import os
import sys

import torch


def parse_variant(spec):
    """A --variants entry: "default", "split-default" or KEY=VALUE overrides
    joined by '+'."""
    from common import parse_overrides  # benchmarks/ is this script's directory
    return {} if spec in ("default", "split-default") or is_module_setting(spec) else parse_overrides(spec)


def is_module_setting(spec):
    return spec.startswith(("mod:", "pmod:"))


def module_setting(hbwd, spec):
    """A "mod:NAME=VALUE" variant: kernels/hopper/bwd.py's NAME set to VALUE
    (a Python literal) for that variant, through the cached plans as a
    user's call runs (e.g. mod:DQ_ACC_LIKE_DQ=False); "pmod:NAME=VALUE":
    kernels/bwd.py's NAME (e.g. pmod:DQ_CONVERT_KERNEL=True); several joined
    by '&' (pmod:DQ_CONVERT_KERNEL=True&mod:DQ_ACC_LIKE_DQ=True); returns the undo."""
    import ast
    from flashattn_triton.kernels import bwd as pbwd
    olds = []
    for part in spec.split("&"):
        prefix, setting = part.split(":", 1)
        module = pbwd if prefix == "pmod" else hbwd
        name, value = setting.split("=", 1)
        olds.append((module, name, getattr(module, name)))
        setattr(module, name, ast.literal_eval(value))
    hbwd._PLANS.clear()

    def undo():
        for module, name, old in reversed(olds):
            setattr(module, name, old)
        hbwd._PLANS.clear()
    return undo


def max_rel_err(got, ref):
    """max over tensors of max |got - ref| / max |ref| (float32)."""
    return max(((g.float() - r.float()).abs().max() / r.float().abs().max()).item() for g, r in zip(got, ref))


def set_split_default(hbwd, setting):
    """HOPPER_BWD_GROUP_SPLIT_DEFAULT set to setting ({causal: on}), the plans
    made under another setting dropped (a plan's key does not hold it)."""
    if hasattr(hbwd, "HOPPER_BWD_GROUP_SPLIT_DEFAULT"):
        hbwd.HOPPER_BWD_GROUP_SPLIT_DEFAULT = dict(setting)
        hbwd._PLANS.clear()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/out")
    ap.add_argument("--variants", default="default,HEADS_FIRST=true",
                    help="comma-separated: default, split-default, KEY=VALUE+... CONFIGS overrides (a launch "
                         "plan per call), mod:NAME=VALUE (a kernels/hopper/bwd.py switch) or pmod:NAME=VALUE "
                         "(a kernels/bwd.py switch, e.g. pmod:DQ_CONVERT_KERNEL=True), both through the cached "
                         "plans")
    ap.add_argument("--variants64", default="BLOCK_M=64",
                    help="extra variants for d=64 only")
    ap.add_argument("--variants256", default="NUM_STAGES=1+DS_BUFS=2+DQ_CHUNK=128",
                    help="extra variants for d=256 only")
    ap.add_argument("--gqa", default="2,32,8,8192,128,1",
                    help="GQA rows B,Hq,Hkv,N,d,causal separated by ';' ('none' for none)")
    ap.add_argument("--head-dims", default="64,128", help="the grid's head dims ('none': no grid rows)")
    ap.add_argument("--baselines", default="api,cudnn,fa2",
                    help="which of api (flash_attn_func's backward), portable (the same with "
                    "FLASHATTN_TRITON_HOPPER_BWD=0), cudnn, fa2 (SDPA) to time")
    ap.add_argument("--seqlens", default="2048,8192")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="dropout_p of the kernel rows' forward and backward (one seed, so every variant "
                         "draws the same mask and its gradients check against the first's); the baselines "
                         "run without it")
    ap.add_argument("--rep", type=int, default=60)
    ap.add_argument("--stat", choices=("median", "mean"), default="median",
                    help="do_bench's statistic over the timed calls (median since session 22: one stalled "
                         "call inflated a mean 2-3x in session 22's calls 1-2; mean before)")
    ap.add_argument("--rows", choices=("grid", "window"), default="grid",
                    help="grid: the variants above; window: sliding windows (module doc)")
    ap.add_argument("--windows", default="256,1024", help="--rows window: left window sizes")
    ap.add_argument("--tokens", type=int, default=16384, help="--rows window: B * N")
    ap.add_argument("--window-variants", default="",
                    help="--rows window: extra kernel rows, ';'-separated: KEY=VALUE+... overrides (a launch "
                         "plan per call) or mod:NAME=VALUE / pmod:NAME=VALUE (a kernels/hopper/bwd.py / "
                         "kernels/bwd.py switch, through the cached plans), e.g. "
                         "\"mod:WINDOW_CONFIGS={128: {'NUM_STAGES': 3}}\"")
    ap.add_argument("--window-shapes", default="",
                    help="--rows window: ';'-separated B,Hq,Hkv,N,d[,left/left...] rows instead of the "
                         "head-dims x seqlens grid (GQA where Hkv < Hq; lefts: --windows unless given)")
    ap.add_argument("--no-flex", action="store_true", help="--rows window: no FlexAttention column")
    ap.add_argument("--profile", action="store_true",
                    help="--rows window: also list each timed function's CUDA kernels (torch.profiler, 3 calls)")
    args = ap.parse_args()
    if args.rows == "window":
        return window_rows(args)

    from triton.testing import do_bench
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import flashattn_triton as fat
    from flashattn_triton.kernels import hopper
    from flashattn_triton.kernels.hopper import bwd as hbwd
    from flashattn_triton.ops import _install_direct_launches

    # kernels/bwd.py's own launches (the dQ conversion, the group sums) take
    # the launch fast path, as in a user's backward
    _install_direct_launches()
    os.environ[hbwd.UNVERIFIED_ENV] = "1"
    os.makedirs(args.out, exist_ok=True)
    shapes = []
    for d in (map(int, args.head_dims.split(",")) if args.head_dims != "none" else ()):
        for n in map(int, args.seqlens.split(",")):
            for causal in (False, True):
                shapes.append((16384 // n, 2048 // d, 2048 // d, n, d, causal))
    if args.gqa != "none":
        for gqa in filter(None, args.gqa.split(";")):
            b, hq, hkv, n, d, causal = map(int, gqa.split(","))
            shapes.append((b, hq, hkv, n, d, bool(causal)))
    baselines = set(filter(None, args.baselines.split(",")))
    rows = []

    def save():
        with open(os.path.join(args.out, "hopper_bwd_probe.json"), "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
    for b, hq, hkv, n, d, causal in shapes:
        torch.manual_seed(0)
        dv = getattr(hbwd, "HEAD_DIM_V", {}).get(d, d)  # V's and dO's width (d = 192: 128)
        q = torch.randn(b, n, hq, d, device="cuda", dtype=torch.bfloat16)
        do = torch.randn(b, n, hq, dv, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, n, hkv, dv, device="cuda", dtype=torch.bfloat16)
        qh, kh, vh, doh = (t.transpose(1, 2) for t in (q, k, v, do))
        scale = d ** -0.5
        shift = 0 if causal else None
        o = torch.empty_like(do)
        lse = torch.empty(b, hq, n, device="cuda")
        drop = {}
        if args.dropout:
            drop = dict(dropout=(torch.tensor([1234], dtype=torch.int64, device="cuda"), args.dropout, 0))
        assert hopper.hopper_attention_forward(qh, kh, vh, o.transpose(1, 2), lse, scale, shift, **drop)
        delta = (do.float() * o.float()).sum(-1).transpose(1, 2).contiguous()
        flops = 2 * b * hq * n * n * (3 * d + 2 * dv) / (2 if causal else 1)
        row = dict(b=b, hq=hq, hkv=hkv, n=n, d=d, dv=dv, causal=causal, dropout=args.dropout, tflops={},
                   check={})
        if hq != hkv and hasattr(hbwd, "group_split"):  # the S that GROUP_SPLIT=0 (the rule) takes
            n_blocks = -(-n // hbwd.kernel_meta(d, causal, unverified=True, dropout=bool(args.dropout))["BLOCK_N"])
            waves = getattr(hbwd, "GROUP_SPLIT_WAVES_DROPOUT", None) if args.dropout else None
            row["rule_split"] = hbwd.group_split(hq // hkv, n_blocks * b * hkv, hbwd.sm_count(q.device),
                                                 b * hkv * n * (d + dv) * 4, waves)
        ref = None
        extra = {64: args.variants64, 256: args.variants256}.get(d, "")
        specs = args.variants.split(",") + (extra.split(",") if extra else [])
        split_default = dict(getattr(hbwd, "HOPPER_BWD_GROUP_SPLIT_DEFAULT", {}))
        for spec in specs:
            over = parse_variant(spec)
            set_split_default(hbwd, {False: True, True: True} if spec == "split-default" else split_default)
            undo = module_setting(hbwd, spec) if is_module_setting(spec) else None
            grads = [torch.empty_like(t) for t in (q, k, v)]
            gh = [g.transpose(1, 2) for g in grads]

            def run():
                return hbwd.hopper_attention_backward(doh, qh, kh, vh, lse, delta, *gh, scale, shift,
                                                      UNVERIFIED=True, **drop, **over)
            try:
                if not run():
                    row["tflops"][spec] = None
                    row["check"][spec] = "declined " + str(list(hbwd._BROKEN.values())[-1:])[:300]
                    continue
                torch.cuda.synchronize()
                if ref is None:
                    ref = [g.float() for g in grads]
                    row["check"][spec] = "ref"
                else:
                    err = max_rel_err(grads, ref)
                    row["check"][spec] = "ok" if err <= 2e-2 else f"FAIL {err:.2e}"
                row["tflops"][spec] = flops / do_bench(run, warmup=10, rep=args.rep, return_mode=args.stat) * 1e-9
            except Exception as exc:  # noqa: BLE001
                row["tflops"][spec] = None
                row["check"][spec] = f"{type(exc).__name__}: {str(exc)[:300]}"
            finally:
                if undo is not None:
                    undo()
        set_split_default(hbwd, split_default)
        out = None
        api_grads = {}
        for name in ("api", "portable"):
            if name not in baselines:
                continue
            qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
            out = fat.flash_attn_func(qg, kg, vg, causal=causal)

            def api_bwd(off=name == "portable"):
                # portable: the Hopper backward switched off for this call only
                if off:
                    os.environ["FLASHATTN_TRITON_HOPPER_BWD"] = "0"
                try:
                    return torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
                finally:
                    os.environ.pop("FLASHATTN_TRITON_HOPPER_BWD", None)
            try:
                api_grads[name] = [g.float() for g in api_bwd()]
                row["tflops"][name] = flops / do_bench(api_bwd, warmup=10, rep=args.rep, return_mode=args.stat) * 1e-9
            except Exception as exc:  # noqa: BLE001
                row["tflops"][name] = None
                row["check"][name] = f"{type(exc).__name__}: {str(exc)[:200]}"
        if len(api_grads) == 2:
            err = max_rel_err(api_grads["api"], api_grads["portable"])
            row["check"]["api"] = "ok" if err <= 2e-2 else f"FAIL {err:.2e} (against portable)"
        api_grads = None
        so = None
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
            if name not in baselines:
                continue
            qs, ks, vs = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
            try:
                with sdpa_kernel(backend):
                    so = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal,
                                                                          enable_gqa=hq != hkv)
                dso = do.transpose(1, 2)
                row["tflops"][name] = flops / do_bench(
                    lambda: torch.autograd.grad(so, (qs, ks, vs), dso, retain_graph=True), warmup=10,
                    rep=args.rep, return_mode=args.stat) * 1e-9
            except Exception as exc:  # noqa: BLE001
                row["tflops"][name] = None
                row["check"][name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            so = None
        rows.append(row)
        cud = row["tflops"].get("cudnn") or float("nan")
        cells = "  ".join(f"{k} {v:.0f} ({v / cud:.2f})" if v else f"{k} -" for k, v in row["tflops"].items())
        if row["tflops"].get("default") and row["tflops"].get("fa2"):
            cells += f"  default/fa2 {row['tflops']['default'] / row['tflops']['fa2']:.2f}"
        for num in ("api", "default"):
            if row["tflops"].get(num) and row["tflops"].get("portable"):
                cells += f"  {num}/portable {row['tflops'][num] / row['tflops']['portable']:.2f}"
        base = row["tflops"].get("default")
        for spec in specs:
            if spec != "default" and base and row["tflops"].get(spec):
                cells += f"  {spec}/default {row['tflops'][spec] / base:.3f}"
        bad = {k: c for k, c in row["check"].items() if c not in ("ok", "ref")}
        if "rule_split" in row:
            cells += f"  rule S={row['rule_split']}"
        print(f"B={b} Hq={hq} Hkv={hkv} N={n} d={d}{'' if dv == d else f'/{dv}'} causal={causal!s:5}: {cells}"
              + (f"  {bad}" if bad else ""), flush=True)
        del q, k, v, do, o, out
        torch.cuda.empty_cache()
        save()  # after every row: a run cut by its time limit keeps the rows it timed
    save()
    return 0


DEVICE = "cuda"  # (a CPU dry run of window_rows sets "cpu")


def _flex_window_bwd(q, k, v, do, left):
    """FlexAttention (torch.compile'd) on contiguous (B, H, N, d) copies with a
    causal sliding-window block mask (keys i - left .. i): a function timing
    its backward.  The window size is a captured tensor, so the windows of a
    shape share one compiled graph."""
    from torch.nn.attention.flex_attention import create_block_mask
    from flashattn_triton.bench.common import compiled_flex
    flex = compiled_flex()
    qf, kf, vf = (t.detach().contiguous().requires_grad_() for t in (q, k, v))
    left_t = torch.tensor(left, device=q.device, dtype=torch.int32)
    n = qf.shape[2]

    def mask_mod(b, h, qi, ki):
        return (ki <= qi) & (ki >= qi - left_t)
    block_mask = create_block_mask(mask_mod, None, None, n, n, device=q.device)
    gqa = qf.shape[1] != kf.shape[1]  # (enable_gqa only where needed: MHA keeps its graph)
    out = flex(qf, kf, vf, block_mask=block_mask, **({"enable_gqa": True} if gqa else {}))
    dof = do.contiguous()
    return lambda: torch.autograd.grad(out, (qf, kf, vf), dof, retain_graph=True)


def _profile(fns, label, calls=3):
    """Each function's CUDA kernels over `calls` calls: name, count, total
    microseconds (torch.profiler), to see where an API call's time goes."""
    from torch.profiler import ProfilerActivity, profile
    for name, fn in fns.items():
        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(calls):
                    fn()
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001
            print(f"PROFILE {label} {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        if name.startswith("api:"):  # the host side too: where a call's Python time goes
            from common import host_profile  # benchmarks/ is this script's directory
            print(f"HOSTPROFILE {label} {name} (20 calls)\n" + host_profile(fn)[-6000:], flush=True)
        events = [e for e in prof.key_averages() if getattr(e, "device_time_total", 0) > 0]
        events.sort(key=lambda e: -e.device_time_total)
        total = sum(e.device_time_total for e in events) / calls
        print(f"PROFILE {label} {name}: {total:.0f} us of kernels per call", flush=True)
        for e in events[:6]:
            print(f"    {e.device_time_total / calls:9.1f} us  x{e.count // calls}  {e.key[:110]}", flush=True)


def window_shapes(args):
    """--rows window's shapes: (B, Hq, Hkv, N, d, lefts), from --window-shapes
    or the head-dims x seqlens grid (MHA, H = 2048/d, B = --tokens / N)."""
    lefts = [int(x) for x in args.windows.split(",")]
    spec = getattr(args, "window_shapes", "")
    if spec:
        out = []
        for item in filter(None, spec.split(";")):
            fields = item.split(",")
            b, hq, hkv, n, d = map(int, fields[:5])
            if hq % hkv:
                raise SystemExit(f"--window-shapes {item!r}: Hkv must divide Hq")
            out.append((b, hq, hkv, n, d, [int(x) for x in fields[5].split("/")] if len(fields) > 5 else lefts))
        return out
    return [(max(1, args.tokens // n), 2048 // d, 2048 // d, n, d, lefts)
            for d in map(int, args.head_dims.split(",")) for n in map(int, args.seqlens.split(","))]


def window_rows(args):
    """--rows window (module doc): api:window (the Hopper backward through the
    opt-in) against api:portable, hopper:kernel and flex, causal windows."""
    from triton.testing import do_bench
    import flashattn_triton as fat
    from flashattn_triton.kernels import hopper as hopper_pkg
    from flashattn_triton.kernels.hopper import bwd as hbwd
    from hopper_fwd_probe import visible_pairs  # benchmarks/ is this script's directory

    took = []
    real = hopper_pkg.hopper_attention_backward

    def counted(*a, **kw):  # what kernels/bwd.py calls: did the API take the Hopper backward?
        took.append(real(*a, **kw))
        return took[-1]
    hopper_pkg.hopper_attention_backward = counted

    env = "FLASHATTN_TRITON_HOPPER_WINDOW"
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for b, h, hkv, n, d, lefts in window_shapes(args):
        for left in lefts:
            torch.manual_seed(0)
            q, do = (torch.randn(b, n, h, d, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
            k, v = (torch.randn(b, n, hkv, d, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
            window = (left, 0)
            flops = 2.5 * 4 * b * h * visible_pairs(n, True, left) * d
            row = dict(b=b, h=h, hq=h, hkv=hkv, n=n, d=d, causal=True, window=left, tflops={}, check={})
            qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
            os.environ.pop(env, None)
            out, lse = fat.flash_attn_func(qg, kg, vg, causal=True, window_size=window, return_lse=True)

            def api(opt_in):
                def run():  # "0", not unset: _dispatch's size rule must not take the portable arm
                    os.environ[env] = "1" if opt_in else "0"
                    return torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
                return run
            qh, kh, vh, doh = (t.transpose(1, 2) for t in (q, k, v, do))
            lse2 = (lse * 1.4426950408889634).contiguous()
            delta = (do.float() * out.detach().float()).sum(-1).transpose(1, 2).contiguous()
            gh = [torch.empty_like(t).transpose(1, 2) for t in (q, k, v)]

            def kernel(**over):
                return lambda: hbwd.hopper_attention_backward(doh, qh, kh, vh, lse2, delta, *gh, d ** -0.5, 0,
                                                              window, **over)
            fns = {"api:window": api(True), "api:portable": api(False), "hopper:kernel": kernel()}
            for spec in filter(None, getattr(args, "window_variants", "").split(";")):
                fns["hopper:" + spec] = kernel(**parse_variant(spec))
            try:
                if not getattr(args, "no_flex", False):
                    fns["flex"] = _flex_window_bwd(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   do.transpose(1, 2), left)
            except Exception as exc:  # noqa: BLE001
                row["check"]["flex"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            grads = {}
            for name, fn in fns.items():
                spec = name[len("hopper:"):] if name.startswith("hopper:") else ""
                undo = module_setting(hbwd, spec) if is_module_setting(spec) else None
                try:
                    took.clear()
                    res = fn()
                    if name.startswith("api:") and took != ([True] if name == "api:window" else []):
                        raise RuntimeError(f"Hopper backward calls {took}")
                    if name.startswith("hopper:") and not res:
                        raise RuntimeError(f"declined {str(list(hbwd._BROKEN.values())[-1:])[:200]}")
                    if name.startswith("api:"):
                        grads[name] = [g.float() for g in res]
                    elif name != "hopper:kernel" and "api:portable" in grads:  # a --window-variants entry
                        torch.cuda.synchronize()
                        err = max_rel_err([g.transpose(1, 2) for g in gh], grads["api:portable"])
                        row["check"][name] = "ok" if err <= 2e-2 else f"FAIL {err:.2e}"
                    row["tflops"][name] = flops / do_bench(fn, warmup=10, rep=args.rep, return_mode=args.stat) * 1e-9
                except Exception as exc:  # noqa: BLE001
                    row["tflops"][name] = None
                    row["check"][name] = f"{type(exc).__name__}: {str(exc)[:200]}"
                finally:
                    if undo is not None:
                        undo()
            os.environ.pop(env, None)
            if len(grads) == 2:
                err = max_rel_err(grads["api:window"], grads["api:portable"])
                row["check"]["api:window"] = "ok" if err <= 2e-2 else f"FAIL {err:.2e}"
            rows.append(row)
            t = row["tflops"]
            cells = "  ".join(f"{k} {x:.0f}" if x else f"{k} -" for k, x in t.items())
            for label, num, den in (("win/port", "api:window", "api:portable"), ("win/flex", "api:window", "flex")):
                if t.get(num) and t.get(den):
                    cells += f"  {label} {t[num] / t[den]:.2f}"
            bad = {k: c for k, c in row["check"].items() if c != "ok"}
            heads = f"H={h}" if hkv == h else f"Hq={h} Hkv={hkv}"
            print(f"B={b} {heads} N={n} d={d} causal window={left}: {cells}" + (f"  {bad}" if bad else ""),
                  flush=True)
            if getattr(args, "profile", False):
                _profile({k: f for k, f in fns.items()
                          if not (k.startswith("hopper:") and is_module_setting(k[len("hopper:"):]))},
                         f"B={b} {heads} N={n} d={d} window={left}")
            del q, k, v, do, out, lse, qg, kg, vg, fns, grads
            torch.cuda.empty_cache()
            # after every row: a run cut by its time limit keeps the rows it timed
            with open(os.path.join(args.out, "hopper_bwd_window.json"), "w") as f:
                json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

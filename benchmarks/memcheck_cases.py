"""Small ragged cases through the public API, forward and backward, for
compute-sanitizer (benchmarks/gpu_memcheck.sh): each case's output and
gradients are compared with float64 (3x the error of the same reference in
the input dtype, flashattn_triton.testing) and checked for NaN, so a run
also says the results were right under the sanitizer.

Cases: Nq, Nk not multiples of any tile, batch > 1 (the rows of the next
batch entry or head lie right after a tile's end), GQA, causal bottom-right
and not, head dims 64 / 128 / 256 and 192 with dv = 128, a non-contiguous q
(a slice of a packed qkv), dropout, a sliding window, a packed (varlen)
batch and a paged KV-cache decode.  --tier hopper forces the Hopper tier
(FLASHATTN_TRITON_BACKEND=hopper) on the cases it takes (dense, no
variant or causal only, and the dropout / window ones); portable forces the
portable kernels; auto leaves the library's choice.  Exits 1 if any case is
off or raised."""
import argparse
import os
import sys

import torch

DEVICE = "cuda"  # --device cpu: a smoke run of the cases (with TRITON_INTERPRET=1: the kernels)


def _compare(name, got, refs, dtype, factor):
    from flashattn_triton.testing import max_abs_err, tolerance
    ref64, ref_lo = refs
    err = max_abs_err(got, ref64)
    tol = tolerance(max_abs_err(ref_lo, ref64), ref64, dtype, factor)
    nan = int(torch.isnan(got).sum())
    ok = err <= tol and nan == 0
    return ok, f"{name} {err:.2e}/{tol:.2e}" + (f" NaN {nan}" if nan else "")


def _check_fwd_bwd(ours, ref, q, k, v, do, dtype):
    """ours(q, k, v) -> out and ref(q, k, v, dtype) -> out on leaf copies of
    q, k, v, each backpropagating do: out, dq, dk, dv of ours against float64
    (2x / 3x the error of ref in the input dtype)."""
    from flashattn_triton.testing import leaf
    leaves = [leaf(t) for t in (q, k, v)]
    out = ours(*leaves)
    out.backward(do)
    got = [out.detach()] + [t.grad for t in leaves]
    refs = []
    for rd in (torch.float64, dtype):
        leaves = [leaf(t, rd) for t in (q, k, v)]
        o = ref(*leaves, rd)
        o.backward(do.to(rd))
        refs.append([o.detach()] + [t.grad for t in leaves])
    return [_compare(n, g, (r64, rlo), dtype, 2.0 if n == "out" else 3.0)
            for n, g, r64, rlo in zip(("out", "dq", "dk", "dv"), got, *refs)]


def dense_case(b, nq, nk, hq, hkv, d, dv, causal, dtype, packed_q=False, dropout=0.0, window=(-1, -1)):
    import flashattn_triton as fat
    from flashattn_triton.reference import flash_attention_ref
    from flashattn_triton.testing import dropout_mask, make_qkv, rand
    dev = DEVICE
    torch.manual_seed(0)
    q, k, v = make_qkv(b, nq, nk, hq, hkv, d, dtype, dev, requires_grad=False, d_v=dv)
    do = rand((b, nq, hq, dv), dtype, dev)
    kw = dict(causal=causal, window_size=window)
    ref_kw = {}
    if dropout:
        kw["dropout_p"] = dropout
        ref_kw = dict(dropout_p=dropout, dropout_mask=dropout_mask(7, dropout, b, hq, nq, nk, dev))

    def ours(q_, k_, v_):
        if packed_q:  # q as a slice of (B, Nq, Hq, 3 d): strides that no tensor of its own shape has
            packed = torch.zeros(b, nq, hq, 3 * d, device=dev, dtype=dtype)
            packed[..., d:2 * d] = q_
            q_ = packed[..., d:2 * d]
            assert not q_.is_contiguous()
        if dropout:
            torch.manual_seed(7)  # the seed dropout_mask(7, ...) regenerates
        return fat.flash_attn_func(q_, k_, v_, **kw)

    return _check_fwd_bwd(ours, lambda q_, k_, v_, rd: flash_attention_ref(q_, k_, v_, causal, None, rd, window,
                                                                          **ref_kw)[0], q, k, v, do, dtype)


def varlen_case(lens, hq, hkv, d, causal, dtype):
    import flashattn_triton as fat
    from flashattn_triton.testing import rand, random_cu_seqlens, varlen_attention_ref
    dev = DEVICE
    torch.manual_seed(0)
    total = sum(lens)
    cu = random_cu_seqlens(lens, dev)
    q, do = (rand((total, hq, d), dtype, dev) for _ in range(2))
    k, v = (rand((total, hkv, d), dtype, dev) for _ in range(2))
    return _check_fwd_bwd(
        lambda q_, k_, v_: fat.flash_attn_varlen_func(q_, k_, v_, cu, cu, max(lens), max(lens), causal=causal),
        lambda q_, k_, v_, rd: varlen_attention_ref(q_, k_, v_, cu, cu, causal, dtype=rd)[0], q, k, v, do, dtype)


def decode_case(b, hq, hkv, d, lens, block, dtype):
    """One new token per sequence against a paged cache of ragged lengths."""
    import flashattn_triton as fat
    from flashattn_triton.reference import flash_attention_ref
    from flashattn_triton.testing import make_qkv
    dev = DEVICE
    torch.manual_seed(0)
    n_max = -(-max(lens) // block) * block
    blocks = n_max // block
    q, k_dense, v_dense = make_qkv(b, 1, n_max, hq, hkv, d, dtype, dev, requires_grad=False)
    perm = torch.randperm(b * blocks, device=dev)
    table = perm.view(b, blocks).to(torch.int32)
    k_cache = torch.empty(b * blocks, block, hkv, d, device=dev, dtype=dtype)
    v_cache = torch.empty_like(k_cache)
    k_cache[perm] = k_dense.view(b * blocks, block, hkv, d)
    v_cache[perm] = v_dense.view(b * blocks, block, hkv, d)
    seqlens = torch.tensor(lens, device=dev, dtype=torch.int32)
    out = fat.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, block_table=table)
    res = []
    for i, n in enumerate(lens):
        refs = [flash_attention_ref(q[i:i + 1].to(rd), k_dense[i:i + 1, :n].to(rd), v_dense[i:i + 1, :n].to(rd),
                                    False, None, rd)[0] for rd in (torch.float64, dtype)]
        res.append(_compare(f"out[{i}]", out[i:i + 1], refs, dtype, 2.0))
    return res


CASES = {
    # name: (tiers it runs on, function, arguments)
    "d64 causal gqa": (("hopper", "portable", "auto"), dense_case, (2, 200, 333, 4, 2, 64, 64, True, torch.bfloat16)),
    "d64 full": (("hopper", "portable", "auto"), dense_case, (2, 333, 200, 4, 4, 64, 64, False, torch.float16)),
    "d128 causal gqa": (("hopper", "portable", "auto"), dense_case, (2, 257, 257, 4, 1, 128, 128, True, torch.bfloat16)),
    "d128 full packed q": (("hopper", "portable", "auto"), dense_case,
                           (2, 200, 333, 4, 2, 128, 128, False, torch.bfloat16, True)),
    "d256 causal": (("hopper", "portable", "auto"), dense_case, (2, 200, 333, 2, 1, 256, 256, True, torch.bfloat16)),
    "d192/128 causal": (("hopper", "portable", "auto"), dense_case,
                        (2, 200, 333, 4, 2, 192, 128, True, torch.bfloat16)),
    "d128 causal dropout": (("hopper", "portable", "auto"), dense_case,
                            (2, 200, 333, 4, 2, 128, 128, True, torch.bfloat16, False, 0.1)),
    "d128 window": (("hopper", "portable", "auto"), dense_case,
                    (2, 200, 333, 4, 2, 128, 128, True, torch.bfloat16, False, 0.0, (64, 0))),
    "d128 varlen": (("portable", "auto"), varlen_case, ([100, 1, 232], 4, 2, 128, True, torch.bfloat16)),
    "d128 paged decode": (("portable", "auto"), decode_case, (3, 8, 2, 128, [1, 300, 1000], 16, torch.bfloat16)),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tier", choices=("hopper", "portable", "auto"), default="auto")
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    if args.tier != "auto":
        os.environ["FLASHATTN_TRITON_BACKEND"] = args.tier
    if args.tier == "hopper":  # the Hopper backward's window path and the dropout forward are opt-ins
        os.environ.setdefault("FLASHATTN_TRITON_HOPPER_WINDOW", "1")
        os.environ.setdefault("FLASHATTN_TRITON_HOPPER_DROPOUT", "1")
    words = [w for w in args.only.split(",") if w]
    bad = 0
    for name, (tiers, fn, fargs) in CASES.items():
        if args.tier not in tiers or (words and not any(w in name for w in words)):
            continue
        try:
            res = fn(*fargs)
            if DEVICE == "cuda":
                torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported, counted, next case
            print(f"{args.tier} {name}: RAISED {type(e).__name__}: {e}", flush=True)
            bad += 1
            continue
        ok = all(r[0] for r in res)
        bad += not ok
        print(f"{args.tier} {name}: {'ok' if ok else 'OFF'} " + "; ".join(r[1] for r in res), flush=True)
    print(f"{args.tier}: {'all ok' if not bad else f'{bad} case(s) off or raised'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Hugging Face Transformers backend (flashattn_triton.integrations.transformers).

Tiny Llama- (GQA), Mistral- (GQA, sliding window), GPT-2- (MHA, Conv1D) and
Gemma2-style (softcap) models built from configs -- nothing is downloaded --
run with ``attn_implementation=register()`` and are compared with the same
weights under ``attn_implementation="sdpa"``.

Pass mark (as everywhere in this suite): the max error of our logits /
gradients against the same model run in float64 (PyTorch's math attention) is
at most 2x / 3x that of the SDPA model in the test dtype, plus one ulp.

Padded batches go through ``flash_attn_varlen_func`` (a spy checks the
segments); sliding windows through ``window_size``, also while decoding with
the sliding-window cache; Gemma-2 softcap against the eager implementation;
packed sequences (position_ids restarting) through the varlen kernel over the
documents that Transformers' block-diagonal mask carries.
Models that ask for the mask materialised and add to it (Doge, Falcon with
ALiBi) or concatenate it (T5Gemma2), static caches, and padded cross-attention
with a decoder longer than the encoder input (BART) against eager / SDPA;
arguments no kernel takes (a sparse indexer's ``indices``) raise.
"""

import copy
import inspect

import pytest
import torch

transformers = pytest.importorskip("transformers")

import flashattn_triton  # noqa: E402
from flashattn_triton.integrations import transformers as hf  # noqa: E402
from _utils import assert_close  # noqa: E402

NAME = hf.register()
VOCAB, BATCH, SEQ = 96, 2, 12


@pytest.fixture(autouse=True)
def _on_test_device(device):
    """Everything a test creates lands on the test device (the GPU with
    FLASHATTN_TRITON_TEST_DEVICE=cuda, else the CPU and Triton's interpreter)."""
    torch.set_default_device(device)
    yield
    torch.set_default_device("cpu")

# One layer keeps the Triton interpreter's share small; attention is the only
# part that differs between the implementations.
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def _config(kind, **over):
    if kind == "llama":
        cfg = transformers.LlamaConfig(**_COMMON)
    elif kind == "mistral":
        cfg = transformers.MistralConfig(**{**_COMMON, "num_key_value_heads": 1, "sliding_window": 64})
    elif kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=1, n_head=2, n_positions=64,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)
    elif kind == "gpt_oss":  # learnable sinks (s_aux); a sliding and a full layer; two experts, one per token
        cfg = transformers.GptOssConfig(**{**_COMMON, "num_hidden_layers": 2, "head_dim": 16,
                                           "intermediate_size": 32, "num_local_experts": 2,
                                           "num_experts_per_tok": 1, "sliding_window": 4,
                                           "layer_types": ["sliding_attention", "full_attention"],
                                           "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}})
        cfg._experts_implementation = "eager"  # the float64 reference: the grouped-matmul path has no float64
    elif kind == "gemma2":
        cfg = transformers.Gemma2Config(**{**_COMMON, "head_dim": 16, "attn_logit_softcapping": 5.0,
                                           "final_logit_softcapping": None, "query_pre_attn_scalar": 16,
                                           "sliding_window": 64})
    elif kind == "doge":  # adds a learnable dynamic mask onto a causal mask it asks to be materialised
        cfg = transformers.DogeConfig(**_COMMON)
    elif kind == "falcon_alibi":  # adds ALiBi onto a causal mask it asks to be materialised
        cfg = transformers.FalconConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=1,
                                        num_attention_heads=4, alibi=True, multi_query=True)
    elif kind == "llama4":  # chunked attention (attention_chunk_size): 4-token chunks, both layers
        cfg = transformers.Llama4TextConfig(**{**_COMMON, "num_hidden_layers": 2, "head_dim": 16,
                                               "intermediate_size_mlp": 96, "attention_chunk_size": 4,
                                               "num_local_experts": 1, "no_rope_layers": [1, 1],
                                               "use_qk_norm": False})
    else:
        raise ValueError(kind)
    for key, value in over.items():
        setattr(cfg, key, value)
    return cfg


def _models(kind, attn, dtype, **over):
    """(ours, baseline, float64 reference) with identical weights.  Each model
    gets its own config copy: from_config writes attn_implementation into it."""
    cfg = _config(kind, **over)
    ref = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=attn)
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=NAME)
    base = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=attn)
    ours.load_state_dict(ref.state_dict())
    base.load_state_dict(ref.state_dict())
    assert ours.config._attn_implementation == NAME and base.config._attn_implementation == attn
    return ours.to(dtype).eval(), base.to(dtype).eval(), ref.double().eval()


def _loss(model, ids, mask=None, weight=None, **kw):
    """Forward; a loss touching every valid logit with a fixed random weight."""
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False, **kw).logits
    keep = torch.ones(ids.shape, dtype=torch.bool) if mask is None else mask.bool()
    return logits, (logits[keep].double() * weight[keep]).sum()


def _compare(models, ids, dtype, mask=None, label="", grad_factors=None, **kw):
    """grad_factors: {parameter-name suffix: pass-mark factor} replacing 3 for those gradients."""
    ours, base, ref = models
    weight = torch.randn(*ids.shape, VOCAB, dtype=torch.float64)
    outs = []
    for m in (ours, base, ref):
        logits, loss = _loss(m, ids, mask, weight, **kw)
        loss.backward()
        outs.append((logits, {n: p.grad for n, p in m.named_parameters()}))
    keep = torch.ones(ids.shape, dtype=torch.bool) if mask is None else mask.bool()
    (lo, go), (lb, gb), (lr, gr) = outs
    assert_close(f"{label} logits", lo[keep].double(), lr[keep], baseline=lb[keep].double(), dtype=dtype)
    checked = 0
    for name in gr:
        if gr[name] is None:
            continue
        assert go[name] is not None, f"{label}: no gradient for {name}"
        factor = next((f for suffix, f in (grad_factors or {}).items() if name.endswith(suffix)), 3.0)
        assert_close(f"{label} grad {name}", go[name].double(), gr[name], baseline=gb[name].double(),
                     factor=factor, dtype=dtype)
        checked += 1
    assert checked > 0


# ---------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------

def test_register_returns_usable_name():
    assert NAME == "triton_attention" == hf.DEFAULT_NAME
    assert "flash" not in NAME
    assert transformers.AttentionInterface()[NAME] is hf.attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    assert ALL_MASK_ATTENTION_FUNCTIONS[NAME] is hf.attention_mask
    assert hf.register("my_attention") == "my_attention"
    model = transformers.AutoModelForCausalLM.from_config(_config("llama"), attn_implementation="my_attention")
    assert model.config._attn_implementation == "my_attention"


@pytest.mark.parametrize("name, err, match", [
    ("flash_triton", ValueError, "contains 'flash'"),
    ("MyFlashAttn", ValueError, "contains 'flash'"),
    ("paged|ours", ValueError, r"contains '\|'"),
    ("org/repo", ValueError, "contains '/'"),
    ("sdpa", ValueError, "built-in"),
    ("", ValueError, "non-empty"),
    (3, TypeError, "must be a str, got int"),
])
def test_register_rejects_bad_names(name, err, match):
    with pytest.raises(err, match=match):
        hf.register(name)


# ---------------------------------------------------------------------------
# Whole models against SDPA: logits and every parameter's gradient
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["llama", "mistral", "gpt2"])
def test_model_matches_sdpa_fp32(kind):
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    _compare(_models(kind, "sdpa", torch.float32), ids, torch.float32, label=kind)


def test_model_matches_sdpa_bf16():
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    _compare(_models("llama", "sdpa", torch.bfloat16), ids, torch.bfloat16, label="llama bf16")


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_generate_greedy_matches_sdpa(kind):
    # two layers: the second layer's keys depend on the first layer's causal masking
    layers = {"llama": {"num_hidden_layers": 2}, "gpt2": {"n_layer": 2}}[kind]
    ours, base, _ = _models(kind, "sdpa", torch.float32, **layers)
    _compare_generate(ours, base, 1, 7, new=6)


# ---------------------------------------------------------------------------
# The attention function on its own: causal alignment, GQA, decode
# ---------------------------------------------------------------------------

class _Module(torch.nn.Module):
    def __init__(self, is_causal):
        super().__init__()
        self.is_causal = is_causal


def _sdpa_bottom_right(q, k, v, causal, scale=None):
    """float64 attention with flash-attn's bottom-right causal mask, (B, H, N, d)."""
    q, k, v = (t.double() for t in (q, k, v))
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    mask = None
    if causal:
        n_q, n_k = q.shape[2], k.shape[2]
        mask = torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + n_k - n_q
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


@pytest.mark.parametrize("n_q, n_k, is_causal", [(1, 9, True), (4, 11, True), (7, 7, False), (5, 5, True)])
def test_attention_forward_alignment_and_gqa(n_q, n_k, is_causal):
    """A decode step (Nq = 1) and a chunk after a cache (Nq < Nk) attend every
    cached key: causal is aligned bottom-right, as Transformers' caches need."""
    q = torch.randn(2, 4, n_q, 16)
    k, v = torch.randn(2, 2, n_k, 16), torch.randn(2, 2, n_k, 16)
    out, weights = hf.attention_forward(_Module(is_causal), q, k, v, None, scaling=0.3)
    assert weights is None and out.shape == (2, n_q, 4, 16)
    ref = _sdpa_bottom_right(q, k, v, is_causal, scale=0.3).transpose(1, 2)
    base = _sdpa_bottom_right(q.float(), k.float(), v.float(), is_causal, scale=0.3).float().transpose(1, 2)
    assert_close("out", out.double(), ref, baseline=base.double(), atol=1e-5)
    # is_causal passed explicitly wins over module.is_causal
    out2, _ = hf.attention_forward(_Module(not is_causal), q, k, v, None, scaling=0.3, is_causal=is_causal)
    torch.testing.assert_close(out2, out, rtol=0, atol=0)


def test_window_and_softcap_are_passed_through(monkeypatch):
    seen = {}

    def spy(q, k, v, **kw):
        seen.update(kw)
        return torch.zeros_like(q)

    monkeypatch.setattr(flashattn_triton, "flash_attn_func", spy)
    q, k, v = torch.randn(1, 2, 12, 8), torch.randn(1, 2, 12, 8), torch.randn(1, 2, 12, 8)
    hf.attention_forward(_Module(True), q, k, v, None, sliding_window=5, softcap=30.0, dropout=0.0)
    assert seen["window_size"] == (4, 0) and seen["softcap"] == 30.0 and seen["causal"] is True
    hf.attention_forward(_Module(False), q, k, v, None, sliding_window=5)
    assert seen["window_size"] == (5, 5) and seen["causal"] is False
    hf.attention_forward(_Module(True), q, k, v, None, sliding_window=12)  # covers every key
    assert seen["window_size"] == (-1, -1) and seen["softcap"] == 0.0


def test_unsupported_kwargs_raise():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(NotImplementedError, match="position_bias"):
        hf.attention_forward(_Module(True), q, q, q, None, position_bias=torch.zeros(1, 2, 4, 4))
    with pytest.raises(ValueError, match="attention_mask must be None, 2-D"):
        hf.attention_forward(_Module(True), q, q, q, torch.ones(1, 2, 4, dtype=torch.bool))


# ---------------------------------------------------------------------------
# Padding: unpad / pad and the varlen route
# ---------------------------------------------------------------------------

def test_unpad_pad_round_trip():
    x = torch.randn(3, 6, 2, 4)
    keep = torch.tensor([[1, 1, 1, 0, 0, 0],     # right padding
                         [0, 0, 1, 1, 1, 1],     # left padding
                         [1, 0, 1, 1, 0, 1]],    # holes
                        dtype=torch.bool)
    packed, cu, order = hf.unpad(x, keep)
    assert packed.shape == (18, 2, 4) and cu.dtype == torch.int32
    assert cu.tolist() == [0, 3, 6, 10, 12, 16, 18]
    for b in range(3):
        real = x[b][keep[b]]
        torch.testing.assert_close(packed[cu[2 * b]:cu[2 * b + 1]], real, rtol=0, atol=0)
    back = hf.pad(packed, order, keep, 3, 6)
    torch.testing.assert_close(back, x * keep[:, :, None, None], rtol=0, atol=0)
    packed, cu, order = hf.unpad(x, None)
    assert order is None and cu.tolist() == [0, 6, 6, 12, 12, 18, 18]
    torch.testing.assert_close(hf.pad(packed, None, None, 3, 6), x, rtol=0, atol=0)


def _padding_mask(kind, batch=BATCH, seq=SEQ):
    mask = torch.ones(batch, seq, dtype=torch.long)
    if kind == "right":
        mask[0, seq - 4:] = 0
    else:
        mask[0, :5] = 0
        mask[1, :1] = 0
    return mask


def _spy_varlen(monkeypatch):
    calls = []
    real = flashattn_triton.flash_attn_varlen_func

    def spy(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **kw):
        calls.append((cu_seqlens_q.tolist(), cu_seqlens_k.tolist(), max_seqlen_q, max_seqlen_k, kw))
        return real(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **kw)

    monkeypatch.setattr(flashattn_triton, "flash_attn_varlen_func", spy)
    return calls


@pytest.mark.parametrize("kind, side", [("llama", "right"), ("llama", "left"), ("gpt2", "left")])
def test_padded_batch_matches_sdpa(kind, side, monkeypatch):
    calls = _spy_varlen(monkeypatch)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    mask = _padding_mask(side)
    _compare(_models(kind, "sdpa", torch.float32), ids, torch.float32, mask=mask, label=f"{kind} {side}")
    assert calls, "the padded batch did not take the varlen route"
    cq, ck, max_q, max_k, kw = calls[0]
    n_real = mask.sum(1).tolist()
    # segments: row 0 real, row 0 padding, row 1 real, row 1 padding
    assert kw["causal"] and cq == ck == [0, n_real[0], SEQ, SEQ + n_real[1], 2 * SEQ]
    assert max_q == max_k == SEQ


def test_padded_generate_matches_sdpa(monkeypatch):
    """Left-padded batch through prefill and decode steps (Nq = 1 against the cache)."""
    calls = _spy_varlen(monkeypatch)
    ours, base, _ = _models("llama", "sdpa", torch.float32)
    _compare_generate(ours, base, BATCH, 8, new=4, mask=_padding_mask("left", seq=8))
    decode = [c for c in calls if c[2] == 1]
    assert decode and decode[0][0] == [0, 1, 1, 2, 2], "decode steps: one real query per row"


def _compare_generate(ours, base, batch, prompt, new, mask=None, **generate_kw):
    ids = torch.randint(1, VOCAB, (batch, prompt))
    if mask is None:
        mask = torch.ones_like(ids)
    ids = ids.masked_fill(mask == 0, 0)
    got, want = (m.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=0,
                            output_logits=True, return_dict_in_generate=True, **generate_kw) for m in (ours, base))
    assert got.sequences.tolist() == want.sequences.tolist(), \
        f"greedy tokens differ: {got.sequences.tolist()} vs {want.sequences.tolist()}"
    for step, (lg, lw) in enumerate(zip(got.logits, want.logits)):
        err = (lg - lw).abs().max().item()
        assert err <= 1e-5 * lw.abs().max().item(), f"step {step}: logits differ by {err:.2e}"


# ---------------------------------------------------------------------------
# Sliding window (Mistral): full forward, padded, and decoding with the
# sliding-window cache (it keeps W - 1 past keys; the window is bottom-right)
# ---------------------------------------------------------------------------

def test_mistral_sliding_window_matches_sdpa():
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    _compare(_models("mistral", "sdpa", torch.float32, sliding_window=5), ids, torch.float32,
             label="mistral window 5")


def test_mistral_sliding_window_padded_matches_sdpa():
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    _compare(_models("mistral", "sdpa", torch.float32, sliding_window=4), ids, torch.float32,
             mask=_padding_mask("left"), label="mistral window 4 left-padded")


def test_mistral_sliding_window_generate_matches_sdpa():
    ours, base, _ = _models("mistral", "sdpa", torch.float32, sliding_window=4, num_hidden_layers=2)
    _compare_generate(ours, base, 1, 7, new=6)


def test_mask_builder_returns_none_without_padding():
    from transformers import masking_utils as mu
    ones = torch.ones(2, 6, dtype=torch.bool)
    assert hf.attention_mask(2, 6, 6, mask_function=mu.causal_mask_function, attention_mask=ones) is None
    assert hf.attention_mask(2, 6, 6, mask_function=mu.causal_mask_function, attention_mask=None) is None
    padded = ones.clone()
    padded[0, 0] = False
    got = hf.attention_mask(2, 6, 6, mask_function=mu.causal_mask_function, attention_mask=padded)
    assert got is not None and got.shape == (2, 6) and got.dtype == torch.bool
    # a pattern our kernels do not take as arguments -> Transformers' 4-D boolean mask
    packed = mu.and_masks(mu.causal_mask_function, lambda b, h, q, kv: q >= 0)
    got = hf.attention_mask(2, 6, 6, mask_function=packed, attention_mask=None, allow_is_causal_skip=False,
                            device="cpu")
    assert got.shape == (2, 1, 6, 6) and got.dtype == torch.bool


# ---------------------------------------------------------------------------
# Softcap and arbitrary masks
# ---------------------------------------------------------------------------

def test_gemma2_softcap_matches_eager():
    # SDPA ignores softcap, so Gemma2's baseline is the eager implementation.
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    _compare(_models("gemma2", "eager", torch.float32), ids, torch.float32, label="gemma2 softcap")


def _sinks_reference(q, k, v, mask, sinks, scale, softcap=0.0):
    """float64 eager attention with a sink logit per head (gpt-oss): softmax
    over [scores, sink], the sink's column dropped; q (B, H, Nq, d), k, v
    (B, Hkv, Nk, d), mask (B, 1, Nq, Nk) bool (True = attend) or None."""
    q, k, v, sinks = (t.double() for t in (q, k, v, sinks))
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, 1) for t in (k, v))
    s = q @ k.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    sink = sinks[None, :, None, None].expand(*s.shape[:-1], 1)
    p = torch.softmax(torch.cat([s, sink], -1), -1)[..., :-1]
    return p @ v


@pytest.mark.parametrize("mask_kind", ["none", "padding", "4d"])
@pytest.mark.parametrize("softcap", [0.0, 20.0])
def test_sinks_and_softcap_with_every_mask_form(mask_kind, softcap):
    """gpt-oss's s_aux (and softcap) on each route: no mask (flash_attn_func),
    a 2-D padding mask (varlen), a 4-D mask (the SDPA path); output and the
    gradients of q, k, v and the sinks against float64 eager attention."""
    b, h, h_kv, n, d = 2, 4, 2, 10, 16
    scale = d ** -0.5
    q, k, v = (torch.randn(b, hh, n, d) for hh in (h, h_kv, h_kv))
    sinks = torch.randn(h)
    do = torch.randn(b, n, h, d)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    if mask_kind == "none":
        mask, ref_mask = None, causal[None, None].expand(b, 1, n, n)
    elif mask_kind == "padding":  # row 0 left-padded by 3 (its padding queries give zeros)
        mask = torch.ones(b, n, dtype=torch.bool)
        mask[0, :3] = False
        ref_mask = causal[None, None] & mask[:, None, None, :]
    else:  # a block-diagonal causal mask (two packed sequences)
        doc = torch.arange(n) >= 4
        ref_mask = (causal & (doc[:, None] == doc[None, :]))[None, None].expand(b, 1, n, n)
        mask = ref_mask
    leaves = [t.clone().requires_grad_() for t in (q, k, v, sinks)]
    out, _ = hf.attention_forward(_Module(True), *leaves[:3], mask, scaling=scale, softcap=softcap or None,
                                  s_aux=leaves[3])
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v, sinks)]
    ref = _sinks_reference(*ref_leaves[:3], ref_mask, ref_leaves[3], scale, softcap).transpose(1, 2)
    keep = torch.ones(b, n, dtype=torch.bool) if mask_kind != "padding" else mask
    assert_close("out", out[keep].double(), ref[keep], dtype=torch.float32)
    grads = torch.autograd.grad(out[keep], leaves, do[keep])
    ref_grads = torch.autograd.grad(ref[keep], ref_leaves, do[keep].double())
    for name, g, r in zip(("dq", "dk", "dv", "dsinks"), grads, ref_grads):
        assert_close(name, g.double(), r, factor=3.0, dtype=torch.float32)


def test_gpt_oss_matches_eager():
    """A gpt-oss model (learnable sinks, a sliding-window and a full layer):
    logits and every parameter's gradient, the sinks' included."""
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    _compare(_models("gpt_oss", "eager", torch.float32), ids, torch.float32, label="gpt-oss")


def test_gpt_oss_padded_matches_eager(monkeypatch):
    calls = _spy_varlen(monkeypatch)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    _compare(_models("gpt_oss", "eager", torch.float32), ids, torch.float32, mask=_padding_mask("left"),
             label="gpt-oss padded")
    assert calls and calls[0][4]["sinks"] is not None, "the padded batch did not take the varlen route with sinks"


def _restarts(*rows):
    """position_ids (len(rows), n) of documents packed end to end: row r holds
    documents of the lengths rows[r] (they must add up to the same n), each
    numbered from 0."""
    return torch.stack([torch.cat([torch.arange(m) for m in lens]) for lens in rows])


@pytest.mark.parametrize("kind, rows, over", [
    ("llama", [[5, 7]], {}),
    ("llama", [[3, 1, 8], [12]], {}),              # two rows: one doc of one token, one row unpacked
    ("mistral", [[7, 5], [2, 10]], {"sliding_window": 3}),   # the window counted inside each document
])
def test_packed_sequences_match_sdpa(kind, rows, over, monkeypatch):
    """Documents packed in rows, told only by position_ids restarting
    (DataCollatorWithFlattening's default, TRL's padding-free batches):
    Transformers builds a block-diagonal 4-D mask; it carries the documents
    and the layers run flash_attn_varlen_func over them (each document
    attends within itself), not the mask.  Logits and gradients against the
    float64 model, with SDPA's error as the baseline.  (Not every model
    passes position_ids to the mask builder: gpt-oss does not, and attends
    across the documents with every implementation.)"""
    calls = _spy_varlen(monkeypatch)
    made, built = _spy_builds(monkeypatch)
    pos = _restarts(*rows)
    ids = torch.randint(0, VOCAB, pos.shape)
    models = _models(kind, "sdpa", torch.float32, **over)
    for m in models:
        m.train()  # a training step: no cache, so Transformers looks for packing
    _compare(models, ids, torch.float32, label=f"{kind} packed {rows}", position_ids=pos)
    assert made and not built, f"the packed documents' 4-D mask: made unbuilt {made}, built {built}"
    lens = [m for row in rows for m in row]
    bounds = torch.tensor([0] + lens).cumsum(0).tolist()  # the documents of every row, end to end
    assert bounds[-1] == pos.numel()
    assert calls, "the packed documents did not take the varlen route"
    for cq, ck, max_q, max_k, kw in calls:
        assert cq == ck == bounds and max_q == max_k == max(lens) and kw["causal"]


def _spy_builds(monkeypatch) -> tuple:
    """(made, built): the shapes of the unbuilt packed-document masks made,
    and of those that got built."""
    made, built = [], []
    real_new, real_built = hf._UnbuiltMask.__new__, hf._UnbuiltMask.built

    def new(cls, shape, device, build):
        made.append(tuple(shape))
        return real_new(cls, shape, device, build)

    def spy(self):
        if self._built is None:
            built.append(tuple(self.shape))
        return real_built(self)

    monkeypatch.setattr(hf._UnbuiltMask, "__new__", staticmethod(new))
    monkeypatch.setattr(hf._UnbuiltMask, "built", spy)
    return made, built


def test_unbuilt_packed_mask_builds_on_first_read(monkeypatch):
    """The packed documents' mask comes unbuilt: its shape, dtype and device
    are the 4-D mask's, and the first op that reads its values builds
    Transformers' own mask once (a model that alters it gets SDPA's mask; the
    result is a plain tensor); a layer the documents do not fit reads the
    built mask."""
    from transformers import masking_utils as mu

    made, built = _spy_builds(monkeypatch)
    pos = _restarts([5, 7], [4, 8])
    remap = getattr(mu, "remap_positions_for_packed_sequence", lambda fn, _: fn)
    fn = mu.and_masks(remap(mu.causal_mask_function, pos),
                      mu.packed_sequence_mask_function(mu.find_packed_sequence_indices(pos)))
    # (Transformers passes allow_is_causal_skip=False with packed documents)
    args = dict(mask_function=fn, attention_mask=None, allow_is_causal_skip=False, device=pos.device)
    mask = hf.attention_mask(2, 12, 12, **args)
    assert isinstance(mask, hf._UnbuiltMask) and not built
    assert mask.shape == (2, 1, 12, 12) and mask.dtype == torch.bool and mask.device == pos.device
    assert getattr(mask, hf._DOCUMENTS)["cu_seqlens"].tolist() == [0, 5, 12, 16, 24]
    full = mu.sdpa_mask(batch_size=2, q_length=12, kv_length=12, **args)
    row = mask[1, 0]
    assert type(row) is torch.Tensor and torch.equal(row, full[1, 0]) and built == [(2, 1, 12, 12)]
    bias = torch.zeros(2, 1, 12, 12).masked_fill(~mask, float("-inf"))
    assert torch.equal(bias, torch.zeros(2, 1, 12, 12).masked_fill(~full, float("-inf")))
    assert built == [(2, 1, 12, 12)], "built once"
    calls = _spy_varlen(monkeypatch)
    q = torch.randn(2, 2, 12, 16)

    class Bidirectional(torch.nn.Module):
        is_causal = False

    fresh = hf.attention_mask(2, 12, 12, **args)
    got, _ = hf.attention_forward(Bidirectional(), q, q, q, fresh)   # the documents are causal: the mask
    assert not calls and len(built) == 2
    want = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=full)
    torch.testing.assert_close(got.transpose(1, 2), want)


def test_unbuilt_packed_mask_in_a_compiled_layer(monkeypatch):
    """An attention layer compiled on its own (torch.compile(fullgraph=True),
    the mask built outside it, as with regional compilation) takes the
    documents from the unbuilt mask without building it: the same output as
    eager."""
    from transformers import masking_utils as mu
    if not hasattr(mu, "remap_positions_for_packed_sequence"):
        pytest.skip(f"transformers {transformers.__version__}: no remap_positions_for_packed_sequence")
    made, built = _spy_builds(monkeypatch)
    pos = _restarts([5, 7])
    fn = mu.and_masks(mu.remap_positions_for_packed_sequence(mu.causal_mask_function, pos),
                      mu.packed_sequence_mask_function(mu.find_packed_sequence_indices(pos)))
    mask = hf.attention_mask(1, 12, 12, mask_function=fn, attention_mask=None, allow_is_causal_skip=False,
                             device=pos.device)

    class Layer(torch.nn.Module):
        is_causal = True

    q = torch.randn(1, 2, 12, 16)
    want, _ = hf.attention_forward(Layer(), q, q, q, mask)
    torch._dynamo.reset()
    layer = torch.compile(lambda q, m: hf.attention_forward(Layer(), q, q, q, m)[0], fullgraph=True,
                          backend="eager")
    assert_close("compiled layer out", layer(q, mask), want, atol=0)
    assert made == [(1, 1, 12, 12)] and not built


@pytest.mark.gpu
def test_gpu_packed_documents_never_build_the_mask(device, monkeypatch):
    """A training step of 16k tokens packed in documents (one row, bf16): its
    peak memory stays below half the 256 MiB of the 4-D mask it no longer
    builds (16384^2 booleans; with it the step peaked at 770 MiB, without it
    at 59 MiB on an H100), and the documents took the varlen route."""
    calls = _spy_varlen(monkeypatch)
    n = 16384
    pos = _restarts([1024, 3072, 4096, 8192])
    model = transformers.AutoModelForCausalLM.from_config(
        _config("llama", max_position_embeddings=n), attn_implementation=NAME).to(torch.bfloat16).train()
    ids = torch.randint(0, VOCAB, pos.shape)
    model(input_ids=ids, position_ids=pos, use_cache=False).logits.float().sum().backward()  # warm
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    model(input_ids=ids, position_ids=pos, use_cache=False).logits.float().sum().backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    assert calls and calls[-1][0] == [0, 1024, 4096, 8192, 16384]
    assert peak < n * n // 2, f"a packed step's peak memory {peak / 2**20:.1f} MiB (the 4-D mask: 256 MiB)"


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_packed_documents_with_activation_checkpointing(reentrant, monkeypatch):
    """Gradient checkpointing (Transformers' default non-reentrant form, and
    the reentrant one; both hand the layers the mask object itself, a
    keyword argument, when they recompute): the recomputed layers take the
    documents again, the mask is never built, and the gradients match SDPA's
    model."""
    calls = _spy_varlen(monkeypatch)
    made, built = _spy_builds(monkeypatch)
    pos = _restarts([3, 9], [7, 5])
    ids = torch.randint(0, VOCAB, pos.shape)
    models = _models("llama", "sdpa", torch.float32)
    for m in models:
        m.train()
        if hasattr(m, "activation_checkpointing_enable"):  # transformers 5.25 renamed it (the old name warns)
            m.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": reentrant})
        else:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    _compare(models, ids, torch.float32, label=f"llama packed checkpointed reentrant={reentrant}",
             position_ids=pos)
    assert made and not built
    assert len(calls) >= 2, "the recomputed forward did not take the varlen route"


def test_packed_encoder_documents_match_sdpa(monkeypatch):
    """An encoder (BERT) with documents packed by position_ids: Transformers'
    bidirectional mask with the packed-sequence overlay; each document
    attends all of itself (varlen, not causal).  Hidden states and gradients
    against the float64 model, SDPA's error as the baseline.  (Transformers
    5.17's bidirectional mask takes no position_ids: there every
    implementation attends across the documents, which is compared too.)"""
    import inspect
    from transformers import masking_utils as mu
    packs = "position_ids" in inspect.signature(mu.create_bidirectional_mask).parameters
    calls = _spy_varlen(monkeypatch)
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=96, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    made = []
    for attn in (NAME, "sdpa", "sdpa"):
        c = copy.deepcopy(cfg)
        c._attn_implementation = attn
        made.append(transformers.BertModel(c, add_pooling_layer=False))
    ours, base, ref = made
    ours.load_state_dict(ref.state_dict())
    base.load_state_dict(ref.state_dict())
    ref.double()
    pos = _restarts([4, 8], [9, 3])
    ids = torch.randint(0, VOCAB, pos.shape)
    weight = torch.randn(*pos.shape, 64, dtype=torch.float64)
    outs = []
    for m in (ours, base, ref):
        hidden = m(input_ids=ids, position_ids=pos).last_hidden_state
        (hidden.double() * weight).sum().backward()
        outs.append((hidden, {n: p.grad for n, p in m.named_parameters() if p.grad is not None}))
    (ho, go), (hb, gb), (hr, gr) = outs
    assert_close("bert packed hidden", ho.double(), hr, baseline=hb.double(), dtype=torch.float32)
    for name in gr:
        assert_close(f"bert packed grad {name}", go[name].double(), gr[name], baseline=gb[name].double(),
                     factor=3.0, dtype=torch.float32)
    if packs:
        assert calls and all(c[0] == [0, 4, 12, 21, 24] and not c[4]["causal"] for c in calls)
    else:
        assert not calls


def test_packed_documents_not_taken_where_the_layer_differs(monkeypatch):
    """The documents ride on the 4-D mask tensor; a model that builds its own
    mask from it (Doge adds a learnable bias: a new tensor) reads the mask,
    and so does a layer whose causality or window is not the pattern's."""
    from transformers import masking_utils as mu

    pos = _restarts([5, 7])
    # Transformers 5.25 remaps the positions inside each document first; 5.17 does not.
    remap = getattr(mu, "remap_positions_for_packed_sequence", lambda fn, _: fn)
    fn = mu.and_masks(remap(mu.causal_mask_function, pos),
                      mu.packed_sequence_mask_function(mu.find_packed_sequence_indices(pos)))
    mask = hf.attention_mask(1, 12, 12, mask_function=fn, attention_mask=None, allow_is_causal_skip=False,
                             device=pos.device)
    docs = getattr(mask, hf._DOCUMENTS)
    assert docs["cu_seqlens"].tolist() == [0, 5, 12] and docs["max_seqlen"] == 7 and docs["causal"]
    want = (pos[0][:, None] >= pos[0][None, :]) & ((torch.arange(12) < 5)[:, None] == (torch.arange(12) < 5)[None])
    assert torch.equal(mask[0, 0], want), "the 4-D mask is Transformers' own"
    assert hf._documents_apply(docs, 1, 12, 12, True, None, 0)
    assert not hf._documents_apply(docs, 1, 12, 12, False, None, 0)   # a bidirectional layer
    assert not hf._documents_apply(docs, 1, 12, 12, True, 4, 0)       # a window the mask has not
    assert not hf._documents_apply(docs, 1, 12, 12, True, None, 4)    # chunks
    assert not hf._documents_apply(docs, 2, 12, 12, True, None, 0)
    # A user overlay on top of the packing (an and_mask_function): the mask alone.
    extra = mu.and_masks(mu.causal_mask_function, lambda b, h, q, kv: kv != 2)
    fn = mu.and_masks(remap(extra, pos),
                      mu.packed_sequence_mask_function(mu.find_packed_sequence_indices(pos)))
    mask = hf.attention_mask(1, 12, 12, mask_function=fn, attention_mask=None, allow_is_causal_skip=False,
                             use_vmap=True, device=pos.device)
    assert not hasattr(mask, hf._DOCUMENTS)
    calls = _spy_varlen(monkeypatch)
    q = torch.randn(1, 2, 12, 16)

    class Layer(torch.nn.Module):
        is_causal = True

    got, _ = hf.attention_forward(Layer(), q, q, q, mask + 0 == 1)   # an altered (new) mask tensor
    assert not calls
    want = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    torch.testing.assert_close(got.transpose(1, 2), want)


def test_packed_sequences_by_position_ids_doge_reads_its_mask():
    """Doge asks for the mask materialised and adds to it: with packed
    documents it still matches eager (it gets the 4-D mask, not the documents)."""
    _needs_mask_asking("doge")
    pos = _restarts([5, 7])
    ids = torch.randint(0, VOCAB, pos.shape)
    models = _models("doge", "eager", torch.float32)
    for m in models:
        m.train()
    _compare(models, ids, torch.float32, label="doge packed", position_ids=pos, grad_factors={"self_attn.A": 8.0})


def _spy_chunks(monkeypatch):
    """The attention_chunk of every flash_attn_func / flash_attn_varlen_func call."""
    chunks = []
    for name in ("flash_attn_func", "flash_attn_varlen_func"):
        real = getattr(flashattn_triton, name)

        def spy(*args, _real=real, **kw):
            chunks.append(kw.get("attention_chunk", 0))
            return _real(*args, **kw)

        monkeypatch.setattr(flashattn_triton, name, spy)
    return chunks


@pytest.mark.parametrize("side", [None, "left", "right"])
def test_llama4_chunked_attention_matches_sdpa(side, monkeypatch):
    """Chunked attention (Llama 4, 4-token chunks over 12 tokens): the mask
    builder recognises Transformers' chunked mask and the layers pass
    attention_chunk to the kernels (dense, or varlen over the real tokens of a
    padded batch, whose chunks count from each row's first real token, as
    Transformers' left_padding does); before session 52 the layers took the
    4-D mask, and before that plain causal attention, silently."""
    torch.manual_seed(0)
    chunks = _spy_chunks(monkeypatch)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    mask = None if side is None else _padding_mask(side)
    _compare(_models("llama4", "sdpa", torch.float32), ids, torch.float32, mask=mask,
             label=f"llama4 chunked {side or 'unpadded'}")
    assert chunks and set(chunks) == {4}, f"the chunked layers' kernel calls: attention_chunk {chunks}"


@pytest.mark.parametrize("rows, taken", [
    ([[8, 4], [4, 5, 3]], True),      # every document starts at position 0
    ([[6, 6]], True),                 # 6 = one chunk and a half: the second document's chunks restart
    ([[5, 7]], False),                # the second document's positions start at 2 (below): not a chunk start
])
def test_llama4_packed_documents_chunked(rows, taken, monkeypatch):
    """Llama 4 with documents packed in rows (position_ids restarting): with
    Transformers' remapped positions, the chunked layers' pattern is
    attention_chunk=4 inside each document, so they run flash_attn_varlen_func
    over the documents with the chunk (each document's chunks from its first
    token, which Transformers counts from its position; a document whose
    first position is not a multiple of the chunk keeps the mask).  Logits
    and gradients against the float64 model, SDPA's error as the baseline."""
    from transformers import masking_utils as mu
    if not hasattr(mu, "remap_positions_for_packed_sequence"):
        pytest.skip(f"transformers {transformers.__version__}: packed positions are not remapped, chunks "
                    "follow the row index")
    calls = _spy_varlen(monkeypatch)
    pos = _restarts(*rows)
    if not taken:
        pos[0, 5:] += 2   # 0..4, then 2..8: a new document (the step is not 1) whose positions start at 2
    ids = torch.randint(0, VOCAB, pos.shape)
    models = _models("llama4", "sdpa", torch.float32)
    for m in models:
        m.train()
    _compare(models, ids, torch.float32, label=f"llama4 packed {rows}", position_ids=pos)
    chunked = [c for c in calls if c[4].get("attention_chunk")]
    if taken:
        bounds = torch.tensor([0] + [m for row in rows for m in row]).cumsum(0).tolist()
        assert chunked and all(c[0] == bounds and c[4]["attention_chunk"] == 4 and c[4]["causal"]
                               for c in chunked), f"the chunked layers' varlen calls: {calls}"
    else:
        assert not chunked


def test_llama4_chunked_generate_matches_sdpa(monkeypatch):
    """Greedy decoding past the chunk size: the prefill runs the chunk kernels;
    decode steps, whose chunked-layer cache (a sliding one) has dropped keys
    (kv_offset > 0), take the 4-D mask."""
    chunks = _spy_chunks(monkeypatch)
    ours, base, _ = _models("llama4", "sdpa", torch.float32)
    _compare_generate(ours, base, BATCH, 6, new=5, mask=_padding_mask("left", seq=6))
    assert 4 in chunks, "the prefill did not pass attention_chunk"


def test_mask_builder_tells_windows_from_chunks():
    """local_size with a sliding-window mask function keeps the fast path (None:
    the window comes from the layer's sliding_window); with a chunked one also
    None (the layer passes attention_chunk) when the keys start at position 0,
    Transformers' 4-D boolean mask after a sliding cache dropped keys
    (kv_offset > 0); with any other function the 4-D mask."""
    from transformers import masking_utils as mu
    dev = torch.get_default_device()  # (the test device: sdpa_mask's aranges and the chunks' padding on one)
    kw = dict(batch_size=1, q_length=8, kv_length=8, attention_mask=None, local_size=4, allow_is_causal_skip=True,
              device=dev)
    assert hf.attention_mask(mask_function=mu.sliding_window_causal_mask_function(4), **kw) is None
    chunked = mu.chunked_causal_mask_function(4, torch.zeros(1, dtype=torch.long, device=dev))
    assert hf._chunked_causal_size(chunked, mu) == 4
    assert hf._chunked_causal_size(mu.sliding_window_causal_mask_function(4), mu) is None
    assert hf.attention_mask(mask_function=chunked, **kw) is None
    later = dict(kw, q_length=1, kv_length=4, q_offset=9, kv_offset=6)
    got = hf.attention_mask(mask_function=chunked, **later)
    want = mu.sdpa_mask(mask_function=chunked, **{**later, "allow_is_causal_skip": False})
    assert got is not None and torch.equal(got, want)
    assert got[0, 0, 0].tolist() == [False, False, True, True]  # keys 6..9, query 9: chunk [8, 12)
    other = mu.and_masks(mu.causal_mask_function, lambda b, h, q, k: k >= 0)
    got = hf.attention_mask(mask_function=other, **kw)
    assert got is not None and got.shape == (1, 1, 8, 8)


def test_layer_chunk_reads_the_layer_type():
    cfg = _config("llama4")
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=NAME)
    attn = [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "q_proj")]
    assert attn and all(hf._layer_chunk(m) == 4 for m in attn)
    cfg_full = _config("llama4", layer_types=["full_attention", "chunked_attention"])
    model = transformers.AutoModelForCausalLM.from_config(cfg_full, attn_implementation=NAME)
    attn = [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "q_proj")]
    assert [hf._layer_chunk(m) for m in attn] == [0, 4]
    llama = transformers.AutoModelForCausalLM.from_config(_config("llama"), attn_implementation=NAME)
    assert all(hf._layer_chunk(m) == 0 for m in llama.modules() if hasattr(m, "q_proj"))


# ---------------------------------------------------------------------------
# A materialised mask asked for (allow_is_causal_skip=False): models that add
# to the mask (Doge, Falcon-ALiBi), concatenate it (T5Gemma2), and static caches
# ---------------------------------------------------------------------------

def _needs(*names):
    for name in names:
        if getattr(transformers, name, None) is None:
            pytest.skip(f"transformers {transformers.__version__} has no {name}")


@pytest.mark.parametrize("q_length, kv_length, q_offset", [(6, 6, 0), (1, 7, 6)])
@pytest.mark.parametrize("padded", [False, True])
def test_mask_builder_materialises_when_asked(q_length, kv_length, q_offset, padded):
    """allow_is_causal_skip=False (allow_is_bidirectional_skip=False for a
    bidirectional pattern) gets the 4-D mask of Transformers' SDPA builder,
    never None or a 2-D padding mask: for causal, sliding-window and
    bidirectional patterns, prefill and decode step (q_length 1) alike."""
    from transformers import masking_utils as mu
    dev = torch.get_default_device()
    pad = torch.ones(2, kv_length, dtype=torch.bool, device=dev)
    if padded:
        pad[1, :2] = False
    kw = dict(batch_size=2, q_length=q_length, kv_length=kv_length, q_offset=q_offset, kv_offset=0,
              attention_mask=pad, device=dev)
    for label, fn, local, extra in (
            ("causal", mu.causal_mask_function, None, {"allow_is_causal_skip": False}),
            ("sliding", mu.sliding_window_causal_mask_function(3), 3, {"allow_is_causal_skip": False}),
            ("bidirectional", mu.bidirectional_mask_function, None,
             {"allow_is_causal_skip": False, "allow_is_bidirectional_skip": False})):
        got = hf.attention_mask(mask_function=fn, local_size=local, **kw, **extra)
        want = mu.sdpa_mask(mask_function=fn, local_size=local, **{**kw, **extra, "allow_is_causal_skip": False})
        assert got is not None and got.dim() == 4, f"{label}: {None if got is None else tuple(got.shape)}"
        assert torch.equal(got, want), label
    # Transformers' bidirectional builder always passes allow_is_causal_skip=False; skipping stays allowed
    # through allow_is_bidirectional_skip=True
    got = hf.attention_mask(mask_function=mu.bidirectional_mask_function, allow_is_causal_skip=False,
                            allow_is_bidirectional_skip=True, **kw)
    assert got is None if not padded else got.shape == (2, kv_length)


def _needs_mask_asking(kind):
    """Skip unless this Transformers' model asks for the materialised mask
    (allow_is_causal_skip=False) through the attention interface: Transformers
    5.17's Doge does not ask (the GPU run of session 48: logits off by 0.46)
    and its Falcon picks attention classes by name (KeyError for a custom one)."""
    import importlib
    import inspect
    _needs({"doge": "DogeConfig", "falcon_alibi": "FalconConfig"}[kind])
    name = {"doge": "doge", "falcon_alibi": "falcon"}[kind]
    src = inspect.getsource(importlib.import_module(f"transformers.models.{name}.modeling_{name}"))
    if "allow_is_causal_skip=False" not in src or "ALL_ATTENTION_FUNCTIONS" not in src:
        pytest.skip(f"transformers {transformers.__version__}: {name} does not ask for the materialised mask "
                    "through the attention interface")


@pytest.mark.parametrize("kind", ["doge", "falcon_alibi"])
@pytest.mark.parametrize("side", [None, "right"])
def test_model_adding_to_the_mask_matches_eager(kind, side):
    """Doge (a learnable dynamic mask) and Falcon with ALiBi ask for the causal
    mask materialised and add to it: logits and gradients match eager, with and
    without padding (before, the mask builder returned None: Doge ran
    non-causal attention, position 0 seeing later tokens; Falcon crashed).
    (Right padding: with left padding the float64 eager reference's padded rows,
    whose keys are all masked, come out NaN; left padding is in the generate test.)"""
    _needs_mask_asking(kind)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    mask = None if side is None else _padding_mask(side)
    # Doge's A gets its gradient only through the mask: the sum over every (b, i, j) of the bias gradient,
    # which a flash kernel forms from the recomputed probabilities.  Its error measured 2-4x eager's (seeds
    # 0-3, unpadded and right-padded), at ~2e-5 relative: past the 3x pass mark, hence 8x for it alone.
    _compare(_models(kind, "eager", torch.float32), ids, torch.float32, mask=mask, label=f"{kind} {side}",
             grad_factors={"self_attn.A": 8.0})


@pytest.mark.parametrize("kind", ["doge", "falcon_alibi"])
def test_generate_adding_to_the_mask_matches_eager(kind):
    """Decode steps (q_length 1) of a model that adds to the mask get the 4-D
    mask too: greedy tokens and every step's logits match eager."""
    _needs_mask_asking(kind)
    ours, base, _ = _models(kind, "eager", torch.float32)
    _compare_generate(ours, base, BATCH, 8, new=4, mask=_padding_mask("left", seq=8))


@pytest.mark.parametrize("side", [None, "left"])
def test_static_cache_generate_matches_sdpa(side):
    """A static cache (kv_length = its size, unfilled slots at the end): the
    prefill's causal mask is not flash-attn's bottom-right one, and Transformers
    asks for the materialised mask at each decode step; both must hide the
    unfilled slots (before, without padding, they were attended: logits off by 0.1)."""
    ours, base, _ = _models("llama", "sdpa", torch.float32, num_hidden_layers=2)
    mask = None if side is None else _padding_mask(side, seq=7)
    _compare_generate(ours, base, BATCH, 7, new=4, mask=mask, cache_implementation="static")


def test_t5gemma2_merged_masks_match_eager():
    """T5Gemma2's decoder asks for its causal and sliding-window self-attention
    masks and its cross-attention mask materialised (allow_is_causal_skip=False,
    allow_is_bidirectional_skip=False) and concatenates them, decode steps
    included: a padded encoder batch, teacher-forced logits and greedy
    generation match eager (before, a None mask made torch.cat fail)."""
    _needs("T5Gemma2Config", "T5Gemma2ForConditionalGeneration")
    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=4,
                layer_types=["sliding_attention", "full_attention"], max_position_embeddings=64)
    try:
        cfg = transformers.T5Gemma2Config(encoder=dict(text_config=text, vision_config=None), decoder=text,
                                          tie_word_embeddings=True)
    except (TypeError, ValueError) as exc:  # another Transformers version's config layout
        pytest.skip(f"T5Gemma2Config: {exc}")
    eager = transformers.AutoModelForSeq2SeqLM.from_config(copy.deepcopy(cfg), attn_implementation="eager").eval()
    ours = transformers.AutoModelForSeq2SeqLM.from_config(copy.deepcopy(cfg), attn_implementation=NAME).eval()
    ours.load_state_dict(eager.state_dict())
    enc = torch.randint(3, VOCAB, (BATCH, 6))
    enc_mask = torch.ones_like(enc)
    enc_mask[1, 4:] = 0
    dec = torch.randint(3, VOCAB, (BATCH, 9))
    with torch.no_grad():
        got, want = (m(input_ids=enc, attention_mask=enc_mask, decoder_input_ids=dec).logits for m in (ours, eager))
    assert (got - want).abs().max().item() <= 1e-5 * want.abs().max().item()
    got, want = (m.generate(input_ids=enc, attention_mask=enc_mask, max_new_tokens=4, do_sample=False,
                            output_logits=True, return_dict_in_generate=True) for m in (ours, eager))
    assert got.sequences.tolist() == want.sequences.tolist()
    for step, (lg, lw) in enumerate(zip(got.logits, want.logits)):
        assert (lg - lw).abs().max().item() <= 1e-5 * lw.abs().max().item(), f"step {step}"


# ---------------------------------------------------------------------------
# Layer arguments that change the result and that no kernel takes
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, value", [
    ("indices", torch.zeros(1, 4, 2, dtype=torch.long)),  # DeepSeek-V3.2 & co: the indexer's top-k keys
    ("block_indices", torch.zeros(1, 1, 4, 1, dtype=torch.long)),  # MiniMax-M3: top-k key blocks
    ("sinks", torch.zeros(1, 2, 4, 1)),  # Inkling-2: per-token sink logits
])
def test_result_changing_kwargs_raise(name, value):
    """A keyword that would change the attention and that flashattn_triton does
    not take raises NotImplementedError naming it, never silently dropped; a
    None value (what Transformers passes when it has nothing) is accepted."""
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(NotImplementedError, match=rf"^{name} .*not supported.*attn_implementation="):
        hf.attention_forward(_Module(True), q, q, q, None, **{name: value})
    out, _ = hf.attention_forward(_Module(True), q, q, q, None, **{name: None})
    assert out.shape == (1, 4, 2, 8)


def test_deepseek_v32_sparse_indexer_is_refused():
    """DeepSeek-V3.2 passes its indexer's selection as `indices=` (into the mask
    only for eager / sdpa): the model raises instead of running dense attention."""
    _needs("DeepseekV32Config")
    cfg = transformers.DeepseekV32Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
        topk_group=1, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12,
        max_position_embeddings=64, index_topk=4, index_head_dim=16, index_n_heads=2)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=NAME).eval()
    with torch.no_grad(), pytest.raises(NotImplementedError, match="indices"):
        model(input_ids=torch.randint(3, VOCAB, (BATCH, 10)))


# ---------------------------------------------------------------------------
# Cross-attention: the padding mask belongs to the keys only
# ---------------------------------------------------------------------------

def test_cross_attention_query_longer_than_padded_keys():
    """Not causal, a 2-D mask masks keys only, whatever the number of queries:
    8 queries against 3 keys of which row 1 has 2 real."""
    q, k, v = torch.randn(2, 4, 8, 16), torch.randn(2, 2, 3, 16), torch.randn(2, 2, 3, 16)
    keep = torch.tensor([[True, True, True], [True, True, False]])
    out, _ = hf.attention_forward(_Module(False), q, k, v, keep, scaling=0.25)
    kk, vv = (t.double().repeat_interleave(2, dim=1) for t in (k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), kk, vv, attn_mask=keep[:, None, None, :],
                                                           scale=0.25).transpose(1, 2)
    assert_close("out", out.double(), ref, dtype=torch.float32)


def test_bart_padded_encoder_longer_decoder_matches_eager():
    """BART with a padded encoder batch and a decoder longer than the encoder
    input (teacher forcing): logits and gradients match eager (before, the
    cross-attention's (B, Ne) mask was refused for Nd > Ne)."""
    _needs("BartConfig")
    cfg = transformers.BartConfig(vocab_size=VOCAB, d_model=64, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=96,
                                  decoder_ffn_dim=96, max_position_embeddings=64, dropout=0.0,
                                  attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1, bos_token_id=0,
                                  eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)
    ref = transformers.AutoModelForSeq2SeqLM.from_config(copy.deepcopy(cfg), attn_implementation="eager")
    models = [transformers.AutoModelForSeq2SeqLM.from_config(copy.deepcopy(cfg), attn_implementation=a)
              for a in (NAME, "eager")]
    for m in models:
        m.load_state_dict(ref.state_dict())
    models = [m.eval() for m in models] + [ref.double().eval()]
    enc = torch.randint(3, VOCAB, (BATCH, 4))
    enc_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    dec = torch.randint(3, VOCAB, (BATCH, 11))
    weight = torch.randn(BATCH, 11, VOCAB, dtype=torch.float64)
    outs = []
    for m in models:
        logits = m(input_ids=enc, attention_mask=enc_mask, decoder_input_ids=dec).logits
        (logits.double() * weight).sum().backward()
        outs.append((logits.double(), {n: p.grad for n, p in m.named_parameters()}))
    (lo, go), (lb, gb), (lr, gr) = outs
    assert_close("bart logits", lo, lr, baseline=lb, dtype=torch.float32)
    for name in gr:
        if gr[name] is not None:
            assert_close(f"bart grad {name}", go[name].double(), gr[name], baseline=gb[name].double(), factor=3.0,
                         dtype=torch.float32)


def test_sliding_window_with_padding_inside_rows_matches_sdpa():
    """A sliding window with padding inside a row (a batched multi-turn
    continuation whose new turn is left-padded): Transformers counts the
    window over positions, padding included, so the mask builder gives the
    4-D mask there (before: the varlen path counted it over the packed real
    tokens, logits off by 0.3 past the gap).  Logits and gradients match."""
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[0, 3:6] = 0
    mask[1, :2] = 0  # (ordinary left padding in the other row)
    _compare(_models("mistral", "sdpa", torch.float32, sliding_window=4), ids, torch.float32, mask=mask,
             label="window, gap in a row")


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_mask_longer_than_the_keys_is_read_from_position_0(cache):
    """A 2-D mask longer than the keys (made up to a cache's size, zeros for
    the slots still to come) is read at absolute key positions, as
    Transformers reads it (before: its last kv_length columns, all zeros, so
    every query was taken for padding and output zeros)."""
    from transformers import DynamicCache, StaticCache
    ours, base, _ = _models("llama", "sdpa", torch.float32)
    n, total = 6, 12
    ids = torch.randint(0, VOCAB, (BATCH, n))
    mask = torch.zeros(BATCH, total, dtype=torch.long)
    mask[:, :n] = 1
    mask[1, :2] = 0
    logits = []
    for m in (ours, base):
        past = (StaticCache(config=m.config, max_cache_len=total) if cache == "static"
                else DynamicCache(config=m.config))
        # transformers 5.25 calls the cache argument `cache` (`past_key_values` warns, removed in 5.40)
        cache_arg = "cache" if "cache" in inspect.signature(m.forward).parameters else "past_key_values"
        with torch.no_grad():
            logits.append(m(input_ids=ids, attention_mask=mask, use_cache=True, **{cache_arg: past}).logits)
    keep = mask[:, :n].bool()
    assert_close(f"{cache} cache logits", logits[0][keep], logits[1][keep], atol=1e-5)


@pytest.mark.parametrize("gap", [True, False], ids=["gap_in_a_row", "end_padding"])
def test_modernbert_local_window_with_padding_matches_sdpa(gap):
    """An encoder's bidirectional local window (ModernBERT: |i - j| <= W on
    its sliding layers) with padding at the end of one row and, with `gap`,
    inside the other: Transformers never lets that pattern be skipped, so the
    layers get the 4-D mask (the window kwarg, read as (W, W) for a bidirectional layer,
    only narrows the tiles visited; the mask decides).  Logits and gradients
    match SDPA's against a float64 SDPA reference."""
    cfg = transformers.ModernBertConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        global_attn_every_n_layers=2, local_attention=4, max_position_embeddings=64, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, embedding_dropout=0.0,
        attention_dropout=0.0, mlp_dropout=0.0)
    assert "sliding_attention" in cfg.layer_types
    made = [transformers.ModernBertForMaskedLM._from_config(copy.deepcopy(cfg), attn_implementation=attn)
            for attn in (NAME, "sdpa", "sdpa")]
    for m in made[:2]:
        m.load_state_dict(made[2].state_dict())
    ours, base, ref = made[0].eval(), made[1].eval(), made[2].double().eval()
    ids = torch.randint(3, VOCAB, (BATCH, SEQ + 2))
    mask = torch.ones(BATCH, SEQ + 2, dtype=torch.long)
    if gap:
        mask[0, 4:7] = 0
    mask[1, -3:] = 0
    _compare((ours, base, ref), ids, torch.float32, mask=mask, label="modernbert local window")


def test_flash_kwargs_pack_documents_in_one_row():
    """One row of documents packed end to end, described only by the flash
    kwargs (DataCollatorWithFlattening(return_flash_attn_kwargs=True,
    return_position_ids=False): cu_seq_lens_q / _k, max_length_q / _k): each
    document attends within itself, as with flash_attention_2 (before: the
    kwargs were ignored and the documents attended each other, logits off by
    ~10).  Logits and gradients match SDPA given the block-diagonal causal
    mask, against its float64 copy."""
    lens = [5, 9, 7]
    n = sum(lens)
    ids = torch.randint(0, VOCAB, (1, n))
    flat = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=False)
    batch = flat([{"input_ids": ids[0, s:s + m].tolist()} for s, m in
                  zip(torch.tensor([0] + lens[:-1]).cumsum(0).tolist(), lens)], return_tensors="pt")
    fk = {key: (val.to(ids.device) if isinstance(val, torch.Tensor) else val) for key, val in batch.items()
          if key.startswith(("cu_seq_lens", "max_length"))}
    assert fk["cu_seq_lens_q"].tolist() == [0, 5, 14, 21] and fk["max_length_q"] == 9
    doc = torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens)).to(ids.device)
    pos = torch.arange(n, device=ids.device)
    block = ((doc[:, None] == doc[None, :]) & (pos[None, :] <= pos[:, None]))[None, None]
    ours, base, ref = _models("llama", "sdpa", torch.float32)
    weight = torch.randn(1, n, VOCAB, dtype=torch.float64)
    outs = []
    for m, kw in ((ours, fk), (base, {"attention_mask": block}), (ref, {"attention_mask": block})):
        m.train()  # (a training step: Transformers makes a cache unless told not to)
        logits = m(input_ids=ids, **kw).logits
        (logits.double() * weight).sum().backward()
        outs.append((logits, {name: p.grad for name, p in m.named_parameters()}))
    (lo, go), (lb, gb), (lr, gr) = outs
    assert_close("packed logits", lo.double(), lr, baseline=lb.double(), dtype=torch.float32)
    for name in gr:
        if gr[name] is not None:
            assert_close(f"packed grad {name}", go[name].double(), gr[name], baseline=gb[name].double(),
                         factor=3.0, dtype=torch.float32)


def test_flash_kwargs_checked_and_ignored_where_they_do_not_apply():
    """cu_seq_lens of two lengths is a ValueError naming both; with a batch of
    two rows, or queries that are not the keys (a decode step), the kwargs
    are not used (flash_attention_2 packs only a prefill's single row)."""
    class Layer(torch.nn.Module):
        is_causal = True
    q = torch.randn(1, 2, 6, 16)
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"cu_seq_lens_q and cu_seq_lens_k .*\(3,\) and \(2,\)"):
        hf.attention_forward(Layer(), q, q, q, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu[:2])
    kv = torch.randn(1, 2, 9, 16)
    dense, _ = hf.attention_forward(Layer(), q, kv, kv, None)
    got, _ = hf.attention_forward(Layer(), q, kv, kv, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                                  max_length_q=4, max_length_k=4)
    assert torch.equal(got, dense)

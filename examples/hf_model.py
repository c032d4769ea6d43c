"""A Hugging Face Transformers model running on flashattn_triton's attention.

    python examples/hf_model.py                                  # CPU: a tiny random Llama built from a config
    python examples/hf_model.py --device cuda                    # GPU: a Llama-3.2-1B-shaped model, random weights
    python examples/hf_model.py --device cuda --model PATH       # any local checkpoint directory (or hub id, online)

The switch is one line:

    model = AutoModelForCausalLM.from_pretrained(PATH, attn_implementation=register())

The script then checks the model against attn_implementation="sdpa" on a
left-padded batch (padding goes through flash_attn_varlen_func), with "eager"
beside it to show the rounding floor of the dtype, runs one training step,
and generates greedily with ours and with sdpa and compares the tokens (in
float32 on the GPU, where random weights do not leave near-ties to rounding).
"""

import argparse
import copy
import time

import torch

from flashattn_triton.integrations.transformers import register


def tiny_llama_config(big: bool):
    from transformers import LlamaConfig
    if big:  # the shape of Llama-3.2-1B
        return LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                           num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                           rope_theta=500000.0, tie_word_embeddings=True)
    return LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", help="a checkpoint for from_pretrained (default: random weights from a config)")
    ap.add_argument("--prompt-len", type=int, help="default 32 on CPU, 512 on GPU")
    ap.add_argument("--new-tokens", type=int, default=16)
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM

    device = torch.device(args.device)
    gpu = device.type == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    name = register()  # "triton_attention"

    torch.manual_seed(0)
    if args.model:
        # the one line:
        model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation=name, dtype=dtype)
        ref = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="sdpa", dtype=dtype)
        eager = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="eager", dtype=dtype)
    else:
        cfg = tiny_llama_config(big=gpu)
        with device:  # random weights drawn on the device (seconds, not minutes, for 1B parameters)
            # the one line (from_config here, since nothing is downloaded):
            model = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=name, dtype=dtype)
            ref = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="sdpa", dtype=dtype)
            eager = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager", dtype=dtype)
        ref.load_state_dict(model.state_dict())
        eager.load_state_dict(model.state_dict())
    model, ref, eager = model.to(device).eval(), ref.to(device).eval(), eager.to(device).eval()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{type(model).__name__}, {n_params / 1e6:.1f}M parameters, attn_implementation="
          f"{model.config._attn_implementation!r}, {dtype}, {device}")

    # a left-padded batch of two prompts
    n = args.prompt_len or (512 if gpu else 32)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (2, n), device=device)
    mask = torch.ones_like(ids)
    mask[1, : n // 4] = 0
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    ids = ids.masked_fill(mask == 0, pad_id)
    with torch.no_grad():
        t0 = time.perf_counter()
        got = model(input_ids=ids, attention_mask=mask).logits
        t1 = time.perf_counter()
        want = ref(input_ids=ids, attention_mask=mask).logits
        floor = eager(input_ids=ids, attention_mask=mask).logits
    del eager
    keep = mask.bool()

    def max_diff(a, b):
        return (a[keep].float() - b[keep].float()).abs().max().item()

    print(f"logits on a padded batch: max |ours - sdpa| = {max_diff(got, want):.2e}, "
          f"max |eager - sdpa| = {max_diff(floor, want):.2e} (the {str(dtype)[6:]} rounding floor; "
          f"logits up to {want.abs().max().item():.1f}); forward {1000 * (t1 - t0):.0f} ms")

    model.train()
    out = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
    out.loss.backward()
    grad_norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in model.parameters() if p.grad is not None))
    print(f"training step: loss {out.loss.item():.3f}, gradient norm {grad_norm.item():.3f}")
    model.zero_grad(set_to_none=True)
    model.eval()

    if dtype != torch.float32:
        # Greedy decoding of random weights meets near-tied top logits, which
        # bf16 rounding flips for any two attention implementations; in float32
        # (our kernels run it too) the comparison is exact enough to be a test.
        model, ref = model.float(), ref.float()
        print("generation compared in float32")
    gen_kw = dict(attention_mask=mask, max_new_tokens=args.new_tokens, do_sample=False, pad_token_id=pad_id)
    with torch.no_grad():
        g_ours = model.generate(ids, **gen_kw)[:, n:]
        g_ref = ref.generate(ids, **gen_kw)[:, n:]
    same = (g_ours == g_ref).all(dim=1).tolist()
    print(f"greedy generation of {args.new_tokens} tokens: identical to sdpa for each prompt: {same}")
    if not all(same):
        first = [(row != 0).nonzero()[0].item() if (row != 0).any() else None for row in (g_ours != g_ref).int()]
        print(f"  first differing token per prompt: {first}")

if __name__ == "__main__":
    main()

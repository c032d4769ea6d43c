"""Train a GPT on the Python standard library's source with a choice of attention.

    python examples/train_gpt.py                          # CPU: toy model, all three attentions
    python examples/train_gpt.py --attn ours --steps 100  # one attention only
    python examples/train_gpt.py --device cuda            # H100/H200: GPT-2 small (124M), bf16, 1k context

--attn picks flashattn_triton ("ours"), torch's scaled_dot_product_attention
("sdpa") or matmul-softmax-matmul ("eager"); "all" trains each from the same
initial weights on the same batches and plots the three loss curves, which
should lie on top of each other (same math, different kernels).  Writes
<out>/train_gpt.png and <out>/train_gpt.json.
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import ATTENTION_CHOICES, GPT, Batches, GPTConfig, evaluate, smooth, tokenize_corpus, train  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attn", choices=ATTENTION_CHOICES + ("all",), default="all")
    ap.add_argument("--device", default="cpu", help="cpu (toy size) or cuda (real size)")
    ap.add_argument("--size", choices=["toy", "gpt2-small"], help="default: toy on CPU, gpt2-small on GPU")
    ap.add_argument("--seq-len", type=int, help="default: 64 on CPU, 1024 on GPU")
    ap.add_argument("--batch-size", type=int, help="default: 8 on CPU, 16 on GPU")
    ap.add_argument("--steps", type=int, help="default: 50 on CPU, 300 on GPU")
    ap.add_argument("--lr", type=float, help="default: 3e-3 toy, 6e-4 gpt2-small")
    ap.add_argument("--corpus-mb", type=float, help="text read from the stdlib, default 1 (CPU) / 16 (GPU)")
    ap.add_argument("--out", default=".", help="directory for train_gpt.png / train_gpt.json")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    gpu = args.device.startswith("cuda")
    if gpu and not torch.cuda.is_available():
        sys.exit("--device cuda but no GPU is visible")
    size = args.size or ("gpt2-small" if gpu else "toy")
    seq_len = args.seq_len or (1024 if gpu else 64)
    batch_size = args.batch_size or (16 if gpu else 8)
    steps = args.steps or (300 if gpu else 50)
    lr = args.lr or (6e-4 if size == "gpt2-small" else 3e-3)
    amp = torch.bfloat16 if gpu else None

    cfg = GPTConfig.preset(size)
    t0 = time.perf_counter()
    ids, tok = tokenize_corpus("bytes" if cfg.vocab_size == 256 else "pieces",
                               int((args.corpus_mb or (16 if gpu else 1)) * 1e6), cfg.vocab_size)
    print(f"corpus: {len(ids) / 1e6:.2f}M tokens ({type(tok).__name__}, vocab {cfg.vocab_size}) "
          f"in {time.perf_counter() - t0:.1f}s")

    attns = ATTENTION_CHOICES if args.attn == "all" else (args.attn,)
    results = {}
    for attn in attns:
        torch.manual_seed(args.seed)
        model = GPT(cfg, attn).to(args.device)
        if attn == attns[0]:
            print(f"model: {size}, {model.num_params() / 1e6:.1f}M parameters, seq_len {seq_len}, "
                  f"batch {batch_size}, {steps} steps, {'bf16 autocast' if amp else 'float32'} on {args.device}")
        batches = Batches(ids, batch_size, seq_len, args.device, seed=args.seed)
        log = train(model, batches, steps, lr, amp, log_every=max(1, steps // 10), label=f"[{attn:5s}] ")
        log["val_loss"] = evaluate(model, batches.val_batches(4), amp)
        log["tokens_per_s"] = steps * batch_size * seq_len / log["time"][-1]
        print(f"[{attn:5s}] final val loss {log['val_loss']:.4f}, {log['tokens_per_s']:.0f} tokens/s "
              f"(including the first steps' compilation)")
        results[attn] = log
        del model
        if gpu:
            torch.cuda.empty_cache()

    if len(results) > 1:
        first = attns[0]
        for attn in attns[1:]:
            diff = max(abs(a - b) for a, b in zip(results[first]["loss"], results[attn]["loss"]))
            print(f"max |loss({attn}) - loss({first})| over {steps} steps: {diff:.2e}")
    os.makedirs(args.out, exist_ok=True)
    meta = {"size": size, "seq_len": seq_len, "batch_size": batch_size, "steps": steps, "lr": lr,
            "device": args.device, "torch": torch.__version__}
    with open(os.path.join(args.out, "train_gpt.json"), "w") as f:
        json.dump({"config": meta, "runs": results}, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for attn, log in results.items():
        ax.plot(smooth(log["loss"]), label=f"{attn} (val {log['val_loss']:.3f})", alpha=0.85)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (smoothed)")
    ax.set_title(f"{size}, seq {seq_len}, batch {batch_size} on {args.device}")
    ax.legend()
    fig.tight_layout()
    path = os.path.join(args.out, "train_gpt.png")
    fig.savefig(path, dpi=120)
    print(f"wrote {path} and train_gpt.json")


if __name__ == "__main__":
    main()

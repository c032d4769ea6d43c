"""A causal self-attention block trained for a few steps with flashattn_triton.

Runs on a GPU, or on the CPU (blockwise PyTorch path; set TRITON_INTERPRET=1
to run the Triton kernels in the interpreter instead, slowly):

    python examples/train_step.py
"""

import torch
import torch.nn as nn

from flashattn_triton import flash_attn_func


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wkv = nn.Linear(dim, 2 * n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.n_heads, self.head_dim)
        # k and v stay slices of one packed projection: no copy is needed.
        kv = self.wkv(x).view(b, n, 2, self.n_kv_heads, self.head_dim)
        out = flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], causal=True)  # GQA: 8 query heads, 2 KV heads
        return self.wo(out.reshape(b, n, -1))


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    model = CausalSelfAttention(dim=256, n_heads=8, n_kv_heads=2).to(device, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(4, 512 if device == "cuda" else 64, 256, device=device, dtype=dtype)
    target = torch.roll(x, shifts=1, dims=1)  # predict the previous token's features
    for step in range(5):
        loss = nn.functional.mse_loss(model(x).float(), target.float())
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

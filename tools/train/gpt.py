"""The byte-level pre-LN GPT that specdec's example models use (PyTorch reference).

Must match examples/gpt/gpt_model.hpp exactly:
  x = wte[token] + wpe[position]
  per layer: x += proj(attention(LN1(x)));  x += fc2(gelu_tanh(fc1(LN2(x))))
  logits = LN_f(x) @ wte^T          (tied input/output embedding)
LayerNorm eps = 1e-5; attention is causal, scaled by 1/sqrt(head_dim); qkv rows are [q; k; v],
head h owning dimensions [h*head_dim, (h+1)*head_dim) of each.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 256
    max_context: int = 384
    n_layer: int = 6
    n_head: int = 6
    d_model: int = 384
    d_ff: int = 1536


class Block(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.n_head = c.n_head
        self.ln1 = nn.LayerNorm(c.d_model, eps=1e-5)
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.proj = nn.Linear(c.d_model, c.d_model)
        self.ln2 = nn.LayerNorm(c.d_model, eps=1e-5)
        self.fc1 = nn.Linear(c.d_model, c.d_ff)
        self.fc2 = nn.Linear(c.d_ff, c.d_model)

    def forward(self, x):
        B, T, D = x.shape
        H = self.n_head
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q = q.view(B, T, H, D // H).transpose(1, 2)
        k = k.view(B, T, H, D // H).transpose(1, 2)
        v = v.view(B, T, H, D // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.config = c
        self.wte = nn.Embedding(c.vocab_size, c.d_model)
        self.wpe = nn.Embedding(c.max_context, c.d_model)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.d_model, eps=1e-5)
        self.apply(self._init)
        for b in self.blocks:  # GPT-2 scaled init of residual projections
            nn.init.normal_(b.proj.weight, std=0.02 / math.sqrt(2 * c.n_layer))
            nn.init.normal_(b.fc2.weight, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.T

    def tensors(self):
        """Tensors in the order of the .spdc file format (see models/README.md)."""
        out = [self.wte.weight, self.wpe.weight]
        for b in self.blocks:
            out += [b.ln1.weight, b.ln1.bias, b.qkv.weight, b.qkv.bias, b.proj.weight, b.proj.bias,
                    b.ln2.weight, b.ln2.bias, b.fc1.weight, b.fc1.bias, b.fc2.weight, b.fc2.bias]
        return out + [self.ln_f.weight, self.ln_f.bias]

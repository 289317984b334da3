"""A small GPT written in plain torch.nn (RMSNorm, rotary embeddings, grouped-query attention,
SwiGLU, AdamW with gradient clipping) trains on ember with every op native and follows the CPU
run step for step."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_ember


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.kv_heads, self.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads)
        self.mlp = SwiGLU(dim, 4 * dim)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, vocab=96, dim=64, layers=2, heads=4, kv_heads=2, max_len=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // heads
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_len).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, self.cos[:t], self.sin[:t])
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def train(device, steps, dtype=None):
    torch.manual_seed(0)
    model = GPT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, foreach=True)
    data = torch.randint(0, 96, (steps, 4, 33), generator=torch.Generator().manual_seed(1))
    losses = []
    for step in range(steps):
        batch = data[step].to(device)
        with torch.autocast(device_type=device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = model(batch[:, :-1], batch[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        losses.append(loss.item())
    return losses, model


def test_gpt_trains_natively_and_matches_cpu():
    torch_ember.reset_fallback_stats()
    ember_losses, ember_model = train("ember", 6)
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())
    cpu_losses, cpu_model = train("cpu", 6)
    torch.testing.assert_close(ember_losses, cpu_losses, rtol=2e-4, atol=2e-4)
    for (name, pe), pc in zip(ember_model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(pe.detach().cpu(), pc.detach(), rtol=2e-3, atol=2e-4, msg=name)
    assert ember_losses[-1] < ember_losses[0]
    assert abs(ember_losses[0] - math.log(96)) < 0.5


def test_gpt_bf16_autocast_is_native():
    torch_ember.reset_fallback_stats()
    losses, _ = train("ember", 4, dtype=torch.bfloat16)
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]

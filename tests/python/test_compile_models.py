"""Compiled mode on models nobody prepared for it: Hugging Face architectures from small configs
and research-style edits of a plain-nn GPT compile strictly (no fallback option) and match CPU
eager, forward and backward. Ops without a fused lowering run as library steps."""
import copy
import math
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_ember

pytest.importorskip("transformers", reason="transformers is a dev requirement")
from torch_ember.sweep import tiny_hf  # noqa: E402

HF = [("llama", "causal"), ("mistral", "causal"), ("qwen2", "causal"), ("qwen3", "causal"), ("gemma", "causal"),
      ("phi", "causal"), ("gpt2", "causal"), ("gpt_neox", "causal"), ("stablelm", "causal"), ("opt", "causal"),
      ("falcon", "causal"), ("bloom", "causal"), ("bert", "masked"), ("roberta", "masked"), ("t5", "seq2seq"),
      ("jetmoe", "causal")]


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    torch_ember.reset_compile_stats()
    yield
    torch._dynamo.reset()


def _loss_and_grads(model, batch, compiled):
    fn = torch.compile(model, backend="ember") if compiled else model
    out = fn(**batch) if isinstance(batch, dict) else fn(batch)
    loss = out.loss if hasattr(out, "loss") else out
    loss.backward()
    return loss.detach().cpu(), {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}


def _check_parity(model, make_batch, rtol=1e-4, atol=1e-5):
    ref_model = copy.deepcopy(model)
    ref_loss, ref_grads = _loss_and_grads(ref_model, make_batch("cpu"), compiled=False)
    model.to("ember")
    loss, grads = _loss_and_grads(model, make_batch("ember"), compiled=True)
    torch.testing.assert_close(loss, ref_loss, rtol=rtol, atol=atol)
    assert grads.keys() == ref_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=rtol, atol=atol, msg=name)
    stats = torch_ember.compile_stats()
    assert stats and all(not r["eager_ops"] for r in stats)  # nothing went through the CPU fallback
    return stats


@pytest.mark.parametrize("model_type,task", HF, ids=[m for m, _ in HF])
def test_hf_architecture_compiles_strictly(model_type, task):
    model = tiny_hf.build(model_type, task)
    _check_parity(model, lambda d: tiny_hf.inputs(task, d))


def test_levit_compiles_strictly():
    # LeViT's attention returns one executable output for two traced nodes with different
    # layouts; views replayed on it must see each node's own layout.
    from transformers import LevitConfig, LevitForImageClassification
    torch.manual_seed(0)
    cfg = LevitConfig(image_size=32, hidden_sizes=[16, 32, 48], num_attention_heads=[1, 2, 3], depths=[1, 1, 1],
                      key_dim=[8, 8, 8], patch_size=16, num_labels=3)
    model = LevitForImageClassification(cfg).eval()
    g = torch.Generator().manual_seed(1)
    pixels, labels = torch.randn(2, 3, 32, 32, generator=g), torch.tensor([0, 2])
    _check_parity(model, lambda d: {"pixel_values": pixels.to(d), "labels": labels.to(d)})


# --- research edits of a plain GPT -----------------------------------------------------------
class Edits:
    def __init__(self, **kw):
        self.rotary = kw.get("rotary", "halves")  # halves | interleaved | partial | none
        self.alibi = kw.get("alibi", False)
        self.window = kw.get("window", 0)
        self.qk_norm = kw.get("qk_norm", False)
        self.moe = kw.get("moe", False)
        self.tied = kw.get("tied", False)


def rotate(x, cos, sin, mode):
    if mode == "interleaved":
        x1, x2 = x[..., ::2], x[..., 1::2]
        c, s = cos[..., ::2], sin[..., ::2]
        return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    if mode == "partial":  # rotate the first quarter of each head, pass the rest through
        r = x.shape[-1] // 4
        rot, rest = x[..., :r], x[..., r:]
        h = r // 2
        rot = rot * cos[..., :r] + torch.cat((-rot[..., h:], rot[..., :h]), -1) * sin[..., :r]
        return torch.cat((rot, rest), dim=-1)
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class Attention(nn.Module):
    def __init__(self, dim, heads, e: Edits):
        super().__init__()
        self.heads, self.hd, self.e = heads, dim // heads, e
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        if e.qk_norm:
            self.qn, self.kn = nn.RMSNorm(self.hd), nn.RMSNorm(self.hd)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
        if self.e.qk_norm:
            q, k = self.qn(q), self.kn(k)
        if self.e.rotary != "none":
            q, k = rotate(q, cos, sin, self.e.rotary), rotate(k, cos, sin, self.e.rotary)
        i = torch.arange(t, device=x.device)
        keep = i[:, None] >= i[None, :]
        if self.e.window:
            keep = keep & (i[:, None] - i[None, :] < self.e.window)
        if self.e.alibi:
            slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / self.heads) for h in range(self.heads)], device=x.device)
            bias = -slopes[:, None, None] * (i[:, None] - i[None, :]).abs().float()
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.hd) + bias
            y = scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.o(y.transpose(1, 2).reshape(b, t, d))


class MoE(nn.Module):
    """Top-2 routing over 4 experts: softmax router, topk, a dense dispatch by one-hot weights,
    and index_add of each expert's output into its tokens."""

    def __init__(self, dim, experts=4):
        super().__init__()
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
                                     for _ in range(experts))

    def forward(self, x):
        b, t, d = x.shape
        flat = x.reshape(-1, d)
        weight, chosen = self.router(flat).softmax(-1).topk(2, dim=-1)
        weight = weight / weight.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        rows = torch.arange(flat.shape[0], device=x.device)
        for e, expert in enumerate(self.experts):
            w = (weight * (chosen == e)).sum(-1)  # 0 for tokens not routed to e
            out = out.index_add(0, rows, expert(flat) * w[:, None])
        return out.reshape(b, t, d)


class GPT(nn.Module):
    def __init__(self, e: Edits, vocab=64, dim=32, heads=4, layers=2):
        super().__init__()
        self.e = e
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict(dict(n1=nn.LayerNorm(dim), attn=Attention(dim, heads, e),
                                                  n2=nn.LayerNorm(dim),
                                                  mlp=MoE(dim) if e.moe else nn.Sequential(
                                                      nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)))))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        if e.tied:
            self.head.weight = self.emb.weight
        hd = dim // heads
        freqs = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(64).float(), freqs)
        ang = torch.repeat_interleave(ang, 2, -1) if e.rotary == "interleaved" else torch.cat((ang, ang), -1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.emb(ids)
        cos, sin = self.cos[:t], self.sin[:t]
        for blk in self.blocks:
            x = x + blk["attn"](blk["n1"](x), cos, sin)
            x = x + blk["mlp"](blk["n2"](x))
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


EDITS = {
    "interleaved_rotary": dict(rotary="interleaved"),
    "partial_rotary": dict(rotary="partial"),
    "alibi": dict(rotary="none", alibi=True),
    "sliding_window": dict(window=3),
    "qk_norm": dict(qk_norm=True),
    "moe_topk_index_add": dict(moe=True),
    "tied_head": dict(tied=True),
}


def _ids(device, t=12):
    return torch.randint(0, 64, (2, t), generator=torch.Generator().manual_seed(3)).to(device)


@pytest.mark.parametrize("edit", list(EDITS))
def test_research_edit_compiles_strictly(edit):
    torch.manual_seed(0)
    _check_parity(GPT(Edits(**EDITS[edit])), _ids)


def test_twenty_compiled_training_steps_follow_eager():
    torch.manual_seed(0)
    eager = GPT(Edits(qk_norm=True, tied=True)).to("ember")
    compiled_model = copy.deepcopy(eager)
    step = torch.compile(compiled_model, backend="ember")
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3) for m in (eager, compiled_model)]
    losses = {"eager": [], "compiled": []}
    for i in range(20):
        ids = _ids("ember")
        for name, fn, opt in (("eager", eager, opts[0]), ("compiled", step, opts[1])):
            loss = fn(ids)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    torch.testing.assert_close(torch.tensor(losses["compiled"]), torch.tensor(losses["eager"]), rtol=1e-3, atol=1e-4)
    assert losses["compiled"][-1] < losses["compiled"][0]


def test_dynamic_sequence_lengths_match_and_compile_once_per_length():
    torch.manual_seed(0)
    model = GPT(Edits())
    ember = copy.deepcopy(model).to("ember")
    fn = torch.compile(ember, backend="ember", dynamic=True)
    lengths = [5, 8, 11, 8, 16, 20, 24, 5]
    for t in lengths:
        ids = _ids("cpu", t)
        torch.testing.assert_close(fn(ids.to("ember")).cpu(), model(ids), rtol=1e-4, atol=1e-5)
    fw = [r for r in torch_ember.compile_stats() if r["kind"] in ("fw", "inference")]
    assert len(fw) <= len(set(lengths))
    assert all(r["recompile_reason"] for r in fw[1:])  # each recompile says which input changed
    # Sizes passed as ints are bound, so each specialization fuses like a static graph.
    assert all(r["nodes_fused"] for r in fw), [(r["name"], r["library_ops"]) for r in fw]


def test_compiled_optimizer_step_fuses_the_foreach_update():
    # The same ember model twice, one stepped by the eager optimizer and one by the compiled
    # step: the gradients are identical, so the parameters must follow closely.
    torch.manual_seed(0)
    eager = GPT(Edits()).to("ember")
    comp = copy.deepcopy(eager)
    opt_e, opt_c = torch.optim.AdamW(eager.parameters(), lr=1e-2), torch.optim.AdamW(comp.parameters(), lr=1e-2)
    step = torch.compile(opt_c.step, backend="ember")
    for _ in range(3):
        for model, do_step, opt in ((eager, opt_e.step, opt_e), (comp, step, opt_c)):
            model(_ids("ember")).backward()
            do_step()
            opt.zero_grad()
    for p, q in zip(comp.parameters(), eager.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-4, atol=1e-5)
    recs = torch_ember.compile_stats()
    assert recs and all(not r["library_ops"] and not r["eager_ops"] for r in recs)
    # As for CUDA parameters, the compiled step is capturable: its step counts live on the device.
    assert opt_c.param_groups[0]["capturable"]
    assert all(s["step"].device.type == "ember" for s in opt_c.state.values())


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
def test_compile_modes_are_accepted(mode):
    f = torch.compile(lambda x: torch.softmax(x * 2, -1), backend="ember", mode=mode)
    x = torch.randn(4, 8)
    torch.testing.assert_close(f(x.to("ember")).cpu(), torch.softmax(x * 2, -1))


@pytest.mark.parametrize("how", ["max-autotune", "option"])
def test_recompute_saves_less_and_trains_the_same(how):
    """With recompute (the max-autotune modes, or options={"recompute": True}) the backward
    recomputes RMSNorm's normalized input instead of saving it: only the inputs and the per-row
    rstd are kept for the backward. Gradients match the CPU's either way."""
    def f(x, w):
        return torch.nn.functional.rms_norm(x, (64,), w).square().sum()

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(32, 64, generator=g), torch.randn(64, generator=g)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    f(xc, wc).backward()
    saved = {}
    for recompute in (False, True):
        torch._dynamo.reset()
        torch_ember.reset_compile_stats()
        kw = {"mode": "max-autotune"} if recompute and how == "max-autotune" else {"options": {"recompute": recompute}}
        xe, we = x.to("ember").requires_grad_(), w.to("ember").requires_grad_()
        numel = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: numel.append(t.numel()) or t, lambda t: t):
            loss = torch.compile(f, backend="ember", **kw)(xe, we)
        loss.backward()
        torch.testing.assert_close(xe.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(we.grad.cpu(), wc.grad, rtol=1e-4, atol=1e-4)
        saved[recompute] = sum(numel) - xe.numel() - we.numel()  # beyond the inputs themselves
    assert saved[True] < saved[False], saved


def test_error_from_python_c_names_the_line():
    code = ("import torch, torch_ember\n"
            "def f(x):\n"
            "    return torch.nn.functional.multilabel_margin_loss(x.exp().view(2, 2), torch.tensor([[1, -1], [0, 1]]).to(x.device))\n"
            "try:\n"
            "    torch.compile(f, backend='ember')(torch.randn(4, device='ember'))\n"
            "except Exception as e:\n"
            "    print(e.inner_exception)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "aten.multilabel_margin_loss_forward.default' at <string>:3" in r.stdout, r.stdout + r.stderr[-2000:]


def test_a_dtype_without_kernels_names_the_op_and_line():
    """uint16 tensors live on ember (storage and copies) but no kernel computes on them: the
    compile error names the dtype, the op that uses the input and the user's line."""
    def f(a):
        return a + 1

    x = torch.arange(6).to(torch.uint16).to("ember")
    with pytest.raises(Exception, match=r"dtype torch.uint16 is not supported.*aten.add.Tensor at .*test_compile_models.py:\d+"):
        torch.compile(f, backend="ember")(x)

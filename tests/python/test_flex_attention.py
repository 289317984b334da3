"""FlexAttention on ember, eager and compiled, forward and backward: score_mod/mask_mod variants
researchers write, against a dense float64 reference on the CPU. (PyTorch's CPU path refuses
the backward; ember runs it.) Compiled graphs run the flex ops as library steps."""
import copy
import math

import pytest
import torch

import torch_ember
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

B, H, S, D = 2, 4, 64, 16
DOC = torch.tensor([0] * 20 + [1] * 30 + [2] * 14)  # document ids of a packed sequence


def causal(b, h, q, kv):
    return q >= kv


def sliding(b, h, q, kv):
    return (q >= kv) & (q - kv <= 8)


def prefix_lm(b, h, q, kv):
    return (kv < 16) | (q >= kv)


VARIANTS = {
    # name: (score_mod(captured) or None, mask_mod or None, dense reference score/mask functions)
    "noop": (None, None),
    "causal": (None, causal),
    "sliding_window": (None, sliding),
    "prefix_lm": (None, prefix_lm),
    "document": ("doc", "doc"),
    "alibi": ("alibi", causal),
    "softcap": ("softcap", causal),
    "relative_bias_table": ("table", causal),
}


def _mods(name, device, table):
    smod, mmod = VARIANTS[name]
    doc = DOC.to(device)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device=device)
    score = {
        None: None,
        "alibi": lambda s, b, h, q, kv: s + slopes[h] * (kv - q),
        "softcap": lambda s, b, h, q, kv: 20.0 * torch.tanh(s / 20.0),
        "table": lambda s, b, h, q, kv: s + table[h, q - kv + S],
        "doc": None,
    }[smod]
    mask = (lambda b, h, q, kv: (doc[q] == doc[kv]) & (q >= kv)) if mmod == "doc" else mmod
    return score, mask


def _dense(name, q, k, v, table):
    """The math of flex attention, written out: scores, score_mod, mask, softmax."""
    s = q @ k.transpose(-1, -2) / math.sqrt(D)
    qi, ki = torch.arange(S)[:, None], torch.arange(S)[None, :]
    hi = torch.arange(H)[:, None, None]
    score, mask = _mods(name, "cpu", table)
    if score is not None:
        s = score(s, 0, hi, qi, ki)
    if mask is not None:
        s = s.masked_fill(~mask(0, hi, qi, ki), float("-inf"))
    return s.softmax(-1) @ v


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_flex_variant_matches_dense_reference(name, compiled):
    torch.manual_seed(0)
    qkv = [torch.randn(B, H, S, D, dtype=torch.float64) for _ in range(3)]
    table = torch.randn(H, 2 * S + 1, dtype=torch.float64) * 0.1
    ref_in = [t.clone().requires_grad_() for t in qkv]
    ref_table = table.clone().requires_grad_()
    ref = _dense(name, *ref_in, ref_table)
    ref.square().sum().backward()

    ins = [t.float().to("ember").requires_grad_() for t in qkv]
    etable = table.float().to("ember").requires_grad_()
    score, mask = _mods(name, "ember", etable)
    bm = create_block_mask(mask, None, None, S, S, device="ember") if mask is not None else None

    def attend(q, k, v):
        return flex_attention(q, k, v, score_mod=score, block_mask=bm)

    fn = torch.compile(attend, backend="ember") if compiled else attend
    torch_ember.reset_fallback_stats()
    out = fn(*ins)
    out.square().sum().backward()
    torch.testing.assert_close(out.detach().cpu().double(), ref.detach(), rtol=1e-4, atol=1e-5)
    for a, b in zip(ins, ref_in):
        torch.testing.assert_close(a.grad.cpu().double(), b.grad, rtol=1e-3, atol=1e-4)
    if name == "relative_bias_table":  # a learned bias gets its gradient
        torch.testing.assert_close(etable.grad.cpu().double(), ref_table.grad, rtol=1e-3, atol=1e-4)
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())


def test_gqa_and_return_lse():
    torch.manual_seed(0)
    q = torch.randn(1, 4, S, D, device="ember")
    k, v = (torch.randn(1, 2, S, D, device="ember") for _ in range(2))
    out, lse = flex_attention(q, k, v, enable_gqa=True, return_lse=True)
    kr, vr = (t.repeat_interleave(2, dim=1).cpu() for t in (k, v))
    s = q.cpu() @ kr.transpose(-1, -2) / math.sqrt(D)
    torch.testing.assert_close(out.cpu(), s.softmax(-1) @ vr, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(lse.cpu(), s.logsumexp(-1), rtol=1e-4, atol=1e-5)


def test_transformers_flex_attention_in_an_eager_model():
    # transformers compiles flex_attention for eager models with the default backend (Inductor),
    # which cannot generate code for ember: ember queries are compiled by Ember instead.
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    cfg = transformers.LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=2, intermediate_size=64, vocab_size=100)
    torch.manual_seed(0)
    # Each model gets its own config: _from_config records the attention implementation on the
    # config it is given, and a shared one would switch the reference to flex attention too (on
    # the CPU, Inductor's flex kernel, which is not the reference this test wants).
    ref = transformers.LlamaForCausalLM._from_config(copy.deepcopy(cfg), attn_implementation="sdpa").eval()
    model = transformers.LlamaForCausalLM._from_config(copy.deepcopy(cfg), attn_implementation="flex_attention")
    model.load_state_dict(ref.state_dict())
    model = model.to("ember").eval()
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        got = model(ids.to("ember")).logits.cpu()
        want = ref(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

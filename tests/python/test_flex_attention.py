"""FlexAttention on ember, eager and compiled, forward and backward: score_mod/mask_mod variants
researchers write, against a dense float64 reference on the CPU. (PyTorch's CPU path refuses
the backward; ember runs it.) Compiled graphs run the flex ops as library steps."""
import copy
import math

import pytest
import torch

import torch_ember
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch_ember.flex import hop

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
    # Every variant runs the fused kernels, a learned table's gradient included.
    assert hop.last_paths() == {"forward": "fused", "backward": "fused"}, hop.last_paths()
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


def _reference(q, k, v, score, mask, scale):
    """Dense float64 math of flex attention on the CPU: scores, score_mod, mask, softmax (fully
    masked rows give zeros and a logsumexp of -inf), with GQA's head groups."""
    Hq, Hkv = q.shape[1], k.shape[1]
    k, v = (t.repeat_interleave(Hq // Hkv, dim=1) for t in (k, v))
    s = q @ k.transpose(-1, -2) * scale
    b = torch.arange(q.shape[0])[:, None, None, None]
    h = torch.arange(Hq)[None, :, None, None]
    qi = torch.arange(q.shape[2])[None, None, :, None]
    ki = torch.arange(k.shape[2])[None, None, None, :]
    if score is not None:
        s = score(s, b, h, qi, ki)
    if mask is not None:
        s = s.masked_fill(~mask(b, h, qi, ki), float("-inf"))
    lse = s.logsumexp(-1)
    p = torch.where(torch.isinf(lse)[..., None], 0.0, (s - lse[..., None]).exp())
    return p @ v, lse


FUSED_CASES = {
    # name: (Hq, Hkv, M, N, block size, score_mod(captured), mask_mod(captured))
    "natten_2d": (2, 2, 36, 36, 16, None, lambda c: lambda b, h, q, kv: (
        ((q // 6) - (kv // 6)).abs() <= 1) & (((q % 6) - (kv % 6)).abs() <= 1)),
    "gqa_alibi_ragged": (4, 2, 50, 70, 16, lambda c: lambda s, b, h, q, kv: s + c["slopes"][h] * (kv - q), None),
    "head_bias_softcap": (2, 2, 40, 40, 32, lambda c: lambda s, b, h, q, kv: 10 * torch.tanh((s + c["hb"][h, q]) / 10),
                          lambda c: lambda b, h, q, kv: q >= kv),
    "empty_rows": (2, 2, 40, 40, 16, None, lambda c: lambda b, h, q, kv: (q >= 8) & (kv <= q)),
    "exp2_sigmoid_where": (2, 2, 33, 33, 16, lambda c: lambda s, b, h, q, kv: torch.where(
        kv > q, s * torch.sigmoid(s), s + torch.exp2(-(q - kv).float() / 8)), None),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(FUSED_CASES))
def test_fused_kernels_match_the_dense_math(name, compiled):
    """Shapes and mods beyond the variant table: GQA with different query and key lengths that are
    not multiples of the block size, 2-D neighbourhoods (// and %), captured per-head tables, rows
    no key reaches, where/exp2/sigmoid; forward, logsumexp and backward, on the fused path."""
    Hq, Hkv, M, N, block, make_score, make_mask = FUSED_CASES[name]
    g = torch.Generator().manual_seed(1)
    qkv = [torch.randn(2, h, n, D, generator=g, dtype=torch.float64) for h, n in ((Hq, M), (Hkv, N), (Hkv, N))]
    captured = {"slopes": torch.rand(Hq, generator=g, dtype=torch.float64), "hb": torch.randn(Hq, M, generator=g,
                                                                                             dtype=torch.float64)}
    cap_cpu = {k: v for k, v in captured.items()}
    cap_ember = {k: v.float().to("ember") for k, v in captured.items()}
    score_ref = make_score(cap_cpu) if make_score else None
    mask_ref = make_mask(cap_cpu) if make_mask else None
    ref_in = [t.clone().requires_grad_() for t in qkv]
    ref_out, ref_lse = _reference(*ref_in, score_ref, mask_ref, 1 / math.sqrt(D))
    w = torch.randn(ref_out.shape, generator=g, dtype=torch.float64)
    ((ref_out * w).sum() + torch.where(torch.isinf(ref_lse), 0.0, ref_lse).sum()).backward()

    score = make_score(cap_ember) if make_score else None
    mask = make_mask(cap_ember) if make_mask else None
    bm = create_block_mask(mask, None, None, M, N, device="ember", BLOCK_SIZE=block) if mask else None
    ins = [t.float().to("ember").requires_grad_() for t in qkv]

    def attend(q, k, v):
        return flex_attention(q, k, v, score_mod=score, block_mask=bm, enable_gqa=Hq != Hkv, return_lse=True)

    fn = torch.compile(attend, backend="ember") if compiled else attend
    out, lse = fn(*ins)
    ((out * w.float().to("ember")).sum() + torch.where(torch.isinf(lse), 0.0, lse).sum()).backward()
    assert hop.last_paths() == {"forward": "fused", "backward": "fused"}, hop.last_paths()
    torch.testing.assert_close(out.detach().cpu().double(), ref_out.detach(), rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(lse.detach().cpu().double(), ref_lse.detach(), rtol=1e-4, atol=2e-5)
    for e, r in zip(ins, ref_in):
        torch.testing.assert_close(e.grad.cpu().double(), r.grad, rtol=1e-3, atol=1e-4)


def test_fused_kernels_take_half_precision_and_fall_back_for_what_they_lack():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 40, D, generator=g) for _ in range(3))
    bm = create_block_mask(causal, None, None, 40, 40, device="ember", BLOCK_SIZE=16)
    out = flex_attention(*(t.bfloat16().to("ember") for t in (q, k, v)), block_mask=bm)
    assert hop.last_paths()["forward"] == "fused" and out.dtype == torch.bfloat16
    ref, _ = _reference(*(t.bfloat16().double() for t in (q, k, v)), None, causal, 1 / math.sqrt(D))
    torch.testing.assert_close(out.cpu().double(), ref, rtol=2e-2, atol=2e-2)
    # An op the programs do not express (erf) runs PyTorch's dense implementation: same values.
    erf_mod = lambda s, b, h, qi, ki: s + torch.special.erf(s)  # noqa: E731
    out = flex_attention(*(t.to("ember") for t in (q, k, v)), score_mod=erf_mod)
    assert hop.last_paths()["forward"].startswith("dense ("), hop.last_paths()
    ref, _ = _reference(*(t.double() for t in (q, k, v)), erf_mod, None, 1 / math.sqrt(D))
    torch.testing.assert_close(out.cpu().double(), ref, rtol=1e-4, atol=1e-5)


def test_a_bad_captured_index_fails_at_the_next_sync():
    table = torch.zeros(10, device="ember")  # indexed by q - kv + 10, which runs past its end
    q = torch.randn(1, 1, 16, D, device="ember")
    out = flex_attention(q, q, q, score_mod=lambda s, b, h, qi, ki: s + table[qi - ki + 10])
    assert hop.last_paths()["forward"] == "fused"
    with pytest.raises(RuntimeError, match="index 1[0-9] is out of bounds for dimension 0 with size 10"):
        out.cpu()
    torch.ember.synchronize()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_learned_tables_get_their_gradients_from_the_fused_backward(compiled):
    """A learned table read twice in score_mod (its gradient is the sum of two scatters) and a
    per-head slope: their gradients come from the fused backward, as the float64 reference's do."""
    g = torch.Generator().manual_seed(3)
    M = 40
    qkv = [torch.randn(1, 2, M, D, generator=g, dtype=torch.float64) for _ in range(3)]
    table = torch.randn(2, M, generator=g, dtype=torch.float64) * 0.3
    slope = torch.rand(2, generator=g, dtype=torch.float64)

    def make(t, sl):
        return lambda s, b, h, q, kv: s + t[h, q] - t[h, kv] + sl[h] * (kv - q)

    ref_t, ref_s = table.clone().requires_grad_(), slope.clone().requires_grad_()
    ref_in = [t.clone().requires_grad_() for t in qkv]
    ref_out, _ = _reference(*ref_in, make(ref_t, ref_s), causal, 1 / math.sqrt(D))
    ref_out.square().sum().backward()

    et, es = table.float().to("ember").requires_grad_(), slope.float().to("ember").requires_grad_()
    ins = [t.float().to("ember").requires_grad_() for t in qkv]
    bm = create_block_mask(causal, None, None, M, M, device="ember", BLOCK_SIZE=16)

    def attend(q, k, v):
        return flex_attention(q, k, v, score_mod=make(et, es), block_mask=bm)

    fn = torch.compile(attend, backend="ember") if compiled else attend
    fn(*ins).square().sum().backward()
    assert hop.last_paths() == {"forward": "fused", "backward": "fused"}, hop.last_paths()
    torch.testing.assert_close(et.grad.cpu().double(), ref_t.grad, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(es.grad.cpu().double(), ref_s.grad, rtol=1e-3, atol=1e-4)
    for e, r in zip(ins, ref_in):
        torch.testing.assert_close(e.grad.cpu().double(), r.grad, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_learned_scalar_temperature_gets_its_gradient(compiled):
    """A 0-d learned temperature and softcap in score_mod: every score adds to the scalar's one
    element (the dense fallback failed inside vmap). A 1-element shift read as shift[0] runs
    fused too (its constant index used to send eager calls to the dense path)."""
    g = torch.Generator().manual_seed(5)
    M = 32
    qkv = [torch.randn(1, 2, M, D, generator=g, dtype=torch.float64) for _ in range(3)]

    def make(temp, cap, shift):
        return lambda s, b, h, q, kv: cap * torch.tanh(s / temp / cap) + shift[0] * (q - kv)

    ref_t, ref_c, ref_s = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (1.7, 5.0, [0.1]))
    ref_in = [t.clone().requires_grad_() for t in qkv]
    ref_out, _ = _reference(*ref_in, make(ref_t, ref_c, ref_s), None, 1 / math.sqrt(D))
    ref_out.square().sum().backward()

    et, ec, es = (torch.tensor(v, device="ember", requires_grad=True) for v in (1.7, 5.0, [0.1]))
    ins = [t.float().to("ember").requires_grad_() for t in qkv]
    attend = lambda q, k, v: flex_attention(q, k, v, score_mod=make(et, ec, es))  # noqa: E731
    fn = torch.compile(attend, backend="ember") if compiled else attend
    out = fn(*ins)
    out.square().sum().backward()
    assert hop.last_paths() == {"forward": "fused", "backward": "fused"}, hop.last_paths()
    torch.testing.assert_close(out.detach().cpu().double(), ref_out.detach(), rtol=1e-4, atol=2e-5)
    for e, r in ((et, ref_t), (ec, ref_c), (es, ref_s), *zip(ins, ref_in)):
        assert e.grad.shape == r.grad.shape
        torch.testing.assert_close(e.grad.cpu().double(), r.grad, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_mods_closing_over_changing_numbers_use_each_value(compiled):
    """Sliding windows and position offsets made by a factory per layer: once the number becomes
    an input of the traced mod, each value must get its own program (every later one reused the
    second value's)."""
    g = torch.Generator().manual_seed(6)
    M = 64
    q, k, v = (torch.randn(1, 2, M, D, generator=g, dtype=torch.float64) for _ in range(3))
    attend = torch.compile(flex_attention, backend="ember", dynamic=True) if compiled else flex_attention

    def window(w):
        return lambda b, h, qi, kv: (qi >= kv) & (qi - kv <= w)

    def offset(o):
        return lambda s, b, h, qi, kv: s + ((qi - kv + o) % 5) * 0.5

    for n in (4, 9, 16, 3):
        bm = create_block_mask(window(n), None, None, M, M, device="ember", BLOCK_SIZE=16)
        out = attend(*(t.float().to("ember") for t in (q, k, v)), score_mod=offset(n), block_mask=bm)
        ref, _ = _reference(q, k, v, offset(n), window(n), 1 / math.sqrt(D))
        torch.testing.assert_close(out.cpu().double(), ref, rtol=1e-4, atol=2e-5, msg=f"window and offset {n}")

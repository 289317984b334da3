"""scaled_dot_product_attention runs on ember's fused kernel (forward and backward): causal,
masked, grouped-query, and matches PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F
import torch_ember

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=3e-2, atol=3e-2),
       torch.float16: dict(rtol=5e-3, atol=5e-3)}


def run(device, q, k, v, **kw):
    ts = [t.to(device).requires_grad_() for t in (q, k, v)]
    if "attn_mask" in kw:
        kw = {**kw, "attn_mask": kw["attn_mask"].to(device)}
    out = F.scaled_dot_product_attention(*ts, **kw)
    g = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out.dtype).to(device)
    grads = torch.autograd.grad(out, ts, g)
    return [t.detach().cpu() for t in (out, *grads)]


def inputs(dtype, b=2, hq=4, hkv=4, lq=9, lk=9, d=16, dv=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, hq, lq, d, generator=g).to(dtype), torch.randn(b, hkv, lk, d, generator=g).to(dtype),
            torch.randn(b, hkv, lk, dv, generator=g).to(dtype))


@pytest.fixture
def fused_only():
    torch_ember.reset_fallback_stats()
    yield
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_cpu(dtype, causal, fused_only):
    q, k, v = inputs(dtype)
    for got, expected in zip(run("ember", q, k, v, is_causal=causal), run("cpu", q, k, v, is_causal=causal)):
        torch.testing.assert_close(got, expected, **TOL[dtype])


def test_sdpa_masks_gqa_and_shapes(fused_only):
    q, k, v = inputs(torch.float32, hq=4, hkv=2, lq=7, lk=12, d=8, dv=5)
    bool_mask = torch.rand(1, 1, 7, 12, generator=torch.Generator().manual_seed(1)) > 0.3
    bool_mask[..., 0] = True  # every query sees at least one key
    float_mask = torch.randn(2, 1, 1, 12, generator=torch.Generator().manual_seed(2))
    for kw in ({"enable_gqa": True}, {"enable_gqa": True, "attn_mask": bool_mask},
               {"enable_gqa": True, "attn_mask": float_mask}, {"enable_gqa": True, "scale": 0.3}):
        for got, expected in zip(run("ember", q, k, v, **kw), run("cpu", q, k, v, **kw)):
            torch.testing.assert_close(got, expected, **TOL[torch.float32])


def test_sdpa_is_the_fused_op():
    q, k, v = [t.to("ember") for t in inputs(torch.float32)]
    from torch.profiler import profile, ProfilerActivity

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    names = {e.key for e in prof.key_averages()}
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in names


def test_sdpa_with_dropout_uses_the_math_path():
    torch_ember.reset_fallback_stats()
    q, k, v = [t.to("ember") for t in inputs(torch.float32)]
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert out.shape == q.shape and torch.isfinite(out.cpu()).all()


def test_fused_output_layout_matches_pytorchs_meta():
    # Graphs traced with meta tensors view the output with the meta function's strides.
    q = torch.randn(2, 6, 4, 8).transpose(1, 2)  # [B, H, S, D] viewed from [B, S, H, D]
    k = torch.randn(2, 6, 4, 8).transpose(1, 2)
    v = torch.randn(2, 6, 4, 8).transpose(1, 2)
    op = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    meta = op(q.to("meta"), k.to("meta"), v.to("meta"))[0]
    got = op(q.to("ember"), k.to("ember"), v.to("ember"))[0]
    assert got.stride() == meta.stride()
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
    got.transpose(1, 2).view(2, 6, 32)  # the view a traced graph does next


@pytest.mark.parametrize("layout", ["left_aligned", "holes", "norm", "no_mask_check"])
def test_transformer_encoder_inference_fast_path_matches_cpu(layout):
    # PyTorch's eval fast path packs a left-aligned padded batch into a nested tensor and
    # returns zeros (then the final norm) at padded positions; ember matches it everywhere,
    # padded positions included, without nested tensors.
    import copy

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    norm = torch.nn.LayerNorm(32) if layout == "norm" else None
    enc = torch.nn.TransformerEncoder(layer, 2, norm=norm, enable_nested_tensor=True,
                                      mask_check=layout != "no_mask_check").eval()
    ember = copy.deepcopy(enc).to("ember")
    x = torch.randn(3, 8, 32)
    pad = torch.zeros(3, 8, dtype=torch.bool)
    pad[0, 6:] = True
    pad[2, 3:] = True
    if layout == "holes":
        pad[1, 2] = True  # not left-aligned: PyTorch itself takes the padded path
    with torch.no_grad():
        expected = enc(x, src_key_padding_mask=pad)
        got = ember(x.to("ember"), src_key_padding_mask=pad.to("ember"))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_torchscript_still_compiles_transformer_encoder():
    """The encoder's forward is wrapped for ember's fast path; TorchScript compiles the original
    source and must still find the names it uses, for CPU and ember modules alike."""
    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.script(enc)(x), enc(x))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("masks", ["none", "pad", "src", "both"])
def test_transformer_encoder_layer_fast_path_eager_and_compiled(norm_first, masks, native_only):
    # nn.TransformerEncoderLayer in eval mode calls the fused _transformer_encoder_layer_fwd:
    # ember composes it from native ops (it ran on the CPU and failed a strict compile).
    import copy

    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=norm_first,
                                             activation="gelu" if norm_first else "relu").eval()
    ember = copy.deepcopy(layer).to("ember")
    x = torch.randn(3, 8, 32)
    pad = torch.zeros(3, 8, dtype=torch.bool)
    pad[0, 6:] = True
    pad[2, 3:] = True
    causal = torch.triu(torch.ones(8, 8, dtype=torch.bool), 1)
    kw = {"none": {}, "pad": dict(src_key_padding_mask=pad), "src": dict(src_mask=causal),
          "both": dict(src_mask=causal, src_key_padding_mask=pad)}[masks]
    kw_e = {k: v.to("ember") for k, v in kw.items()}
    with torch.no_grad():
        expected = layer(x, **kw)
        torch.testing.assert_close(ember(x.to("ember"), **kw_e).cpu(), expected, rtol=1e-4, atol=1e-5)
        torch._dynamo.reset()
        compiled = torch.compile(ember, backend="ember", fullgraph=True)(x.to("ember"), **kw_e)
        torch.testing.assert_close(compiled.cpu(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_multihead_attention_inference_runs_natively(need_weights, average, native_only):
    # In eval mode without grad, nn.MultiheadAttention's fast path called
    # torch._native_multi_head_attention, which ran on the CPU.
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    with torch.no_grad():
        refs = [m(x, x, x, need_weights=need_weights, average_attn_weights=average, **kw)
                for kw in ({}, {"key_padding_mask": pad}, {"attn_mask": causal})]
        m.to("ember")
        xe = x.to("ember")
        outs = [m(xe, xe, xe, need_weights=need_weights, average_attn_weights=average, **kw)
                for kw in ({}, {"key_padding_mask": pad.to("ember")}, {"attn_mask": causal.to("ember")})]
    for (o, w), (ro, rw) in zip(outs, refs):
        torch.testing.assert_close(o.cpu(), ro, rtol=1e-4, atol=1e-5)
        assert (w is None) == (rw is None)
        if rw is not None:
            torch.testing.assert_close(w.cpu(), rw, rtol=1e-4, atol=1e-5)


def test_sdpa_kernel_math_selects_the_math_path_as_on_the_cpu():
    """sdpa_kernel([MATH]) switches ember's fused attention off: the math composition runs, with
    its argument checks, and matches the CPU's math path."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    mask = torch.zeros(5, 5)
    with sdpa_kernel([SDPBackend.MATH]):
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        got = F.scaled_dot_product_attention(q.to("ember"), k.to("ember"), v.to("ember"), is_causal=True)
        torch.testing.assert_close(got.cpu(), want)
        for device in ("cpu", "ember"):
            with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when is_causal=True"):
                F.scaled_dot_product_attention(q.to(device), k.to(device), v.to(device), attn_mask=mask.to(device),
                                               is_causal=True)
    got = F.scaled_dot_product_attention(q.to("ember"), k.to("ember"), v.to("ember"), is_causal=True)
    torch.testing.assert_close(got.cpu(), want)  # the fused kernel again outside the context

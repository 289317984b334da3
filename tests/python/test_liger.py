"""Liger-Kernel's Triton ops, as installed from PyPI, on ember tensors: forward and backward
checked against the same math composed from PyTorch ops on the CPU. Nothing here is changed from
what Liger ships; Ember's Triton backend compiles its kernels. Skipped when triton or liger_kernel
is not installed (both come with `pip install 'torch_ember[triton]'`)."""
import pytest
import torch
import torch.nn.functional as F

import torch_ember

pytest.importorskip("triton", reason="triton is not installed (pip install 'torch_ember[triton]')")
LF = pytest.importorskip("liger_kernel.transformers.functional",
                         reason="liger_kernel is not installed (pip install 'torch_ember[triton]')")

DEV = "ember"


def _grads(fn, inputs, grad_out_seed=1):
    """Output and input gradients of fn(*inputs) on the CPU (reference) and on ember."""
    g = torch.Generator().manual_seed(grad_out_seed)
    results = []
    for device in ("cpu", DEV):
        xs = [x.detach().to(device).requires_grad_(x.is_floating_point()) for x in inputs]
        outs = fn(device, *xs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        loss = sum((o.float() * torch.randn(o.shape, generator=g).to(device)).sum() for o in outs)
        g.manual_seed(grad_out_seed)
        loss.backward()
        results.append(([o.detach().cpu() for o in outs], [x.grad.cpu() if x.grad is not None else None
                                                             for x in xs]))
    return results


def _check(fn, inputs, atol, rtol):
    (want, want_g), (got, got_g) = _grads(fn, inputs)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol)
    for a, b in zip(got_g, want_g):
        if b is not None:
            torch.testing.assert_close(a, b, atol=atol, rtol=rtol)


def _tol(dtype):
    return (1e-4, 1e-4) if dtype == torch.float32 else (2e-2, 2e-2)


# Liger's cross-entropy backward asks `torch.equal(grad_output, torch.tensor(1.0))` to skip a
# multiply; aten::equal has no ember kernel yet and runs on the CPU (8 bytes). Nothing else may.
_ALLOWED_FALLBACKS = {"aten::equal"}


@pytest.fixture(autouse=True)
def _no_fallback():
    torch_ember.reset_fallback_stats()
    yield
    report = torch_ember.fallback_report()
    assert {r.op for r in report} <= _ALLOWED_FALLBACKS, str(report)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("offset,casting", [(0.0, "llama"), (1.0, "gemma")])
def test_rms_norm(dtype, offset, casting):
    x = torch.randn(3, 5, 96).to(dtype)
    w = (torch.rand(96) + 0.5).to(dtype)

    def fn(device, x, w):
        if device == "cpu":
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
            if casting == "llama":
                return y.to(dtype) * (w + offset)
            return (y * (w.float() + offset)).to(dtype)
        return LF.liger_rms_norm(x, w, 1e-6, offset=offset, casting_mode=casting, in_place=False)

    _check(fn, [x, w], *_tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu(dtype):
    a, b = torch.randn(2, 7, 160).to(dtype), torch.randn(2, 7, 160).to(dtype)

    def fn(device, a, b):
        if device == "cpu":
            return (F.silu(a.float()) * b.float()).to(dtype)
        return LF.liger_swiglu(a, b)

    _check(fn, [a, b], *_tol(dtype))


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def test_rope():
    B, H, KV, S, Dh = 2, 4, 2, 9, 32
    q, k = torch.randn(B, H, S, Dh), torch.randn(B, KV, S, Dh)
    inv = 1.0 / (10000 ** (torch.arange(0, Dh, 2).float() / Dh))
    emb = torch.outer(torch.arange(S).float(), inv).repeat(1, 2)
    cos, sin = emb.cos()[None], emb.sin()[None]

    def fn(device, q, k):
        c, s = cos.to(device), sin.to(device)
        if device == "cpu":
            c, s = c[:, None], s[:, None]
            return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s
        return LF.liger_rope(q, k, c, s)

    _check(fn, [q, k], 1e-5, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm(dtype):
    N = 200
    x = torch.randn(6, 4, N).to(dtype)
    w, b = torch.randn(N).to(dtype), torch.randn(N).to(dtype)

    def fn(device, x, w, b):
        if device == "cpu":
            return F.layer_norm(x.float(), (N,), w.float(), b.float(), 1e-5).to(dtype)
        return LF.liger_layer_norm(x, w, b, 1e-5)

    _check(fn, [x, w, b], *_tol(dtype))


@pytest.mark.parametrize("reduction,smoothing", [("mean", 0.0), ("sum", 0.1), ("none", 0.0)])
def test_cross_entropy(reduction, smoothing):
    V = 700  # more than one block of the vocabulary per row
    x = torch.randn(12, V) * 3
    t = torch.randint(0, V, (12,))
    t[[2, 7]] = -100  # ignored rows: the kernel zeroes their gradient and returns early

    def fn(device, x):
        if device == "cpu":
            return F.cross_entropy(x, t, ignore_index=-100, reduction=reduction, label_smoothing=smoothing)
        return LF.liger_cross_entropy(x, t.to(device), ignore_index=-100, reduction=reduction,
                                      label_smoothing=smoothing)

    _check(fn, [x], 1e-5, 1e-4)


def test_cross_entropy_z_loss_softcap():
    V = 300
    x = torch.randn(8, V) * 4
    t = torch.randint(0, V, (8,))

    def fn(device, x):
        if device == "cpu":
            xs = 30.0 * torch.tanh(x / 30.0)
            lse = torch.logsumexp(xs, -1)
            return F.cross_entropy(xs, t) + 1e-4 * (lse ** 2).mean()
        return LF.liger_cross_entropy(x, t.to(device), lse_square_scale=1e-4, softcap=30.0)

    _check(fn, [x], 1e-5, 1e-4)


@pytest.mark.parametrize("bias", [False, True])
def test_fused_linear_cross_entropy(bias):
    BT, H, V = 24, 64, 500
    h = torch.randn(BT, H)
    w = torch.randn(V, H) * 0.1
    b = torch.randn(V) * 0.1
    t = torch.randint(0, V, (BT,))
    t[5] = -100

    def fn(device, h, w, b):
        bb = b if bias else None
        if device == "cpu":
            return F.cross_entropy(F.linear(h, w, bb), t, ignore_index=-100)
        return LF.liger_fused_linear_cross_entropy(h, w, t.to(device), bias=bb, ignore_index=-100)

    (want, want_g), (got, got_g) = _grads(fn, [h, w, b])
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-4)
    for a, e in zip(got_g[:2 + bias], want_g[:2 + bias]):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4)


def test_liger_ops_in_a_compiled_graph():
    # Liger's autograd.Functions under torch.compile(backend="ember", fullgraph=True): each
    # launch becomes a triton_kernel_wrapper node that the graph runs as a library step.
    torch._dynamo.reset()
    torch_ember.reset_compile_stats()
    x, w = torch.randn(4, 64), torch.rand(64) + 0.5
    a = torch.randn(4, 64)

    def fn(device, x, w, a):
        if device == "cpu":
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
            return F.silu(y) * a
        return torch.compile(lambda x, w, a: LF.liger_swiglu(LF.liger_rms_norm(x, w, 1e-6, in_place=False), a),
                             backend="ember", fullgraph=True)(x, w, a)

    _check(fn, [x, w, a], 1e-4, 1e-4)
    recs = torch_ember.compile_stats()
    assert recs and all(not r["eager_ops"] for r in recs)
    steps = [op for r in recs for op, _ in r["library_ops"]]
    assert steps.count("triton_kernel_wrapper_functional") == 4, steps  # 2 forward, 2 backward


def test_liger_layer_norm_and_rope_in_a_compiled_graph():
    torch._dynamo.reset()
    torch_ember.reset_compile_stats()
    B, H, S, Dh = 1, 2, 4, 16
    q, k = torch.randn(B, H, S, Dh), torch.randn(B, H, S, Dh)
    w, b = torch.randn(Dh), torch.randn(Dh)
    emb = torch.randn(S, Dh // 2).repeat(1, 2)
    cos, sin = emb.cos()[None], emb.sin()[None]

    def fn(device, q, k, w, b):
        c, s = cos.to(device), sin.to(device)
        if device == "cpu":
            qn = F.layer_norm(q, (Dh,), w, b, 1e-5)
            c, s = c[:, None], s[:, None]
            return qn * c + _rotate_half(qn) * s, k * c + _rotate_half(k) * s

        def f(q, k, w, b):
            return LF.liger_rope(LF.liger_layer_norm(q, w, b, 1e-5), k, c, s)

        return torch.compile(f, backend="ember", fullgraph=True)(q, k, w, b)

    _check(fn, [q, k, w, b], 1e-4, 1e-4)
    recs = torch_ember.compile_stats()
    assert recs and all(not r["eager_ops"] for r in recs)
    steps = [op for r in recs for op, _ in r["library_ops"]]
    assert steps.count("triton_kernel_wrapper_functional") == 4, steps

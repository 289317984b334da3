"""Ops ember composes from its native kernels: hardtanh (ReLU6) and its gradient, log-sigmoid
and its gradient, sgn of real tensors, a scalar raised to a tensor, one-sided clamps."""
import pytest
import torch
import torch.nn.functional as F

import torch_ember  # noqa: F401


def _grad_check(fn, x, native_only=None):
    xe = x.to("ember").requires_grad_()
    xc = x.clone().requires_grad_()
    ye, yc = fn(xe), fn(xc)
    torch.testing.assert_close(ye.detach().cpu(), yc.detach())
    w = torch.randn(yc.shape, generator=torch.Generator().manual_seed(1))
    (ye * w.to("ember")).sum().backward()
    (yc * w).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)


@pytest.mark.parametrize("fn", [F.relu6, F.hardtanh, lambda x: F.hardtanh(x, -0.5, 2.0), F.logsigmoid,
                                lambda x: torch.sgn(x) * x, lambda x: torch.clamp_min(x, 0.1),
                                lambda x: torch.clamp_max(x, -0.1), lambda x: 3.0 ** x, lambda x: 1 ** x],
                         ids=["relu6", "hardtanh", "hardtanh_range", "logsigmoid", "sgn", "clamp_min",
                              "clamp_max", "scalar_pow", "one_pow"])
def test_matches_cpu_with_gradients(fn, native_only):
    x = torch.randn(64, generator=torch.Generator().manual_seed(0)) * 3
    x[0] = 0.0
    _grad_check(fn, x)


def test_rotary_frequencies_with_scalar_base(native_only):
    d = 16
    exps = torch.arange(0, d, 2).float() / d
    torch.testing.assert_close((10000 ** exps.to("ember")).cpu(), 10000 ** exps)


def test_in_place_hardtanh(native_only):
    x = torch.randn(10) * 3
    xe = x.to("ember")
    F.hardtanh_(xe)
    torch.testing.assert_close(xe.cpu(), F.hardtanh(x))


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("out_int32", [False, True])
def test_searchsorted_per_row_matches_cpu(right, out_int32, native_only):
    # One sorted sequence per row (NeRF's hierarchical sampling); ties and NaN as the CPU's
    # binary search treats them.
    g = torch.Generator().manual_seed(0)
    seq = torch.sort(torch.randn(4, 3, 10, generator=g), -1).values
    seq[0, 0, 5] = seq[0, 0, 4]
    vals = torch.randn(4, 3, 7, generator=g)
    vals[0, 0, 0] = seq[0, 0, 4]
    vals[1, 1, 1] = float("nan")
    ref = torch.searchsorted(seq, vals, right=right, out_int32=out_int32)
    got = torch.searchsorted(seq.to("ember"), vals.to("ember"), right=right, out_int32=out_int32)
    assert got.dtype == ref.dtype
    torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=0)
    compiled = torch.compile(lambda s, v: torch.searchsorted(s, v, right=right, out_int32=out_int32), backend="ember")
    torch.testing.assert_close(compiled(seq.to("ember"), vals.to("ember")).cpu(), ref, rtol=0, atol=0)


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1)])
def test_addbmm_forms_match_cpu(beta, alpha, native_only):
    g = torch.Generator().manual_seed(0)
    m, b1, b2 = torch.randn(5, 6, generator=g), torch.randn(3, 5, 4, generator=g), torch.randn(3, 4, 6, generator=g)
    if beta == 0:
        m[0, 0] = float("nan")  # ignored when beta is 0
    ref = torch.addbmm(m, b1, b2, beta=beta, alpha=alpha)
    args = (m.to("ember"), b1.to("ember"), b2.to("ember"))
    torch.testing.assert_close(torch.addbmm(*args, beta=beta, alpha=alpha).cpu(), ref)
    out = torch.empty(0, device="ember")
    torch.addbmm(*args, beta=beta, alpha=alpha, out=out)
    torch.testing.assert_close(out.cpu(), ref)
    x = args[0].clone()
    x.addbmm_(args[1], args[2], beta=beta, alpha=alpha)
    torch.testing.assert_close(x.cpu(), ref)
    f = torch.compile(lambda a, b, c: torch.addbmm(a, b, c, beta=beta, alpha=alpha) * 2, backend="ember")
    torch.testing.assert_close(f(*args).cpu(), ref * 2)


def test_searchsorted_into_out():
    seq, vals = torch.tensor([1.0, 3.0, 5.0, 7.0]), torch.tensor([[2.0, 6.0], [7.0, 0.0]])
    for s, v in ((seq, vals[0]), (torch.stack([seq, seq + 1]), vals)):
        ref = torch.searchsorted(s, v)
        out = torch.empty(0, dtype=torch.int64, device="ember")
        torch.searchsorted(s.to("ember"), v.to("ember"), out=out)
        torch.testing.assert_close(out.cpu(), ref)


@pytest.mark.parametrize("shape,kw", [((1, 4, 5, 5), dict(size=(7, 7))),
                                      ((2, 3, 8, 6), dict(size=(5, 13), align_corners=True)),
                                      ((1, 2, 4, 4), dict(scale_factor=2.5)), ((1, 2, 6, 6), dict(size=(3, 2))),
                                      ((1, 1, 1, 5), dict(size=(4, 9), align_corners=True))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bicubic_upsampling_backward_is_native(shape, kw, dtype, native_only):
    # ViT / DINOv2 position-embedding interpolation: the backward ran on the CPU.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
    yc, ye = F.interpolate(xc, mode="bicubic", **kw), F.interpolate(xe, mode="bicubic", **kw)
    gy = torch.randn(yc.shape, generator=g, dtype=dtype)
    yc.backward(gy)
    ye.backward(gy.to("ember"))
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)


def test_fake_quantization_for_qat_is_native_and_bit_exact(native_only):
    # Quantization-aware training: per-tensor, per-channel and FakeQuantize's tensor-qparams
    # forms ran on the CPU.
    import copy
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, generator=g) * 5
    for scale, zp, lo, hi in [(0.1, 3, -128, 127), (0.05, 0, 0, 255), (0.3, -2, -8, 7)]:
        xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
        yc = torch.fake_quantize_per_tensor_affine(xc, scale, zp, lo, hi)
        ye = torch.fake_quantize_per_tensor_affine(xe, scale, zp, lo, hi)
        torch.testing.assert_close(ye.cpu(), yc.detach(), rtol=0, atol=0)
        yc.sum().backward()
        ye.sum().backward()
        torch.testing.assert_close(xe.grad.cpu(), xc.grad, rtol=0, atol=0)
    sc, zp = torch.rand(8, generator=g) + 0.05, torch.randint(-3, 3, (8,), dtype=torch.int32, generator=g)
    ref = torch.fake_quantize_per_channel_affine(x, sc, zp, 1, -128, 127)
    got = torch.fake_quantize_per_channel_affine(x.to("ember"), sc.to("ember"), zp.to("ember"), 1, -128, 127)
    torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=0)
    fq = torch.ao.quantization.FakeQuantize()
    fqe = copy.deepcopy(fq).to("ember")
    for _ in range(3):
        xi = torch.randn(4, 8, generator=g)
        torch.testing.assert_close(fqe(xi.to("ember")).cpu(), fq(xi), rtol=0, atol=0)
    fq.disable_fake_quant()
    fqe.disable_fake_quant()
    torch.testing.assert_close(fqe(x.to("ember")).cpu(), fq(x), rtol=0, atol=0)


@pytest.mark.parametrize("qmin, qmax, zero_point, scale, grad_factor", [
    (0, 255, 128.3, 0.05, 1.0), (-128, 127, 0.0, 0.02, 0.5), (0, 15, 2.5, 0.3, 0.008), (0, 255, 300.0, 0.1, 1.0)])
def test_learnable_fake_quantization_matches_cpu(qmin, qmax, zero_point, scale, grad_factor, native_only):
    # LSQ: scale and zero point are parameters with gradients (the zero point rounded half to
    # even forward, +0.5 and truncated backward, clamped to the range, as the CPU does).
    g = torch.Generator().manual_seed(1)
    x, gy = torch.randn(64, 33, generator=g) * 3, torch.randn(64, 33, generator=g)
    runs = []
    for d in ("cpu", "ember"):
        xd = x.to(d, copy=True).requires_grad_()
        s, z = torch.tensor([scale], device=d, requires_grad=True), torch.tensor([zero_point], device=d, requires_grad=True)
        y = torch._fake_quantize_learnable_per_tensor_affine(xd, s, z, qmin, qmax, grad_factor)
        (y * gy.to(d)).sum().backward()
        runs.append([t.cpu() for t in (y.detach(), xd.grad, s.grad, z.grad)])
    (yc, gxc, gsc, gzc), (ye, gxe, gse, gze) = runs
    torch.testing.assert_close(ye, yc, rtol=0, atol=0)
    torch.testing.assert_close(gxe, gxc, rtol=0, atol=0)
    # The scale's and zero point's gradients are sums over the tensor: the order differs.
    torch.testing.assert_close(gse, gsc, rtol=2e-5, atol=1e-6)
    torch.testing.assert_close(gze, gzc, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("axis, shape", [(0, (6, 5, 4)), (1, (3, 6, 4)), (2, (2, 3, 6))])
@pytest.mark.parametrize("qmin, qmax, grad_factor", [(0, 255, 1.0), (-128, 127, 0.3)])
def test_learnable_per_channel_fake_quantization_matches_cpu(axis, shape, qmin, qmax, grad_factor, native_only):
    g = torch.Generator().manual_seed(2)
    x, gy = torch.randn(shape, generator=g) * 3, torch.randn(shape, generator=g)
    scale = torch.rand(6, generator=g) * 0.1 + 0.01
    zero_point = torch.randn(6, generator=g) * 5 + (128 if qmin == 0 else 0)
    runs = []
    for d in ("cpu", "ember"):
        xd, s, z = (t.to(d, copy=True).requires_grad_() for t in (x, scale, zero_point))
        y = torch._fake_quantize_learnable_per_channel_affine(xd, s, z, axis, qmin, qmax, grad_factor)
        (y * gy.to(d)).sum().backward()
        runs.append([t.detach().cpu() for t in (y, xd.grad, s.grad, z.grad)])
    (yc, gxc, gsc, gzc), (ye, gxe, gse, gze) = runs
    torch.testing.assert_close(ye, yc, rtol=0, atol=0)
    torch.testing.assert_close(gxe, gxc, rtol=0, atol=0)
    # Sums over the other dims of terms up to ~dy * 128 (a float32 ulp ~1e-5): the order differs.
    torch.testing.assert_close(gse, gsc, rtol=2e-5, atol=5e-5)
    torch.testing.assert_close(gze, gzc, rtol=2e-5, atol=5e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_default_qat_qconfig_observers_are_native_and_match_cpu(compiled, native_only):
    """get_default_qat_qconfig's fused observer and fake quantization: per tensor for the
    activations, per channel (4-d conv and 2-d linear weights) for the weights, with the observer
    and then the fake quantization switched off; outputs, gradients and every observer buffer."""
    import copy

    import torch.ao.quantization as tq

    torch.manual_seed(0)
    model = torch.nn.Sequential(tq.QuantStub(), torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 5), tq.DeQuantStub())
    model.qconfig = tq.get_default_qat_qconfig("x86")
    model.train()
    tq.prepare_qat(model, inplace=True)
    em = copy.deepcopy(model).to("ember")
    run = torch.compile(em, backend="ember") if compiled else em
    g = torch.Generator().manual_seed(1)
    for step in range(4):
        if step == 2:
            for m in (model, em):
                m.apply(tq.disable_observer)
        if step == 3:
            for m in (model, em):
                m.apply(tq.disable_fake_quant)
        x = torch.randn(2, 3, 8, 8, generator=g) * (step + 1)
        yc, ye = model(x), run(x.to("ember"))
        torch.testing.assert_close(ye.detach().cpu(), yc.detach(), rtol=1e-5, atol=1e-5)
        yc.square().sum().backward()
        ye.square().sum().backward()
    for (name, c), (_, e) in zip(model.state_dict().items(), em.state_dict().items()):
        torch.testing.assert_close(e.cpu(), c, rtol=1e-6, atol=0, msg=name)
    for (name, c), (_, e) in zip(model.named_parameters(), em.named_parameters()):
        torch.testing.assert_close(e.grad.cpu(), c.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_linspace_and_logspace_into_shaped_out():
    # An out= that already holds `steps` elements keeps its shape (and a narrowed view's
    # strides); the result was written as one contiguous run of 1-d memory.
    for fn, args in ((torch.linspace, (0, 3, 4)), (torch.logspace, (0, 3, 4))):
        ref, got = torch.zeros(2, 3), torch.zeros(2, 3, device="ember")
        fn(*args, out=ref.narrow(1, 1, 2))
        fn(*args, out=got.narrow(1, 1, 2))
        torch.testing.assert_close(got.cpu(), ref)
        o = torch.zeros(2, 2, device="ember")
        fn(*args, out=o)
        assert o.shape == (2, 2)
        torch.testing.assert_close(o.cpu(), fn(*args).view(2, 2))
    torch.testing.assert_close(torch.linspace(False, True, steps=5, device="ember").cpu(),
                               torch.linspace(False, True, steps=5))


def test_in_place_writes_through_overlapping_memory_are_refused():
    y = torch.arange(6.0, device="ember")
    idx = torch.tensor([2, 1, 0], device="ember")
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor"):
        y.index_copy_(0, idx, y[:3])
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor"):
        y.put_(idx, y[:3])
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.zeros(1, device="ember").expand(4).index_copy_(0, idx, torch.ones(3, device="ember"))
    y.index_copy_(0, idx, y[3:].clone())
    torch.testing.assert_close(y.cpu(), torch.tensor([5.0, 4.0, 3.0, 3.0, 4.0, 5.0]))


@pytest.mark.parametrize("case", ["masked_scalar", "masked_tensor", "masked_varying", "index_kept_dim",
                                  "index_shared_dim", "index_tensor_value"])
def test_fills_through_expanded_views_write_like_cpu(case, native_only):
    """masked_fill_ / index_fill_ on an expanded self: the CPU writes (with a deprecation warning);
    every memory element shared by masked view elements gets the fill."""
    def run(dev):
        base = torch.randn(4, 1, 5, generator=torch.Generator().manual_seed(0)).to(dev)
        x = base.expand(4, 3, 5)
        mask = (torch.rand(4, 1, 5, generator=torch.Generator().manual_seed(1)) > 0.5).to(dev)
        if case == "masked_scalar":
            x.masked_fill_(mask, -1.5)
        elif case == "masked_tensor":
            x.masked_fill_(mask, torch.tensor(2.0, device=dev))
        elif case == "masked_varying":  # differs along the shared dim: any masked view element fills
            x.masked_fill_(torch.rand(4, 3, 5, generator=torch.Generator().manual_seed(2)).to(dev) > 0.7, 9.0)
        elif case == "index_kept_dim":
            x.index_fill_(2, torch.tensor([0, 3], device=dev), 7.0)
        elif case == "index_shared_dim":
            x.index_fill_(1, torch.tensor([2], device=dev), 7.0)
        else:
            x.index_fill_(0, torch.tensor([1], device=dev), torch.tensor(4.0, device=dev))
        return base

    with pytest.warns(UserWarning, match="on expanded tensors is deprecated"):
        got = run("ember").cpu()
    with pytest.warns(UserWarning, match="on expanded tensors is deprecated"):
        torch.testing.assert_close(got, run("cpu"))


def test_is_set_to_and_multi_margin_loss_shapes():
    t = torch.zeros(3, 4, device="ember")
    assert t.is_set_to(t) and not t.is_set_to(t.clone()) and not t.is_set_to(t.t())
    x, target = torch.randn(1, 3), torch.tensor(1)
    for reduction in ("none", "mean"):
        ref = F.multi_margin_loss(x, target, reduction=reduction)
        got = F.multi_margin_loss(x.to("ember"), target.to("ember"), reduction=reduction)
        assert got.shape == ref.shape
        torch.testing.assert_close(got.cpu(), ref)
    x, target = torch.randn(5, 4), torch.zeros(3, dtype=torch.long)  # one target per sample: 5 expected
    with pytest.raises(RuntimeError) as cpu_err:
        F.multi_margin_loss(x, target)
    with pytest.raises(RuntimeError, match=r"Expected target size \[5\], but got \[3\]") as ember_err:
        F.multi_margin_loss(x.to("ember"), target.to("ember"))
    assert str(ember_err.value) == str(cpu_err.value)


def test_fake_quantize_with_a_python_scale_compiles():
    # the scale's float32 rounding happens in Python, not as a traced torch.tensor(...).item()
    def f(x):
        return torch.fake_quantize_per_tensor_affine(x, 0.05, 0, -128, 127) * 2

    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(0)) * 2
    xe = x.to("ember").requires_grad_()
    got = torch.compile(f, backend="ember")(xe)
    assert torch.equal(got.detach().cpu(), f(x))
    got.sum().backward()
    xc = x.clone().requires_grad_()
    f(xc).sum().backward()
    assert torch.equal(xe.grad.cpu(), xc.grad)


@pytest.mark.parametrize("compiled", [False, True])
def test_fake_quantize_refuses_zero_points_out_of_range(compiled):
    # The CPU raises; a per-channel zero point is checked on the device and reported at the next
    # synchronizing call (as CUDA reports a failed device assertion), never a silent garbage output.
    x = torch.randn(4, 3)
    msg = "`zero_point` must be between `quant_min` and `quant_max`"

    def per_channel(x, zp):
        return torch.fake_quantize_per_channel_affine(x, torch.full((3,), 0.05, device=x.device), zp, 1, -128, 127)

    fn = torch.compile(per_channel, backend="ember") if compiled else per_channel
    good = torch.tensor([0, 5, -7], dtype=torch.int32)
    assert torch.equal(fn(x.to("ember"), good.to("ember")).cpu(), per_channel(x, good))
    bad = torch.tensor([0, 300, 0], dtype=torch.int32)
    with pytest.raises(RuntimeError, match=msg):
        per_channel(x, bad)
    with pytest.raises(RuntimeError, match=msg):
        fn(x.to("ember"), bad.to("ember")).cpu()
    assert torch.equal(fn(x.to("ember"), good.to("ember")).cpu(), per_channel(x, good))  # the device works on
    with pytest.raises(RuntimeError, match=msg):
        torch.fake_quantize_per_tensor_affine(x.to("ember"), 0.1, -5, 0, 255)


def test_fake_quantize_of_nan_comes_out_as_quant_min_like_cpu(native_only):
    # The CPU converts to an integer before clamping (NaN becomes the lowest value): quant_min,
    # no gradient, and LSQ counts it below the range, so one NaN does not poison the learned scale.
    x = torch.tensor([float("nan"), 2.5, -0.3, 40.0])
    got, want = {}, {}
    for device, out in (("cpu", want), ("ember", got)):
        xd = x.clone().to(device).requires_grad_()
        y = torch.fake_quantize_per_tensor_affine(xd, 0.05, 3, -128, 127)
        y.sum().backward()
        out["per_tensor"], out["per_tensor_grad"] = y.detach().cpu(), xd.grad.cpu()
        xd = x.clone().to(device).requires_grad_()
        s = torch.tensor([0.05], device=device, requires_grad=True)
        z = torch.tensor([0.0], device=device, requires_grad=True)
        y = torch._fake_quantize_learnable_per_tensor_affine(xd, s, z, -128, 127, 1.0)
        y.sum().backward()
        out["lsq"], out["lsq_grads"] = y.detach().cpu(), [t.grad.cpu() for t in (xd, s, z)]
    for key in want:
        torch.testing.assert_close(got[key], want[key])


@pytest.mark.parametrize("dim", [-1, 1])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_glu_forward_mode_and_hessian_match_cpu(dim, compiled, native_only):
    """glu_jvp and glu_backward_jvp (jvp, jacfwd, hessian through F.glu) are composed natively."""
    from torch.func import hessian, jvp

    g = torch.Generator().manual_seed(2)
    x, t = torch.randn(3, 6, 4, generator=g), torch.randn(3, 6, 4, generator=g)

    def primal_and_tangent(x, t):
        return jvp(lambda v: F.glu(v, dim), (x,), (t,))

    def curvature(x):
        return hessian(lambda v: F.glu(v, dim).pow(2).sum())(x)

    run_jvp, run_hessian = primal_and_tangent, curvature
    if compiled:
        run_jvp, run_hessian = (torch.compile(f, backend="ember") for f in (primal_and_tangent, curvature))
    for got, want in zip(run_jvp(x.to("ember"), t.to("ember")), primal_and_tangent(x, t)):
        torch.testing.assert_close(got.cpu(), want)
    small = x[:1, :, :2].contiguous()
    torch.testing.assert_close(run_hessian(small.to("ember")).cpu(), curvature(small))

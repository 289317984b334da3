"""Native softmax, log_softmax, layer_norm and NLL / cross-entropy (forward and backward) match
PyTorch CPU. float32/float64 to default tolerances; bfloat16/float16 to a few units in their last
place, since CPU rounds some intermediates to the low-precision type and ember keeps them in float."""
import pytest
import torch
import torch.nn.functional as F
import torch_ember

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
TOL = {torch.bfloat16: dict(rtol=3e-2, atol=1e-2), torch.float16: dict(rtol=5e-3, atol=2e-3)}


def check(fn, *args, dtype=torch.float32):
    expected = fn(*args)
    got = fn(*[a.to("ember") if isinstance(a, torch.Tensor) else a for a in args])
    if not isinstance(expected, (tuple, list)):
        expected, got = (expected,), (got,)
    for g, e in zip(got, expected):
        assert g.device.type == "ember" and g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e, equal_nan=True, **TOL.get(dtype, {}))


def grads(fn, *tensors, seed=0):
    leaves = [t.detach().requires_grad_() for t in tensors]
    y = fn(*leaves)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed)).to(y.dtype).to(y.device)
    return torch.autograd.grad(y, leaves, g)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_forward_backward(dtype, dim, log, native_only):
    f = torch.log_softmax if log else torch.softmax
    x = (torch.randn(3, 4, 17, generator=torch.Generator().manual_seed(1)) * 5).to(dtype)
    check(lambda t: f(t, dim), x, dtype=dtype)
    check(lambda t: grads(lambda u: f(u, dim), t), x, dtype=dtype)


def test_softmax_extremes(native_only):
    x = torch.tensor([[1000.0, 0.0, -1000.0], [float("-inf"), 0.0, 1.0], [float("-inf")] * 3])
    check(lambda t: torch.softmax(t, -1), x)
    check(lambda t: torch.log_softmax(t, -1), x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_forward_backward(dtype, affine, native_only):
    gen = torch.Generator().manual_seed(2)
    x = (torch.randn(5, 3, 16, generator=gen) * 3 + 1).to(dtype)
    w = torch.randn(16, generator=gen).to(dtype)
    b = torch.randn(16, generator=gen).to(dtype)
    if affine:
        check(lambda t, w_, b_: F.layer_norm(t, (16,), w_, b_), x, w, b, dtype=dtype)
        check(lambda t, w_, b_: grads(lambda u, v, c: F.layer_norm(u, (16,), v, c), t, w_, b_), x, w, b,
              dtype=dtype)
    else:
        check(lambda t: F.layer_norm(t, (3, 16)), x, dtype=dtype)
        check(lambda t: grads(lambda u: F.layer_norm(u, (3, 16)), t), x, dtype=dtype)


def test_layer_norm_module_training(native_only):
    ln = torch.nn.LayerNorm(32)
    ln_e = torch.nn.LayerNorm(32).to("ember")
    ln_e.load_state_dict(ln.state_dict())
    x = torch.randn(4, 7, 32)
    ln(x).pow(2).sum().backward()
    ln_e(x.to("ember")).pow(2).sum().backward()
    torch.testing.assert_close(ln_e.weight.grad.cpu(), ln.weight.grad)
    torch.testing.assert_close(ln_e.bias.grad.cpu(), ln.bias.grad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_and_cross_entropy(dtype, reduction):
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 10, generator=gen).to(dtype)
    target = torch.tensor([1, 0, 9, -100, 3, 3])
    weight = torch.rand(10, generator=gen).to(dtype)
    check(lambda l, t: F.cross_entropy(l, t, reduction=reduction), logits, target, dtype=dtype)
    check(lambda l, t: F.cross_entropy(l, t, reduction=reduction, label_smoothing=0.1), logits, target,
          dtype=dtype)
    check(lambda l, t, w: F.nll_loss(l.log_softmax(-1), t, weight=w, reduction=reduction), logits, target,
          weight, dtype=dtype)
    check(lambda l, t: grads(lambda u: F.cross_entropy(u, t, reduction=reduction), l), logits, target,
          dtype=dtype)
    check(lambda l, t: F.nll_loss(l.log_softmax(-1), t, ignore_index=3, reduction=reduction), logits[0],
          target[0], dtype=dtype)


@pytest.mark.parametrize("shape", [(2, 5, 4, 3), (3, 6, 7), (0, 5, 2, 2)], ids=["4d", "3d", "empty"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_spatial_cross_entropy_is_native_and_sums_in_float(shape, reduction, native_only):
    # Per-pixel losses (segmentation, (N, C, L) sequences) reach nll_loss2d; with class weights,
    # ignored targets and a channels-last input. bfloat16 within the CPU's own error: both round once.
    gen = torch.Generator().manual_seed(4)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(*shape, generator=gen).to(dtype)
        if x.dim() == 4:
            x = x.to(memory_format=torch.channels_last)
        t = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=gen)
        t.view(-1)[::5] = -100
        w = torch.rand(shape[1], generator=gen).to(dtype)
        xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
        yc = F.cross_entropy(xc, t, weight=w, reduction=reduction)
        ye = F.cross_entropy(xe, t.to("ember"), weight=w.to("ember"), reduction=reduction)
        ulp = 0 if dtype == torch.float32 else torch.finfo(dtype).eps
        torch.testing.assert_close(ye.detach().cpu(), yc.detach(), rtol=max(ulp, 1.3e-6), atol=1e-5, equal_nan=True)
        if x.numel():
            gy = torch.randn(yc.shape, generator=gen).to(dtype)
            (yc * gy).sum().backward()
            (ye * gy.to("ember")).sum().backward()
            assert xe.grad.stride() == xc.grad.stride()
            torch.testing.assert_close(xe.grad.cpu(), xc.grad, rtol=max(2 * ulp, 1.3e-6), atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_forward_backward(dtype, reduction, native_only):
    gen = torch.Generator().manual_seed(0)
    x, t = torch.randn(6, 5, generator=gen).to(dtype), torch.randn(6, 5, generator=gen).to(dtype)
    check(lambda a, b: F.mse_loss(a, b, reduction=reduction), x, t, dtype=dtype)
    check(lambda a, b: grads(lambda p, q: F.mse_loss(p, q, reduction=reduction), a, b), x, t, dtype=dtype)


def test_all_ignored_mean_is_nan_like_cpu():
    logits = torch.randn(3, 4)
    target = torch.full((3,), -100)
    check(lambda l, t: F.cross_entropy(l, t), logits, target)


def test_out_of_range_target_is_a_device_error():
    # As on CUDA, the bounds check runs in the kernel: it surfaces at the next synchronizing call.
    logits = torch.randn(2, 5, device="ember")
    with pytest.raises(RuntimeError, match="nll_loss.*Target 7 is out of bounds"):
        F.cross_entropy(logits, torch.tensor([1, 7], device="ember"))
        torch.ember.synchronize()
    torch.ember.synchronize()  # reported once; the device works again
    check(lambda l, t: F.cross_entropy(l, t), logits.cpu(), torch.tensor([1, 2]))


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (6, 3), (2, 3, 7)])
def test_batch_norm_forward_backward_and_running_stats(training, affine, shape, native_only):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(shape, generator=gen) * 2 + 1
    w, b = torch.randn(3, generator=gen), torch.randn(3, generator=gen)
    rm, rv = torch.randn(3, generator=gen), torch.rand(3, generator=gen) + 0.5

    def run(device):
        xs = x.to(device).requires_grad_()
        ws, bs = w.to(device).requires_grad_(), b.to(device).requires_grad_()
        rms, rvs = rm.to(device), rv.to(device)
        y = F.batch_norm(xs, rms, rvs, ws if affine else None, bs if affine else None, training=training)
        y.backward(torch.linspace(-1, 1, y.numel()).reshape(y.shape).to(device))
        grads = [xs.grad] + ([ws.grad, bs.grad] if affine else [])
        return [t.detach().cpu() for t in [y, rms, rvs] + grads]

    for got, expected in zip(run("ember"), run("cpu")):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_mixed_devices_are_refused_like_cuda():
    logits = torch.randn(2, 5, device="ember")
    with pytest.raises(RuntimeError, match="same device"):
        F.cross_entropy(logits, torch.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="same device"):
        F.layer_norm(logits, (5,), torch.ones(5))
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.aten._softmax_backward_data(logits, logits.cpu(), 1, torch.float32)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(4, 6, 5, 3), (3, 6), (2, 6, 7)])
def test_group_norm_forward_backward(affine, shape, native_only):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(shape, generator=gen) * 3 - 1
    w, b = torch.randn(6, generator=gen), torch.randn(6, generator=gen)
    for groups in (1, 2, 3, 6):
        if x[0].numel() // groups <= 2:
            continue  # a group of one or two normalizes to constants: its gradient is rounding noise
        if affine:
            check(lambda t, w_, b_: grads(lambda u, v, c: F.group_norm(u, groups, v, c).sin(), t, w_, b_), x, w, b)
        else:
            check(lambda t: grads(lambda u: F.group_norm(u, groups).sin(), t), x)


def test_group_norm_channels_last_eager_and_compiled(native_only):
    # math_group_norm views its input flat, which a channels-last tensor cannot do.
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, 4, 6, 6, generator=gen).contiguous(memory_format=torch.channels_last)
    gn = torch.nn.GroupNorm(2, 4)
    gn_e = torch.nn.GroupNorm(2, 4).to("ember")
    xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
    yc = gn(xc)
    ye = gn_e(xe)
    assert ye.is_contiguous(memory_format=torch.channels_last) == yc.is_contiguous(memory_format=torch.channels_last)
    yc.sin().sum().backward()
    ye.sin().sum().backward()
    torch.testing.assert_close(ye.detach().cpu(), yc.detach())
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)
    torch.testing.assert_close(gn_e.weight.grad.cpu(), gn.weight.grad)
    compiled = torch.compile(gn_e, backend="ember", fullgraph=True)(x.to("ember"))
    torch.testing.assert_close(compiled.cpu(), yc.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["legit", "no_stats", "with_update"])
def test_batch_norm_functional_variants(op, native_only):
    # The forms torch.compile and torch.func emit for batch norm; each matches CPU, running stats
    # included, and its backward runs natively.
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(4, 3, 5, generator=gen)
    w, b = torch.randn(3, generator=gen), torch.randn(3, generator=gen)
    rm, rv = torch.randn(3, generator=gen), torch.rand(3, generator=gen) + 0.5
    a = torch.ops.aten

    def run(device):
        xs, ws, bs = (t.to(device).requires_grad_() for t in (x, w, b))
        rms, rvs = rm.to(device), rv.to(device)
        if op == "legit":
            out = a._native_batch_norm_legit(xs, ws, bs, rms, rvs, True, 0.1, 1e-5)
        elif op == "no_stats":
            out = a._native_batch_norm_legit.no_stats(xs, ws, bs, True, 0.1, 1e-5)
        else:
            out = a._batch_norm_with_update(xs, ws, bs, rms, rvs, 0.1, 1e-5)
        y = out[0]
        gs = torch.autograd.grad((y * y.cos()).sum(), (xs, ws, bs))
        return [t.detach().cpu() for t in (y, out[1], out[2], rms, rvs, *gs)]

    for got, expected in zip(run("ember"), run("cpu")):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dim", [0, -1, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weight_norm_interface_forward_backward(dim, dtype, native_only):
    gen = torch.Generator().manual_seed(7)
    v = torch.randn(4, 3, 5, generator=gen).to(dtype)
    g = torch.randn([v.shape[dim] if i == dim % 3 else 1 for i in range(3)], generator=gen).to(dtype)
    f = lambda a, b: torch._weight_norm(a, b, dim)
    check(f, v, g, dtype=dtype)
    check(lambda a, b: grads(f, a, b), v, g, dtype=dtype)


def test_weight_norm_module_trains_like_cpu(native_only):
    def step(device):
        torch.manual_seed(0)
        conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 4, 3, padding=1), dim=2).to(device)
        loss = conv(torch.linspace(-1, 1, 2 * 4 * 7).reshape(2, 4, 7).to(device)).square().mean()
        loss.backward()
        return [loss] + [p.grad for p in conv.parameters()]

    for got, expected in zip(step("ember"), step("cpu")):
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("params", ["same", "float", "none"])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_low_precision_and_mixed(dtype, params, training, native_only):
    # bf16/f16 activations with parameters in the same dtype (model.half()) or in float (autocast).
    gen = torch.Generator().manual_seed(11)
    x = (torch.randn(4, 3, 5, 5, generator=gen) * 2 + 1).to(dtype)
    pdtype = dtype if params == "same" else torch.float32
    w, b = torch.randn(3, generator=gen).to(pdtype), torch.randn(3, generator=gen).to(pdtype)
    rm, rv = torch.randn(3, generator=gen).to(pdtype), (torch.rand(3, generator=gen) + 0.5).to(pdtype)

    def run(device):
        xs = x.to(device).requires_grad_()
        ws, bs = (w.to(device).requires_grad_(), b.to(device).requires_grad_()) if params != "none" else (None, None)
        rms, rvs = rm.to(device), rv.to(device)
        y = F.batch_norm(xs, rms, rvs, ws, bs, training=training)
        y.backward(torch.linspace(-1, 1, y.numel()).reshape(y.shape).to(dtype).to(device))
        out = [y, rms, rvs, xs.grad] + ([ws.grad, bs.grad] if params != "none" else [])
        return [t.detach().cpu() for t in out]

    for got, expected in zip(run("ember"), run("cpu")):
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("layout", ["n_strided", "channels_last", "5d", "tight_channel"])
def test_batch_norm_layouts_and_tight_channels(layout, native_only):
    # NCHW-like inputs (the spatial dims one stride-1 run) take the per-channel kernel, other
    # layouts the composed path; a channel whose values barely differ (large invstd) keeps its
    # input gradient exact where b * x - b * mean would cancel.
    gen = torch.Generator().manual_seed(12)
    if layout == "n_strided":
        x = torch.randn(8, 3, 4, 5, generator=gen)[::2]
    elif layout == "channels_last":
        x = torch.randn(4, 3, 4, 5, generator=gen).to(memory_format=torch.channels_last)
    elif layout == "5d":
        x = torch.randn(2, 3, 2, 3, 4, generator=gen)
    else:
        x = 5 + 1e-3 * torch.randn(2, 3, generator=gen)
    w, b = torch.randn(3, generator=gen), torch.randn(3, generator=gen)
    g = torch.randn(x.shape, generator=gen)

    def run(device, dtype=torch.float32):
        xs = x.to(device, dtype).requires_grad_()
        ws, bs = w.to(device, dtype).requires_grad_(), b.to(device, dtype).requires_grad_()
        rm, rv = torch.zeros(3, device=device, dtype=dtype), torch.ones(3, device=device, dtype=dtype)
        y = F.batch_norm(xs, rm, rv, ws, bs, training=True)
        y.backward(g.to(device, dtype))
        return [t.detach().cpu().double() for t in (y, xs.grad, ws.grad, bs.grad, rm, rv)]

    exact = run("cpu", torch.float64)
    for got, cpu, ref in zip(run("ember"), run("cpu"), exact):
        # As close to the float64 result as the CPU's own float32 kernel is (or within rounding).
        scale = ref.abs().max().item()
        assert (got - ref).abs().max() <= 2 * (cpu - ref).abs().max() + 1e-6 * scale


def test_layer_norm_keeps_precision_on_long_rows_far_from_zero():
    # Float sums lost the mean's fourth digit on a million values near 10 (error 1.3e-4 where
    # the CPU's is 4e-7); the row sums are now formed in double.
    x = torch.rand(2, 1 << 20, generator=torch.Generator().manual_seed(0)) + 10
    exact = torch.nn.functional.layer_norm(x.double(), (1 << 20,))
    cpu_err = (torch.nn.functional.layer_norm(x, (1 << 20,)).double() - exact).abs().max().item()
    err = (torch.nn.functional.layer_norm(x.to("ember"), (1 << 20,)).cpu().double() - exact).abs().max().item()
    assert err <= max(2 * cpu_err, 2e-6), (err, cpu_err)


@pytest.mark.parametrize("param_dtype", [torch.bfloat16, torch.float32, None])
def test_group_norm_half_input_rounds_once_as_the_cpu(param_dtype, native_only):
    # The CPU normalizes a bfloat16 input in float and rounds the output once; rounding the
    # normalized values first (the composition run in bfloat16) was off by several ulps.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 5, generator=g).bfloat16()
    w = b = None
    if param_dtype is not None:
        w, b = torch.randn(6, generator=g).to(param_dtype), torch.randn(6, generator=g).to(param_dtype)
    on = lambda t: None if t is None else t.to("ember")
    expected = torch.native_group_norm(x, w, b, 4, 6, 5, 2, 0.5)
    got = torch.native_group_norm(x.to("ember"), on(w), on(b), 4, 6, 5, 2, 0.5)
    for e, a in zip(expected, got):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a.cpu(), e, rtol=1e-2, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("param_dtype", ["same", torch.float32, None])
def test_group_norm_half_backward_is_native(dtype, param_dtype, native_only):
    # A bfloat16 diffusion UNet's GroupNorm backward ran on the CPU. It computes in float and
    # rounds once, as the CPU kernel does.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 5, 5, generator=g).to(dtype)
    pdt = dtype if param_dtype == "same" else param_dtype
    w = None if pdt is None else (torch.rand(8, generator=g) + 0.5).to(pdt)
    b = None if pdt is None else torch.randn(8, generator=g).to(pdt)
    dy = torch.randn(2, 8, 5, 5, generator=g).to(dtype)

    def grads(device):
        ts = [t.to(device).requires_grad_() if t is not None else None for t in (x, w, b)]
        F.group_norm(ts[0], 4, ts[1], ts[2]).backward(dy.to(device))
        return [t.grad.cpu() for t in ts if t is not None]

    for got, want in zip(grads("ember"), grads("cpu")):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


def test_addbmm_half_rounds_once(native_only):
    g = torch.Generator().manual_seed(1)
    b1, b2 = (torch.randn(5, 5, 5, generator=g) * 4).bfloat16(), (torch.randn(5, 5, 10, generator=g) * 4).bfloat16()
    c = torch.randn(5, 10, generator=g).bfloat16()
    exact = torch.addbmm(c.double(), b1.double(), b2.double(), beta=0.6, alpha=0.2)
    cpu = torch.addbmm(c, b1, b2, beta=0.6, alpha=0.2)
    got = torch.addbmm(c.to("ember"), b1.to("ember"), b2.to("ember"), beta=0.6, alpha=0.2).cpu()
    assert (got.double() - exact).abs().max() <= (cpu.double() - exact).abs().max()


@pytest.mark.parametrize("n, value", [(4096, 100.3), (300, 100.3), (10, 10.839)])
def test_compiled_layer_norm_of_a_constant_row_is_zero(n, value):
    # A float32 row mean is an ulp off for a constant row, and rstd (1/sqrt(eps) there) made
    # that 0.04; the compiled mean is formed in float64, as eager mode's and the CPU's is.
    x = torch.full((2, n), value)
    torch._dynamo.reset()
    got = torch.compile(lambda t: F.layer_norm(t, [n]), backend="ember")(x.to("ember")).cpu()
    torch.testing.assert_close(got, F.layer_norm(x, [n]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", ["empty shape", "weight", "bias", "module weight"])
def test_layer_norm_checks_its_shapes_like_cpu(case):
    """A weight or bias of another shape than normalized_shape was read past its end (garbage
    out, no error); an empty normalized_shape gave zeros. The CPU's errors now come back."""
    x, small = torch.randn(1, 2, 3), torch.randn(1, 2)
    calls = {
        "empty shape": (lambda d: torch.native_layer_norm(x.to(d), [], None, None, 1e-5),
                        "Expected normalized_shape to be at least 1-dimensional"),
        "weight": (lambda d: torch.native_layer_norm(x.to(d), [1, 2, 3], small.to(d), None, 1e-5),
                   "Expected weight to be of same shape as normalized_shape"),
        "bias": (lambda d: torch.native_layer_norm(x.to(d), [1, 2, 3], None, small.to(d), 1e-5),
                 "Expected bias to be of same shape as normalized_shape"),
        "module weight": (lambda d: torch.nn.functional.layer_norm(x.to(d), [3], torch.ones(2, device=d)),
                          "Expected weight to be of same shape as normalized_shape"),
    }
    fn, message = calls[case]
    for device in ("cpu", "ember"):
        with pytest.raises(RuntimeError, match=message):
            fn(device)

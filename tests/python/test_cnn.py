"""CNN ops run natively on ember and match PyTorch CPU: convolution (through the library
provider), pooling, batch norm, and a small ResNet's training step."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_ember

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: {},
       torch.bfloat16: dict(rtol=3e-2, atol=3e-2), torch.float16: dict(rtol=3e-3, atol=3e-3)}


def fwd_bwd(fn, x, dtype):
    xc = x.clone().requires_grad_()
    xe = x.to("ember").requires_grad_()
    yc, ye = fn(xc), fn(xe)
    torch.testing.assert_close(ye.cpu(), yc, equal_nan=True, **TOL[dtype])
    g = torch.randn(yc.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    yc.backward(g)
    ye.backward(g.to("ember"))
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, equal_nan=True, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cfg", [(2, 2, 0, 1, False), (3, 2, 1, 1, False), (3, 2, 1, 1, True),
                                 (3, 1, 1, 2, False), ((2, 3), (1, 2), (1, 0), 1, True)])
def test_max_and_avg_pool(dtype, cfg, native_only):
    k, s, p, d, ceil = cfg
    x = torch.randn(2, 3, 11, 10, generator=torch.Generator().manual_seed(0)).to(dtype)
    fwd_bwd(lambda t: F.max_pool2d(t, k, s, p, d, ceil_mode=ceil), x, dtype)
    fwd_bwd(lambda t: F.avg_pool2d(t, k, s, p, ceil_mode=ceil), x, dtype)
    fwd_bwd(lambda t: F.avg_pool2d(t, k, s, p, ceil_mode=ceil, count_include_pad=False), x, dtype)
    fwd_bwd(lambda t: F.avg_pool2d(t, k, s, p, ceil_mode=ceil, divisor_override=3), x, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("size", [(1, 1), (3, 4), (5, 5), (7, 3)])
def test_adaptive_avg_pool(dtype, size, native_only):
    x = torch.randn(2, 3, 11, 10, generator=torch.Generator().manual_seed(0)).to(dtype)
    fwd_bwd(lambda t: F.adaptive_avg_pool2d(t, size), x, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # the CPU has no bf16 avg_pool3d
@pytest.mark.parametrize("cfg", [(2, 2, 0, False), (3, 2, 1, False), (3, 2, 1, True), ((2, 3, 4), (1, 2, 2), (0, 1, 2), True),
                                 ((3, 2, 1), (2, 1, 3), (1, 1, 0), False)])
@pytest.mark.parametrize("batched", [True, False])
def test_avg_pool3d(dtype, cfg, batched, native_only):
    # Composed as plane pooling then depth pooling: divisors, padding and ceil_mode windows as the CPU's.
    k, s, p, ceil = cfg
    x = torch.randn(*((2,) if batched else ()), 3, 7, 6, 9, generator=torch.Generator().manual_seed(0)).to(dtype)
    fwd_bwd(lambda t: F.avg_pool3d(t, k, s, p, ceil_mode=ceil), x, dtype)
    fwd_bwd(lambda t: F.avg_pool3d(t, k, s, p, ceil_mode=ceil, count_include_pad=False), x, dtype)
    fwd_bwd(lambda t: F.avg_pool3d(t, k, s, p, ceil_mode=ceil, divisor_override=5), x, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("size", [(1, 1, 1), (3, 4, 2), (7, 6, 9), (5, 3, 4)])
def test_adaptive_avg_pool3d(dtype, size, native_only):
    x = torch.randn(2, 3, 7, 6, 9, generator=torch.Generator().manual_seed(0)).to(dtype)
    fwd_bwd(lambda t: F.adaptive_avg_pool3d(t, size), x, dtype)
    fwd_bwd(lambda t: F.adaptive_avg_pool3d(t, size), x[0], dtype)


def test_pool3d_compiles_and_refuses_bad_windows(native_only):
    x = torch.randn(2, 3, 6, 6, 6)
    f = lambda t: F.avg_pool3d(t, 3, 2, 1).sum() + F.adaptive_avg_pool3d(t, (2, 3, 4)).square().sum()
    xe = x.to("ember").requires_grad_()
    xc = x.clone().requires_grad_()
    torch.compile(f, backend="ember")(xe).backward()
    f(xc).backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.avg_pool3d(x.to("ember"), 2, 1, 2)
    # The CPU has no 16-bit avg_pool3d; CUDA's (whose autocast policy keeps it in 16 bits) pools
    # in float and rounds once, as ember does.
    for dtype in (torch.bfloat16, torch.float16):
        with pytest.raises(NotImplementedError, match="not implemented for"):
            F.avg_pool3d(x.to(dtype), 2)
        xe = x.to(dtype).to("ember").requires_grad_()
        xf = x.to(dtype).float().requires_grad_()
        out, ref = F.avg_pool3d(xe, 3, 2, 1), F.avg_pool3d(xf, 3, 2, 1)
        assert out.dtype == dtype
        torch.testing.assert_close(out.cpu(), ref.to(dtype))
        g = torch.randn(ref.shape).to(dtype)
        out.backward(g.to("ember"))
        ref.backward(g.float())
        torch.testing.assert_close(xe.grad.cpu(), xf.grad.to(dtype))
    with torch.autocast("ember", dtype=torch.bfloat16):
        y = torch.nn.AvgPool3d(2)(torch.nn.Conv3d(3, 4, 3, padding=1).to("ember")(x.to("ember")))
    assert y.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("size", [(1, 1), (3, 4), (5, 5), (7, 3), (11, 10), (13, 2)])
def test_adaptive_max_pool_with_indices_and_ties(dtype, size, native_only):
    # Overlapping cells (non-divisible sizes), cells larger than the input, repeated values
    # (the first maximum wins) and NaN (it wins) pick the CPU's values and indices.
    x = torch.randn(2, 3, 11, 10, generator=torch.Generator().manual_seed(0)).to(dtype)
    x[0, 0, :3, :3] = 1.5
    x[1, 2, 4, 4] = float("nan")
    fwd_bwd(lambda t: F.adaptive_max_pool2d(t, size), x, dtype)
    out, idx = F.adaptive_max_pool2d(x.to("ember"), size, return_indices=True)
    torch.testing.assert_close(idx.cpu(), F.adaptive_max_pool2d(x, size, return_indices=True)[1])
    fwd_bwd(lambda t: F.adaptive_max_pool2d(t, size), x[0], dtype)  # unbatched


def test_max_pool_nan_and_unbatched(native_only):
    fwd_bwd(lambda t: F.max_pool2d(t, 2), torch.tensor([[[[1.0, float("nan")], [3.0, 3.0]]]]), torch.float32)
    fwd_bwd(lambda t: F.max_pool2d(t, 2), torch.randn(3, 6, 6), torch.float32)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("groups", [1, 3])
def test_convolution(transposed, groups, native_only):
    cls = nn.ConvTranspose2d if transposed else nn.Conv2d
    torch.manual_seed(0)
    conv = cls(3, 6, 3, stride=2, padding=1, groups=groups)
    conv_e = cls(3, 6, 3, stride=2, padding=1, groups=groups).to("ember")
    conv_e.load_state_dict(conv.state_dict())
    x = torch.randn(2, 3, 9, 9)
    xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
    yc, ye = conv(xc), conv_e(xe)
    torch.testing.assert_close(ye.cpu(), yc, **TOL[torch.float32])
    g = torch.randn_like(yc)
    yc.backward(g)
    ye.backward(g.to("ember"))
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, **TOL[torch.float32])
    torch.testing.assert_close(conv_e.weight.grad.cpu(), conv.weight.grad, **TOL[torch.float32])
    torch.testing.assert_close(conv_e.bias.grad.cpu(), conv.bias.grad, **TOL[torch.float32])


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


def small_resnet():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), Block(8), Block(8), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 10))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["conv1d", "conv2d", "conv_transpose2d"])
def test_half_parameter_gradients_accumulate_over_the_whole_batch(kind, dtype, native_only):
    # The two halves of the batch get nearly opposite output gradients: parameter gradients
    # summed per thread and rounded to the half type before adding would keep each half's rounding
    # error; the CPU accumulates the batch in float and rounds once, and so must ember.
    g = torch.Generator().manual_seed(0)
    n, c = 8, 16
    spatial = (24,) if kind == "conv1d" else (24, 24)
    x = torch.randn(1, c, *spatial, generator=g).repeat(n, *([1] * (1 + len(spatial)))).to(dtype)
    w = (torch.randn(c, c, *([3] * len(spatial)), generator=g) / 12).to(dtype)
    b = torch.randn(c, generator=g).to(dtype)
    fn = {"conv1d": F.conv1d, "conv2d": F.conv2d, "conv_transpose2d": F.conv_transpose2d}[kind]
    sign = torch.tensor([1.0] * (n // 2) + [-(1 - 1 / 64)] * (n // 2)).view(n, *([1] * (1 + len(spatial))))
    go = (torch.randn(1, c, *spatial, generator=g) * sign).to(dtype)
    grads = []
    for dev, t in (("cpu", dtype), ("ember", dtype), ("cpu", torch.float64)):
        xx, ww, bb = (v.detach().to(dev, t).requires_grad_() for v in (x, w, b))
        fn(xx, ww, bb, padding=1).backward(go.to(dev, t))
        grads.append([v.grad.cpu().double() for v in (xx, ww, bb)])
    # Against the exact gradients of the same 16-bit inputs: within the CPU's error, or one
    # rounding of the largest value (sums in another order round differently). Half-batch sums
    # rounded apart would be off by about 64 such roundings here.
    eps = torch.finfo(dtype).eps
    for cpu, got, exact in zip(*grads):
        err, cpu_err = (got - exact).abs().max(), (cpu - exact).abs().max()
        assert err <= max(cpu_err, eps * exact.abs().max()), (err, cpu_err)


def test_float16_conv_net_is_as_accurate_as_the_cpu(native_only):
    # Convolutions (grouped, strided, transposed) and pools in float16, forward and backward:
    # ember's error against a float64 run stays within the CPU's own float16 error, give or take one
    # float16 rounding of the tensor's largest value (sums in another order round differently).
    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 8, 3, stride=2, groups=2), nn.AvgPool2d(2, ceil_mode=True),
                             nn.ConvTranspose2d(8, 4, 3, stride=2), nn.AdaptiveAvgPool2d(3), nn.Flatten(),
                             nn.Linear(36, 5))
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    res = {}
    for tag, dev, dt in (("exact", "cpu", torch.float64), ("cpu", "cpu", torch.float16), ("ember", "ember", torch.float16)):
        m = net().to(dev, dt)
        xi = x.to(dev, dt).requires_grad_()
        y = m(xi)
        y.float().pow(2).sum().backward()
        res[tag] = [y.detach(), xi.grad] + [p.grad for p in m.parameters()]
    for exact, cpu, ember in zip(res["exact"], res["cpu"], res["ember"]):
        err_cpu = (cpu.double() - exact).abs().max().item()
        err_ember = (ember.cpu().double() - exact).abs().max().item()
        assert err_ember <= err_cpu + 2**-11 * exact.abs().max().item(), (err_ember, err_cpu)


def test_small_resnet_trains_natively_like_cpu(native_only):
    torch.manual_seed(0)
    cpu = small_resnet()
    ember = small_resnet().to("ember")
    ember.load_state_dict(cpu.state_dict())
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.1, momentum=0.9)
    opt_e = torch.optim.SGD(ember.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    y = torch.randint(0, 10, (8,), generator=torch.Generator().manual_seed(3))
    for _ in range(3):
        for model, opt, dev in ((cpu, opt_c, "cpu"), (ember, opt_e, "ember")):
            opt.zero_grad()
            F.cross_entropy(model(x.to(dev)), y.to(dev)).backward()
            opt.step()
    for (name, pc), pe in zip(cpu.state_dict().items(), ember.state_dict().values()):
        torch.testing.assert_close(pe.cpu(), pc, rtol=1e-3, atol=1e-4, msg=name)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("case", [((2, 3, 7), dict(scale_factor=2)), ((2, 3, 7), dict(size=11)),
                                  ((2, 3, 7), dict(scale_factor=0.6)),
                                  ((1, 2, 5, 4), dict(scale_factor=(1.7, 3))), ((1, 2, 5, 4), dict(size=(3, 9))),
                                  ((1, 2, 3, 4, 5), dict(scale_factor=2)), ((1, 2, 3, 4, 5), dict(size=(5, 2, 7)))])
def test_upsample_nearest(mode, case, native_only):
    shape, kw = case
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    fwd_bwd(lambda t: F.interpolate(t, mode=mode, **kw), x, torch.float32)


def test_upsample_nearest_channels_last_and_bf16(native_only):
    x = torch.randn(2, 3, 5, 6, generator=torch.Generator().manual_seed(4))
    fwd_bwd(lambda t: F.interpolate(t.contiguous(memory_format=torch.channels_last), scale_factor=2.5), x,
            torch.float32)
    fwd_bwd(lambda t: F.interpolate(t, size=(7, 13), mode="nearest-exact"), x.bfloat16(), torch.bfloat16)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_upsample_nearest_of_uint8_images(mode, channels_last, native_only):
    x = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8, generator=torch.Generator().manual_seed(6))
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    for kw in (dict(scale_factor=2), dict(size=(9, 4)), dict(scale_factor=1.7)):
        got, want = F.interpolate(x.to("ember"), mode=mode, **kw), F.interpolate(x, mode=mode, **kw)
        assert torch.equal(got.cpu(), want) and got.stride() == want.stride(), kw


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("case", [("linear", (2, 3, 7), dict(scale_factor=2)), ("linear", (2, 3, 7), dict(size=4)),
                                  ("bilinear", (1, 2, 5, 4), dict(scale_factor=(1.7, 3))),
                                  ("bilinear", (2, 3, 6, 6), dict(size=(12, 3))), ("bilinear", (1, 1, 1, 5), dict(size=(3, 1))),
                                  ("trilinear", (1, 2, 3, 4, 5), dict(scale_factor=2)),
                                  ("trilinear", (1, 2, 3, 4, 5), dict(size=(2, 7, 5)))])
def test_upsample_linear(align_corners, case, native_only):
    mode, shape, kw = case
    x = torch.randn(shape, generator=torch.Generator().manual_seed(5))
    for dtype in (torch.float32, torch.float64):
        fwd_bwd(lambda t: F.interpolate(t, mode=mode, align_corners=align_corners, **kw), x.to(dtype), dtype)


def test_upsample_bilinear_channels_last_bf16_and_recompute_scale(native_only):
    x = torch.randn(2, 3, 5, 6, generator=torch.Generator().manual_seed(6))
    fwd_bwd(lambda t: F.interpolate(t.contiguous(memory_format=torch.channels_last), scale_factor=1.5,
                                    mode="bilinear"), x, torch.float32)
    fwd_bwd(lambda t: F.interpolate(t, scale_factor=2.3, mode="bilinear", recompute_scale_factor=True), x,
            torch.float32)
    fwd_bwd(lambda t: F.interpolate(t, size=(9, 4), mode="bilinear"), x.bfloat16(), torch.bfloat16)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("kw", [dict(size=(4, 3)), dict(size=(11, 17)), dict(scale_factor=(1.7, 0.45)),
                                dict(size=(1, 5)), dict(scale_factor=0.3, recompute_scale_factor=False)])
def test_antialiased_resize_eager_and_compiled(mode, align_corners, kw, native_only):
    # interpolate(antialias=True): float64 matches the CPU's float64 to rounding; float32 is
    # compared with the float64 result too, since the CPU builds its float32 weights in float32
    # (~6e-6 off) and ember in float64. Compiled strictly, forward and backward.
    x = torch.randn(2, 3, 9, 12, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    g = torch.randn(F.interpolate(x, mode=mode, align_corners=align_corners, antialias=True, **kw).shape,
                    generator=torch.Generator().manual_seed(10), dtype=torch.float64)

    def run(fn, t, dev):
        t = t.detach().to(dev).requires_grad_()
        y = fn(t)
        y.backward(g.to(dev, t.dtype))
        return y.detach().cpu().double(), t.grad.cpu().double()

    fn = lambda t: F.interpolate(t, mode=mode, align_corners=align_corners, antialias=True, **kw)  # noqa: E731
    want = run(fn, x, "cpu")
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="ember", fullgraph=True)
    for f in (fn, compiled):
        for got, ref in zip(run(f, x, "ember"), want):
            torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)
        for got, ref in zip(run(f, x.float(), "ember"), want):
            torch.testing.assert_close(got, ref, rtol=2e-6, atol=2e-6)
    cl = x.float().contiguous(memory_format=torch.channels_last)
    assert fn(cl.to("ember")).is_contiguous(memory_format=torch.channels_last) == \
        fn(cl).is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("cfg", [dict(kernel_size=3, padding=1), dict(kernel_size=(2, 3), stride=(2, 1)),
                                 dict(kernel_size=2, dilation=2, padding=(0, 1), stride=2)])
@pytest.mark.parametrize("batched", [True, False])
def test_unfold_and_fold(cfg, batched, native_only):
    x = torch.randn(2, 3, 7, 6, generator=torch.Generator().manual_seed(8))
    if not batched:
        x = x[0]
    for dtype in (torch.float32, torch.float64):
        fwd_bwd(lambda t: F.unfold(t, **cfg), x.to(dtype), dtype)
        cols = F.unfold(x.to(dtype), **cfg)
        fwd_bwd(lambda t: F.fold(t, (7, 6), **cfg), cols, dtype)


def test_unfold_of_bool_and_fold_of_an_empty_batch(native_only):
    mask = torch.randn(2, 1, 5, 6, generator=torch.Generator().manual_seed(3)) > 0
    assert torch.equal(F.unfold(mask.to("ember"), 3, padding=1).cpu(), F.unfold(mask, 3, padding=1))
    cols = torch.randn(0, 18, 6)
    torch.testing.assert_close(F.fold(cols.to("ember"), (5, 6), (3, 2), stride=2).cpu(),
                               F.fold(cols, (5, 6), (3, 2), stride=2))
    assert F.unfold(torch.randn(0, 2, 4, 4, device="ember"), 2).shape == (0, 8, 9)


def test_fold_errors_match_cpu():
    cols = torch.randn(1, 9, 10)
    for device in ("cpu", "ember"):
        with pytest.raises(RuntimeError, match="sliding blocks"):
            F.fold(cols.to(device), (5, 5), 3)
        with pytest.raises(RuntimeError, match="must be at least one"):
            F.unfold(torch.randn(1, 1, 2, 2, device=device), 3)


def test_embedding_max_norm_renormalizes_in_place_like_cpu(native_only):
    w = torch.randn(10, 4, generator=torch.Generator().manual_seed(9)) * 2
    idx = torch.tensor([[1, 3, 3], [9, 0, 1]])
    for norm_type in (2.0, 1.0):
        we, wc = w.to("ember"), w.clone()
        out_e = F.embedding(idx.to("ember"), we, max_norm=1.5, norm_type=norm_type)
        out_c = F.embedding(idx, wc, max_norm=1.5, norm_type=norm_type)
        torch.testing.assert_close(out_e.cpu(), out_c)
        torch.testing.assert_close(we.cpu(), wc)  # the table itself changed, only at the named rows


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dims", [2, 3])  # 3: trilinear (mode="bilinear") over volumes
def test_grid_sample_forward_backward(mode, padding_mode, align_corners, dims, native_only):
    if mode == "bicubic" and dims == 3:
        pytest.skip("PyTorch has no 3-d bicubic grid_sample")
    gen = torch.Generator().manual_seed(10)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(2, 3, *((4,) if dims == 3 else ()), 5, 7, generator=gen).to(dtype)
        # Points inside, on the edges and well outside [-1, 1], so that every padding rule acts.
        grid = (torch.rand(2, *((3,) if dims == 3 else ()), 4, 6, dims, generator=gen) * 3.2 - 1.6).to(dtype)
        grid.view(-1, dims)[0] = torch.tensor([1.0, -1.0, 0.5][:dims])

        def run(device):
            xs = x.to(device).requires_grad_()
            gs = grid.to(device).requires_grad_()
            y = F.grid_sample(xs, gs, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
            w = torch.linspace(-1, 2, y.numel(), dtype=dtype).reshape(y.shape).to(device)
            gx, gg = torch.autograd.grad((y * w).sum(), (xs, gs))
            return [t.detach().cpu() for t in (y, gx, gg)]

        for got, expected in zip(run("ember"), run("cpu")):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("padding_mode", ["border", "reflection"])
def test_grid_sample_nan_coordinates_sample_the_border_like_cpu(padding_mode, native_only):
    # max(NaN, 0) is 0 in the CPU's and CUDA's clipping, so a NaN coordinate (an infinite one,
    # once reflected) reads the first pixel of its row instead of giving 0.
    x = torch.randn(1, 2, 7, 9, generator=torch.Generator().manual_seed(12))
    nan, inf = float("nan"), float("inf")
    grid = torch.tensor([[[[nan, 0.0], [0.0, nan], [inf, 0.2], [-inf, -0.4], [0.3, 0.2]]]])
    expected = F.grid_sample(x, grid, padding_mode=padding_mode, align_corners=False)
    got = F.grid_sample(x.to("ember"), grid.to("ember"), padding_mode=padding_mode, align_corners=False)
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_half_computes_in_float(dtype, mode, native_only):
    # The CPU's bfloat16 kernel does its coordinate arithmetic in bfloat16, so nearest sampling
    # picks neighbouring pixels (errors near 1 against float64); ember computes in float and
    # rounds once, which is the reference here.
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(2, 3, 6, 7, generator=gen).to(dtype)
    grid = (torch.rand(2, 5, 4, 2, generator=gen) * 2.4 - 1.2).to(dtype)
    w = torch.linspace(-1, 2, 2 * 3 * 5 * 4).reshape(2, 3, 5, 4)

    def run(device, compute):
        xs = x.to(compute).to(device).requires_grad_()
        gs = grid.to(compute).to(device).requires_grad_()
        y = F.grid_sample(xs, gs, mode=mode, padding_mode="border", align_corners=False)
        gx, gg = torch.autograd.grad((y * w.to(compute).to(device)).sum(), (xs, gs))
        return [t.detach().cpu().to(dtype) for t in (y, gx, gg)]

    for got, expected in zip(run("ember", dtype), run("cpu", torch.float32)):
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)  # the weights' own rounding


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_bicubic_grid_sample_in_sixteen_bits_computes_in_float(dtype):
    # Bicubic sampling runs on the CPU, whose 16-bit kernel does its arithmetic in 16 bits (35x
    # the error); ember hands it float and rounds once, as for the native modes.
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(2, 3, 6, 7, generator=gen).to(dtype)
    grid = (torch.rand(2, 5, 4, 2, generator=gen) * 2.4 - 1.2).to(dtype)
    g = torch.randn(2, 3, 5, 4, generator=gen).to(dtype)
    xe, ge = x.to("ember").requires_grad_(), grid.to("ember").requires_grad_()
    xf, gf = x.float().requires_grad_(), grid.float().requires_grad_()
    out = F.grid_sample(xe, ge, mode="bicubic", align_corners=False)
    ref = F.grid_sample(xf, gf, mode="bicubic", align_corners=False)
    assert out.dtype == dtype
    torch.testing.assert_close(out.cpu(), ref.to(dtype), rtol=0, atol=0)
    out.backward(g.to("ember"))
    ref.backward(g.float())
    torch.testing.assert_close(xe.grad.cpu(), xf.grad.to(dtype), rtol=0, atol=0)
    torch.testing.assert_close(ge.grad.cpu(), gf.grad.to(dtype), rtol=0, atol=0)


def test_spatial_transformer_trains_compiled_like_cpu():
    def step(device, compiled):
        torch.manual_seed(0)
        loc = torch.nn.Linear(16, 6)
        torch.nn.init.zeros_(loc.weight)
        loc.bias.data = torch.tensor([1.0, 0.1, 0.0, -0.1, 0.9, 0.05])
        model = loc.to(device)

        def f(x):
            theta = model(x.flatten(1)).view(-1, 2, 3)
            g = F.affine_grid(theta, x.shape, align_corners=False)
            return F.grid_sample(x, g, align_corners=False).square().mean()

        fn = torch.compile(f, backend="ember") if compiled else f
        x = torch.linspace(-1, 1, 2 * 1 * 4 * 4).reshape(2, 1, 4, 4).to(device)
        loss = fn(x)
        loss.backward()
        return [loss.detach().cpu()] + [p.grad.cpu() for p in model.parameters()]

    ref = step("cpu", False)
    for compiled in (False, True):
        for got, expected in zip(step("ember", compiled), ref):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_volume_registration_warp_compiles_strictly(native_only):
    # A 3-d image-registration step (VoxelMorph's spatial transformer): a learned displacement
    # field warps a moving volume by trilinear sampling; the loss compares it with a fixed one.
    def step(device, compiled):
        torch.manual_seed(0)
        flow = torch.nn.Parameter(torch.randn(1, 3, 4, 5, 6) * 0.1)
        moving = torch.randn(1, 2, 4, 5, 6).to(device)
        fixed = torch.randn(1, 2, 4, 5, 6).to(device)
        flow_d = flow.to(device).detach().requires_grad_()

        def loss_fn(flow, moving, fixed):
            base = F.affine_grid(torch.eye(3, 4, device=flow.device)[None], moving.shape, align_corners=True)
            warped = F.grid_sample(moving, base + flow.permute(0, 2, 3, 4, 1), align_corners=True)
            return (warped - fixed).square().mean() + flow.diff(dim=2).square().mean()

        fn = torch.compile(loss_fn, backend="ember", fullgraph=True) if compiled else loss_fn
        loss = fn(flow_d, moving, fixed)
        loss.backward()
        return [loss.detach().cpu(), flow_d.grad.cpu()]

    ref = step("cpu", False)
    for compiled in (False, True):
        for got, expected in zip(step("ember", compiled), ref):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name,make", [
    ("max_pool", lambda: nn.MaxPool2d(2)), ("avg_pool", lambda: nn.AvgPool2d(2, padding=1)),
    ("adaptive_max", lambda: nn.AdaptiveMaxPool2d(3)), ("adaptive_avg", lambda: nn.AdaptiveAvgPool2d((2, 3))),
    ("lp_pool", lambda: nn.LPPool2d(2, 2)), ("relu6", lambda: nn.ReLU6()),
    ("logical", lambda: (lambda t: torch.logical_and(t > 0, t < 1) * t + torch.logical_not(t > 0) * 2)),
])
def test_channels_last_results_and_gradients_keep_the_layout(name, make, native_only):
    # As on the CPU and in the shapes compiled graphs are traced with: a channels-last input
    # gives channels-last results and a channels-last input gradient, with the CPU's values.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 6, 8, generator=g).to(memory_format=torch.channels_last) * 3
    m = make()
    xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
    yc, ye = m(xc), m(xe)
    w = torch.randn(yc.shape, generator=g).to(memory_format=torch.channels_last)
    (yc * w).sum().backward()
    (ye * w.to("ember")).sum().backward()
    for got, want in ((ye, yc), (xe.grad, xc.grad)):
        assert got.is_contiguous(memory_format=torch.channels_last) == want.is_contiguous(
            memory_format=torch.channels_last) and got.stride() == want.stride(), (got.stride(), want.stride())
        torch.testing.assert_close(got.detach().cpu(), want.detach())


def test_cat_of_channels_last_inputs_stays_channels_last_like_cpu(native_only):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 3, 8, 8, generator=g), torch.randn(4, 3, 8, 8, generator=g)
    cl = torch.channels_last
    for dim in range(4):
        want = torch.cat((x.contiguous(memory_format=cl), y.contiguous(memory_format=cl)), dim=dim)
        got = torch.cat((x.to("ember").contiguous(memory_format=cl), y.to("ember").contiguous(memory_format=cl)),
                        dim=dim)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got.cpu(), want)
    mixed = torch.cat((x.to("ember").contiguous(memory_format=cl), y.to("ember")), dim=1)  # mixed: contiguous
    assert mixed.stride() == torch.cat((x.contiguous(memory_format=cl), y), dim=1).stride()


class _NhwcBlock(nn.Module):
    """A ConvNeXt-style block: conv, then LayerNorm over channels on an NHWC view (.view, not
    .reshape, which needs the conv's output to be channels-last in memory as on the CPU)."""

    def __init__(self):
        super().__init__()
        self.conv, self.norm, self.proj = nn.Conv2d(4, 8, 3, padding=1), nn.LayerNorm(8), nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = self.conv(x)
        b, c, h, w = y.shape
        t = self.norm(y.permute(0, 2, 3, 1).view(b, h * w, c))
        return self.proj(t.view(b, h, w, c).permute(0, 3, 1, 2)).relu()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("where", ["input", "weight", "both"])
def test_channels_last_convolution_keeps_the_cpus_layout(where, compiled, native_only):
    import copy
    torch._dynamo.reset()
    torch.manual_seed(0)
    m, x = _NhwcBlock(), torch.randn(2, 4, 6, 6)
    if where != "input":
        m = m.to(memory_format=torch.channels_last)
    if where != "weight":
        x = x.contiguous(memory_format=torch.channels_last)
    me = copy.deepcopy(m).to("ember")
    ref = m(x)
    got = (torch.compile(me, backend="ember") if compiled else me)(x.to("ember"))
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-5)
    g = torch.randn(ref.shape)
    ref.backward(g)
    got.backward(g.to("ember"))
    for p, q in zip(me.parameters(), m.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    # The layouts themselves, eagerly: output, input gradient and weight gradient.
    xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
    for t, conv in ((xc, m.conv), (xe, me.conv)):
        y = conv(t)
        gi, gw = torch.autograd.grad(y, (t, conv.weight), torch.ones_like(y))
        assert [v.is_contiguous(memory_format=torch.channels_last) for v in (y, gi, gw)] == [True] * 3

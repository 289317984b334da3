"""float8_e4m3fn and float8_e5m2: conversions on the device round exactly as the CPU's (every
float8 value, dense sweeps of float32 bit patterns, overflow, NaN, subnormals, ties), and
torch._scaled_mm (float8 training's product) runs natively and matches the CPU, eager and
compiled, with the CPU's errors for the arguments it refuses."""
import pytest
import torch
import torch_ember

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2]
REALS = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8,
         torch.int8, torch.bool]


def same_bits(a, b):
    return torch.equal(a.cpu().view(torch.uint8), b.view(torch.uint8))


def float32_patterns():
    """Every 509th float32 bit pattern (both signs, NaN and infinity included) and the exact
    halfway points between neighbouring float8 values of both formats, where rounding to even
    decides."""
    bits = torch.arange(0, 2**32, 509, dtype=torch.int64)
    sweep = (bits - (bits >= 2**31).long() * 2**32).to(torch.int32).view(torch.float32)
    halves = []
    for f8 in FLOAT8:
        grid = torch.arange(256, dtype=torch.uint8).view(f8).float()
        grid = grid[torch.isfinite(grid)].sort().values
        halves.append((grid[1:] + grid[:-1]) / 2)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448.0, 464.0, 470.0, 480.0,
                            57344.0, 61439.0, 61440.0, 65536.0, 2.0**-9, 2.0**-10, 2.0**-16, 2.0**-17, 1e-30])
    return torch.cat([sweep, *halves, special, -special])


@pytest.mark.parametrize("f8", FLOAT8)
def test_narrowing_to_float8_rounds_like_the_cpu(f8):
    x = float32_patterns()
    want = x.to(f8)
    got = x.to("ember").to(f8)
    assert got.device.type == "ember" and got.dtype == f8
    assert same_bits(got, want)
    # Strided source and destination, and a destination that already exists.
    xs = x[: 2 * 40000].reshape(40000, 2).t()
    out = torch.empty(40000, 2, dtype=f8, device="ember").t()
    out.copy_(xs.to("ember"))
    assert same_bits(out.contiguous(), xs.to(f8).contiguous())


@pytest.mark.parametrize("f8", FLOAT8)
@pytest.mark.parametrize("dtype", REALS)
def test_every_float8_value_widens_and_narrows_like_the_cpu(f8, dtype):
    every = torch.arange(256, dtype=torch.uint8).view(f8)
    want = every.to(dtype) if dtype.is_floating_point or dtype == torch.bool else None
    if want is not None:
        got = every.to("ember").to(dtype).cpu()
        if dtype.is_floating_point:  # NaN where the CPU has NaN (its payload bits aside), the rest bit for bit
            nan = want.isnan()
            assert torch.equal(got.isnan(), nan) and same_bits(got[~nan], want[~nan])
        else:
            assert torch.equal(got, want)
    # Into float8 from every other real dtype.
    src = torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 300
    src = src.to(dtype) if dtype != torch.bool else src > 0
    assert same_bits(src.to("ember").to(f8), src.to(f8))


def scaled_inputs(device, rowwise=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(16, 32, generator=g) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(24, 32, generator=g) * 2).to(torch.float8_e4m3fn).t()  # column-major, as required
    if rowwise:
        sa, sb = torch.rand(16, 1, generator=g), torch.rand(1, 24, generator=g)
    else:
        sa, sb = torch.tensor(0.25), torch.tensor(0.5)
    return [t.to(device) for t in (a, b, sa, sb)]


@pytest.mark.parametrize("rowwise", [False, True])
@pytest.mark.parametrize("kwargs", [dict(out_dtype=torch.float32), dict(out_dtype=torch.bfloat16), dict(),
                                    dict(out_dtype=torch.bfloat16, bias=True),
                                    dict(out_dtype=torch.float8_e4m3fn, scale_result=True)],
                         ids=["float32", "bfloat16", "float8", "bias", "scale_result"])
def test_scaled_mm_is_native_and_matches_cpu(rowwise, kwargs, native_only):
    def run(device):
        kw = dict(kwargs)
        if kw.get("bias"):
            kw["bias"] = (torch.arange(24, device=device) / 8 - 1.5).to(torch.bfloat16)
        if kw.get("scale_result"):
            kw["scale_result"] = torch.tensor(2.0, device=device)
        return torch._scaled_mm(*scaled_inputs(device, rowwise), **kw)

    want, got = run("cpu"), run("ember")
    assert got.dtype == want.dtype
    # Equal on CPUs without AMX (the CPU composes the same way); with AMX the CPU takes oneDNN,
    # whose float32 sums may round differently, then by up to one step of the output dtype.
    step = {torch.float32: 1e-5, torch.bfloat16: 1e-2}.get(want.dtype, 0.13)
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=step, atol=step)
    compiled = torch.compile(lambda *a: torch._scaled_mm(*a, out_dtype=torch.float32), backend="ember",
                             fullgraph=True)
    torch.testing.assert_close(compiled(*scaled_inputs("ember", rowwise)).cpu(),
                               torch._scaled_mm(*scaled_inputs("cpu", rowwise), out_dtype=torch.float32))


def test_scaled_mm_refuses_what_the_cpu_refuses():
    a, b, sa, sb = scaled_inputs("ember")
    with pytest.raises(ValueError, match="Invalid scaling configuration"):
        torch._scaled_mm(a, b, sa.reshape(1, 1).expand(16, 1), torch.ones(3, device="ember"))
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        torch._scaled_mm(a, a, sa, sb)
    with pytest.raises(RuntimeError, match="Bias must be size 24"):
        torch._scaled_mm(a, b, sa, sb, bias=torch.ones(5, device="ember"), out_dtype=torch.float32)


@pytest.mark.parametrize("f8", FLOAT8)
def test_compiled_casts_to_and_from_float8_round_like_the_cpu(f8, fresh_compile):
    """Generated code converts float8 at loads and stores: a fused scale-cast-unscale (what
    float8 training does to each operand) and a transposed float8 copy match the CPU bit for bit."""
    x = float32_patterns()[::7]

    def quantize(t, scale):
        q = (t * scale).to(f8)
        return q, q.to(torch.float32) / scale, q.view(-1, 2).t().contiguous()

    scale = torch.tensor(0.37)
    want = quantize(x[: x.numel() // 2 * 2], scale)
    got = torch.compile(quantize, backend="ember", fullgraph=True)(x[: x.numel() // 2 * 2].to("ember"),
                                                                  scale.to("ember"))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        nan = w.isnan() if w.dtype == torch.float32 else w.float().isnan()
        assert torch.equal(g.cpu().float().isnan(), nan)
        assert same_bits(g.cpu()[~nan], w[~nan])


def test_float8_training_step_compiled_matches_cpu(fresh_compile):
    """A linear layer in float8 training style (dynamic per-tensor scales, float8 operands,
    torch._scaled_mm, gradients through a straight-through cast), eager and compiled against the CPU."""
    def f8_linear(x, w):
        def cast(t):
            scale = 448.0 / t.abs().amax().clamp(min=1e-12)
            q = (t * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
            return q, scale.reciprocal().float()
        xq, xs = cast(x.detach())
        wq, ws = cast(w.detach())
        y8 = torch._scaled_mm(xq, wq.t(), xs, ws, out_dtype=torch.float32)
        return y8 + (x @ w.t() - (x @ w.t()).detach())  # value from float8, gradient from the float path

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(32, 64, generator=g), torch.randn(48, 64, generator=g)
    results = {}
    for name, device, fn in (("cpu", "cpu", f8_linear), ("eager", "ember", f8_linear),
                             ("compiled", "ember", torch.compile(f8_linear, backend="ember", fullgraph=True))):
        xd, wd = x.detach().to(device).requires_grad_(), w.detach().to(device).requires_grad_()
        y = fn(xd, wd)
        y.square().mean().backward()
        results[name] = (y.detach().cpu(), xd.grad.cpu(), wd.grad.cpu())
    for name in ("eager", "compiled"):
        for got, want in zip(results[name], results["cpu"]):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)


ELEMENT_MOVES = {
    "cat": lambda x, i, m: torch.cat([x, x[1:]]),
    "stack": lambda x, i, m: torch.stack([x, x.flip(0)], dim=1),
    "cat_out": lambda x, i, m: torch.cat([x, x], out=torch.empty(0, dtype=x.dtype, device=x.device)),
    "index": lambda x, i, m: x[i, 1:],
    "mask": lambda x, i, m: x[m],
    "index_select": lambda x, i, m: x.index_select(1, i),
    "flip": lambda x, i, m: x.flip(0),
    "roll": lambda x, i, m: x.roll(2, 1),
    "where": lambda x, i, m: torch.where(m[:, None], x, x.flip(0)),
    "index_put": lambda x, i, m: x.index_put((i,), x[:2]),
    "setitem": lambda x, i, m: (lambda y: (y.__setitem__(i, x[1:3]), y)[1])(x.clone()),
}


@pytest.mark.parametrize("f8", FLOAT8)
@pytest.mark.parametrize("op", sorted(ELEMENT_MOVES))
def test_element_moves_on_float8_stay_on_the_device_and_match_cpu(f8, op, native_only):
    """cat, indexing, index_put, where, flip and roll move float8 bits unchanged: they run on the
    device's byte kernels (no host round trip) and give the CPU's bits, NaN and -0 included."""
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0)).to(f8)
    x[0, 0], x[0, 1] = float("nan"), -0.0
    i, m = torch.tensor([2, 0]), torch.tensor([True, False, True, False])
    want = ELEMENT_MOVES[op](x, i, m)
    got = ELEMENT_MOVES[op](x.to("ember"), i.to("ember"), m.to("ember"))
    assert got.dtype == f8 and got.shape == want.shape
    assert same_bits(got, want)


def test_float8_moves_that_compute_or_promote_behave_as_on_the_cpu():
    """Accumulating index_put adds (the CPU's kernel runs it, or refuses it, as on the CPU), and
    mixing float8 with another dtype is the CPU's promotion error, not a silent byte copy."""
    x = torch.randn(4, 6).to(torch.float8_e4m3fn)
    xe, i = x.to("ember"), torch.tensor([2, 2])
    try:
        want = x.index_put((i,), x[:2], accumulate=True)
    except (RuntimeError, NotImplementedError) as e:
        with pytest.raises(type(e), match=str(e).split("\n")[0][:40]):
            xe.index_put((i.to("ember"),), xe[:2], accumulate=True)
    else:
        assert same_bits(xe.index_put((i.to("ember"),), xe[:2], accumulate=True), want)
    with pytest.raises(RuntimeError, match="Promotion for Float8 Types is not supported"):
        torch.cat([xe, xe.view(torch.uint8)])
    with pytest.raises(RuntimeError, match="Promotion for Float8 Types is not supported"):
        torch.where(torch.ones(4, 6, dtype=torch.bool, device="ember"), xe, xe.float())

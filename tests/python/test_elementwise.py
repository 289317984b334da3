"""Native elementwise kernels match PyTorch CPU: every dtype pair, broadcasting, strides,
Python scalars, in-place and out= forms, and CPU's errors."""
import pytest
import torch
import torch.nn.functional as F
import torch_ember

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16,
          torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "ne", "lt", "le", "gt", "ge"]
UNARY = ["neg", "abs", "reciprocal", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "sin", "cos",
         "relu", "erf", "log1p", "expm1", "floor", "ceil", "trunc", "round", "sign", "bitwise_not"]
F = torch.nn.functional
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=5.0),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "silu": F.silu,
}


def sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    if dtype == torch.bool:
        return x > 0
    if not dtype.is_floating_point:
        x = x.round().clamp(-20, 20)
        if dtype == torch.uint8:
            x = x.abs()
    return x.to(dtype)


def same_outcome(fn, *cpu_args):
    """fn on CPU and on ember give the same values, or both raise the same kind of error."""
    try:
        expected = fn(*cpu_args)
    except Exception as cpu_error:
        with pytest.raises(type(cpu_error)):
            fn(*[a.to("ember") if isinstance(a, torch.Tensor) else a for a in cpu_args])
        return
    got = fn(*[a.to("ember") if isinstance(a, torch.Tensor) else a for a in cpu_args])
    assert got.device.type == "ember"
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected, equal_nan=True)


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("da", DTYPES)
@pytest.mark.parametrize("db", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_binary_type_promotion_and_broadcast(op, da, db):
    fn = getattr(torch, op)
    same_outcome(fn, sample((4, 5), da), sample((5,), db, seed=1))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "pow", "lt"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_strided_and_broadcast_views_are_native(op, dtype, native_only):
    fn = getattr(torch, op)
    a = sample((6, 8), dtype)
    b = sample((8, 6), dtype, seed=1).abs() + 0.5
    same_outcome(lambda x, y: fn(x.t()[1:, ::2], y[::2, 1:]), a, b)
    same_outcome(lambda x, y: fn(x[:, :1], y[0]), a, b)  # (6,1) with (6,) -> (6,6)


@pytest.mark.parametrize("scalar", [2, -1.5, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8])
def test_python_scalars(scalar, dtype):
    a = sample((3, 4), dtype)
    for fn in (lambda x: x + scalar, lambda x: x * scalar, lambda x: scalar - x,
               lambda x: x / scalar, lambda x: x > scalar, lambda x: torch.add(x, 1, alpha=scalar)):
        same_outcome(fn, a)


@pytest.mark.parametrize("op", UNARY + ["silu"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary(op, dtype):
    fn = torch.nn.functional.silu if op == "silu" else getattr(torch, op)
    a = sample((5, 7), dtype)
    same_outcome(fn, a)
    same_outcome(lambda x: fn(x.t()), a)


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -0.5, -1, 1.7, 0, 1, -2])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_pow_scalar_special_cases(exponent, dtype):
    same_outcome(lambda x: x.abs().pow(exponent), sample((4, 6), dtype))
    same_outcome(lambda x: x.pow(exponent), sample((4, 6), dtype))


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_activation_and_backward(name, dtype):
    fn = ACTIVATIONS[name]
    x = (sample((6, 9), torch.float32) * 3).to(dtype)  # reaches softplus' linear region
    # CPU's vectorized exact gelu gives NaN at +-inf where the formula gives inf and 0; Ember
    # follows the formula, so infinities are checked only where both agree (test below).
    x[0, :3] = torch.tensor([float("nan"), 40.0, -40.0])
    xc = x.clone().requires_grad_()
    xe = x.to("ember").requires_grad_()
    g = sample((6, 9), torch.float32, seed=1).to(dtype)
    yc, ye = fn(xc), fn(xe)
    yc.backward(g)
    ye.backward(g.to("ember"))
    tol = {} if dtype in (torch.float32, torch.float64) else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(ye.detach().cpu(), yc.detach(), equal_nan=True, **tol)
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, equal_nan=True, **tol)


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor"])
@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64])
def test_bitwise(op, dtype):
    fn = getattr(torch, op)
    same_outcome(fn, sample((5, 7), dtype), sample((7,), dtype, seed=3))
    same_outcome(fn, sample((5, 7), torch.float32), sample((7,), dtype))  # CPU's error is kept


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_shifts_match_cpu_at_every_amount(dtype, native_only):
    # Shift amounts past the width (and negative ones) follow PyTorch's rule: 0 to the left,
    # the sign to the right.
    info = torch.iinfo(dtype)
    a = torch.tensor([0, 1, -1 if info.min < 0 else 200, info.max, info.min, 37, 5, 100], dtype=dtype)
    amounts = torch.arange(-2 if info.min < 0 else 0, 70).to(dtype)
    x, s = a[:, None].expand(-1, amounts.numel()), amounts[None, :].expand(a.numel(), -1)
    xe, se = x.to("ember"), s.to("ember")
    for op in (torch.bitwise_left_shift, torch.bitwise_right_shift):
        torch.testing.assert_close(op(xe, se).cpu(), op(x, s), rtol=0, atol=0)
    torch.testing.assert_close((xe << 3).cpu(), x << 3, rtol=0, atol=0)
    torch.testing.assert_close((xe >> 2).cpu(), x >> 2, rtol=0, atol=0)
    torch.testing.assert_close((xe >> se).cpu(), x >> s, rtol=0, atol=0)
    y, ye = x.clone(), xe.clone()
    y <<= 1
    ye <<= 1
    y >>= s
    ye >>= se
    torch.testing.assert_close(ye.cpu(), y, rtol=0, atol=0)


def test_shift_errors_match_cpu():
    same_outcome(lambda a, b: a << b, sample((4,), torch.bool), sample((4,), torch.bool))
    same_outcome(lambda a, b: a >> b, sample((4,), torch.float32), sample((4,), torch.int64))


def test_new_unary_ops_are_native(native_only):
    x = sample((64,), torch.float32)
    for name in ["erf", "log1p", "expm1", "floor", "ceil", "trunc", "round", "sign"]:
        same_outcome(getattr(torch, name), x)
    for name in ("gelu", "gelu_tanh", "softplus", "softplus_beta"):
        same_outcome(ACTIVATIONS[name], x)
    same_outcome(lambda m: ~m & (m | ~m) ^ m, x > 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softplus_with_any_beta_and_threshold_is_native(dtype, native_only):
    x = (sample((6, 9), torch.float32) * 4).to(dtype)
    g = sample((6, 9), torch.float32, seed=2).to(dtype)
    for beta, threshold in ((2.0, 5.0), (0.5, 20.0), (1.0, 3.0)):
        xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
        yc, ye = F.softplus(xc, beta, threshold), F.softplus(xe, beta, threshold)
        yc.backward(g)
        ye.backward(g.to("ember"))
        torch.testing.assert_close(ye.detach().cpu(), yc.detach())
        torch.testing.assert_close(xe.grad.cpu(), xc.grad)


def test_silu_backward_is_one_native_kernel(native_only):
    # SwiGLU MLPs call it once per layer per step; composed from sigmoid and muls it cost 4x the CPU.
    import torch_ember.profiler as ep

    x, g = sample((4, 33), torch.float32), sample((4, 33), torch.float32, seed=1)
    with ep.profile() as prof:
        got = torch.ops.aten.silu_backward(g.to("ember"), x.to("ember")).cpu()
    torch.testing.assert_close(got, torch.ops.aten.silu_backward(g, x))
    kernels = {r.key for r in prof.key_averages() if r.device_time_total > 0 and not r.key.startswith("aten::")}
    assert kernels == {"silu_backward"}, kernels


def test_nan_and_inf_propagate(native_only):
    vals = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0])
    other = torch.tensor([1.0, float("nan"), 2.0, -0.0, 0.0, float("inf")])
    for fn in (torch.maximum, torch.minimum, torch.add, torch.div, torch.mul, torch.eq, torch.ne):
        same_outcome(fn, vals, other)
    for fn in (torch.relu, torch.exp, torch.log, torch.sqrt, torch.rsqrt, torch.sigmoid, torch.tanh,
               torch.erf, torch.floor, torch.round, torch.sign, F.softplus):
        same_outcome(fn, vals)


def test_integer_overflow_wraps_like_cpu():
    for dtype in (torch.int8, torch.uint8, torch.int32, torch.int64):
        info = torch.iinfo(dtype)
        a = torch.tensor([info.max, info.min, 7], dtype=dtype)
        b = torch.tensor([1, -1 if dtype != torch.uint8 else 1, 3], dtype=dtype)
        same_outcome(torch.add, a, b)
        same_outcome(torch.mul, a, b)
        same_outcome(torch.sub, a, b)


def test_in_place_and_out_forms(native_only):
    a, b = sample((4, 5), torch.float32), sample((5,), torch.float32, seed=1)
    ae, be = a.to("ember"), b.to("ember")
    for name in ("add_", "sub_", "mul_", "div_", "exp_", "sigmoid_", "relu_", "pow_"):
        args = (b,) if name in ("add_", "sub_", "mul_", "div_") else ((2,) if name == "pow_" else ())
        eargs = (be,) if args and isinstance(args[0], torch.Tensor) else args
        expected = getattr(a.clone(), name)(*args)
        got = getattr(ae.clone(), name)(*eargs)
        torch.testing.assert_close(got.cpu(), expected)
    out = torch.empty(1, device="ember")  # resized as on CPU
    torch.mul(ae, be, out=out)
    torch.testing.assert_close(out.cpu(), a * b)
    view = ae.clone()
    view.t()[1:].add_(1.0)  # writes through a strided view
    expected = a.clone()
    expected.t()[1:].add_(1.0)
    torch.testing.assert_close(view.cpu(), expected)


def test_cpu_errors_are_kept():
    a = torch.tensor([True, False], device="ember")
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
        a - a
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.ones(3, dtype=torch.int64, device="ember").add_(0.5)
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        torch.add(torch.ones(2, dtype=torch.int32, device="ember"), 1, alpha=0.5)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.ones(3, device="ember").add_(torch.ones(2, 3, device="ember"))
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3, device="ember") + torch.ones(3)
    with pytest.raises(RuntimeError, match="single memory location"):
        x = torch.ones(5, device="ember")
        torch.add(x[1:], 1, out=x[:-1])


def test_complex_falls_back_visibly():
    # Complex arithmetic is native (composed from real kernels, test_complex.py); complex tanh is not.
    torch_ember.reset_fallback_stats()
    z = torch.randn(4, dtype=torch.complex64)
    torch.testing.assert_close(torch.tanh(z.to("ember")).cpu(), torch.tanh(z))
    assert any("tanh" in r.op for r in torch_ember.fallback_report())


def test_large_tensor_parallel(native_only):
    a = sample((1 << 20,), torch.float32)
    b = sample((1 << 20,), torch.bfloat16, seed=1)
    same_outcome(lambda x, y: x * y + 1, a, b)
    same_outcome(torch.sigmoid, a)


@pytest.mark.parametrize("da", [torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize("db", [torch.float32, torch.int64, torch.bfloat16])
def test_ternary_ops(da, db):
    a, b = sample((4, 5), da), sample((5,), da, seed=1)
    c = sample((4, 1), db, seed=2)
    cond = sample((4, 5), torch.bool, seed=3)
    same_outcome(torch.where, cond, a, c)
    same_outcome(lambda k, x: torch.where(k, x, 0.5), cond, a)
    same_outcome(lambda x, y, z: torch.addcmul(x, y, z, value=0.5), a, b, c)
    same_outcome(lambda x, y, z: torch.addcdiv(x, y, z.abs() + 1, value=-2), a, b, c)
    same_outcome(lambda x, y, z: x.clone().addcmul_(y, z, value=2), a, b, c)
    for w in (0.3, 0.8):
        same_outcome(lambda x, y: torch.lerp(x, y, w), a, b.expand(4, 5))
    same_outcome(lambda x, y: x.clone().lerp_(y, 0.1), a, b)


def test_optimizer_step_is_native(native_only):
    params = [torch.randn(6, 4), torch.randn(4)]
    grads = [torch.randn(6, 4), torch.randn(4)]

    def run(device):
        ps = [p.clone().to(device).requires_grad_() for p in params]
        opt = torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=False)
        for _ in range(3):
            for p, g in zip(ps, grads):
                p.grad = g.to(device)
            opt.step()
        return [p.detach().cpu() for p in ps]

    for got, expected in zip(run("ember"), run("cpu")):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.uint8])
@pytest.mark.parametrize("bounds", [(0, None), (None, 2), (-1, 1), (2, -2), (0.5, None), (float("nan"), None)])
def test_clamp(dtype, bounds):
    lo, hi = bounds
    x = sample((20,), dtype)
    same_outcome(lambda t: torch.clamp(t, lo, hi), x)
    same_outcome(lambda t: t.clone().clamp_(lo, hi), x)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.bool])
def test_clamp_of_integers_by_float_bounds_promotes_natively(dtype, native_only):
    x = sample((20,), dtype)
    for lo, hi in [(0.5, 1.5), (None, 1.5), (-0.5, None)]:
        expected, got = torch.clamp(x, lo, hi), torch.clamp(x.to("ember"), lo, hi)
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got.cpu(), expected)
        out = torch.empty(0, device="ember")
        torch.clamp(x.to("ember"), lo, hi, out=out)
        torch.testing.assert_close(out.cpu(), expected)


@pytest.mark.parametrize("dtype", FLOATS)
def test_isinf_family(dtype, native_only):
    y = torch.tensor([1.0, float("inf"), -float("inf"), float("nan")]).to(dtype)
    same_outcome(torch.isneginf, y)
    same_outcome(torch.isposinf, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("value", [0.5, -3, True, float("-inf")])
def test_masked_fill(dtype, value):
    x = sample((4, 5), dtype)
    mask = sample((5,), torch.bool, seed=2)
    same_outcome(lambda t, m: t.clone().masked_fill_(m, value), x, mask)
    same_outcome(lambda t, m: t.masked_fill(m, value), x, mask)
    same_outcome(lambda t, m: t.masked_fill(m, torch.tensor(1)), x, mask)
    same_outcome(lambda t, m: t.clone().masked_fill_(m.expand(3, 4, 5), value), x, mask)  # CPU refuses


def test_masked_fill_in_attention_masks_is_native(native_only):
    scores = torch.randn(2, 3, 4, 4, device="ember")
    causal = torch.ones(4, 4, dtype=torch.bool, device="ember").triu(1)
    out = scores.masked_fill(causal, float("-inf")).softmax(-1)
    ref = scores.cpu().masked_fill(causal.cpu(), float("-inf")).softmax(-1)
    torch.testing.assert_close(out.cpu(), ref)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor", "logical_not"])
def test_logical_ops_native(op, dtype, native_only):
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-2, 3, (64,), generator=g).to(dtype)
    b = torch.randint(-2, 3, (64,), generator=g).to(dtype)
    fn = getattr(torch, op)
    args = (a,) if op == "logical_not" else (a, b)
    torch.testing.assert_close(fn(*[t.to("ember") for t in args]).cpu(), fn(*args))
    out = torch.empty(64, dtype=torch.float32)
    fn(*args, out=out)
    out_e = torch.empty(64, dtype=torch.float32, device="ember")
    fn(*[t.to("ember") for t in args], out=out_e)
    torch.testing.assert_close(out_e.cpu(), out)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_multiply_and_polar_native(dtype, native_only):
    # Complex rotary embeddings (Llama 4, DeepSeek-V2): polar builds the rotation, a complex
    # product applies it; both run on ember's real kernels.
    g = torch.Generator().manual_seed(0)
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    x = torch.randn(2, 5, 4, 8, generator=g, dtype=real)
    angles = torch.randn(5, 1, 4, generator=g, dtype=real)
    def rotate(t, a):
        rot = torch.polar(torch.ones_like(a), a)
        tc = torch.view_as_complex(t.reshape(*t.shape[:-1], -1, 2))
        return torch.view_as_real(tc * rot).flatten(-2)
    torch.testing.assert_close(rotate(x.to("ember"), angles.to("ember")).cpu(), rotate(x, angles))
    a = torch.randn(6, generator=g, dtype=dtype)
    b = torch.randn(6, generator=g, dtype=dtype)
    ae = a.to("ember")
    ae.mul_(b.to("ember"))
    torch.testing.assert_close(ae.cpu(), a * b)
    out = torch.empty(6, dtype=dtype, device="ember")
    torch.mul(a.to("ember"), b.to("ember"), out=out)
    torch.testing.assert_close(out.cpu(), a * b)


MATH_DOMAINS = {
    "tan": (-1.4, 1.4), "asin": (-1, 1), "acos": (-1, 1), "atan": (-20, 20), "sinh": (-5, 5), "cosh": (-5, 5),
    "asinh": (-20, 20), "acosh": (1, 20), "atanh": (-1, 1), "log2": (0, 50), "log10": (0, 50), "exp2": (-20, 20),
    "erfc": (-4, 4), "erfinv": (-1, 1), "lgamma": (-20, 20), "digamma": (-20, 20),
}


@pytest.mark.parametrize("name", sorted(MATH_DOMAINS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_unary_math_matches_cpu(name, dtype, native_only):
    lo, hi = MATH_DOMAINS[name]
    x = torch.linspace(lo, hi, 257, dtype=torch.float64)
    # The domain's edges and a step past them: inf and NaN must come out as on the CPU.
    x = torch.cat([x, torch.tensor([lo - 0.5, hi + 0.5, 0.0, -0.0, float("nan"), float("inf"), -float("inf")],
                                   dtype=torch.float64)]).to(dtype)
    f = getattr(torch, name)
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.bfloat16 else dict(rtol=2e-6, atol=1e-6) \
        if dtype == torch.float32 else {}
    torch.testing.assert_close(f(x.to("ember")).cpu(), f(x), equal_nan=True, **tol)
    xe = x.to("ember").clone()
    getattr(xe, name + "_")()
    torch.testing.assert_close(xe.cpu(), f(x), equal_nan=True, **tol)
    if dtype != torch.bfloat16:  # the backward formulas, through native ops
        inner = torch.linspace(lo, hi, 19, dtype=dtype)[1:-1]
        g = [torch.autograd.grad(f(t.requires_grad_()).sum(), t)[0].cpu() for t in (inner.clone(), inner.to("ember"))]
        torch.testing.assert_close(g[1], g[0], **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polygamma_and_distributions_log_probs(dtype, native_only):
    # trigamma (polygamma 1) is digamma's derivative; Gamma, Beta and Dirichlet log-probabilities
    # and their gradients go through lgamma and digamma.
    x = torch.cat([torch.linspace(-6, 6, 97, dtype=dtype), torch.tensor([1e-3, 30.0, 1e6], dtype=dtype)])
    for n in (0, 1):
        torch.testing.assert_close(torch.polygamma(n, x.to("ember")).cpu(), torch.polygamma(n, x), equal_nan=True)
    conc = torch.tensor([0.5, 2.0, 7.0], dtype=dtype)
    value = torch.tensor([0.2, 0.3, 0.5], dtype=dtype)

    def log_prob(device):
        c = conc.to(device).requires_grad_()
        lp = (torch.distributions.Dirichlet(c).log_prob(value.to(device))
              + torch.distributions.Gamma(c, c + 1).log_prob(value.to(device)).sum()
              + torch.distributions.Beta(c, c * 2).entropy().sum())
        return [lp.detach().cpu(), torch.autograd.grad(lp, c)[0].cpu()]

    for got, want in zip(log_prob("ember"), log_prob("cpu")):
        torch.testing.assert_close(got, want)


def test_bool_add_and_integer_powers(native_only):
    a, b = torch.tensor([True, False, True, False]), torch.tensor([False, False, True, True])
    assert torch.equal((a.to("ember") + b.to("ember")).cpu(), a + b)  # logical or
    assert torch.equal(torch.add(a.to("ember"), b.to("ember"), alpha=False).cpu(), torch.add(a, b, alpha=False))
    i = torch.arange(-5, 6)
    for e in (2, 3):
        got = i.to("ember") ** e
        assert got.dtype == i.dtype and torch.equal(got.cpu(), i ** e)
    with pytest.raises(RuntimeError, match="Subtraction.*bool"):
        a.to("ember") - b.to("ember")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_integer_pow_wraps_like_cpu(dtype, native_only):
    # Squaring with wrap-around; negative exponents give 1, +-1 or 0 (bases 1, -1, others).
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-20, 20, (300,), generator=g).to(dtype)
    b = torch.randint(-5, 70, (300,), generator=g).to(dtype)
    a[:6], b[:6] = torch.tensor([1, -1, -1, 0, 0, 2]).to(dtype), torch.tensor([-7, -3, -4, -1, 0, 63]).to(dtype)
    for f in (lambda x, y: x ** y, lambda x, y: x ** 5, lambda x, y: x ** 0, lambda x, y: x ** 40,
              lambda x, y: x.clone().pow_(y), lambda x, y: torch.pow(3, y)):
        want, got = f(a, b), f(a.to("ember"), b.to("ember"))
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


def test_bool_sign_and_one_sided_clamps(native_only):
    a, b = torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])
    for f in (torch.sign, torch.sgn, lambda x, y: torch.clamp_min(x, y), lambda x, y: torch.clamp_max(x, y),
              lambda x, y: torch.sign(x, out=torch.empty(0, dtype=torch.bool, device=x.device)),
              lambda x, y: x.clone().sign_()):
        args = (a,) if f in (torch.sign, torch.sgn) else (a, b)
        want, got = f(*args), f(*[t.to("ember") for t in args])
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        torch.clamp(a.to("ember"), b.to("ember"), b.to("ember"))


def test_integer_pow_with_a_negative_scalar_is_refused():
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        torch.tensor([2, 3], device="ember") ** -1


def test_integer_inputs_promote_like_cpu(native_only):
    i = torch.tensor([1, 2, 5])
    for name in ("asin", "log2", "erfinv", "atan"):
        got, want = getattr(torch, name)(i.to("ember") - 1 if name != "log2" else i.to("ember")), \
            getattr(torch, name)(i - 1 if name != "log2" else i)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_atan2_and_hypot(dtype, native_only):
    a = torch.tensor([0.0, -0.0, 1.0, -1.0, 3.0, float("inf"), float("nan"), 1e30], dtype=dtype)
    b = torch.tensor([[0.0], [-1.0], [2.0], [1e30]], dtype=dtype)
    for f in (torch.atan2, torch.hypot):
        torch.testing.assert_close(f(a.to("ember"), b.to("ember")).cpu(), f(a, b), equal_nan=True)
        out = torch.empty(4, 8, dtype=dtype, device="ember")
        f(a.to("ember"), b.to("ember"), out=out)
        torch.testing.assert_close(out.cpu(), f(a, b), equal_nan=True)
    torch.testing.assert_close(torch.atan2(torch.tensor([1, -2]).to("ember"), torch.tensor([3, 3]).to("ember")).cpu(),
                               torch.atan2(torch.tensor([1, -2]), torch.tensor([3, 3])))
    x, y = (torch.linspace(-2, 3, 7, dtype=dtype) for _ in range(2))
    y = y.flip(0)
    for f in (torch.atan2, torch.hypot):
        xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
        xe, ye = x.to("ember").requires_grad_(), y.to("ember").requires_grad_()
        gc = torch.autograd.grad(f(xs, ys).sum(), (xs, ys))
        gE = torch.autograd.grad(f(xe, ye).sum(), (xe, ye))
        for u, v in zip(gE, gc):
            torch.testing.assert_close(u.cpu(), v)


def test_clamp_by_tensors_matches_cpu_nan_propagating(native_only):
    x = torch.tensor([[-3.0, 0.5, float("nan"), 4.0], [1.0, 2.0, -1.0, 9.0]])
    lo = torch.tensor([-1.0, float("nan"), 0.0, 1.0])
    hi = torch.tensor([[2.0], [float("nan")]])
    for args in ((lo, hi), (lo, None), (None, hi)):
        want = torch.clamp(x, *args)
        got = torch.clamp(x.to("ember"), *(a.to("ember") if a is not None else None for a in args))
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    torch.testing.assert_close(torch.clamp_min(x.to("ember"), lo.to("ember")).cpu(), torch.clamp_min(x, lo),
                               equal_nan=True)
    torch.testing.assert_close(torch.clamp_max(x.to("ember"), hi.to("ember")).cpu(), torch.clamp_max(x, hi),
                               equal_nan=True)
    i = torch.tensor([1, 5, 9])
    torch.testing.assert_close(torch.clamp(i.to("ember"), torch.tensor([2, 2, 2], device="ember"),
                                           torch.tensor([4.5, 4.5, 4.5], device="ember")).cpu(),
                               torch.clamp(i, torch.tensor([2, 2, 2]), torch.tensor([4.5, 4.5, 4.5])))
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        torch.clamp(x.to("ember"), None, None)


def test_bool_mul_and_isfinite_run_natively(native_only):
    a = torch.tensor([[True, False, True, False]])
    b = torch.tensor([[True], [False]])
    torch.testing.assert_close((a.to("ember") * b.to("ember")).cpu(), a * b)
    e = a.to("ember").clone()
    e.mul_(torch.tensor([True, True, False, False], device="ember"))
    torch.testing.assert_close(e.cpu(), a * torch.tensor([True, True, False, False]))
    x = torch.tensor([1.0, float("inf"), -float("inf"), float("nan"), -0.0])
    torch.testing.assert_close(torch.isfinite(x.to("ember")).cpu(), torch.isfinite(x))
    # a bool times a float promotes as on the CPU
    torch.testing.assert_close((a.to("ember") * torch.tensor(2.5, device="ember")).cpu(), a * torch.tensor(2.5))


@pytest.mark.parametrize("inner", [1, 3, 32, 33, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
def test_short_rows_with_a_broadcast_operand(inner, dtype, native_only):
    # x * s[..., None] over a short last dim (per-head scales, rotary tables) computes several
    # rows per span; every row must still see its own broadcast value.
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(5, 7, 9, inner, generator=g) * 10).to(dtype)
    s = (torch.randn(5, 1, 9, 1, generator=g) * 10).to(dtype)
    if dtype == torch.int64:
        s = s.clamp(min=1)
    fs = [lambda a, b: a * b, lambda a, b: b - a, lambda a, b: torch.maximum(a, b)]
    if dtype != torch.int64:
        fs.append(lambda a, b: a / b)
    for f in fs:
        torch.testing.assert_close(f(x.to("ember"), s.to("ember")).cpu(), f(x, s))
    xe = x.to("ember")
    xe.mul_(s.to("ember"))
    torch.testing.assert_close(xe.cpu(), x * s)
    mixed = s.float() if dtype == torch.bfloat16 else s  # a broadcast operand of another dtype
    torch.testing.assert_close((x.to("ember") * mixed.to("ember")).cpu(), x * mixed)


@pytest.mark.parametrize("out_dtype", [torch.complex64, torch.complex128])
def test_real_results_into_a_complex_out_are_written(out_dtype):
    # The kernels move real values only: a complex out= kept its old contents.
    a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])
    for fn in (lambda x, y, out: torch.mul(x, y, out=out), lambda x, y, out: torch.add(x.int(), y.int(), out=out),
               lambda x, y, out: torch.eq(x, y, out=out), lambda x, y, out: torch.sin(x, out=out),
               lambda x, y, out: torch.addcmul(x, x, y, out=out)):
        ref = torch.full((3,), -1 + 0j, dtype=out_dtype)
        got = ref.to("ember")
        fn(a, b, ref)
        fn(a.to("ember"), b.to("ember"), got)
        torch.testing.assert_close(got.cpu(), ref)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_python_numbers_with_half_tensors_match_cpu_bit_for_bit(dtype, native_only):
    # The CPU rounds a Python number to the tensor's dtype first (x.half() % 2.3 divides by
    # 2.30078), except in mul and div, which keep its full value.
    x = (torch.rand(1000, generator=torch.Generator().manual_seed(0)) * 18 - 9).to(dtype)
    xe = x.to("ember")
    for f in (torch.fmod, torch.remainder, torch.add, torch.sub, torch.mul, torch.div, lambda a, b: b - a,
              lambda a, b: torch.pow(a.abs(), b), lambda a, b: torch.clamp(a, min=b), lambda a, b: a < b,
              lambda a, b: torch.where(a > 0, a, b), lambda a, b: torch.atan2(a, torch.tensor(b))):
        torch.testing.assert_close(f(xe, 2.3).cpu(), f(x, 2.3), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_add_sub_alpha_with_half_tensors_match_cpu_bit_for_bit(dtype, native_only):
    # The CPU rounds alpha to the tensor's dtype too (3.14159 is 3.140625 in both).
    g = torch.Generator().manual_seed(0)
    a, b = [[torch.randn(64, generator=g).to(dtype) for _ in range(3)] for _ in range(2)]
    ae, be = [t.to("ember") for t in a], [t.to("ember") for t in b]
    for op in (torch.add, torch.sub):
        torch.testing.assert_close(op(ae[0], be[0], alpha=3.14159).cpu(), op(a[0], b[0], alpha=3.14159), rtol=0, atol=0)
    for got, want in zip(torch._foreach_add(ae, be, alpha=3.14159), torch._foreach_add(a, b, alpha=3.14159)):
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_zero_dim_complex_times_a_python_number_keeps_its_dtype(native_only):
    s = torch.tensor(1 + 2j, dtype=torch.complex64)
    for f in (lambda t: t * 0.5, lambda t: t * 1j, lambda t: 2.0 * t):
        got, ref = f(s.to("ember")), f(s)
        assert got.dtype == ref.dtype == torch.complex64
        torch.testing.assert_close(got.cpu(), ref)


def test_abs_of_complex_into_a_real_out():
    t = torch.tensor([3 + 4j, -1 + 0j], dtype=torch.complex64)
    out = torch.empty(2, device="ember")
    torch.abs(t.to("ember"), out=out)
    torch.testing.assert_close(out.cpu(), torch.abs(t))


def test_a_wider_out_keeps_the_computations_rounding():
    # The CPU computes in the inputs' dtype, then casts into out=: float16 33000 + 33000 is inf
    # and int8 100 + 100 wraps to -56, even into a float64 / int64 out=.
    h = torch.tensor([33000.0, 1.5], dtype=torch.float16)
    i8 = torch.tensor([100, -100, 7], dtype=torch.int8)
    for fn, a, out_dtype in ((torch.add, h, torch.float64), (torch.mul, h, torch.float32), (torch.add, i8, torch.int64),
                             (torch.mul, i8, torch.int32), (torch.sub, -i8, torch.int16)):
        ref = fn(a, a, out=torch.empty(0, dtype=out_dtype))
        got = fn(a.to("ember"), a.to("ember"), out=torch.empty(0, dtype=out_dtype, device="ember"))
        torch.testing.assert_close(got.cpu(), ref, equal_nan=True)


def test_tanh_keeps_the_sign_of_zero_eager_and_compiled():
    x = torch.tensor([-0.0, 0.0, -1e-30, 1e-30, -0.3, 0.3, -2.0, 2.0])
    want = torch.signbit(torch.tanh(x))
    assert torch.equal(torch.signbit(torch.tanh(x.to("ember")).cpu()), want)
    compiled = torch.compile(lambda t: torch.tanh(t) * 1.0, backend="ember")
    assert torch.equal(torch.signbit(compiled(x.to("ember")).cpu()), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_maximum_minimum_clamp_keep_the_first_of_equal_zeros_eager_and_compiled(dtype):
    # Between -0.0 and +0.0 the CPU keeps the first operand: clamp(-0.0, min=0) is -0.0.
    x = torch.tensor([-0.0, 0.0, float("nan"), 1.0, -0.0], dtype=dtype)
    z = torch.tensor([0.0, -0.0, 1.0, float("nan"), -0.0], dtype=dtype)

    def f(x, z):
        return [torch.maximum(x, z), torch.minimum(x, z), x.clamp(min=0), x.clamp(max=0), x.clamp_min(0.0)]

    compiled = torch.compile(lambda x, z: [t * 1 for t in f(x, z)], backend="ember")
    for got in (f(x.to("ember"), z.to("ember")), compiled(x.to("ember"), z.to("ember"))):
        for g, r in zip(got, f(x, z)):
            torch.testing.assert_close(g.cpu(), r, equal_nan=True)
            assert torch.equal(torch.signbit(g.cpu()), torch.signbit(r))


def test_bool_extremes_integer_infs_and_integer_hardtanh(native_only):
    a = torch.tensor([True, False, True, False])
    b = torch.tensor([True, True, False, False])
    for fn in (torch.maximum, torch.minimum, torch.fmax, torch.fmin):
        got, want = fn(a.to("ember"), b.to("ember")), fn(a, b)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    for dtype in (torch.int64, torch.int8, torch.uint8, torch.int16, torch.bool):
        x = torch.tensor([0, 3, 100, 1]).to(dtype)
        for fn in (torch.isposinf, torch.isneginf):
            assert torch.equal(fn(x.to("ember")).cpu(), fn(x))
        if dtype == torch.bool:
            continue
        fns = (F.relu6, lambda t: F.hardtanh(t, 0, 50.9)) + (() if dtype == torch.uint8 else (F.hardtanh,))
        for fn in fns:
            got, want = fn(x.to("ember")), fn(x)
            assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


def test_integer_hardtanh_keeps_the_cpus_errors():
    x = torch.tensor([1, 2], dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="unsigned type with negative limits"):
        F.hardtanh(x.to("ember"))
    with pytest.raises(RuntimeError, match="does not support non-boolean outputs|bool"):
        torch.isposinf(x.to("ember"), out=torch.empty(2, device="ember"))


def test_masked_fill_of_bool_tensors(native_only):
    x = torch.tensor([True, False, True, False])
    m = torch.tensor([True, True, False, False])
    for v in (True, False, 0, 1, 2):
        assert torch.equal(x.to("ember").masked_fill(m.to("ember"), v).cpu(), x.masked_fill(m, v))
    assert torch.equal(x.to("ember").masked_fill(m.to("ember"), torch.tensor(True, device="ember")).cpu(),
                       x.masked_fill(m, torch.tensor(True)))


# --- nextafter, gcd, lcm, angle: native, bit for bit with the CPU --------------------------------
def _native_only(fn, *inputs):
    torch_ember.reset_fallback_stats()
    got = fn(*(t.to("ember") for t in inputs)).cpu()
    torch.ember.synchronize()
    assert not list(torch_ember.fallback_report()), "took the CPU fallback"
    torch.testing.assert_close(got, fn(*inputs), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nextafter_and_angle_of_floats(dtype):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 300, generator=g, dtype=dtype)
    special = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1.0, -2.0], dtype=dtype)
    a[:7], b[:7] = special, special.flip(0)
    _native_only(torch.nextafter, a, b)
    _native_only(lambda x, y: x.clone().nextafter_(y), a, b)
    _native_only(torch.angle, a)
    _native_only(torch.angle, torch.tensor([-3, 0, 5]))  # integers promote to float


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_gcd_and_lcm_of_integers(dtype):
    g = torch.Generator().manual_seed(1)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(2 ** 40)), min(info.max, 2 ** 40)
    a, b = torch.randint(lo, hi, (2, 500), generator=g, dtype=torch.int64).to(dtype)
    a[:3], b[:2] = 0, 0
    _native_only(torch.lcm, a, b)  # int32 products wrap in 32 bits, as on the CPU
    _native_only(torch.lcm, a[:, None][:20], b[None, :20])  # broadcast
    # std::abs keeps the minimum negative. (Not for lcm: the CPU's own lcm can divide the
    # minimum by -1 there and crash the process.)
    a[3:6], b[3:6] = info.min, torch.tensor([6, -4, info.min])
    _native_only(torch.gcd, a, b)


def test_gcd_of_floats_and_half_nextafter_keep_the_cpu_behaviour():
    with pytest.raises(RuntimeError, match="gcd_cpu.*not implemented for 'Float'"):
        torch.gcd(torch.ones(3, device="ember"), torch.ones(3, device="ember"))
    a = torch.ones(4, dtype=torch.bfloat16)
    # bfloat16 steps in its own representation: computed by the CPU, not in float32.
    torch.testing.assert_close(torch.nextafter(a.to("ember"), (a * 0).to("ember")).cpu(),
                               torch.nextafter(a, a * 0), rtol=0, atol=0)


def test_double_erfinv_keeps_its_precision_near_one():
    # Newton steps on erf(x) - y cancel as y nears 1 (a relative error of 9e-3 at 1 - 1e-14);
    # the tail refines log erfc instead.
    mpmath = pytest.importorskip("mpmath", reason="mpmath (a sympy dependency) gives the exact reference")
    mpmath.mp.dps = 40
    ys = [0.3, 0.6, 0.999, 1 - 1e-8, 1 - 1e-12, 1 - 1e-14, 1 - 2**-52, 1 - 2**-53, -(1 - 1e-13), 5e-300]
    got = torch.erfinv(torch.tensor(ys, dtype=torch.float64, device="ember")).cpu().tolist()
    for y, g in zip(ys, got):
        ref = float(mpmath.erfinv(mpmath.mpf(y)))
        assert abs(g - ref) <= 4e-16 * abs(ref), (y, g, ref)


@pytest.mark.parametrize("fmt,shape", [(torch.channels_last, (2, 3, 4, 5)), (torch.channels_last_3d, (2, 3, 2, 4, 5))])
def test_pow_where_and_logit_keep_channels_last_like_cpu(fmt, shape):
    x = torch.rand(shape, generator=torch.Generator().manual_seed(0)).contiguous(memory_format=fmt)
    ops = [lambda t: t.pow(3), lambda t: t.pow(0.0), lambda t: t.pow(1.0), lambda t: t.pow(2.5),
           lambda t: t.logit(), lambda t: t.logit(1e-6), lambda t: torch.where(t < 0.5, 0.5, t),
           lambda t: torch.where(t < 0.5, t, t.neg())]
    for op in ops:
        expected, got = op(x), op(x.to("ember"))
        assert got.is_contiguous(memory_format=fmt) == expected.is_contiguous(memory_format=fmt)
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got.cpu(), expected)

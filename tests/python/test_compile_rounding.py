"""Compiled graphs round every op's float16 / bfloat16 result and wrap every narrow integer
result as eager mode does, even where the next op is fused into the same generated kernel
(registers hold float32 and 64-bit integers): overflow to inf, integer wrap-around and the
rounding error of a low-precision product come out bit for bit as eagerly; so do integer true
division by Python ints and float-to-integer casts out of range."""
import pytest
import torch

import torch_ember  # noqa: F401

_G = torch.Generator().manual_seed(0)
CASES = {
    "int32_product_wraps": (lambda x: (x * 3) < 0, torch.full((4,), 2**30, dtype=torch.int32)),
    "int32_wrap_then_widen": (lambda x: (x * 3).long(), torch.full((4,), 2**30, dtype=torch.int32)),
    "int32_square_sum": (lambda x: (x * x).sum(), torch.full((3,), 2**16, dtype=torch.int32)),
    "uint8_add_wraps": (lambda u: (u + 10).sum(), torch.full((4,), 250, dtype=torch.uint8)),
    "int8_negation_wraps": (lambda x: (-x).to(torch.int16) + 1, torch.tensor([-128, 5, 127], dtype=torch.int8)),
    "int16_product": (lambda x: (x * x + 1).float(), torch.tensor([300, -200, 7], dtype=torch.int16)),
    "half_overflows_to_inf": (lambda y: (y.half() * 1000).float(), torch.tensor([100.0, 70.0, 1.0])),
    "bfloat16_rounding_error": (lambda y: (y.bfloat16() * 3).float() - y * 3, torch.randn(64, generator=_G)),
    "bfloat16_increment_lost": (lambda y: (y.bfloat16() + 1).float() == y, torch.tensor([256.0, 512.0, 3.0])),
    "half_softmax_is_representable": (lambda y: y.half().softmax(0).float(), torch.randn(50, generator=_G)),
    "half_scaled_sum": (lambda y: (y.half() * 1.1).float().sum(), torch.randn(1000, generator=_G)),
    "bfloat16_where_fill": (lambda y: torch.where(y > 0, y.bfloat16(), 0.1).float() * 3, torch.randn(16, generator=_G)),
    # True division of an integer tensor by a Python int divides in floating point: the int is
    # not wrapped to the tensor's dtype first (int8 / 300, uint8 / -3, int32 / 2**40).
    "int8_divided_by_a_wider_int": (lambda x: (x * 1) / 300, torch.tensor([3, -1, 0, 2], dtype=torch.int8)),
    "uint8_divided_by_a_negative_int": (lambda x: (x + 0) / -3, torch.tensor([3, 1, 200], dtype=torch.uint8)),
    "int32_divided_by_2_40": (lambda x: (x + 0) / 2**40, torch.tensor([3, 1, 2], dtype=torch.int32)),
    # The CPU's float16 roots follow std::pow ((-0) ** 0.5 is +0, (-inf) ** 0.5 is +inf); its
    # cube and inverse square are products in a fixed order.
    "half_roots_at_signed_zero_and_infinity": (
        lambda y: torch.stack([(y * 1) ** 0.5, (y * 1) ** -0.5]),
        torch.tensor([-0.0, -float("inf"), 0.0, float("inf"), 4.0, 0.3, 6e-8], dtype=torch.float16)),
    **{f"{dt}_cube_and_inverse_square": (
        lambda y: torch.stack([(y * 1) ** 3, (y * 1) ** -2]),
        torch.tensor([0.3, 1.7, 3.1, 0.1, 6e-8, -2.5], dtype=getattr(torch, dt))) for dt in ("float32", "float64")},
    # Float to integer casts of NaN, infinities and out-of-range values give what the CPU's
    # truncating conversion gives (the smallest 32-bit integer, then the low bits).
    **{f"{src}_to_{dst}_out_of_range": (
        (lambda d: lambda y: (y * 1).to(d))(getattr(torch, dst)),
        torch.tensor([float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e5, -2.7, 1e19, 65535.9],
                     dtype=getattr(torch, src)))
       for src in ("float32", "float64", "bfloat16") for dst in ("int32", "int16", "uint8", "int64")},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_matches_eager_bit_for_bit(name, native_only):
    torch._dynamo.reset()
    fn, x = CASES[name]
    want = fn(x.to("ember")).cpu()
    got = torch.compile(fn, backend="ember", fullgraph=True)(x.to("ember")).cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    # A float32 sum of many terms adds in another order on the CPU: there, float32's tolerance.
    exact = {} if name.endswith("_sum") else dict(rtol=0, atol=0)
    torch.testing.assert_close(got, fn(x), equal_nan=True, **exact)


def test_bfloat16_training_step_follows_eager(native_only):
    # Pure bfloat16 weights: every fused elementwise op of forward and backward rounds as eagerly.
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    model = model.to(torch.bfloat16).to("ember")
    x = torch.randn(8, 16, dtype=torch.bfloat16, device="ember")

    def step(m):
        m.zero_grad()
        loss = (m(x).float() - 1).square().mean()
        loss.backward()
        return loss.detach().cpu(), [p.grad.cpu() for p in m.parameters()]

    want = step(model)
    got = step(torch.compile(model, backend="ember"))
    torch.testing.assert_close(got[0], want[0], rtol=1e-3, atol=1e-3)
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)


SCALAR_CASES = {
    "add": lambda t, u: t + 0.3, "sub": lambda t, u: t - 0.7, "rsub": lambda t, u: 1.1 - t,
    "mul": lambda t, u: t * 0.1, "div": lambda t, u: t / 0.3, "alpha": lambda t, u: torch.add(t, u, alpha=0.3),
    "alpha_sub": lambda t, u: torch.sub(t, u, alpha=0.3), "pow": lambda t, u: t.abs() ** 1.3,
    "chain": lambda t, u: t * 0.1 + 0.3, "int_scalar": lambda t, u: t + 3001,
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(SCALAR_CASES))
def test_python_scalars_take_the_cpus_precision(name, dtype, native_only):
    # add, sub, rsub, alpha and pow exponents round a Python number to the tensor's dtype first on
    # the CPU; mul and div use it exactly. Compiled graphs do the same, bit for bit.
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    t, u = ((torch.randn(4000, generator=g) * 3).to(dtype) for _ in range(2))
    fn = SCALAR_CASES[name]
    got = torch.compile(fn, backend="ember", fullgraph=True)(t.to("ember"), u.to("ember")).cpu()
    torch.testing.assert_close(got, fn(t, u), rtol=0, atol=0)


LONG_SUMS = {
    "sum": lambda t: t.sum(), "mean": lambda t: t.mean(), "var": lambda t: t.var(),
    "rows": lambda t: t.reshape(4, -1).sum(1), "cols": lambda t: t.reshape(-1, 4).sum(0),
    "mse": lambda t: torch.nn.functional.mse_loss(t, torch.zeros_like(t)),
}


@pytest.mark.parametrize("name", sorted(LONG_SUMS))
def test_long_float32_sums_stay_accurate(name, native_only):
    # Each vector lane's running float32 partial sum lost accuracy with the count (a sum of 2^22
    # values of 0.1 was 0.2% off; var() of values near 1e5 12% off): long sums add float32
    # blocks of 1024 values into a float64 total, as accurate as the CPU's cascade.
    torch._dynamo.reset()
    t = torch.full((1 << 22,), 0.1) + torch.linspace(0, 1e5, 1 << 22) * (name == "var")
    fn = LONG_SUMS[name]
    got = torch.compile(fn, backend="ember")(t.to("ember")).cpu()
    want = fn(t.double())
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=0)  # the CPU's own error is about 1e-6
    torch.testing.assert_close(got, fn(t), rtol=2e-6, atol=0)


HUGE_SPREADS = {
    "var": lambda t: t.var(1), "std": lambda t: t.std(1, correction=0), "var_all": lambda t: t.var(),
    "var_mean": lambda t: torch.var_mean(t, 1), "std_mean": lambda t: torch.std_mean(t, 0, keepdim=True),
}


@pytest.mark.parametrize("name", sorted(HUGE_SPREADS))
def test_variance_of_huge_values_does_not_overflow(name, native_only):
    # Values near 1e18 have a variance float32 holds (1e36) but a float32 sum of squared
    # deviations over 1000 of them does not (1e39): compiled var gave inf where eager and the CPU,
    # which accumulate in double, give the variance.
    torch._dynamo.reset()
    t = torch.randn(4, 1000, generator=torch.Generator().manual_seed(0)) * 1e18
    fn = HUGE_SPREADS[name]
    got = torch.compile(fn, backend="ember")(t.to("ember"))
    want = fn(t)
    torch.testing.assert_close(torch.utils._pytree.tree_map(lambda v: v.cpu(), got), want, rtol=2e-6, atol=0)


_S = torch.Generator().manual_seed(1)
_NAN = torch.randn(1 << 20, generator=_S).index_fill_(0, torch.tensor([70000]), float("nan"))
SPLIT_REDUCTIONS = {
    # A reduction with few outputs over many inputs runs as partial results over chunks and a
    # second reduction of those (the leading reduced dims, or the last one cut into chunks).
    "sum_1d": (lambda t: t.sum(), torch.randn(1 << 20, generator=_S)),
    "mean_keepdim": (lambda t: t.mean((0, 2), keepdim=True), torch.randn(8, 3, 50000, generator=_S)),
    "amax_leading_dims": (lambda t: t.amax((1, 2)), torch.randn(2, 64, 4096, generator=_S)),
    "amin_rows": (lambda t: t.amin(1), torch.randn(3, 200000, generator=_S)),
    "amax_nan": (lambda t: t.amax(), _NAN),
    "sum_nan": (lambda t: t.sum(), _NAN),
    "bfloat16_sum": (lambda t: (t.bfloat16() * 2).sum(), torch.randn(1 << 20, generator=_S)),
    "bfloat16_mean": (lambda t: t.bfloat16().mean(-1), torch.randn(2, 1 << 17, generator=_S)),
    "int32_sum": (lambda t: (t * 1000).int().sum(), torch.randn(1 << 20, generator=_S)),
    "bool_sum": (lambda t: (t > 0).sum(), torch.randn(1 << 20, generator=_S)),
    "prime_length": (lambda t: t.sum(), torch.randn(65537 * 3, generator=_S)),
    "mse_grad": (lambda t: torch.autograd.grad(((t * t) - 1).square().mean(), t)[0],
                 torch.randn(4, 1 << 16, generator=_S)),
}


@pytest.mark.parametrize("name", sorted(SPLIT_REDUCTIONS))
def test_reductions_split_into_partial_results_match_cpu(name, native_only):
    torch._dynamo.reset()
    fn, t = SPLIT_REDUCTIONS[name]
    t = t.clone().requires_grad_(name == "mse_grad")
    want = fn(t)
    got = torch.compile(fn, backend="ember")(t.detach().to("ember").requires_grad_(t.requires_grad))
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = {"rtol": 2e-2, "atol": 1e-2} if want.dtype == torch.bfloat16 else {"rtol": 2e-6, "atol": 1e-6}
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tol)

"""Native reductions match PyTorch CPU over every dim set, keepdim, dtype and layout."""
import pytest
import torch
import torch_ember

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.uint8, torch.bool]
DIMS = [None, (0,), (1,), (2,), (-1,), (0, 2), (1, 2), (0, 1, 2)]


def sample(dtype, shape=(4, 5, 6)):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 3
    if dtype == torch.bool:
        return x > 0
    return x.to(dtype) if dtype.is_floating_point else x.round().abs().to(dtype)


def same_outcome(fn, x):
    try:
        expected = fn(x)
    except Exception as err:
        with pytest.raises(type(err)):
            fn(x.to("ember"))
        return
    got = fn(x.to("ember"))
    pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
    for g, e in pairs:
        assert g.dtype == e.dtype and g.device.type == "ember"
        torch.testing.assert_close(g.cpu(), e, equal_nan=True)


REDUCTIONS = {
    "sum": lambda t, d, k: t.sum() if d is None else t.sum(dim=d, keepdim=k),
    "mean": lambda t, d, k: t.mean() if d is None else t.mean(dim=d, keepdim=k),
    "amax": lambda t, d, k: t.amax(dim=d or (), keepdim=k),
    "amin": lambda t, d, k: t.amin(dim=d or (), keepdim=k),
    "norm2": lambda t, d, k: torch.linalg.vector_norm(t, 2, dim=d, keepdim=k),
    "norm1": lambda t, d, k: torch.linalg.vector_norm(t, 1, dim=d, keepdim=k),
    "norminf": lambda t, d, k: torch.linalg.vector_norm(t, float("inf"), dim=d, keepdim=k),
    "norm3": lambda t, d, k: torch.linalg.vector_norm(t, 3, dim=d, keepdim=k),
    "torch_norm": lambda t, d, k: torch.norm(t, 2, dim=d or [], keepdim=k),
    "torch_norm1": lambda t, d, k: torch.norm(t, 1.0, dim=d or [], keepdim=k, dtype=t.dtype),
    "var": lambda t, d, k: t.var(dim=d, keepdim=k),
    "std0": lambda t, d, k: t.std(dim=d, keepdim=k, correction=0),
    "any": lambda t, d, k: t.any() if d is None else t.any(dim=d, keepdim=k),
    "all": lambda t, d, k: t.all() if d is None else t.all(dim=d, keepdim=k),
}


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(name, dtype, dims, keepdim):
    same_outcome(lambda t: REDUCTIONS[name](t, dims, keepdim), sample(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1, None])
@pytest.mark.parametrize("keepdim", [False, True])
def test_arg_and_indexed_extremes(dtype, dim, keepdim):
    x = sample(dtype)
    same_outcome(lambda t: t.argmax(dim=dim, keepdim=keepdim), x)
    same_outcome(lambda t: t.argmin(dim=dim, keepdim=keepdim), x)
    if dim is not None:
        same_outcome(lambda t: t.max(dim=dim, keepdim=keepdim), x)
        same_outcome(lambda t: t.min(dim=dim, keepdim=keepdim), x)
    same_outcome(lambda t: t.max(), x)


def test_layouts_dtypes_and_special_values():
    torch_ember.reset_fallback_stats()
    x = sample(torch.float32)
    same_outcome(lambda t: t.transpose(0, 2).sum(1), x)
    same_outcome(lambda t: t[:, ::2, 1:].mean((0, 2)), x)
    same_outcome(lambda t: t.sum(1, dtype=torch.float64), x)
    same_outcome(lambda t: t.expand(3, 4, 5, 6).sum(0), x)
    nan = torch.tensor([[1.0, float("nan"), 3.0], [2.0, 1.0, 2.0]])
    for fn in (lambda t: t.amax(1), lambda t: t.argmax(1), lambda t: t.max(1), lambda t: t.sum(1)):
        same_outcome(fn, nan)
    same_outcome(lambda t: t.max(1), torch.tensor([[3.0, 1.0, 3.0], [0.0, 0.0, 0.0]]))  # ties
    same_outcome(lambda t: t.sum(), torch.tensor(3.0))
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())


def test_empty_inputs_behave_like_cpu():
    same_outcome(lambda t: t.sum(0), torch.empty(0, 3))
    same_outcome(lambda t: t.mean(0), torch.empty(0, 3))
    same_outcome(lambda t: t.amax(0), torch.empty(0, 3))  # CPU raises; so must ember


def test_large_reductions_are_accurate():
    x = torch.randn(3_000_000, generator=torch.Generator().manual_seed(1))
    exact = x.double()
    xe = x.to("ember")
    # Accumulation in double: at least as accurate as CPU, compared with the float64 result.
    torch.testing.assert_close(xe.sum().cpu().double(), exact.sum(), rtol=1e-6, atol=1e-3)
    torch.testing.assert_close(xe.norm().cpu().double(), exact.norm(), rtol=1e-6, atol=0)
    torch.testing.assert_close(xe.var().cpu().double(), exact.var(), rtol=1e-6, atol=0)
    assert xe.argmax().item() == x.argmax().item()


def test_reductions_inside_training_are_native():
    torch_ember.reset_fallback_stats()
    w = torch.randn(8, 4, device="ember", requires_grad=True)
    loss = (w * w).mean() + w.sum(0).amax() + torch.linalg.vector_norm(w)
    loss.backward()
    ref = w.detach().cpu().requires_grad_()
    ((ref * ref).mean() + ref.sum(0).amax() + torch.linalg.vector_norm(ref)).backward()
    torch.testing.assert_close(w.grad.cpu(), ref.grad)


def test_sums_over_nothing_run_natively(native_only):
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        for shape, dim in (((0, 4), 0), ((3, 0), 1), ((0,), None), ((2, 0, 3), (0, 1))):
            x = torch.zeros(shape, dtype=dtype)
            f = (lambda t: t.sum()) if dim is None else (lambda t: t.sum(dim, keepdim=True))
            got, want = f(x.to("ember")), f(x)
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("case", ["float", "int", "bool", "bf16", "int32_as_double", "empty", "nan"])
def test_prod_matches_cpu(case, native_only):
    gen = torch.Generator().manual_seed(9)
    x = {"float": torch.rand(3, 5, 4, generator=gen) + 0.5, "int": torch.randint(-3, 4, (3, 5, 4), generator=gen),
         "bool": torch.randint(0, 2, (3, 5), generator=gen).bool(),
         "bf16": (torch.rand(4, 6, generator=gen) + 0.5).bfloat16(),
         "int32_as_double": torch.randint(1, 200, (40, 2), generator=gen, dtype=torch.int32),
         "empty": torch.empty(0, 3), "nan": torch.tensor([[1.0, float("nan"), 2.0]])}[case]
    tol = dict(rtol=1e-2, atol=1e-2) if case == "bf16" else {}
    for f in (lambda t: t.prod(), lambda t: t.prod(0), lambda t: t.prod(-1, keepdim=True),
              lambda t: t.prod(0, dtype=torch.float64)):
        want, got = f(x), f(x.to("ember")).cpu()
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True, **tol)
    if x.is_floating_point() and x.numel():
        xc, xe = x.double().requires_grad_(), x.double().to("ember").requires_grad_()
        torch.testing.assert_close(torch.autograd.grad(xe.prod(-1).sum(), xe)[0].cpu(),
                                   torch.autograd.grad(xc.prod(-1).sum(), xc)[0], equal_nan=True)


def test_bool_extremes_run_natively(native_only):
    # max/min/amax/amin of masks (ties everywhere: the first position wins, as on the CPU);
    # argmax/argmin of bool stay the CPU's error.
    x = sample(torch.bool)
    x[1] = True
    x[2] = False
    for dim in (0, 1, 2):
        same_outcome(lambda t: t.max(dim=dim), x)
        same_outcome(lambda t: t.min(dim=dim, keepdim=True), x)
        same_outcome(lambda t: t.amax(dim=dim), x)
        same_outcome(lambda t: t.amin(dim=(dim, 0)), x)
    same_outcome(lambda t: t.max(), x)
    same_outcome(lambda t: t.min(), x)


def test_any_all_over_no_dims_reduce_nothing():
    # dim=[] means no dims for any/all (sum's legacy reads it as all of them).
    x = torch.tensor([[True, False, True], [True, True, True]])
    for t in (x, x.float() * 2, x.to(torch.uint8)):
        for op in (torch.all, torch.any):
            for dims, keepdim in (([], False), ((), True)):
                got, ref = op(t.to("ember"), dim=dims, keepdim=keepdim), op(t, dim=dims, keepdim=keepdim)
                assert got.dtype == ref.dtype and got.shape == ref.shape
                torch.testing.assert_close(got.cpu(), ref)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_sum_with_an_integer_dtype_truncates_each_float_first(compiled):
    x = torch.tensor([[0.6, -1.7, 2.9], [0.6, 0.5, 2.9], [1.9, -0.5, 0.2]])

    def fn(t):
        return t.sum(0, dtype=torch.int64), t.sum(dtype=torch.int32)

    run = torch.compile(fn, backend="ember") if compiled else fn
    for got, want in zip(run(x.to("ember")), fn(x)):
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("dim", [-1, 0, 1, (0, 2), None])
@pytest.mark.parametrize("correction", [0, 1, 2])
def test_variance_two_pass_matches_cpu(dtype, dim, correction):
    # Rows long enough for the vectorized passes and their tails, values far from zero (where a
    # one-pass sum of squares would cancel), and rows holding inf, NaN or a single value.
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(6, 37, 133, generator=g) * 0.01 + 1000).to(dtype)
    # std_mean's mean of a row holding inf is inf here, NaN on the CPU (its Welford update
    # subtracts inf from inf); the plain mean is inf on both. Checked without the inf.
    same_outcome(lambda t: torch.std_mean(t, dim=dim, correction=correction, keepdim=True), x)
    x[1, 3, 5] = float("inf")
    x[2, 4, 7] = float("nan")
    same_outcome(lambda t: torch.var(t, dim=dim, correction=correction), x)
    same_outcome(lambda t: torch.var(t, dim=dim, correction=correction), x[:, :1, :1])
    if dtype == torch.float32:
        exact = x.double()
        got = torch.var(x.to("ember"), dim=dim, correction=correction).cpu().double()
        finite = torch.isfinite(got)
        torch.testing.assert_close(got[finite], torch.var(exact, dim=dim, correction=correction)[finite],
                                   rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("cols", [513, 1025, 4097])
def test_std_of_a_constant_row_is_not_nan(cols):
    """The shifted two-pass variance could round to a tiny negative m2 for equal values: std was
    NaN where the CPU gives 0."""
    x = torch.full((3, cols), 0.6931472)
    got = x.to("ember").std(-1).cpu()
    assert not got.isnan().any()
    torch.testing.assert_close(got, x.std(-1), atol=1e-6, rtol=0)

"""Native sort, argsort, topk, flip and roll, and median/kthvalue/mode composed from the sort,
match PyTorch CPU: any dim, stable order for ties, NaN placement, k = 0 and k = n, and CPU's
errors."""
import pytest
import torch
import torch_ember

DTYPES = [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool]


def sample(shape, dtype, seed=0, ties=False):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3
    if ties:
        x = x.round()
    if dtype == torch.bool:
        return x > 0
    if not dtype.is_floating_point:
        x = x.round().abs() if dtype == torch.uint8 else x.round()
    return x.to(dtype)


def same_outcome(fn, *args):
    to_e = lambda a: a.to("ember") if isinstance(a, torch.Tensor) else a
    try:
        expected = fn(*args)
    except Exception as err:
        with pytest.raises(type(err)):
            fn(*map(to_e, args))
        return
    got = fn(*map(to_e, args))
    if not isinstance(expected, (tuple, list)):
        expected, got = (expected,), (got,)
    for g, e in zip(got, expected):
        assert g.device.type == "ember" and g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g.cpu(), e, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_like_cpu(dtype, dim, descending, native_only):
    x = sample((6, 7, 5), dtype, ties=True)
    same_outcome(lambda a: torch.sort(a, dim=dim, descending=descending, stable=True), x)
    same_outcome(lambda a: torch.argsort(a, dim=dim, descending=descending, stable=True), x)
    same_outcome(lambda a: torch.sort(a.transpose(0, 2), dim=dim, descending=descending, stable=True), x)


def test_sort_nan_and_inf(native_only):
    x = torch.tensor([3.0, float("nan"), -float("inf"), 1.0, float("nan"), float("inf"), -0.0, 0.0])
    for descending in (False, True):
        same_outcome(lambda a: torch.sort(a, descending=descending, stable=True), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [0, 1, 3, 8])
def test_topk(dtype, largest, k, native_only):
    # Distinct values, so the indices are unique too.
    x = (torch.randperm(40, generator=torch.Generator().manual_seed(k)) - 20).view(5, 8).to(dtype)
    same_outcome(lambda a: torch.topk(a, k, dim=-1, largest=largest), x)
    same_outcome(lambda a: torch.topk(a, min(k, 5), dim=0, largest=largest), x)
    got = torch.topk(x.to("ember"), k, largest=largest, sorted=False).values.cpu().sort(-1).values
    torch.testing.assert_close(got, torch.topk(x, k, largest=largest).values.sort(-1).values)


def test_topk_errors_and_nan():
    same_outcome(lambda a: torch.topk(a, 2), torch.tensor([1.0, float("nan"), 3.0]))
    with pytest.raises(RuntimeError, match="k.*out of range"):
        torch.topk(torch.ones(3, device="ember"), 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_and_roll(dtype, native_only):
    x = sample((4, 5, 6), dtype)
    for dims in ([0], [2], [0, 1, 2], [-1, 0]):
        same_outcome(lambda a: a.flip(dims), x)
    same_outcome(lambda a: a.t().flip(0), x[0])
    for shifts, dims in ((2, 0), (-7, 1), ((1, -2), (0, 2)), (3, None), (13, -1)):
        same_outcome(lambda a: a.roll(shifts, dims), x)
    same_outcome(lambda a: a.transpose(0, 2).roll(1, 1), x)


def test_flip_repeated_dim_is_an_error():
    with pytest.raises(RuntimeError, match="appears multiple times"):
        torch.ones(2, 3, device="ember").flip((0, 0))


# --- median, nanmedian and kthvalue along a dim: sort-based, no CPU fallback -------------------

def _with_nan(x):
    x = x.clone()
    if x.is_floating_point():
        x[0, 1] = float("nan")       # a row with one NaN
        x[-1] = float("nan")         # a row of NaN only
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64])
@pytest.mark.parametrize("ties", [False, True])
def test_median_nanmedian_kthvalue_along_a_dim(dtype, ties, native_only):
    x = _with_nan(sample((4, 9), dtype, ties=ties))
    for dim, keepdim in [(1, False), (0, True), (-1, True)]:
        for fn in (lambda a: torch.median(a, dim, keepdim), lambda a: torch.nanmedian(a, dim, keepdim),
                   lambda a: torch.kthvalue(a, 3, dim, keepdim)):
            expected, got = fn(x), fn(x.to("ember"))
            torch.testing.assert_close(got.values.cpu(), expected.values, equal_nan=True, rtol=0, atol=0)
            if not ties and dtype in (torch.float32, torch.float64):
                # Without ties the index is unique; among NaN only (equal as far as the order
                # goes) it is the CPU's own choice.
                rows = ~torch.isnan(x).all(dim, keepdim=keepdim)
                torch.testing.assert_close(got.indices.cpu()[rows], expected.indices[rows])
    # An odd one: median's index on ties is the first of the equal values in sorted order.
    t = torch.tensor([[2.0, 1, 2, 2, 1]])
    assert torch.median(t.to("ember"), 1).indices.item() == torch.median(t, 1).indices.item()


def test_median_kthvalue_gradients_outs_errors_and_compile(native_only):
    x = torch.randn(5, 7)
    xe = x.to("ember").requires_grad_()
    xc = x.clone().requires_grad_()
    for a in (xe, xc):
        (a.median(1).values.sum() + a.kthvalue(2, 0).values.square().sum()).backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)
    values, indices = torch.empty(0, device="ember"), torch.empty(0, dtype=torch.long, device="ember")
    torch.kthvalue(xe.detach(), 4, 1, out=(values, indices))
    expected = torch.kthvalue(x, 4, 1)
    torch.testing.assert_close(values.cpu(), expected.values)
    torch.testing.assert_close(indices.cpu(), expected.indices)
    with pytest.raises(RuntimeError, match="k out of range"):
        torch.kthvalue(xe.detach(), 8, 1)
    f = torch.compile(lambda a: a.median(1).values * 2 + a.nanmedian(1).values + a.kthvalue(2, 1).values,
                      backend="ember")
    torch.testing.assert_close(f(xe.detach()).cpu(), x.median(1).values * 2 + x.nanmedian(1).values
                               + x.kthvalue(2, 1).values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
def test_mode_matches_cpu(dtype, native_only):
    # Values in 0..3 so every row has ties in count; rows of at most 16 elements, which the CPU
    # sorts stably too (so its index, the last holding the mode, is well defined).
    x = torch.randint(0, 4, (6, 11), generator=torch.Generator().manual_seed(1)).to(dtype)
    for dim, keepdim in [(1, False), (0, True), (-1, True)]:
        expected, got = torch.mode(x, dim, keepdim), torch.mode(x.to("ember"), dim, keepdim)
        assert torch.equal(got.values.cpu(), expected.values)
        assert torch.equal(got.indices.cpu(), expected.indices)
    assert torch.equal(torch.mode(torch.tensor(2.0, device="ember")).values.cpu(), torch.tensor(2.0))


def test_mode_gradients_outs_errors_and_compile(native_only):
    x = torch.randint(0, 3, (5, 9)).float()
    xe, xc = x.to("ember").requires_grad_(), x.clone().requires_grad_()
    for a in (xe, xc):
        torch.mode(a, 1).values.mul(torch.arange(5.0, device=a.device)).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)
    values, indices = torch.empty(0, device="ember"), torch.empty(0, dtype=torch.long, device="ember")
    torch.mode(xe.detach(), 0, out=(values, indices))
    assert torch.equal(values.cpu(), torch.mode(x, 0).values) and torch.equal(indices.cpu(), torch.mode(x, 0).indices)
    with pytest.raises(IndexError, match="non-zero size"):
        torch.mode(torch.empty(2, 0, device="ember"), 1)
    f = torch.compile(lambda a: torch.mode(a, 1).values * 2, backend="ember")
    torch.testing.assert_close(f(xe.detach()).cpu(), torch.mode(x, 1).values * 2)


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "expanded", "sliced"])
def test_flip_and_roll_results_take_the_cpus_layout(layout):
    # flip keeps its input's strides and roll keeps channels-last, as on the CPU, so that a
    # later .view() of the result works (or fails) alike.
    x = {"channels_last": torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
         "transposed": torch.randn(3, 4, 5).transpose(0, 2), "expanded": torch.randn(5, 1, 3).expand(5, 4, 3),
         "sliced": torch.randn(4, 6)[:, ::2]}[layout]
    for fn in (lambda t: t.flip(0), lambda t: t.flip(0, -1), lambda t: t.roll(1, 0), lambda t: t.roll((1, -2), (0, 1)),
               lambda t: t.roll(3)):
        want, got = fn(x), fn(x.to("ember"))
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
        assert got.stride() == want.stride()

"""Writing by index and selecting by mask run natively and match PyTorch CPU: scatter,
scatter_add, scatter_reduce, index_put_ (x[idx] = v, x[mask] = v), index_add, advanced-index
reads (x[idx], x[mask]), masked_select and nonzero, with CPU's errors for bad indices."""
import pytest
import torch
import torch_ember
from index_compare import same_outcome, sample, to_e

DTYPES = [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.bool]


def index(shape, high, seed=1):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_family(dtype, dim, native_only):
    x, src = sample((4, 5, 3), dtype), sample((4, 5, 3), dtype, 2)
    idx = index((3, 4, 2), x.shape[dim])
    same_outcome(lambda a, i, s: a.scatter(dim, i, s), x, idx, src)
    same_outcome(lambda a, i: a.scatter(dim, i, 1), x, idx)
    if dtype != torch.bool:
        same_outcome(lambda a, i, s: a.scatter_add(dim, i, s), x, idx, src)
        for reduce in ("sum", "prod", "amax", "amin"):
            same_outcome(lambda a, i, s: a.scatter_reduce(dim, i, s, reduce), x, idx, src)
        same_outcome(lambda a, i, s: a.clone().scatter_(dim, i, s, reduce="add"), x, idx, src)
        for reduce in ("add", "multiply"):  # a scalar source with a reduction
            same_outcome(lambda a, i: a.clone().scatter_(dim, i, 2, reduce=reduce), x, idx)


def test_scatter_add_with_duplicates_is_deterministic(native_only):
    x = torch.zeros(8, 4)
    idx = torch.zeros(1000, 4, dtype=torch.long)
    src = torch.randn(1000, 4, generator=torch.Generator().manual_seed(0))
    same_outcome(lambda a, i, s: a.scatter_add(0, i, s), x, idx, src)


def test_scatter_errors():
    x = torch.zeros(3, 4)
    same_outcome(lambda a, i, s: a.scatter(0, i, s), x, torch.tensor([[5, 0, 0, 0]]), torch.ones(1, 4))
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        to_e(x).scatter(0, to_e(torch.tensor([0])), to_e(torch.ones(1, 4)))
    with pytest.raises(RuntimeError, match="int32/int64"):
        to_e(x).scatter(0, to_e(torch.zeros(1, 4)), to_e(torch.ones(1, 4)))
    # scatter_reduce "mean" without self, positions that receive nothing included.
    same_outcome(lambda a, i, s: a.scatter_reduce(0, i, s, "mean", include_self=False), x,
                 torch.tensor([[0, 1, 2, 0]]), torch.ones(1, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(dtype, accumulate, native_only):
    x = sample((6, 5), dtype)
    rows = torch.tensor([4, 0, -1])
    same_outcome(lambda a, i, v: a.clone().index_put_((i,), v, accumulate=accumulate), x, rows, sample((3, 5), dtype, 3))
    same_outcome(lambda a, i, v: a.clone().index_put_((None, i), v, accumulate=accumulate), x,
                 torch.tensor([1, 3]), sample((6, 2), dtype, 4))
    same_outcome(lambda a, i, v: a.clone().index_put_((i,), v, accumulate=accumulate), x,
                 torch.tensor([2, 2, 2]), sample((5,), dtype, 5))  # broadcast values, duplicates
    mask = sample((6,), torch.bool, 6)
    same_outcome(lambda a, m, v: a.clone().index_put_((m,), v, accumulate=accumulate), x, mask, sample((5,), dtype, 7))


def test_setitem_forms(native_only):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    e = x.to("ember")
    x[x > 0] = 0.5
    e[e > 0] = 0.5
    x[torch.tensor([0, 2])] = torch.ones(6)
    e[torch.tensor([0, 2]).to("ember")] = torch.ones(6, device="ember")
    x[:, torch.tensor([1, -1])] += 1
    e[:, torch.tensor([1, -1]).to("ember")] += 1
    torch.testing.assert_close(e.cpu(), x)


def test_index_put_errors():
    x = torch.zeros(3, 4)
    same_outcome(lambda a, i: a.clone().index_put_((i,), torch.ones(4)), x, torch.tensor([3]))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        to_e(x).index_put_((to_e(torch.tensor([0, 1])),), to_e(torch.ones(3, 3)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("dim", [0, 1])
def test_index_add(dtype, dim, native_only):
    x = sample((5, 6), dtype)
    idx = torch.tensor([0, 3, 3, 1])
    src = sample((4, 6) if dim == 0 else (5, 4), dtype, 1)
    same_outcome(lambda a, i, s: a.index_add(dim, i, s), x, idx, src)
    same_outcome(lambda a, i, s: a.index_add(dim, i, s, alpha=2), x, idx, src)


@pytest.mark.parametrize("alpha", [True, False])
@pytest.mark.parametrize("dim", [0, -1])
def test_index_add_of_bools_with_a_bool_alpha(alpha, dim, native_only):
    x = torch.rand(5, 5, generator=torch.Generator().manual_seed(3)) < 0.3
    src = torch.rand(5, 5, generator=torch.Generator().manual_seed(4)) < 0.5
    same_outcome(lambda a, i, s: a.index_add(dim, i, s, alpha=alpha), x, torch.tensor([4, 0, 0, 2, 4]), src)


def test_scatter_reduce_bool_mean_is_refused():
    b = torch.tensor([True, False, True])
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        to_e(b).scatter_reduce(0, to_e(torch.tensor([0, 1])), to_e(b[:2]), "mean")


def test_index_add_rejects_bad_indices():
    same_outcome(lambda a, i, s: a.index_add(0, i, s), torch.zeros(3, 2), torch.tensor([-1]), torch.ones(1, 2))
    same_outcome(lambda a, i, s: a.index_add(0, i, s), torch.zeros(3, 2), torch.tensor([3]), torch.ones(1, 2))


@pytest.mark.parametrize("dtype", DTYPES)
def test_advanced_index_reads(dtype, native_only):
    x = sample((5, 4, 3), dtype)
    same_outcome(lambda a, i: a[i], x, torch.tensor([4, 0, -2, 0]))
    same_outcome(lambda a, i: a[:, i], x, torch.tensor([[3, 1], [0, 0]]))
    same_outcome(lambda a, m: a[m], x, sample((5,), torch.bool, 1))
    same_outcome(lambda a, m: a[m], x, sample((5, 4), torch.bool, 2))
    same_outcome(lambda a, m: a[m], x, sample((5, 4, 3), torch.bool, 3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_select_and_nonzero(dtype, native_only):
    x = sample((7, 9), dtype)
    same_outcome(lambda a, m: a.masked_select(m), x, sample((7, 9), torch.bool, 1))
    same_outcome(lambda a, m: a.masked_select(m), x, sample((9,), torch.bool, 2))  # broadcast mask
    same_outcome(lambda a: a.nonzero(), x)
    same_outcome(lambda a: a.t().nonzero(), x)
    same_outcome(lambda a: torch.nonzero(a, as_tuple=True)[1], x)
    same_outcome(lambda a: a[:0].nonzero(), x)


def test_large_nonzero_is_ordered(native_only):
    x = torch.rand(1 << 20, generator=torch.Generator().manual_seed(0)) > 0.7
    same_outcome(lambda a: a.nonzero(), x)
    same_outcome(lambda a: a.view(1024, 1024).nonzero(), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.int8, torch.bool])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin", "mean"])
def test_scatter_reduce_modes(dtype, include_self, reduce, native_only):
    # Integer means round down; integer extremes without self start from the dtype's limits.
    x, src = sample((4, 5, 3), dtype), sample((4, 5, 3), dtype, 2)
    if dtype in (torch.int64, torch.int8):
        x, src = x - 3, src - 4  # negative sums, where rounding down and truncating differ
    idx = index((3, 4, 2), x.shape[1])  # some positions receive several values, some none
    if dtype == torch.bool and reduce == "mean":
        pytest.skip("the CPU has no bool mean (test_scatter_reduce_bool_mean_is_refused)")
    same_outcome(lambda a, i, s: a.scatter_reduce(1, i, s, reduce, include_self=include_self), x, idx, src)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_index_add_into_bool_and_integer_addcmul_with_a_float_value(compiled):
    # alpha * a bool source is an integer, and an integer addcmul truncates a float value: the
    # CPU's answers, eagerly and as compiled graph steps.
    def fn(x, y):
        idx = torch.tensor([0, 2], device=x.device)
        return (x.index_add(0, idx, torch.ones(2, 3, dtype=torch.bool, device=x.device), alpha=2),
                torch.addcmul(y, y, y, value=0.5))

    x = torch.tensor([[True, False, True], [False, False, True], [False, True, False]])
    y = torch.tensor([1, 2, 3, -4], dtype=torch.int32)
    run = torch.compile(fn, backend="ember") if compiled else fn
    for got, want in zip(run(x.to("ember"), y.to("ember")), fn(x, y)):
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


# Half-precision accumulation: the CPU sums scatter_add / scatter_reduce (and index_add of rows)
# in float and rounds once, but rounds 1-d index_add and scaled index_add after every update.
# Ember must agree bit for bit; many updates per element make any difference large. index_put_
# with accumulate (x[idx]'s gradient) sums in float and rounds once, as CUDA does, where the CPU
# rounds after every update.
_IDX = torch.randint(0, 10, (4000,), generator=torch.Generator().manual_seed(0))
_SRC = torch.randn(4000, 16, generator=torch.Generator().manual_seed(1))
_I2 = torch.randint(0, 10, (4000, 16), generator=torch.Generator().manual_seed(2))
HALF_ACCUMULATION = {
    "index_add_rows": lambda t, d: torch.zeros(10, 16, dtype=t, device=d).index_add(0, _IDX.to(d), _SRC.to(d, t)),
    "index_add_dim1": lambda t, d: torch.zeros(16, 10, dtype=t, device=d).index_add(1, _IDX.to(d), _SRC.t().to(d, t)),
    "index_add_1d": lambda t, d: torch.zeros(10, dtype=t, device=d).index_add(0, _IDX.to(d), _SRC[:, 0].to(d, t)),
    "index_add_alpha": lambda t, d: torch.zeros(10, 16, dtype=t, device=d).index_add(0, _IDX.to(d), _SRC.to(d, t), alpha=2),
    "scatter_add": lambda t, d: torch.zeros(10, 16, dtype=t, device=d).scatter_add(0, _I2.to(d), _SRC.to(d, t)),
    "scatter_add_1d": lambda t, d: torch.zeros(10, dtype=t, device=d).scatter_add(0, _IDX.to(d), _SRC[:, 0].to(d, t)),
    "scatter_add_strided_out": lambda t, d: torch.zeros(16, 10, dtype=t, device=d).t().scatter_add(
        0, _I2.to(d), _SRC.to(d, t)),
    "scatter_reduce_sum": lambda t, d: torch.zeros(10, 16, dtype=t, device=d).scatter_reduce(
        0, _I2.to(d), _SRC.to(d, t), "sum"),
    "scatter_reduce_mean": lambda t, d: torch.zeros(10, dtype=t, device=d).scatter_reduce(
        0, _IDX.to(d), _SRC[:, 0].to(d, t), "mean", include_self=False),
    "scatter_reduce_prod": lambda t, d: torch.ones(10, 16, dtype=t, device=d).scatter_reduce(
        0, _I2[:300].to(d), (1 + _SRC[:300] * 0.01).to(d, t), "prod"),
}


@pytest.mark.parametrize("name", sorted(HALF_ACCUMULATION))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_accumulation_matches_cpu_bit_for_bit(name, dtype):
    fn = HALF_ACCUMULATION[name]
    assert torch.equal(fn(dtype, "ember").cpu(), fn(dtype, "cpu"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_index_put_accumulates_in_float(dtype):
    got = torch.zeros(10, 16, dtype=dtype, device="ember").index_put_(
        (_IDX.to("ember"),), _SRC.to("ember", dtype), accumulate=True)
    expected = torch.zeros(10, 16).index_put_((_IDX,), _SRC.to(dtype).float(), accumulate=True).to(dtype)
    assert torch.equal(got.cpu(), expected)


def test_compiled_scatter_add_accumulates_like_eager():
    fn = torch.compile(lambda src, idx: torch.zeros(10, 16, dtype=src.dtype, device=src.device).scatter_add(0, idx, src),
                       backend="ember")
    src = _SRC.bfloat16()
    assert torch.equal(fn(src.to("ember"), _I2.to("ember")).cpu(), torch.zeros(10, 16).bfloat16().scatter_add(0, _I2, src))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dim", [0, -1])
def test_index_reduce(dtype, include_self, reduce, dim, native_only):
    x = sample((5, 4), dtype)
    if dtype == torch.int64:
        x = x - 3
    idx = torch.tensor([3, 0, 3, 3, 1, 0] if dim == 0 else [2, 2, 0, 3, 2, 2])  # slice 2 of dim 0 gets nothing
    src = sample((6, 4) if dim == 0 else (5, 6), dtype, 1)
    same_outcome(lambda a, i, s: a.index_reduce(dim, i, s, reduce, include_self=include_self), x, idx, src)
    same_outcome(lambda a, i, s: a.clone().index_reduce_(dim, i, s, reduce, include_self=include_self), x, idx, src)


def test_index_reduce_backward_and_errors(native_only):
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    src = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([1, 4, 1, 0])
    for reduce in ("prod", "mean", "amax", "amin"):
        want = torch.autograd.grad(x.index_reduce(0, idx, src, reduce).square().sum(), (x, src))
        xe, se = to_e(x.detach()).requires_grad_(), to_e(src.detach()).requires_grad_()
        got = torch.autograd.grad(xe.index_reduce(0, to_e(idx), se, reduce).square().sum(), (xe, se))
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w)
    same_outcome(lambda a, i, s: a.index_reduce(0, i, s, "amax"), torch.zeros(3, 2), torch.tensor([3]), torch.ones(1, 2))
    same_outcome(lambda a, i, s: a.index_reduce(0, i, s, "amax"), torch.zeros(3, 2), torch.tensor([-1]), torch.ones(1, 2))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod", "amax", "amin"])
@pytest.mark.parametrize("initial", [None, 0.5])
@pytest.mark.parametrize("by", ["lengths", "offsets"])
def test_segment_reduce_is_native_and_matches_cpu(reduce, initial, by, native_only):
    """Empty segments, ties, zeros and a NaN; forward and backward against the CPU. (The CPU
    gives each tied max/min the whole of a negative upstream gradient; positive ones are split
    evenly there and here, so the gradient below is positive.)"""
    lengths = torch.tensor([3, 0, 2, 4, 1, 3])
    data = torch.tensor([[1.0, 3.0], [3.0, 3.0], [2.0, -1.0], [0.0, 5.0], [0.0, 2.0], [4.0, float("nan")],
                         [4.0, 1.5], [-2.0, 1.5], [0.5, 0.0], [7.0, 7.0], [-1.0, 2.0], [6.0, 0.0], [6.0, 0.0]])
    grad = torch.rand(6, 2, generator=torch.Generator().manual_seed(0)) + 0.5
    kwargs = {"lengths": lengths} if by == "lengths" else {"offsets": torch.cat([torch.zeros(1, dtype=torch.long),
                                                                                  lengths.cumsum(0)])}
    results = []
    for device in ("cpu", "ember"):
        x = data.to(device).requires_grad_()
        out = torch.segment_reduce(x, reduce, initial=initial, **{k: v.to(device) for k, v in kwargs.items()})
        (g,) = torch.autograd.grad(out, x, grad.to(device))
        results.append((out.detach().cpu(), g.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0], equal_nan=True)
    torch.testing.assert_close(results[1][1], results[0][1], equal_nan=True)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "prod"])
def test_unsafe_segment_reduce_ignores_rows_past_the_lengths_like_cpu(reduce, native_only):
    """unsafe=True skips the check that the lengths cover every row: rows past them belong to no
    segment (they used to index past the output), forward and backward as on the CPU."""
    data = torch.randn(10, 3, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([1, 2, 0, 6, 0])  # 9 of 10 rows
    results = []
    for device in ("cpu", "ember"):
        x = data.to(device).requires_grad_()
        out = torch.segment_reduce(x, reduce, lengths=lengths.to(device), unsafe=True, initial=1)
        (g,) = torch.autograd.grad(out, x, torch.ones_like(out))
        results.append((out.detach().cpu(), g.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0], equal_nan=True)
    torch.testing.assert_close(results[1][1], results[0][1], equal_nan=True)


def test_segment_reduce_compiles_and_refuses_bad_lengths_like_cpu(fresh_compile):
    data, lengths = torch.randn(7, 3), torch.tensor([2, 0, 5])
    f = torch.compile(lambda x, n: torch.segment_reduce(x, "mean", lengths=n).relu(), backend="ember", fullgraph=True)
    torch.testing.assert_close(f(data.to("ember"), lengths.to("ember")).cpu(),
                               torch.segment_reduce(data, "mean", lengths=lengths).relu(), equal_nan=True)
    for bad, message in ((torch.tensor([2, 0, 4]), "sum to data.size"), (torch.tensor([8, -1, 0]), "negative")):
        with pytest.raises(RuntimeError, match=message):
            torch.segment_reduce(data, "sum", lengths=bad)
        with pytest.raises(RuntimeError, match=message):
            torch.segment_reduce(data.to("ember"), "sum", lengths=bad.to("ember"))

"""Native cat, index_select, embedding (forward and backward), tril/triu, the scans (cumsum,
logcumsumexp, cummax/cummin) and arange match PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F
import torch_ember
from index_compare import same_outcome, sample

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat(dtype, native_only):
    x, y = sample((3, 4, 5), dtype), sample((3, 2, 5), dtype, 1)
    same_outcome(lambda a, b: torch.cat([a, b], 1), x, y)
    same_outcome(lambda a: torch.cat([a, a, a], 0), x)
    same_outcome(lambda a: torch.cat([a, a.transpose(0, 1).transpose(0, 1)], -1), x)
    same_outcome(lambda a: torch.cat([a, torch.empty(0, dtype=a.dtype, device=a.device)], 0), x)
    same_outcome(lambda a, b: torch.cat([a, b.double()], 1), x, y)  # promotes like CPU


def test_cat_errors_match_cpu():
    same_outcome(lambda a, b: torch.cat([a, b], 0), torch.ones(2, 3), torch.ones(2, 4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_select(dtype):
    x = sample((3, 4, 5), dtype)
    same_outcome(lambda a, i: a.index_select(1, i), x, torch.tensor([3, 0, 0, 2]))
    same_outcome(lambda a, i: a.index_select(-1, i), x, torch.tensor([4]))
    same_outcome(lambda a, i: a.index_select(0, i), x, torch.tensor([5]))   # out of range
    same_outcome(lambda a, i: a.index_select(0, i), x, torch.tensor([-1]))  # CPU refuses negatives


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("padding_idx", [None, 1])
def test_embedding_forward_backward(dtype, padding_idx, native_only):
    w = sample((10, 6), dtype)
    idx = torch.tensor([[1, 2, 1], [9, 0, 1]])

    def run(weight, indices):
        weight = weight.detach().requires_grad_()
        y = F.embedding(indices, weight, padding_idx=padding_idx)
        g = torch.ones_like(y) * torch.arange(6, dtype=y.dtype, device=y.device)
        return torch.cat([y.detach().reshape(-1, 6), torch.autograd.grad(y, weight, g)[0]])

    same_outcome(run, w, idx)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tril_triu(dtype, native_only):
    x = sample((3, 4, 5), dtype)
    for fn in (lambda a: a.tril(), lambda a: a.triu(1), lambda a: torch.tril(a, -2),
               lambda a: a.clone().tril_(1), lambda a: a.transpose(1, 2).triu(-1)):
        same_outcome(fn, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cumsum(dtype, native_only):
    x = sample((3, 4, 5), dtype)
    same_outcome(lambda a: a.cumsum(1), x)
    same_outcome(lambda a: a.cumsum(0), x)
    same_outcome(lambda a: torch.cumsum(a, -1, dtype=torch.float64), x)


def same_scan(fn, x):
    """fn's result (a tensor or a (values, indices) pair) on ember equals CPU's, NaN included."""
    expected, got = fn(x), fn(x.to("ember"))
    for e, g in zip(*((r,) if isinstance(r, torch.Tensor) else tuple(r) for r in (expected, got))):
        assert g.device.type == "ember" and g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e, equal_nan=True)


def _scan_input():
    x = sample((3, 7, 5), torch.float32)
    x[0, 2, 1] = float("nan")
    x[1, 3, 2] = x[1, 5, 2] = float("inf")  # equal infinities: logcumsumexp keeps inf, not NaN
    x[2, :, 0] = -float("inf")
    x[2, 4, 3] = x[2, 1, 3]  # a tie: cummax/cummin report the later position
    return x


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scans_nan_inf_ties(dim, native_only):
    x = _scan_input()
    for fn in (torch.cummax, torch.cummin, torch.logcumsumexp):
        same_scan(lambda a: fn(a, dim), x)
        same_scan(lambda a: fn(a.transpose(0, 2), dim), x)  # strided input


@pytest.mark.parametrize("dtype", DTYPES + [torch.int32, torch.uint8, torch.float16])
def test_cummax_cummin_dtypes(dtype, native_only):
    x = sample((4, 6), dtype)
    same_scan(lambda a: torch.cummax(a, 1), x)
    same_scan(lambda a: torch.cummin(a, 0), x)
    if dtype.is_floating_point:
        same_scan(lambda a: torch.logcumsumexp(a, 1), x)


def test_logcumsumexp_is_stable_where_exp_underflows(native_only):
    # exp of every value is 0 in float32: a composed log(cumsum(exp(x))) would give -inf.
    x = sample((2, 1000), torch.float32) * 50 - 200
    same_scan(lambda a: torch.logcumsumexp(a, 1), x)


def test_scans_out_and_backward(native_only):
    x = sample((7, 3), torch.float32)
    v, i = torch.empty(3, 7).t(), torch.empty(3, 7, dtype=torch.long).t()  # strided out=
    ve, ie = v.to("ember"), i.to("ember")
    torch.cummax(x, 0, out=(v, i))
    torch.cummax(x.to("ember"), 0, out=(ve, ie))
    torch.testing.assert_close(ve.cpu(), v)
    torch.testing.assert_close(ie.cpu(), i)
    xd = sample((4, 6), torch.float64)
    for fn in (lambda t: torch.cummax(t, 1)[0], lambda t: torch.cummin(t, 0)[0], lambda t: torch.logcumsumexp(t, 1)):
        a, b = xd.clone().requires_grad_(), xd.to("ember").requires_grad_()
        fn(a).pow(2).sum().backward()
        fn(b).pow(2).sum().backward()
        torch.testing.assert_close(b.grad.cpu(), a.grad)


@pytest.mark.parametrize("args", [(10,), (2, 11, 3), (0, 1, 0.1), (-5, 5, 0.7), (5, -5, -1)])
@pytest.mark.parametrize("dtype", [None, torch.float64, torch.int32])
def test_arange(args, dtype, native_only):
    torch.testing.assert_close(torch.arange(*args, dtype=dtype, device="ember").cpu(),
                               torch.arange(*args, dtype=dtype))


def test_arange_into_an_out_of_another_size_warns_like_the_cpu(native_only):
    # fft.fftfreq(n, out=...) resizes through this path; an empty out resizes silently.
    for device in ("cpu", "ember"):
        out = torch.empty(3, device=device)
        with pytest.warns(UserWarning, match="does not match the computed number of elements 5"):
            torch.arange(5, out=out)
        torch.testing.assert_close(out.cpu(), torch.arange(5.0))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.arange(4, out=torch.empty(0, device="ember"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_linspace_matches_the_cpu_bit_for_bit(dtype, native_only, fresh_compile):
    """The CPU's rounding (a fused multiply-add per float32 point, 16-bit arithmetic rounding
    after every step), eager and compiled; an end beyond the dtype is the CPU's error."""
    cases = [(-1, 1, 24), (0.1, 7.3, 1000), (5, -3, 77), (2, 2, 5), (0, 1, 2), (3, 9, 1), (1e-3, 1e4, 4097)]
    for start, end, steps in cases:
        want = torch.linspace(start, end, steps, dtype=dtype)
        assert torch.equal(torch.linspace(start, end, steps, dtype=dtype, device="ember").cpu(), want)
    compiled = torch.compile(lambda x: x + torch.linspace(0.1, 7.3, 1000, dtype=dtype, device="ember"),
                             backend="ember", fullgraph=True)
    got = compiled(torch.zeros(1000, dtype=dtype, device="ember"))
    assert torch.equal(got.cpu(), torch.linspace(0.1, 7.3, 1000, dtype=dtype))
    if dtype == torch.float16:
        with pytest.raises(RuntimeError, match="cannot be converted to type c10::Half without overflow"):
            torch.linspace(0, 70000, 9, dtype=dtype, device="ember")


def test_arange_into_an_out_of_another_shape_with_as_many_elements_keeps_it(native_only):
    """As on the CPU: the out= keeps its shape and is filled in row-major order, contiguous or not."""
    for make in (lambda d: torch.empty(2, 3, dtype=torch.int64, device=d),
                 lambda d: torch.empty(3, 3, 4, dtype=torch.int64, device=d).permute(2, 0, 1)):
        want, got = make("cpu"), make("ember")
        torch.arange(want.numel(), out=want)
        torch.arange(got.numel(), out=got)
        assert got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dtype, dim, native_only):
    x = sample((3, 4, 5), dtype)
    g = torch.Generator().manual_seed(5)
    size = list(x.shape)
    size[dim] = 2
    idx = torch.randint(0, x.shape[dim], size, generator=g)
    same_outcome(lambda a, i: torch.gather(a, dim, i), x, idx)
    same_outcome(lambda a, i: torch.gather(a.transpose(0, 2), dim, i.transpose(0, 2)), x, idx)


def test_take_along_dim_matches_cpu():
    x = sample((3, 4, 5), torch.float32)
    idx = torch.randint(0, 4, (3, 2, 5), generator=torch.Generator().manual_seed(6))
    same_outcome(lambda a, i: torch.take_along_dim(a, i, 1), x, idx)


def test_gather_out_of_range_is_a_device_error():
    x = torch.randn(3, 4)
    same_outcome(lambda a, i: torch.gather(a, 1, i), x, torch.tensor([[0, 4]] * 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("args", [(10, -2, 2), (5, 0, 0), (7, -1, 1), (3, 0.5, 0.5)])
def test_histc_matches_cpu(dtype, args):
    torch.manual_seed(0)
    x = torch.randn(5000).to(dtype)
    torch_ember.reset_fallback_stats()
    torch.testing.assert_close(torch.histc(x.to("ember"), *args).cpu(), torch.histc(x, *args))
    # bfloat16 bins are placed with bfloat16 edges, as the CPU computes them: it runs there.
    assert bool(torch_ember.fallback_report()) == (dtype == torch.bfloat16)
    x[7] = float("nan")
    if args[1] == args[2]:  # the range comes from the data: NaN makes it refused, as on the CPU
        with pytest.raises(RuntimeError, match="is not finite"):
            torch.histc(x.to("ember"), *args)
    else:  # NaN is not counted
        torch.testing.assert_close(torch.histc(x.to("ember"), *args).cpu(), torch.histc(x, *args))


def test_histc_counts_integers_like_cuda(native_only):
    # The CPU refuses integer histc; CUDA counts them, and libraries that see an accelerator
    # pass int32 expert ids (transformers' grouped MoE).
    ids = torch.randint(0, 6, (1000,), dtype=torch.int32)
    got = torch.histc(ids.to("ember"), bins=6, min=0, max=5)
    assert got.dtype == torch.int32
    assert got.cpu().tolist() == torch.bincount(ids, minlength=6).tolist()
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(ids.to("ember"), bins=0)
    with pytest.raises(RuntimeError, match="torch.histc: max must be larger than min"):
        torch.histc(ids.to("ember").float(), bins=3, min=2, max=1)


@pytest.mark.parametrize("weights", [None, torch.float32, torch.float64, torch.int64, torch.bfloat16])
@pytest.mark.parametrize("minlength", [0, 12])
def test_bincount_matches_cpu(native_only, weights, minlength):
    torch.manual_seed(0)
    x = torch.randint(0, 7, (300,))
    w = None if weights is None else (torch.rand(300) * 4).to(weights)
    ref = torch.bincount(x, w, minlength)
    got = torch.bincount(x.to("ember"), None if w is None else w.to("ember"), minlength)
    assert got.dtype == ref.dtype
    torch.testing.assert_close(got.cpu(), ref)


def test_bincount_edges_and_errors(native_only):
    assert torch.bincount(torch.tensor([], dtype=torch.long, device="ember"), minlength=3).cpu().tolist() == [0, 0, 0]
    assert torch.bincount(torch.tensor([3, 1], dtype=torch.uint8, device="ember")).cpu().tolist() == [0, 1, 0, 1]
    for bad in (torch.tensor([-1]), torch.tensor([[1]])):
        with pytest.raises(RuntimeError, match="1-d non-negative integral"):
            torch.bincount(bad.to("ember"))
    for bad, name in ((torch.tensor([1.0]), "Float"), (torch.tensor([[True]]), "Bool")):  # the dtype first, as on CPU
        with pytest.raises(NotImplementedError, match=f"not implemented for '{name}'"):
            torch.bincount(bad.to("ember"))
    with pytest.raises(RuntimeError, match="same length as input"):
        torch.bincount(torch.tensor([1, 2], device="ember"), torch.ones(3, device="ember"))


def test_int32_indices_for_embedding_and_index_select(native_only):
    torch.manual_seed(0)
    w = torch.randn(10, 4)
    ids = torch.tensor([[1, 3, 3], [9, 0, 2]], dtype=torch.int32)
    we = w.to("ember").requires_grad_()
    wc = w.clone().requires_grad_()
    F.embedding(ids.to("ember"), we).square().sum().backward()
    F.embedding(ids, wc).square().sum().backward()
    torch.testing.assert_close(we.grad.cpu(), wc.grad)
    torch.testing.assert_close(torch.index_select(w.to("ember"), 0, ids[0].to("ember")).cpu(),
                               torch.index_select(w, 0, ids[0]))


def test_several_index_tensors_read_and_write(native_only):
    # x[rows, cols] (MoE slots, FlexAttention's dense block masks): consecutive index tensors,
    # broadcast together, negative ones wrapping; reads, writes and accumulation.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 6, 3, generator=g)
    rows = torch.tensor([[0], [4], [-1]])
    cols = torch.tensor([1, -2, 5, 0])
    xe = x.to("ember")
    torch.testing.assert_close(xe[rows.to("ember"), cols.to("ember")].cpu(), x[rows, cols])
    torch.testing.assert_close(xe[:, cols.to("ember")[:2], torch.tensor([0, 2]).to("ember")].cpu(),
                               x[:, cols[:2], torch.tensor([0, 2])])
    vals = torch.randn(3, 4, 3, generator=g)
    a, b = x.clone(), xe.clone()
    a[rows, cols] = vals
    b[rows.to("ember"), cols.to("ember")] = vals.to("ember")
    torch.testing.assert_close(b.cpu(), a)
    r1, c1 = torch.tensor([0, 0, 1]), torch.tensor([2, 2, 3])
    a.index_put_((r1, c1), torch.ones(3, 3), accumulate=True)
    b.index_put_((r1.to("ember"), c1.to("ember")), torch.ones(3, 3, device="ember"), accumulate=True)
    torch.testing.assert_close(b.cpu(), a)


def test_several_index_tensors_out_of_range():
    x = torch.zeros(4, 4, device="ember")
    # Column 4 is out of range even though row 0, column 4 would be a valid flat offset.
    with pytest.raises(RuntimeError, match="index out of bounds"):
        x[torch.tensor([0], device="ember"), torch.tensor([4], device="ember")] = 1.0
        torch.ember.synchronize()


@pytest.mark.parametrize("view", ["t", "step", "permute"])
def test_indexing_strided_views_runs_natively(view, native_only):
    # Advanced indexing of a transposed or sliced view reads (and writes) through a contiguous
    # copy on the device instead of the CPU fallback.
    base = torch.arange(60.0).reshape(5, 12)
    make = {"t": lambda b: b.t(), "step": lambda b: b[:, ::2], "permute": lambda b: b.reshape(5, 3, 4).permute(2, 0, 1)}[view]
    idx = torch.tensor([0, 2, -1])
    cpu, dev = base.clone(), base.to("ember")
    torch.testing.assert_close(make(dev)[idx.to("ember")].cpu(), make(cpu)[idx])
    make(cpu)[idx] = -1.0
    make(dev)[idx.to("ember")] = -1.0
    torch.testing.assert_close(dev.cpu(), cpu)
    make(cpu).index_put_((idx,), torch.tensor(2.0), accumulate=True)
    make(dev).index_put_((idx.to("ember"),), torch.tensor(2.0, device="ember"), accumulate=True)
    torch.testing.assert_close(dev.cpu(), cpu)


@pytest.mark.parametrize("dtype", DTYPES + [torch.int32, torch.uint8, torch.int8])
def test_cumprod_is_native(dtype, native_only):
    # It ran as torch._decomp's quadratic composition (floats) or on the CPU (integers).
    x = _scan_input() if dtype.is_floating_point else (sample((3, 7, 5), torch.float32) * 2).to(dtype)
    if dtype.is_floating_point:
        x = x.to(dtype)
        x[1, 4, 0] = 0.0
    for dim in (0, 1, -1):
        same_scan(lambda a: torch.cumprod(a, dim), x)
        same_scan(lambda a: torch.cumprod(a.transpose(0, 2), dim), x)
    same_scan(lambda a: torch.cumprod(torch.full((40,), 3, dtype=torch.int64, device=a.device), 0), x)  # wraps
    xd = sample((4, 6), torch.float64)
    xd[1, 2] = xd[2, 1] = xd[2, 4] = 0.0  # zeros: the backward's special case
    a, b = xd.clone().requires_grad_(), xd.to("ember").requires_grad_()
    torch.cumprod(a, 1).sin().sum().backward()
    torch.cumprod(b, 1).sin().sum().backward()
    torch.testing.assert_close(b.grad.cpu(), a.grad)


def test_separated_and_cpu_index_tensors_run_natively(native_only):
    # x[i, :, j] puts the broadcast index dims first (Longformer's global attention); CPU index
    # tensors into an ember tensor are moved to the device, as CUDA does (BEiT's position bias).
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 5, 6, generator=g)
    i0, i1 = torch.tensor([[0], [2], [-1]]), torch.tensor([1, 4, -2, 0])
    xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
    for pick in (lambda t, a, b: t[a, :, b], lambda t, a, b: t[:, a[:, 0], :, b[:3]], lambda t, a, b: t[a, :, :, b]):
        ref, got = pick(xc, i0, i1 % 5), pick(xe, i0.to("ember"), (i1 % 5).to("ember"))
        torch.testing.assert_close(got.cpu(), ref)
        ref.square().sum().backward()
        got.square().sum().backward()
        torch.testing.assert_close(xe.grad.cpu(), xc.grad)
    a, b = x.clone(), x.to("ember")
    vals = torch.randn(3, 4, 4, 6, generator=g)
    a[i0, :, i1 % 5] = vals
    b[i0.to("ember"), :, (i1 % 5).to("ember")] = vals.to("ember")
    torch.testing.assert_close(b.cpu(), a)
    r, c = torch.tensor([0, 0, 1]), torch.tensor([2, 2, 3])
    put = torch.ops.aten.index_put_  # the Python method takes no None (a slice) among the indices
    put(a, [r, None, c], torch.ones(3, 4, 6), True)  # the repeated (0, :, 2) adds twice
    put(b, [r.to("ember"), None, c.to("ember")], torch.ones(3, 4, 6, device="ember"), True)
    torch.testing.assert_close(b.cpu(), a)
    t = torch.randn(10, 4, generator=g)
    tc, te = t.clone().requires_grad_(), t.to("ember").requires_grad_()
    cpu_idx = torch.tensor([1, 2, 3, 3])
    ref, got = tc[cpu_idx], te[cpu_idx]
    assert got.device.type == "ember"
    torch.testing.assert_close(got.cpu(), ref.detach())
    ref.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(te.grad.cpu(), tc.grad)
    te2 = t.to("ember")
    te2[cpu_idx] = 0.5
    t2 = t.clone()
    t2[cpu_idx] = 0.5
    torch.testing.assert_close(te2.cpu(), t2)


def test_any_all_over_nothing_and_empty_index_puts(native_only):
    e = torch.zeros(0, 2, dtype=torch.bool)
    for dims in ((0,), (0, 1), None):
        for op in (torch.any, torch.all):
            kw = {} if dims is None else {"dim": dims}
            torch.testing.assert_close(op(e.to("ember"), **kw).cpu(), op(e, **kw))
    torch.testing.assert_close(torch.zeros(2, 0, dtype=torch.uint8, device="ember").all(dim=1).cpu(),
                               torch.zeros(2, 0, dtype=torch.uint8).all(dim=1))
    t = torch.zeros(4, 3, device="ember")
    empty = torch.zeros(0, dtype=torch.long, device="ember")
    t[empty, empty] = 1.0
    assert not t.cpu().any()


def test_index_shapes_that_do_not_broadcast_raise_index_error():
    a = torch.zeros(3, 3, device="ember")
    rows, cols = torch.tensor([0, 1], device="ember"), torch.tensor([0, 1, 2], device="ember")
    with pytest.raises(IndexError, match="shape mismatch"):
        a[rows, cols]
    with pytest.raises(IndexError, match="shape mismatch"):
        a[rows, cols] = 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_copy_matches_cpu(dtype, dim, native_only):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 5, 6, generator=g) * 4).to(dtype)
    index = torch.tensor([3, 0, 1])
    source_shape = list(x.shape)
    source_shape[dim] = 3
    source = (torch.randn(source_shape, generator=g) * 4).to(dtype)
    want = x.index_copy(dim, index, source)
    torch.testing.assert_close(x.to("ember").index_copy(dim, index.to("ember"), source.to("ember")).cpu(), want)
    y = x.to("ember").transpose(0, 2)  # in place into a non-contiguous tensor
    y.index_copy_(2 - dim % 3, index.to("ember"), source.to("ember").transpose(0, 2))
    torch.testing.assert_close(y.transpose(0, 2).cpu(), want)


def test_index_copy_kv_cache_update_and_gradients(native_only):
    # Hugging Face's static cache writes each step's keys at cache_position along the sequence dim.
    cache = torch.zeros(2, 4, 16, 8)
    keys = torch.randn(2, 4, 3, 8, requires_grad=True)
    position = torch.tensor([5, 6, 7])
    base = torch.randn(2, 4, 16, 8, requires_grad=True)
    want = base.index_copy(2, position, keys)
    want.square().sum().backward()
    kc, bc = keys.detach().to("ember").requires_grad_(), base.detach().to("ember").requires_grad_()
    got = bc.index_copy(2, position.to("ember"), kc)
    got.square().sum().backward()
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    torch.testing.assert_close(kc.grad.cpu(), keys.grad)
    torch.testing.assert_close(bc.grad.cpu(), base.grad)
    cache_e = cache.to("ember")
    cache_e.index_copy_(2, position.to("ember"), keys.detach().to("ember"))
    torch.testing.assert_close(cache_e.cpu(), cache.index_copy(2, position, keys.detach()))


@pytest.mark.parametrize("op", ["index_copy_", "index_add_"])
@pytest.mark.parametrize("bad", [-1, 3, -4])
def test_index_copy_and_index_add_refuse_indices_outside_the_dim(op, bad):
    # The CPU refuses negative indices here (index_put_ and index_select count them from the
    # end); the check runs in the kernel and surfaces at the next synchronization, naming the index.
    prefix = r"index_copy_\(\): " if op == "index_copy_" else ""
    with pytest.raises(RuntimeError, match=prefix + f"index {bad} is out of bounds for dimension 0 with size 3"):
        getattr(torch.zeros(3, 2, device="ember"), op)(0, torch.tensor([bad], device="ember"),
                                                        torch.ones(1, 2, device="ember"))
        torch.ember.synchronize()
    torch.ember.synchronize()  # reported once
    with pytest.raises(RuntimeError, match="Expected a long tensor for index"):
        torch.zeros(3, 2, device="ember").index_copy_(0, torch.tensor([1], dtype=torch.int32, device="ember"),
                                                      torch.ones(1, 2, device="ember"))


def test_compiled_index_add_and_index_copy_check_indices_as_eagerly():
    # Kept whole in compiled graphs: their decomposition (index_put) would count -1 from the end.
    def f(base, index, rows):
        return base.index_add(0, index, rows * 2).sum(-1) + base.index_copy(0, index, rows).sum(-1)

    torch._dynamo.reset()
    base, rows = torch.randn(4, 8), torch.randn(3, 8)
    compiled = torch.compile(f, backend="ember", fullgraph=True)
    index = torch.tensor([1, 2, 0])
    torch.testing.assert_close(compiled(base.to("ember"), index.to("ember"), rows.to("ember")).cpu(),
                               f(base, index, rows))
    with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 0 with size 4"):
        compiled(base.to("ember"), torch.tensor([1, -1, 3], device="ember"), rows.to("ember")).cpu()
    torch.ember.synchronize()


def test_index_copy_into_a_0d_tensor(native_only):
    for dtype in (torch.float32, torch.int64, torch.bool):
        x, src = torch.tensor(3).to(dtype), torch.tensor(5).to(dtype)
        want = x.index_copy(0, torch.tensor([0]), src)
        torch.testing.assert_close(x.to("ember").index_copy(0, torch.tensor([0], device="ember"), src.to("ember")).cpu(),
                                   want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.float16, torch.bool])
def test_uint8_masks_read_natively_like_cpu(dtype, native_only):
    # x[uint8_mask] (PyTorch's deprecated mask spelling) went to the CPU fallback for most
    # dtypes, adding a second warning; it reads where the mask is nonzero, as a bool mask.
    x = (torch.arange(24) % 5).to(dtype).reshape(4, 6)
    rows = torch.tensor([1, 0, 2, 0], dtype=torch.uint8)
    cols = torch.tensor([0, 7, 1, 0, 0, 1], dtype=torch.uint8)
    for fn in (lambda t, r, c: t[r], lambda t, r, c: t[:, c], lambda t, r, c: t[r.unsqueeze(1) * c]):
        with pytest.warns(UserWarning, match="indexing with dtype torch.uint8 is now deprecated"):
            got = fn(x.to("ember"), rows.to("ember"), cols.to("ember")).cpu()
        with pytest.warns(UserWarning, match="deprecated"):
            want = fn(x, rows, cols)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_masks_mixed_with_integer_indices_run_natively(native_only):
    # x[mask, idx] (detection losses pick each matched anchor's class this way): the mask is the
    # integer indices of its true positions, as PyTorch expands it.
    g = torch.Generator().manual_seed(3)
    t = torch.randn(6, 5, 4, generator=g)
    mask = torch.rand(6, generator=g) > 0.4
    mask2 = torch.rand(6, 5, generator=g) > 0.5
    idx = torch.randint(0, 5, (int(mask.sum()),), generator=g)
    idx2 = torch.randint(0, 4, (int(mask2.sum()),), generator=g)
    reads = [lambda x, d: x[mask.to(d), idx.to(d)], lambda x, d: x[mask.to(d), :, 1],
             lambda x, d: x[mask2.to(d), idx2.to(d)], lambda x, d: x[mask.to(d), idx.to(d), 2],
             lambda x, d: x[mask, idx]]  # CPU index tensors, as CUDA accepts
    for read in reads:
        xc, xe = t.clone().requires_grad_(), t.to("ember").requires_grad_()
        expected, got = read(xc, "cpu"), read(xe, "ember")
        torch.testing.assert_close(got.cpu(), expected)
        w = torch.randn(expected.shape, generator=g)
        expected.backward(w)
        got.backward(w.to("ember"))
        torch.testing.assert_close(xe.grad.cpu(), xc.grad)
    for accumulate in (False, True):
        a, b = t.clone(), t.to("ember")
        v = torch.randn(int(mask.sum()), 4, generator=g)
        a.index_put_((mask, idx), v, accumulate=accumulate)
        b.index_put_((mask.to("ember"), idx.to("ember")), v.to("ember"), accumulate=accumulate)
        a[mask, idx] = 7.0
        b[mask.to("ember"), idx.to("ember")] = 7.0
        torch.testing.assert_close(b.cpu(), a)
    with pytest.raises(IndexError, match=r"The shape of the mask \[5\] at index 0 does not match"):
        t.to("ember")[torch.ones(5, dtype=torch.bool, device="ember"), idx[:1].to("ember")]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sixteen_bit_gradients_of_repeated_indices_sum_in_float(dtype, native_only):
    # CUDA sums an embedding row's (and x[idx]'s) repeated gradients in float and rounds once;
    # summed in bfloat16 a row stops growing at 256 ones (the CPU's result).
    g = torch.Generator().manual_seed(4)
    idx = torch.cat([torch.zeros(1000, dtype=torch.long), torch.randint(0, 6, (300,), generator=g)])
    grad_out = torch.rand(idx.numel(), 3, generator=g).to(dtype)
    expected = torch.zeros(6, 3).index_add_(0, idx, grad_out.float()).to(dtype)  # float sum, rounded once
    w = torch.zeros(6, 3, dtype=dtype, device="ember", requires_grad=True)
    F.embedding(idx.to("ember"), w).backward(grad_out.to("ember"))
    torch.testing.assert_close(w.grad.cpu(), expected)
    x = torch.zeros(6, 3, dtype=dtype, device="ember", requires_grad=True)
    x[idx.to("ember")].backward(grad_out.to("ember"))
    torch.testing.assert_close(x.grad.cpu(), expected)
    y = torch.ones(6, 3, dtype=dtype, device="ember")
    y.index_put_((idx.to("ember"),), grad_out.to("ember"), accumulate=True)
    torch.testing.assert_close(y.cpu(), (expected.float() + 1).to(dtype))


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_of_a_cpu_scalar_tensor_is_native(accumulate, native_only):
    """x[mask] = torch.tensor(v) and index_put_ with a 0-dim CPU value (accepted on CUDA too)
    run on the device; a value of another dtype keeps the CPU's error for index_put_ and is cast
    by __setitem__, as on the CPU."""
    a = torch.randn(6, generator=torch.Generator().manual_seed(0))
    idx, s = torch.tensor([0, 2, 2]), torch.tensor(0.5)
    want = a.clone().index_put_((idx,), s, accumulate=accumulate)
    got = a.to("ember").index_put_((idx.to("ember"),), s, accumulate=accumulate)
    torch.testing.assert_close(got.cpu(), want)
    x, y = a.clone(), a.to("ember")
    x[x > 0] = torch.tensor(2.0, dtype=torch.float64)
    y[y > 0] = torch.tensor(2.0, dtype=torch.float64)
    torch.testing.assert_close(y.cpu(), x)
    with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
        a.to("ember").index_put_((idx.to("ember"),), s.double(), accumulate=accumulate)


def test_take_with_a_0_dim_index_copies_and_put_backward_keeps_its_gradients(native_only):
    """take(x, 0-dim index) returned a view of x (the reference's x.reshape(-1)[index] is basic
    indexing for a 0-dim index): writing the result changed x, and put's backward (which takes
    from the gradient) aliased one gradient into another."""
    x = torch.tensor([1.0, 2.0, 3.0], device="ember")
    r = torch.take(x, torch.tensor(1, device="ember"))
    r.add_(100)
    assert x.cpu().tolist() == [1.0, 2.0, 3.0] and r.item() == 102.0
    grads = []
    for device in ("cpu", "ember"):
        t = torch.tensor(1.0, device=device, requires_grad=True)
        src = torch.tensor(5.0, device=device, requires_grad=True)
        idx = torch.tensor(0, device=device)
        torch.put(t, idx, src, accumulate=True).sum().backward()
        first = t.grad
        t.grad = None
        torch.put(t, idx, src, accumulate=True).sum().backward()
        grads.append((first.item(), src.grad.item()))
    assert grads[1] == grads[0]


def test_gather_and_index_select_refuse_an_overlapping_out_like_cpu():
    """An out= that is the input, the index, or internally overlapping is refused with the CPU's
    message (the kernels would read what they had already written)."""
    x = torch.arange(6.0, device="ember")
    idx = torch.tensor([0, 1, 2], device="ember")
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.gather(x[:3], 0, idx, out=x[:3])
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.index_select(x, 0, idx, out=x[3:])  # the same storage as the input
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.index_select(x.view(2, 3), 1, idx[:2], out=torch.zeros(2, device="ember").expand(2, 2))
    out = torch.empty(3, device="ember")
    torch.index_select(x, 0, idx, out=out)
    torch.testing.assert_close(out.cpu(), torch.tensor([0.0, 1.0, 2.0]))


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_with_a_uint8_mask_runs_natively(accumulate, native_only):
    """A uint8 mask (deprecated, still in older code) is the bool mask of its nonzeros, with
    the CPU's deprecation warning."""
    g = torch.Generator().manual_seed(0)
    mask = (torch.rand(6, 5, generator=g) > 0.5).to(torch.uint8)
    mask[0, 0] = 3  # any nonzero byte selects
    values = torch.randn(int(mask.bool().sum()), generator=g)
    results = []
    for device in ("cpu", "ember"):
        x = torch.ones(6, 5, device=device)
        with pytest.warns(UserWarning, match="indexing with dtype torch.uint8 is now deprecated"):
            x.index_put_((mask.to(device),), values.to(device), accumulate=accumulate)
        results.append(x.cpu())
    torch.testing.assert_close(results[1], results[0])


def test_an_out_of_range_host_index_raises_at_the_call():
    """An integer index tensor still on the CPU is checked there: the CPU's IndexError at the
    indexing call, not a device error at a later synchronizing call."""
    x = torch.arange(20.0, device="ember").view(4, 5)
    for index in (lambda: x[torch.tensor([4])], lambda: x[:, torch.tensor([0, -6])],
                  lambda: x.__setitem__(torch.tensor([9]), 1.0)):
        with pytest.raises(IndexError, match="out of bounds for dimension"):
            index()
    torch.testing.assert_close(x[torch.tensor([-1, 0])].cpu(), torch.arange(20.0).view(4, 5)[[-1, 0]])
    torch.ember.synchronize()  # nothing was left pending

"""Matrix products run natively on ember (kernels::gemm) and match PyTorch's CPU results."""
import pytest
import torch
import torch_ember

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _close(a, b, dtype):
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(dtype)
    kw = {"rtol": tol, "atol": tol * 10} if tol else {}
    torch.testing.assert_close(a.cpu(), b, **kw)


@pytest.fixture
def no_fallback():
    torch_ember.reset_fallback_stats()
    old = torch_ember.set_fallback_mode("error")
    yield
    torch_ember.set_fallback_mode(old)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_mm_any_layout(dtype, ta, tb, no_fallback):
    a = torch.randn(37, 53).to(dtype)
    b = torch.randn(53, 29).to(dtype)
    ae = (a.t().contiguous().to("ember").t() if ta else a.to("ember"))
    be = (b.t().contiguous().to("ember").t() if tb else b.to("ember"))
    _close(torch.mm(ae, be), torch.mm(a, b), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_bmm_baddbmm_addmm(dtype, no_fallback):
    a, b = torch.randn(4, 9, 7).to(dtype), torch.randn(4, 7, 5).to(dtype)
    inp, bias = torch.randn(4, 9, 5).to(dtype), torch.randn(5).to(dtype)
    e = lambda t: t.to("ember")
    _close(torch.bmm(e(a), e(b)), torch.bmm(a, b), dtype)
    _close(torch.baddbmm(e(inp), e(a), e(b), beta=0.5, alpha=2.0),
           torch.baddbmm(inp, a, b, beta=0.5, alpha=2.0), dtype)
    _close(torch.addmm(e(bias), e(a[0]), e(b[0]), beta=1.5, alpha=-1.0),
           torch.addmm(bias, a[0], b[0], beta=1.5, alpha=-1.0), dtype)


def test_out_and_inplace_forms(no_fallback):
    a, b, c = torch.randn(6, 4), torch.randn(4, 3), torch.randn(6, 3)
    out = torch.empty(1, device="ember")
    torch.mm(a.to("ember"), b.to("ember"), out=out)  # resized like CPU
    torch.testing.assert_close(out.cpu(), a @ b)
    ce = c.to("ember")
    ce.addmm_(a.to("ember"), b.to("ember"), beta=2.0)
    torch.testing.assert_close(ce.cpu(), c.addmm(a, b, beta=2.0))


def test_beta_zero_ignores_nan_in_input(no_fallback):
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    nan = torch.full((3, 2), float("nan"))
    r = torch.addmm(nan.to("ember"), a.to("ember"), b.to("ember"), beta=0)
    torch.testing.assert_close(r.cpu(), a @ b)


def test_empty_inner_dimension_gives_zeros(no_fallback):
    r = torch.mm(torch.empty(3, 0, device="ember"), torch.empty(0, 4, device="ember"))
    torch.testing.assert_close(r.cpu(), torch.zeros(3, 4))


def test_matmul_linear_and_backward_are_native(no_fallback):
    lin = torch.nn.Linear(16, 8, bias=False)
    x = torch.randn(2, 5, 16, requires_grad=True)
    lin_e = torch.nn.Linear(16, 8, bias=False).to("ember")
    lin_e.load_state_dict(lin.state_dict())
    xe = x.detach().to("ember").requires_grad_()
    y, ye = lin(x), lin_e(xe)
    torch.testing.assert_close(ye.cpu(), y)
    g = torch.randn_like(y)
    y.backward(g)
    ye.backward(g.to("ember"))
    torch.testing.assert_close(xe.grad.cpu(), x.grad)
    torch.testing.assert_close(lin_e.weight.grad.cpu(), lin.weight.grad)


def test_errors_match_cpu():
    a = torch.randn(3, 4, device="ember")
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        torch.mm(a, torch.randn(5, 2, device="ember"))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(a, torch.randn(4, 2, device="ember", dtype=torch.float64))


INTEGERS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


@pytest.mark.parametrize("dtype", INTEGERS)
@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (3, 4, 5), (17, 33, 9), (64, 130, 70)])
def test_integer_products_native_and_exact(dtype, m, k, n, no_fallback):
    g = torch.Generator().manual_seed(m * k + n)
    lo = 0 if dtype == torch.uint8 else -100
    a = torch.randint(lo, 100, (m, k), generator=g).to(dtype)
    b = torch.randint(lo, 100, (n, k), generator=g).to(dtype).t()  # a transposed operand
    c = torch.randint(lo, 100, (m, n), generator=g).to(dtype)
    ae, be, ce = a.to("ember"), b.to("ember"), c.to("ember")
    # int8/uint8 sums wrap: the results must agree bit for bit, overflow included
    assert torch.equal(torch.mm(ae, be).cpu(), torch.mm(a, b))
    assert torch.equal(torch.addmm(ce, ae, be, beta=3, alpha=-2).cpu(), torch.addmm(c, a, b, beta=3, alpha=-2))
    A = torch.randint(lo, 100, (3, m, k), generator=g).to(dtype)
    B = torch.randint(lo, 100, (3, k, n), generator=g).to(dtype)
    assert torch.equal(torch.bmm(A.to("ember"), B.to("ember")).cpu(), torch.bmm(A, B))
    assert torch.equal((A.to("ember") @ B[0].to("ember")).cpu(), A @ B[0])


def test_int64_products_wrap_like_the_cpu(no_fallback):
    big = torch.full((2, 3), 2 ** 62, dtype=torch.int64)
    assert torch.equal((big.to("ember") @ big.t().to("ember")).cpu(), big @ big.t())


def test_bool_matmul_keeps_the_cpu_error():
    a = torch.ones(2, 2, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        torch.mm(a, a)
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        torch.mm(a.to("ember"), a.to("ember"))


def test_integer_alpha_beta_are_exact_and_checked(no_fallback):
    one = torch.ones(1, 1, dtype=torch.int64)
    z = torch.zeros(1, 1, dtype=torch.int64)
    for fn in (lambda c, x: torch.addmm(c, x, x, alpha=2 ** 62 + 1), lambda c, x: torch.addmm(x, x, x, beta=2 ** 60 + 1),
               lambda c, x: torch.baddbmm(c[None], x[None], x[None], alpha=2 ** 53 + 1)):
        assert torch.equal(fn(z.to("ember"), one.to("ember")).cpu(), fn(z, one))
    c8 = torch.ones(2, 2, dtype=torch.int8, device="ember")
    for kw in (dict(alpha=300), dict(beta=-129)):
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.addmm(c8, c8, c8, **kw)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32])
def test_empty_inner_dimension_scales_the_input(dtype, no_fallback):
    c = torch.arange(6, dtype=dtype).reshape(2, 3)
    a, b = torch.empty(2, 0, dtype=dtype), torch.empty(0, 3, dtype=dtype)
    for beta in (1, 2, 0):
        assert torch.equal(torch.addmm(c.to("ember"), a.to("ember"), b.to("ember"), beta=beta).cpu(),
                           torch.addmm(c, a, b, beta=beta))
    assert torch.equal(torch.baddbmm(c[None].to("ember"), a[None].to("ember"), b[None].to("ember")).cpu(),
                       torch.baddbmm(c[None], a[None], b[None]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_products_accumulate_in_float32_and_round_once(dtype, no_fallback):
    # Long sums: a 16-bit accumulator would be far off; float32 accumulation rounded once to the
    # 16-bit type is what every 16-bit GEMM promises (and what ember computes, natively or by
    # widening to float32 on CPUs without the 16-bit dot instructions).
    a, b = torch.randn(3, 40, 2048).to(dtype), torch.randn(3, 2048, 24).to(dtype)
    c = torch.randn(3, 40, 24).to(dtype)
    e = lambda t: t.to("ember")
    want = (a.float() @ b.float()).to(dtype)
    torch.testing.assert_close(torch.bmm(e(a), e(b)).cpu(), want, atol=0, rtol=2 ** -7)
    want = (0.5 * c.float() + 2.0 * (a.float() @ b.float())).to(dtype)
    torch.testing.assert_close(torch.baddbmm(e(c), e(a), e(b), beta=0.5, alpha=2.0).cpu(), want,
                               atol=1e-2, rtol=2 ** -7)
    # One matrix broadcast over the batch (stride 0), as einsum and matmul produce.
    w = b[0]
    torch.testing.assert_close(torch.bmm(e(a), e(w).expand(3, -1, -1)).cpu(), (a.float() @ w.float()).to(dtype),
                               atol=0, rtol=2 ** -7)
    nan = torch.full((40, 24), float("nan"), dtype=dtype)
    r = torch.addmm(e(nan), e(a[0]), e(b[0]), beta=0, alpha=-1.0)
    torch.testing.assert_close(r.cpu(), (-(a[0].float() @ b[0].float())).to(dtype), atol=0, rtol=2 ** -7)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_int8_matmul_is_exact_and_wraps_like_cpu(compiled, no_fallback):
    # torch._int_mm (int8 x int8 -> int32, torchao's dynamic quantization): exact, and a sum past
    # int32 wraps as the CPU's int32 accumulation does.
    g = torch.Generator().manual_seed(0)
    cases = [(torch.randint(-128, 128, (32, 64), generator=g, dtype=torch.int8),
              torch.randint(-128, 128, (64, 16), generator=g, dtype=torch.int8)),
             (torch.full((2, 140000), 127, dtype=torch.int8), torch.full((140000, 2), 127, dtype=torch.int8))]
    fn = torch.compile(torch._int_mm, backend="ember") if compiled else torch._int_mm
    for a, b in cases:
        assert torch.equal(fn(a.to("ember"), b.to("ember")).cpu(), torch._int_mm(a, b))
    out = torch.empty(32, 16, dtype=torch.int32, device="ember")
    torch._int_mm(cases[0][0].to("ember"), cases[0][1].to("ember"), out=out)
    assert torch.equal(out.cpu(), torch._int_mm(*cases[0]))


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
def test_addr_scalar_checks_are_the_cpus(dtype):
    m, v = torch.arange(4).reshape(2, 2).to(dtype), torch.tensor([1, 2], dtype=dtype)
    cases = [dict(beta=True), dict(alpha=True)]
    if not dtype.is_floating_point:
        cases += [dict(beta=2.5), dict(alpha=2.5)]
    for kw in cases:
        with pytest.raises(RuntimeError) as cpu_err:
            torch.addr(m, v, v, **kw)
        with pytest.raises(RuntimeError, match=str(cpu_err.value).split(".")[0]):
            torch.addr(m.to("ember"), v.to("ember"), v.to("ember"), **kw)
    for kw in (dict(beta=0, alpha=2), dict(beta=2, alpha=3)):
        torch.testing.assert_close(torch.addr(m.to("ember"), v.to("ember"), v.to("ember"), **kw).cpu(),
                                   torch.addr(m, v, v, **kw))


def test_baddbmm_dtype_mismatch_message_is_the_cpus():
    args = (torch.rand(1, 2, 2).half(), torch.rand(1, 2, 2), torch.rand(1, 2, 2))
    with pytest.raises(RuntimeError) as cpu_err:
        torch.baddbmm(*args)
    with pytest.raises(RuntimeError, match=str(cpu_err.value).split(",")[0]):
        torch.baddbmm(*(a.to("ember") for a in args))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m, k, n", [(17, 33, 19), (33, 80, 19), (300, 144, 64), (4096, 40, 8)])
def test_non_finite_stays_in_its_row(dtype, m, k, n, no_fallback):
    """A NaN or inf in one row of A leaves the other rows finite (the float64 product decides
    which rows are NaN). oneDNN's 16-bit kernels spread it to the row above for many K."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(k, n, generator=g).to(dtype)
    a[1, 0], a[m // 2, k // 3], a[m - 1, 0] = float("nan"), float("inf"), float("-inf")
    want = torch.mm(a.double(), b.double())
    for got in (torch.mm(a.to("ember"), b.to("ember")),
                torch.nn.functional.linear(a.to("ember"), b.t().contiguous().to("ember")),
                torch.bmm(a.to("ember").expand(2, m, k), b.to("ember").expand(2, k, n))[1]):
        assert torch.equal(got.cpu().isnan().any(1), want.isnan().any(1))
        finite = want.isfinite().all(1)
        _close(got[finite.to("ember")], want[finite].to(dtype), dtype)


@pytest.mark.parametrize("cin, ks", [(3, 3), (3, 7), (7, 3), (48, 1)])
def test_non_finite_conv_stays_in_its_pixels(cin, ks, no_fallback):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, cin, 8, 8, generator=g).to(torch.bfloat16)
    w = torch.randn(16, cin, ks, ks, generator=g).to(torch.bfloat16)
    x[1, 0, 3, 3], x[0, cin - 1, 5, 0] = float("nan"), float("inf")
    want = torch.nn.functional.conv2d(x.double(), w.double(), padding=ks // 2)
    got = torch.nn.functional.conv2d(x.to("ember"), w.to("ember"), padding=ks // 2)
    assert torch.equal(got.cpu().isnan(), want.isnan())
    # Backward: a NaN in the output gradient reaches only the inputs under that pixel's window.
    grad = torch.ones(want.shape, dtype=torch.bfloat16)
    grad[0, 2, 4, 4] = float("nan")
    args = ([1, 1], [ks // 2] * 2, [1, 1], False, [0, 0], 1, [True, True, False])
    want_gi, want_gw, _ = torch.ops.aten.convolution_backward(grad.double(), x.double(), w.double(), None, *args)
    gi, gw, _ = torch.ops.aten.convolution_backward(grad.to("ember"), x.to("ember"), w.to("ember"), None, *args)
    assert torch.equal(gi.cpu().isnan(), want_gi.isnan())
    assert torch.equal(gw.cpu().isnan(), want_gw.isnan())

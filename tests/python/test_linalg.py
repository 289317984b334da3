"""Linear algebra that runs natively: triangular solves (the chunked linear-attention layers of
hybrid models solve one per step) by ember's own kernel, and the LAPACK family (Cholesky, LU,
QR, eigen and singular value decompositions, solves, determinants, least squares) as library ops
on device memory (register_library.cc); forward and backward, eager and compiled, against the
CPU, with the CPU's layouts and errors."""
import copy

import pytest
import torch

import torch_ember  # noqa: F401


def _triangular(shape, upper, dtype, g):
    a = torch.randn(*shape, generator=g, dtype=dtype)
    a = a.triu() if upper else a.tril()
    return a + 3 * torch.eye(shape[-1], dtype=dtype)  # well conditioned


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_matches_cpu(dtype, upper, left, unit, native_only):
    g = torch.Generator().manual_seed(0)
    a = _triangular((3, 6, 6), upper, dtype, g)
    b = torch.randn(3, 6, 4, generator=g, dtype=dtype) if left else torch.randn(3, 4, 6, generator=g, dtype=dtype)
    ae, be = a.to("ember").requires_grad_(), b.to("ember").requires_grad_()
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    xe = torch.linalg.solve_triangular(ae, be, upper=upper, left=left, unitriangular=unit)
    xc = torch.linalg.solve_triangular(ac, bc, upper=upper, left=left, unitriangular=unit)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
    torch.testing.assert_close(xe.detach().cpu(), xc.detach(), **tol)
    w = torch.randn(xc.shape, generator=g, dtype=dtype)
    (xe * w.to("ember")).sum().backward()
    (xc * w).sum().backward()
    torch.testing.assert_close(ae.grad.cpu(), ac.grad, **tol)
    torch.testing.assert_close(be.grad.cpu(), bc.grad, **tol)


def test_solve_triangular_broadcasts_batches(native_only):
    g = torch.Generator().manual_seed(1)
    a = _triangular((6, 6), False, torch.float32, g)
    b = torch.randn(2, 3, 6, 5, generator=g)
    torch.testing.assert_close(torch.linalg.solve_triangular(a.to("ember"), b.to("ember"), upper=False).cpu(),
                               torch.linalg.solve_triangular(a, b, upper=False), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(4,), (3, 5), (0,), (2, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_eye_native(shape, dtype, native_only):
    torch.testing.assert_close(torch.eye(*shape, dtype=dtype, device="ember").cpu(), torch.eye(*shape, dtype=dtype))


# ---- the LAPACK family as library ops --------------------------------------------------------

def _spd(g, batch=3, n=5, dtype=torch.float64):
    a = torch.randn(batch, n, n, generator=g, dtype=dtype)
    return a @ a.mT + n * torch.eye(n, dtype=dtype)


LAPACK_CASES = {
    "cholesky": lambda a, s: torch.linalg.cholesky(s),
    "cholesky_ex": lambda a, s: torch.linalg.cholesky_ex(s),
    "inv": lambda a, s: torch.linalg.inv(a),
    "det": lambda a, s: torch.linalg.det(a),
    "slogdet": lambda a, s: torch.linalg.slogdet(a),
    "solve": lambda a, s: torch.linalg.solve(a, s),
    "qr": lambda a, s: torch.linalg.qr(a),
    "eigh": lambda a, s: torch.linalg.eigh(s),
    "svd": lambda a, s: torch.linalg.svd(a),
    "svdvals": lambda a, s: torch.linalg.svdvals(a),
    "lu_factor": lambda a, s: torch.linalg.lu_factor(a),
    "lu": lambda a, s: torch.linalg.lu(a),
    "lstsq": lambda a, s: torch.linalg.lstsq(a, s).solution,
    "pinv": lambda a, s: torch.linalg.pinv(a),
    "cholesky_solve": lambda a, s: torch.cholesky_solve(a, torch.linalg.cholesky(s)),
    "householder": lambda a, s: torch.linalg.householder_product(*torch.geqrf(a)),
    "det_of_transposed_view": lambda a, s: torch.linalg.det(a.mT[:, 1:, 1:]),
}


@pytest.mark.parametrize("case", sorted(LAPACK_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lapack_ops_match_cpu_with_its_layouts(case, dtype, native_only):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 5, 5, generator=g, dtype=dtype) + 2 * torch.eye(5, dtype=dtype)
    s = _spd(g, dtype=dtype)
    fn = LAPACK_CASES[case]
    want, got = fn(a, s), fn(a.to("ember"), s.to("ember"))
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
    for w, e in zip(want, got):
        assert e.device.type == "ember"
        assert e.stride() == w.stride(), (e.stride(), w.stride())  # column-major factors stay so
        torch.testing.assert_close(e.cpu(), w, **tol)


@pytest.mark.parametrize("case", ["det_of_transposed_view", "slogdet", "inv", "solve", "eigh", "cholesky", "qr"])
def test_lapack_gradients_match_cpu(case, native_only):
    g = torch.Generator().manual_seed(1)
    a0 = torch.randn(3, 5, 5, generator=g, dtype=torch.float64) + 2 * torch.eye(5, dtype=torch.float64)
    s0 = _spd(g)
    grads = []
    for dev in ("cpu", "ember"):
        a, s = a0.detach().to(dev).requires_grad_(), s0.detach().to(dev).requires_grad_()
        out = LAPACK_CASES[case](a, s)
        out = out if isinstance(out, tuple) else (out,)
        sum(o.sum() for o in out if o.is_floating_point()).backward()
        grads.append((a.grad, s.grad))
    for w, e in zip(*grads):
        if w is not None:
            torch.testing.assert_close(e.cpu(), w)


def test_lapack_errors_are_the_cpus():
    s = _spd(torch.Generator().manual_seed(2))
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        torch.linalg.cholesky(-s.to("ember"))
    with pytest.raises(RuntimeError, match="must be batches of square matrices"):
        torch.linalg.inv(s.to("ember")[:, :3])
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        torch.linalg.cholesky(s.to("ember").int())
    with pytest.raises(RuntimeError, match="not implemented for 'BFloat16'|BFloat16"):
        torch.linalg.inv(s.to("ember").bfloat16())
    info = torch.linalg.cholesky_ex(-s.to("ember")).info
    assert info.device.type == "ember" and (info.cpu() > 0).all()


def test_lapack_out_forms_resize_like_the_cpu(native_only):
    s = _spd(torch.Generator().manual_seed(3))
    L = torch.empty(0, dtype=torch.float64, device="ember")
    torch.linalg.cholesky(s.to("ember"), out=L)
    torch.testing.assert_close(L.cpu(), torch.linalg.cholesky(s))
    q, r = torch.empty(0, dtype=torch.float64, device="ember"), torch.empty(0, dtype=torch.float64, device="ember")
    torch.linalg.qr(s.to("ember"), out=(q, r))
    torch.testing.assert_close((q @ r).cpu(), s)


def test_lapack_in_a_compiled_training_step(native_only):
    def step(a, b):
        q, _ = torch.linalg.qr(a @ b)
        x = torch.linalg.solve(a @ a.mT + 3 * torch.eye(a.shape[-1], device=a.device), b)
        return torch.linalg.svdvals(q + 1).sum() + x.sum() + torch.linalg.slogdet(a)[1].sum()

    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(3, 5, 5, generator=g), torch.randn(3, 5, 5, generator=g)
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    ae, be = a.to("ember").requires_grad_(), b.to("ember").requires_grad_()
    want = step(ac, bc)
    got = torch.compile(step, backend="ember")(ae, be)  # strict: no op may be refused
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    want.backward()
    got.backward()
    torch.testing.assert_close(ae.grad.cpu(), ac.grad, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(be.grad.cpu(), bc.grad, rtol=1e-3, atol=1e-4)


# ---- Cholesky and LU on core's LAPACK driver (register_linalg.cc) --------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("lu_batch,b_batch", [((3,), (3,)), ((), (2, 3)), ((2, 1), (1, 4))])
def test_lu_solve_matches_cpu(dtype, left, adjoint, lu_batch, b_batch, native_only):
    g = torch.Generator().manual_seed(5)
    a = torch.randn(*lu_batch, 4, 4, generator=g, dtype=dtype) + 3 * torch.eye(4, dtype=dtype)
    b = torch.randn(*b_batch, *((4, 2) if left else (2, 4)), generator=g, dtype=dtype)
    lu, piv = torch.linalg.lu_factor(a)
    lue, pive = torch.linalg.lu_factor(a.to("ember"))
    torch.testing.assert_close(pive.cpu(), piv)
    want = torch.linalg.lu_solve(lu, piv, b, left=left, adjoint=adjoint)
    be = b.to("ember").requires_grad_()
    got = torch.linalg.lu_solve(lue, pive, be, left=left, adjoint=adjoint)
    assert got.stride() == want.stride()
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
    torch.testing.assert_close(got.detach().cpu(), want, **tol)
    bc = b.clone().requires_grad_()
    torch.linalg.lu_solve(lu, piv, bc, left=left, adjoint=adjoint).sum().backward()
    got.sum().backward()
    torch.testing.assert_close(be.grad.cpu(), bc.grad, **tol)


def test_factorizations_are_queued_and_can_be_captured(native_only):
    # Queued on the stream like any kernel (a library op waits for the stream, and so cannot be
    # captured): a captured graph of factorizations and solves replays on new values.
    g = torch.Generator().manual_seed(6)
    s, b = _spd(g, batch=4, n=6), torch.randn(4, 6, 3, generator=g, dtype=torch.float64)
    se, bed = s.to("ember"), b.to("ember")
    graph = torch.ember.EmberGraph()
    with torch.ember.graph(graph):
        L, info = torch.linalg.cholesky_ex(se)
        x1 = torch.cholesky_solve(bed, L)
        lu, piv, _ = torch.linalg.lu_factor_ex(se)
        x2 = torch.linalg.lu_solve(lu, piv, bed)
    s2, b2 = _spd(g, batch=4, n=6), torch.randn(4, 6, 3, generator=g, dtype=torch.float64)
    se.copy_(s2)
    bed.copy_(b2)
    graph.replay()
    want = torch.linalg.solve(s2, b2)
    torch.testing.assert_close(L.cpu(), torch.linalg.cholesky(s2))
    assert (info.cpu() == 0).all()
    torch.testing.assert_close(x1.cpu(), want)
    torch.testing.assert_close(x2.cpu(), want)


def test_cholesky_info_names_the_failing_minor_per_matrix(native_only):
    s = _spd(torch.Generator().manual_seed(7), batch=3, n=4)
    s[1, 2, 2] = -100.0  # the third leading minor of the second matrix is not positive
    L, info = torch.linalg.cholesky_ex(s.to("ember"))
    Lc, infoc = torch.linalg.cholesky_ex(s)
    assert info.cpu().tolist() == infoc.tolist() == [0, 3, 0]
    torch.testing.assert_close(L.cpu()[[0, 2]], Lc[[0, 2]])
    with pytest.raises(torch.linalg.LinAlgError, match=r"Batch element 1\).*order 3 is not positive-definite"):
        torch.linalg.cholesky(s.to("ember"))
    empty = torch.linalg.cholesky_ex(torch.zeros(2, 0, 0, device="ember"))
    assert empty.L.shape == (2, 0, 0) and empty.info.cpu().tolist() == [0, 0]


# --- pairwise distances (torch.pdist) --------------------------------------------------------------
@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pdist_matches_cpu_forward_and_backward(p, dtype, native_only):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 5, generator=g, dtype=dtype)
    x[3] = x[7]  # a zero distance: its gradient is 0
    x[5, 2] = x[9, 2]  # a zero coordinate difference
    xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
    ref, out = torch.pdist(xc, p), torch.pdist(xe, p)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else {}
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), **tol)
    w = torch.randn(ref.shape, generator=g, dtype=dtype)
    (ref * w).sum().backward()
    (out * w.to("ember")).sum().backward()
    # ember sums each row's gradient in double: float32 may differ from the CPU by rounding.
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, **(dict(rtol=1e-4, atol=1e-5) if tol else {}))


def test_pdist_edges_and_errors_are_the_cpus(native_only):
    for shape in [(1, 4), (0, 3), (5, 0)]:
        x = torch.randn(shape)
        torch.testing.assert_close(torch.pdist(x.to("ember")).cpu(), torch.pdist(x))
    x = torch.tensor([[0.0, float("nan")], [1.0, 2.0], [1.0, 2.0]])
    for p in (0.0, 2.0, float("inf")):
        torch.testing.assert_close(torch.pdist(x.to("ember"), p).cpu(), torch.pdist(x, p), equal_nan=True)
    with pytest.raises(RuntimeError, match="non-negative p"):
        torch.pdist(torch.randn(3, 2, device="ember"), -1.0)
    with pytest.raises(RuntimeError, match="2D tensors"):
        torch.pdist(torch.randn(3, device="ember"))


def test_pdist_in_a_compiled_graph(native_only):
    def f(x):
        return torch.exp(-torch.pdist(x * 2)).sum()

    x = torch.randn(20, 4)
    xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
    f(xc).backward()
    out = torch.compile(f, backend="ember", fullgraph=True)(xe)
    out.backward()
    torch.testing.assert_close(out.detach().cpu(), f(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape, scale", [((4, 4), 0.1), ((5, 5), 3.0), ((1, 1), 2.0), ((2, 2, 16, 16), 0.5),
                                          ((3, 6, 6), (0.01, 1.0, 8.0))])
def test_matrix_exp_matches_cpu(shape, scale, dtype, native_only):
    # Norms on both sides of the Pade approximant's range, per matrix of a batch: small ones
    # need no squaring, large ones several.
    g = torch.Generator().manual_seed(0)
    scale = torch.tensor(scale, dtype=dtype).reshape(-1, 1, 1) if isinstance(scale, tuple) else scale
    a = torch.randn(shape, generator=g, dtype=dtype) * scale
    want = torch.linalg.matrix_exp(a)
    tol = dict(rtol=2e-5, atol=1e-5 * float(want.abs().max())) if dtype == torch.float32 else {}
    torch.testing.assert_close(torch.linalg.matrix_exp(a.to("ember")).cpu(), want, **tol)


def test_matrix_exp_of_zero_matrices_is_exactly_the_identity(native_only):
    # A batch mixing zero and nonzero matrices: the zero ones give I bit for bit, as on the CPU.
    x = torch.zeros(3, 5, 5, dtype=torch.float64)
    x[1] = torch.randn(5, 5, generator=torch.Generator().manual_seed(0))
    got = torch.linalg.matrix_exp(x.to("ember")).cpu()
    eye = torch.eye(5, dtype=torch.float64)
    assert torch.equal(got[0], eye) and torch.equal(got[2], eye)
    torch.testing.assert_close(got[1], torch.linalg.matrix_exp(x[1]))


def test_matrix_exp_gradient_and_orthogonal_parametrization(native_only):
    a = torch.randn(2, 5, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(torch.linalg.matrix_exp, (a.detach().to("ember").requires_grad_(),))
    # nn.utils.parametrizations.orthogonal maps a square weight through matrix_exp by default.
    torch.manual_seed(0)
    lin = torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(8, 8))
    lin_e = copy.deepcopy(lin).to("ember")
    x = torch.randn(4, 8)
    lin(x).square().sum().backward()
    lin_e(x.to("ember")).square().sum().backward()
    w = lin_e.weight.detach().cpu()
    torch.testing.assert_close(w @ w.T, torch.eye(8), rtol=0, atol=1e-5)
    torch.testing.assert_close(w, lin.weight.detach(), rtol=1e-5, atol=1e-6)
    original = lin.parametrizations.weight.original
    torch.testing.assert_close(lin_e.parametrizations.weight.original.grad.cpu(), original.grad, rtol=1e-5, atol=1e-5)


def test_matrix_exp_of_non_finite_matrices_is_the_cpus():
    x = torch.tensor([[float("nan"), 1.0], [0.0, 1.0]])
    torch.testing.assert_close(torch.linalg.matrix_exp(x.to("ember")).cpu(), torch.linalg.matrix_exp(x), equal_nan=True)


def test_matrix_exp_in_a_compiled_graph(native_only):
    # Its number of squarings is read back from the device: a library step of the graph.
    torch.manual_seed(0)
    lin = torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(6, 6))
    lin_e = copy.deepcopy(lin).to("ember")
    x = torch.randn(3, 6)
    lin(x).square().sum().backward()
    torch.compile(lin_e, backend="ember", fullgraph=True)(x.to("ember")).square().sum().backward()
    original = lin.parametrizations.weight.original
    torch.testing.assert_close(lin_e.parametrizations.weight.original.grad.cpu(), original.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 2), (3, 0), (2, 3, 0)])
def test_lu_of_empty_matrices_is_the_cpus(shape, native_only):
    A = torch.randn(*shape)
    for got, want in zip(torch.linalg.lu_factor_ex(A.to("ember")), torch.linalg.lu_factor_ex(A)):
        torch.testing.assert_close(got.cpu(), want)
    P, L, U = torch.linalg.lu(A.to("ember"))
    for got, want in zip((P, L, U), torch.linalg.lu(A)):
        torch.testing.assert_close(got.cpu(), want)


def test_solve_triangular_into_its_right_hand_side(native_only):
    # out=B is allowed, as on the CPU: B is read before the solution is written.
    g = torch.Generator().manual_seed(0)
    A = torch.randn(3, 4, 4, generator=g).triu() + 4 * torch.eye(4)
    B = torch.randn(3, 4, 2, generator=g)
    want = torch.linalg.solve_triangular(A, B, upper=True)
    Be = B.to("ember")
    got = torch.linalg.solve_triangular(A.to("ember"), Be, upper=True, out=Be)
    assert got.data_ptr() == Be.data_ptr()
    torch.testing.assert_close(Be.cpu(), want)
    # Into part of A too: A is read before the solution is written.
    Ac, Ae = A.clone(), A.to("ember")
    torch.linalg.solve_triangular(Ac, B, upper=True, out=Ac[:, :, :2])
    torch.linalg.solve_triangular(Ae, B.to("ember"), upper=True, out=Ae[:, :, :2])
    torch.testing.assert_close(Ae.cpu(), Ac)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_solve_triangular_applies_a_lazy_negation(dtype, native_only):
    """A torch._neg_view operand (a conjugate's imaginary part, autograd's math-bit views) was
    solved as its stored values, with the wrong sign."""
    g = torch.Generator().manual_seed(0)
    A = (torch.randn(3, 3, generator=g).triu() + 3 * torch.eye(3)).to(dtype)
    B = torch.randn(3, 2, generator=g).to(dtype)
    want = torch.linalg.solve_triangular(-A, B, upper=True)
    got = torch.linalg.solve_triangular(torch._neg_view(A.to("ember")), B.to("ember"), upper=True)
    torch.testing.assert_close(got.cpu(), want)
    got = torch.linalg.solve_triangular(A.to("ember"), torch._neg_view(B.to("ember")), upper=True)
    torch.testing.assert_close(got.cpu(), torch.linalg.solve_triangular(A, -B, upper=True))

"""Complex tensors compute natively on ember, composed from real kernels on their (re, im) parts:
arithmetic, abs/angle/exp/log/sqrt/sgn/reciprocal, matrix products, sums and means, where, cat,
indexing and index_put, comparisons, forward and backward, complex64 and complex128, against
the CPU, including C's special values (zero divisors, infinities, NaN) and lazily conjugated
operands. A Fourier neural operator and spectrogram losses train with nothing on the CPU."""
import copy

import pytest
import torch

import torch_ember  # noqa: F401

INF, NAN = float("inf"), float("nan")


def _run(fn, args, device):
    moved = [a.detach().to(device).requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    out = fn(*moved)
    grads = None
    if out.requires_grad:
        real = out.real if out.is_complex() else out
        weight = torch.randn(real.shape, generator=torch.Generator().manual_seed(1), dtype=real.dtype)
        real.mul(weight.to(device)).sum().backward()
        grads = [None if a.grad is None else a.grad.cpu() for a in moved if isinstance(a, torch.Tensor) and a.requires_grad]
    return out.detach().cpu(), grads


CASES = {
    "add_sub_alpha_broadcast": lambda a, b, c, r: torch.add(a, c[0], alpha=2) - a.conj() * 0.5,
    "with_real_operands": lambda a, b, c, r: a + r - r * a / (r.abs() + 1) + 1.5 - 2j * a,
    "div": lambda a, b, c, r: a / (c + 2) + 3 / (a + 4),
    "abs_angle": lambda a, b, c, r: a.abs() * 2 + a.angle(),
    "exp_log_sqrt": lambda a, b, c, r: a.exp() + (a + 3).log() + a.sqrt(),
    "sgn_reciprocal": lambda a, b, c, r: a.sgn() + (a + 2).reciprocal(),
    "mm_conj": lambda a, b, c, r: a @ b + a.conj() @ b.conj(),
    "adjoint_products": lambda a, b, c, r: (b.mT @ a.mH).sum(0),
    "bmm_einsum": lambda a, b, c, r: torch.einsum("bij,bjk->bik", a[None].expand(2, 3, 4), b[None].expand(2, 4, 5)),
    "linear": lambda a, b, c, r: torch.nn.functional.linear(a, b.t()),
    "sum_mean": lambda a, b, c, r: a.sum() + a.mean(0).sum() + a.sum(-1, keepdim=True).mean(),
    "where_cat_index": lambda a, b, c, r: torch.cat([torch.where(a.real > 0, a, c), c[:, [0, 2]]], 1),
    "square_complex_polar": lambda a, b, c, r: a ** 2 + torch.complex(r, r * 2) + torch.polar(r.abs(), r),
    "spectral_loss": lambda a, b, c, r: (torch.fft.rfft(r, dim=-1).abs() - 1).square().mean(),
    "masked_fill_index_put": lambda a, b, c, r: a.masked_fill(r > 0, 1 - 2j).index_put((torch.tensor([0, 2]),), c[0]),
}


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_ops_match_cpu_forward_and_backward(name, dtype, native_only):
    g = torch.Generator().manual_seed(0)
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    a, c = (torch.randn(3, 4, dtype=dtype, generator=g).requires_grad_() for _ in range(2))
    b = torch.randn(4, 5, dtype=dtype, generator=g).requires_grad_()
    r = torch.randn(3, 4, dtype=real, generator=g).requires_grad_()
    want, want_grads = _run(CASES[name], (a, b, c, r), "cpu")
    got, got_grads = _run(CASES[name], (a, b, c, r), "ember")
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.complex64 else {}
    torch.testing.assert_close(got, want, **tol)
    for x, y in zip(got_grads or [], want_grads or []):
        assert (x is None) == (y is None)
        if x is not None:
            torch.testing.assert_close(x, y, **tol)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_special_values_follow_the_cpu(dtype, native_only):
    values = [1 + 1j, 0j, complex(INF, 0), complex(NAN, 1), complex(1e30, 1e30), complex(-0.0, -0.0), 3 + 4j,
              complex(INF, INF), complex(-INF, 1), complex(-INF, INF), complex(1, NAN), complex(-4, 0),
              complex(-4, -0.0), complex(0, INF), complex(NAN, INF), complex(-1e-30, 1e-30), complex(2, -0.0)]
    a = torch.tensor(values, dtype=dtype)
    b = a.flip(0)
    for fn in (torch.div, torch.mul, torch.eq, torch.sub, torch.exp, torch.sqrt, torch.reciprocal, torch.log,
               torch.abs, torch.sgn, torch.angle):
        args = (a, b) if fn in (torch.div, torch.mul, torch.eq, torch.sub) else (a,)
        want = fn(*args)
        torch.testing.assert_close(fn(*[t.to("ember") for t in args]).cpu(), want, equal_nan=True)


def test_in_place_and_out_forms(native_only):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(4, 4, dtype=torch.complex64, generator=g) for _ in range(2))
    for op in ("add_", "sub_", "mul_", "div_"):
        torch.testing.assert_close(getattr(a.to("ember").clone(), op)(b.to("ember")).cpu(), getattr(a.clone(), op)(b))
    for op in ("exp_", "neg_", "sqrt_", "reciprocal_"):
        torch.testing.assert_close(getattr(a.to("ember").clone(), op)().cpu(), getattr(a.clone(), op)())
    out_c = torch.empty(0, dtype=torch.complex64, device="ember")
    out_r = torch.empty(0, device="ember")
    torch.testing.assert_close(torch.mm(a.to("ember"), b.to("ember"), out=out_c).cpu(), a @ b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.abs(a.to("ember"), out=out_r).cpu(), a.abs())
    out_s = torch.empty(0, dtype=torch.complex64, device="ember")
    torch.testing.assert_close(torch.sum(a.to("ember"), 0, out=out_s).cpu(), a.sum(0))
    with pytest.raises(RuntimeError, match="abs"):
        a.to("ember").abs_()  # the CPU's refusal: the result is real


def test_fourier_neural_operator_trains_eagerly_and_compiled(native_only):
    class Spectral(torch.nn.Module):
        def __init__(self, cin, cout, modes):
            super().__init__()
            self.modes = modes
            self.w = torch.nn.Parameter(torch.randn(cin, cout, modes, dtype=torch.cfloat) / (cin * cout))

        def forward(self, x):
            xf = torch.fft.rfft(x)
            out = torch.zeros(x.size(0), self.w.size(1), x.size(-1) // 2 + 1, dtype=torch.cfloat, device=x.device)
            out[:, :, :self.modes] = torch.einsum("bix,iox->box", xf[:, :, :self.modes], self.w)
            return torch.fft.irfft(out, n=x.size(-1))

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv1d(2, 8, 1), Spectral(8, 8, 6), torch.nn.GELU(), Spectral(8, 2, 6))
    x = torch.randn(4, 2, 32)
    net(x).square().mean().backward()
    for run in ("eager", "compiled"):
        torch._dynamo.reset()
        ember_net = copy.deepcopy(net).to("ember")
        ember_net.zero_grad()
        fn = ember_net if run == "eager" else torch.compile(ember_net, backend="ember")
        fn(x.to("ember")).square().mean().backward()
        for p, q in zip(ember_net.parameters(), net.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-6)


def test_spectrogram_loss_matches_cpu(native_only):
    # A multi-resolution STFT loss of audio models: magnitudes of complex spectrograms.
    g = torch.Generator().manual_seed(0)
    signal, target = torch.randn(2, 800, generator=g), torch.randn(2, 800, generator=g)

    def loss(x, y):
        total = 0
        for n in (64, 128):
            window = torch.hann_window(n, device=x.device)
            sx = torch.stft(x, n, n // 4, window=window, return_complex=True).abs()
            sy = torch.stft(y, n, n // 4, window=window, return_complex=True).abs()
            total = total + (sx - sy).norm() / sy.norm() + (sx.clamp_min(1e-7).log() - sy.clamp_min(1e-7).log()).abs().mean()
        return total

    want, want_grads = _run(loss, (signal.requires_grad_(), target), "cpu")
    got, got_grads = _run(loss, (signal, target), "ember")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_grads[0], want_grads[0], rtol=1e-4, atol=1e-6)


def test_edges_found_in_review(native_only):
    e = "ember"
    z = torch.tensor(1 + 2j)
    torch.testing.assert_close(z.to(e).sum().cpu(), z.sum())  # 0-d
    torch.testing.assert_close(z.to(e).mean().cpu(), z.mean())
    big = torch.tensor([3e38 + 1j, -3e38 + 0j, 3e38 + 3e38j])  # |z| above float32's largest value
    torch.testing.assert_close(big.to(e).sqrt().cpu(), big.sqrt())
    torch.testing.assert_close(big.to(e).log().cpu(), big.log())
    nan_im = torch.tensor([complex(0, NAN), complex(1, INF)])  # the CPU forms alpha * other as a product
    torch.testing.assert_close((nan_im.flip(0).to(e) + nan_im.to(e)).cpu(), nan_im.flip(0) + nan_im, equal_nan=True)
    x = torch.arange(6.0).to(torch.cfloat)[None].repeat(2, 1)  # an operand overlapping the written tensor
    xe = x.to(e)
    x[:, 1:].add_(x[:, :-1])
    xe[:, 1:].add_(xe[:, :-1])
    torch.testing.assert_close(xe.cpu(), x)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, dtype=torch.cfloat, generator=g), torch.randn(5, dtype=torch.cfloat, generator=g)
    for fn in (torch.dot, torch.vdot, lambda p, q: torch.rsub(p, q, alpha=2), lambda p, q: 1.5 - p):
        torch.testing.assert_close(fn(a.to(e), b.to(e)).cpu(), fn(a, b))
    i, m1, m2 = (torch.randn(*s, dtype=torch.cfloat, generator=g) for s in ((2, 3, 5), (2, 3, 4), (2, 4, 5)))
    torch.testing.assert_close(torch.baddbmm(i.to(e), m1.to(e), m2.to(e), beta=0.5, alpha=2).cpu(),
                               torch.baddbmm(i, m1, m2, beta=0.5, alpha=2), rtol=1e-5, atol=1e-5)


def test_complex_linear_with_bias_trains_like_cpu(native_only):
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3).to(torch.cfloat)
    x = torch.randn(2, 4, dtype=torch.cfloat)
    lin(x).abs().sum().backward()
    ember_lin = copy.deepcopy(lin).to("ember")
    ember_lin.zero_grad()
    ember_lin(x.to("ember")).abs().sum().backward()
    for p, q in zip(ember_lin.parameters(), lin.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-6)


def test_complex_errors_are_the_cpus():
    x = torch.zeros(4, 6, dtype=torch.cfloat, device="ember")
    with pytest.raises(RuntimeError, match=r"output with shape \[4, 6\] doesn't match the broadcast shape"):
        x.masked_fill_(torch.ones(2, 4, 6, dtype=torch.bool, device="ember"), 3j)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.where(torch.tensor([True, False], device="ember"), torch.tensor([1j, 2j]), x[0, :2])


def test_lazy_conjugate_and_negation_views_in_compiled_graphs(native_only):
    # z.conj().imag is a lazily negated view: compiled code reading its memory must see the
    # negation, in the forward, in complex backward formulas (which take conjugates) and for a
    # view handed in by the caller, written in place too.
    g = torch.Generator().manual_seed(4)
    x, y, w = (torch.randn(3, 4, generator=g) for _ in range(3))
    z = torch.complex(x, y)
    f = torch.compile(lambda z: z.conj().imag * 2, backend="ember")
    torch.testing.assert_close(f(z.to("ember")).cpu(), z.conj().imag * 2)
    for fn in (lambda a, b: (torch.complex(a, b) * torch.complex(b, a).conj()).abs(),
               lambda a, b: (torch.complex(a, b).conj() * torch.complex(b, a)).imag):
        cpu = [t.clone().requires_grad_() for t in (x, y)]
        ember = [t.to("ember").requires_grad_() for t in (x, y)]
        (fn(*cpu) * w).sum().backward()
        (torch.compile(fn, backend="ember")(*ember) * w.to("ember")).sum().backward()
        for c, e in zip(cpu, ember):
            torch.testing.assert_close(e.grad.cpu(), c.grad)
    ze, zc = z.to("ember"), z.clone()
    view = ze.conj().imag
    assert view.is_neg()
    torch.testing.assert_close(torch.compile(lambda a: a * 3 + 1, backend="ember")(view).cpu(), zc.conj().imag * 3 + 1)
    torch.compile(lambda a: a.add_(1), backend="ember")(view)
    zc.conj().imag.add_(1)
    torch.testing.assert_close(ze.cpu(), zc)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.complex32])
def test_complex_fill_of_an_expanded_tensor_like_cpu(dtype):
    # fill_ writes one value, so the CPU allows it through an expanded view; so does ember.
    for value in (1 + 2j, 3, float("nan"), True):
        got = torch.zeros(1, dtype=dtype, device="ember").expand(4).fill_(value)
        expected = torch.zeros(1, dtype=dtype).expand(4).fill_(value)
        torch.testing.assert_close(got.cpu(), expected, equal_nan=True)
    got = torch.ones(1, dtype=dtype, device="ember").expand(3).zero_()
    torch.testing.assert_close(got.cpu(), torch.zeros(3, dtype=dtype))
    if dtype == torch.complex64:
        with pytest.raises(RuntimeError, match="value cannot be converted to type c10::complex<float>"):
            torch.zeros(2, dtype=dtype, device="ember").fill_(1e40 + 1j)


def test_complex_inplace_lerp_refuses_to_broadcast_self_like_cpu():
    """A broadcasting end used to resize self (and write past a view into its base)."""
    for weight in (0.4, None):
        base = torch.zeros(2, 5, dtype=torch.complex64, device="ember")
        end = torch.ones(5, 5, dtype=torch.complex64, device="ember")
        w = weight if weight is not None else torch.full_like(end, 0.4)
        with pytest.raises(RuntimeError, match=r"output with shape \[5\] doesn't match the broadcast shape \[5, 5\]"):
            base[0].lerp_(end, w)
        assert base.abs().sum().item() == 0


def test_conj_physical_in_place_on_a_conjugate_view_matches_cpu():
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    want = z.clone().conj().conj_physical_()
    got = z.clone().to("ember").conj().conj_physical_()
    assert got.is_conj() == want.is_conj()
    torch.testing.assert_close(got.resolve_conj().cpu(), want.resolve_conj())


@pytest.mark.parametrize("update", ["add_", "copy_", "view_as_real", "sgd", "adamw"])
def test_compiled_in_place_updates_of_complex_inputs(update, native_only):
    # Complex parameters (FNO spectral weights) updated in place inside a compiled function or a
    # compiled optimizer step: the IR does not compute in complex, so the update is a library step.
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    p, d = torch.randn(3, 4, dtype=torch.cfloat, generator=g), torch.randn(3, 4, dtype=torch.cfloat, generator=g)
    if update in ("sgd", "adamw"):
        params = [torch.nn.Parameter(p.clone()), torch.nn.Parameter(p.to("ember"))]
        opts = []
        for q in params:
            q.grad = d.to(q.device)
            opts.append(torch.optim.SGD([q], lr=0.1, momentum=0.9) if update == "sgd" else torch.optim.AdamW([q], lr=0.1))
        for _ in range(2):
            opts[0].step()
            torch.compile(opts[1].step, backend="ember")()
        torch.testing.assert_close(params[1].detach().cpu(), params[0].detach())
        return
    fns = {"add_": lambda a, b: a.add_(b, alpha=-0.1), "copy_": lambda a, b: a.copy_(b * 2),
           "view_as_real": lambda a, b: torch.view_as_real(a).mul_(3)}
    fn = fns[update]
    want, got = p.clone(), p.to("ember")
    fn(want, d)
    torch.compile(fn, backend="ember")(got, d.to("ember"))
    torch.testing.assert_close(got.cpu(), want)


_Z = torch.randn(4, 6, dtype=torch.cfloat, generator=torch.Generator().manual_seed(3))
ELEMENT_MOVES = {
    "flip": lambda z: z.flip(0, 1), "roll": lambda z: z.roll((1, -2), (0, 1)), "fftshift": torch.fft.fftshift,
    "tril": lambda z: z.tril(-1), "triu": lambda z: z.triu(2), "gather": lambda z: z.gather(1, _idx(z, [[0, 5], [2, 2]])),
    "take": lambda z: z.take(_idx(z, [0, 23, -1])), "masked_select": lambda z: z.masked_select(z.real > 0),
    "index_select": lambda z: z.index_select(1, _idx(z, [5, 0])), "index": lambda z: z[_idx(z, [3, 1]), 2:],
    "cat": lambda z: torch.cat([z, z * 2], 1), "stack": lambda z: torch.stack([z, z]), "where": lambda z: torch.where(z.real > 0, z, z * 1j),
    "index_put": lambda z: z.clone().index_put_((_idx(z, [0, 2]),), z[1]),
}


def _idx(z, values):
    return torch.tensor(values, device=z.device)


@pytest.mark.parametrize("name", sorted(ELEMENT_MOVES))
def test_complex64_element_moves_run_on_the_device_bit_for_bit(name, native_only):
    # Ops that only move elements run on int64 views of complex64 data (no CPU fallback).
    fn = ELEMENT_MOVES[name]
    torch.testing.assert_close(fn(_Z.to("ember")).cpu(), fn(_Z), rtol=0, atol=0)
    torch.testing.assert_close(fn(_Z.to("ember").conj()).cpu(), fn(_Z.conj()), rtol=0, atol=0)  # lazy conj


def test_complex_element_moves_keep_gradients_and_complex128():
    z = _Z.clone().requires_grad_()
    ze = _Z.to("ember").requires_grad_()
    for t in (z, ze):
        (t.flip(0).tril().gather(1, _idx(t, [[0, 1]] * 4)).abs() ** 2).sum().backward()
    torch.testing.assert_close(ze.grad.cpu(), z.grad)
    w = _Z.to(torch.cdouble)
    torch.testing.assert_close(w.to("ember").roll(1, 0).triu().cpu(), w.roll(1, 0).triu(), rtol=0, atol=0)


@pytest.mark.parametrize("src_bits, dst_bits", [("conj", ""), ("", "conj"), ("conj", "conj"), ("neg", ""),
                                                 ("conj,neg", ""), ("", "neg"), ("neg", "conj")])
def test_copies_between_lazy_bit_views_match_cpu(src_bits, dst_bits, native_only):
    """copy_ between conjugate/negative views runs on the device (a capture can hold it) and
    stores what the CPU stores, in place too."""
    def view(t, bits):
        if "conj" in bits:
            t = t.conj()
        if "neg" in bits:
            t = torch._neg_view(t)
        return t

    g = torch.Generator().manual_seed(0)
    src = torch.randn(5, 3, dtype=torch.complex64, generator=g)
    results = []
    for device in ("cpu", "ember"):
        s = src.to(device)
        d = torch.zeros(3, 5, dtype=torch.complex64, device=device).t()
        view(d, dst_bits).copy_(view(s, src_bits))
        same = s.clone()
        same.copy_(view(same, src_bits))  # full overlap, in place
        results.append((d.cpu(), same.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][1], results[0][1])


@pytest.mark.parametrize("special", [0.0, 1.0, float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_mean_divides_like_cpu(special, dtype, native_only):
    """mean of a complex tensor is the complex sum divided by n as a complex number (the CPU's
    c10::complex rule): an inf or NaN part reaches the other part, and finite values round the
    same way."""
    base = torch.tensor([[1 + 2j, -0.5 + 1j, 0j, 3 - 1j, 2 + 2j]] * 3, dtype=dtype)
    base[1, 2] = complex(special, 0.0)
    base[2, 3] = complex(0.5, special)
    for args in ((), (1,), (0, True)):
        want = base.mean(*args)
        got = base.to("ember").mean(*args).cpu()
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)

"""AMP with float16 on ember: autocast plus torch.amp.GradScaler, whose two ops
(unscale-and-check, scale update) run natively, so no gradient leaves the device."""
import pytest
import torch
import torch.nn.functional as F

import torch_ember
from torch_ember import fallback_report


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def _train(device, steps=6, poison_step=None, **scaler_kwargs):
    model = _model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler(device, **scaler_kwargs)
    torch.manual_seed(1)
    xs = [torch.randn(8, 16) for _ in range(steps)]
    scales, losses = [], []
    for i, x in enumerate(xs):
        x = x.to(device)
        with torch.autocast(device, dtype=torch.float16):
            loss = model(x).float().square().mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        if i == poison_step:
            model[0].weight.grad[0, 0] = float("inf")
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        losses.append(loss.item())
    return model, scales, losses


def test_gradscaler_trains_like_cpu_with_native_ops():
    torch_ember.reset_fallback_stats()
    model, scales, losses = _train("ember", growth_interval=2, poison_step=3)
    report = fallback_report()
    assert not any(r.op.startswith("aten::_amp") for r in report), report
    ref, ref_scales, ref_losses = _train("cpu", growth_interval=2, poison_step=3)
    assert scales == ref_scales  # grew every 2 clean steps, halved on the inf step
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=2e-3, atol=1e-4)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("bad", [None, float("inf"), float("-inf"), float("nan")])
def test_unscale_and_check_matches_cpu(dtype, bad):
    torch.manual_seed(0)
    grads = [torch.randn(n).to(dtype) for n in (1, 1000, 70000)]
    if bad is not None:
        grads[2][12345] = bad
    inv = torch.tensor([0.125])
    found = torch.zeros(1)
    ember = [g.to("ember") for g in grads]
    found_e = found.to("ember")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    torch._amp_foreach_non_finite_check_and_unscale_(ember, found_e, inv.to("ember"))
    torch.testing.assert_close(found_e.cpu(), found)
    for a, b in zip(ember, grads):
        torch.testing.assert_close(a.cpu(), b, equal_nan=True)


def test_unscale_non_contiguous_gradient():
    g = torch.randn(8, 6)
    ge = g.to("ember").t()
    found = torch.zeros(1, device="ember")
    torch._amp_foreach_non_finite_check_and_unscale_([ge], found, torch.tensor([2.0], device="ember"))
    torch.testing.assert_close(ge.cpu(), g.t() * 2)
    assert found.item() == 0


@pytest.mark.parametrize("found,tracker,interval", [(0.0, 0, 3), (0.0, 2, 3), (1.0, 2, 3), (0.0, 0, 1)])
def test_update_scale_matches_cpu(found, tracker, interval):
    def run(device):
        scale = torch.tensor([1024.0], device=device)
        t = torch.tensor([tracker], dtype=torch.int32, device=device)
        torch._amp_update_scale_(scale, t, torch.tensor([found], device=device), 2.0, 0.5, interval)
        return scale.cpu(), t.cpu()

    (s, t), (rs, rt) = run("ember"), run("cpu")
    torch.testing.assert_close(s, rs)
    torch.testing.assert_close(t, rt)


def test_amp_argument_errors():
    g = [torch.randn(4, device="ember")]
    with pytest.raises(RuntimeError, match="found_inf must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            g, torch.zeros(1, dtype=torch.float64, device="ember"), torch.ones(1, device="ember"))
    with pytest.raises(RuntimeError, match="inv_scale must be a 1-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            g, torch.zeros(1, device="ember"), torch.ones(2, device="ember"))
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor"):
        torch._amp_update_scale_(torch.ones(1, device="ember"), torch.zeros(1, device="ember"),
                                 torch.zeros(1, device="ember"), 2.0, 0.5, 10)


def test_torch_ember_amp_names():
    assert torch.ember.amp.GradScaler().get_scale() == 2.0**16
    with torch.ember.amp.autocast(dtype=torch.bfloat16):
        y = torch.nn.functional.linear(torch.randn(2, 4, device="ember"), torch.randn(3, 4, device="ember"))
    assert y.dtype == torch.bfloat16
    import torch.ember.amp as amp_module  # importable the way torch.cuda.amp is
    assert amp_module is torch.ember.amp


@pytest.mark.parametrize("found", [0.0, 1.0])
def test_fused_adamw_with_grad_scale_matches_cpu(found):
    def run(device):
        torch.manual_seed(0)
        p = torch.randn(1000).to(device)
        g = (torch.randn(1000) * 1024).to(device)
        m, v = torch.zeros_like(p), torch.zeros_like(p)
        step = torch.tensor([1.0], device=device)
        torch._fused_adamw_([p], [g], [m], [v], [], [step], lr=0.01, beta1=0.9, beta2=0.999,
                            weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False,
                            grad_scale=torch.tensor([1024.0], device=device),
                            found_inf=torch.tensor([found], device=device))
        return [t.cpu() for t in (p, g, m, v)]

    torch_ember.reset_fallback_stats()
    got = run("ember")
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())
    for a, b in zip(got, run("cpu")):
        torch.testing.assert_close(a, b)


def _under_autocast(device, fn, *tensors):
    with torch.autocast(device, dtype=torch.bfloat16):
        return fn(*[t.to(device) for t in tensors])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_higher_order_ops_run_under_autocast_like_cpu(compiled):
    """scan, cond, while_loop and flex_attention under torch.autocast("ember") autocast the ops
    of their bodies (flex_attention casts q, k, v), as under the CPU's autocast."""
    from torch._higher_order_ops.scan import scan
    from torch._higher_order_ops.while_loop import while_loop
    from torch.nn.attention.flex_attention import flex_attention

    w = torch.randn(6, 6)

    def recurrent(h0, xs, w):
        return scan(lambda h, x: ((h @ w + x).tanh().float(), (h @ w).float()), h0, xs, dim=0)[1]

    def branch(x, w):
        return torch.cond(x.sum() > 0, lambda a: a @ w, lambda a: (a - 1) @ w, (x,))

    def loop(x, w):
        return while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, (a @ w).float()), (torch.tensor(0, device=x.device), x))[1]

    def attention(q, k, v):
        return flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: torch.where(qi >= ki, s, -float("inf")))

    g = torch.Generator().manual_seed(0)
    cases = [(recurrent, torch.randn(6, generator=g), torch.randn(5, 6, generator=g), w),
             (branch, torch.randn(4, 6, generator=g), w), (loop, torch.randn(4, 6, generator=g), w),
             (attention, *(torch.randn(1, 2, 16, 8, generator=g) for _ in range(3)))]
    for fn, *tensors in cases:
        want = _under_autocast("cpu", fn, *tensors)
        run = torch.compile(fn, backend="ember", fullgraph=True) if compiled else fn
        got = _under_autocast("ember", run, *tensors)
        want = want[1] if isinstance(want, tuple) else want
        got = got[1] if isinstance(got, tuple) else got
        assert got.dtype == want.dtype, fn.__name__
        torch.testing.assert_close(got.cpu(), want, rtol=2e-2, atol=2e-2, msg=fn.__name__)


def test_fourier_transforms_run_in_float32_under_autocast_like_cpu():
    """A long convolution through rfft/irfft on a bfloat16 activation (Hyena, FNO): the CPU's
    autocast runs FFTs in float32, and so does ember's (a bfloat16 FFT would raise)."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 16, generator=g), torch.randn(16, 16, generator=g)
    results = []
    for device in ("cpu", "ember"):
        with torch.autocast(device, dtype=torch.bfloat16):
            h = x.to(device) @ w.to(device)
            spectrum = torch.fft.rfft(h, n=32)
            y = torch.fft.irfft(spectrum * spectrum, n=32)[:, :16] + torch.fft.fft2(h).real
        assert h.dtype == torch.bfloat16 and spectrum.dtype == torch.complex64 and y.dtype == torch.float32
        results.append(y.cpu())
    torch.testing.assert_close(results[1], results[0])


@pytest.mark.parametrize("compiled", [False, True])
def test_cross_entropy_runs_in_float32_under_autocast_like_cpu(compiled):
    """bfloat16 logits under autocast: the loss and its gradient come from a float32
    log-softmax, as on the CPU (CUDA's policy would round the log-probabilities to bfloat16)."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(64, 32, generator=g), torch.randn(32, 1000, generator=g) / 6
    target = torch.randint(0, 1000, (64,), generator=g)

    def loss_fn(x, w, t):
        return F.cross_entropy(x @ w, t, label_smoothing=0.1)

    results = []
    for device, fn in (("cpu", loss_fn), ("ember", torch.compile(loss_fn, backend="ember") if compiled else loss_fn)):
        we = w.detach().clone().to(device).requires_grad_()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = fn(x.to(device), we, target.to(device))
        loss.backward()
        assert loss.dtype == torch.float32
        results.append((loss.detach().cpu(), we.grad.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-2, atol=1e-4)

"""The _foreach_* ops optimizers and gradient clipping use run as native batched kernels and match
PyTorch CPU, including lists that need the per-tensor path (mixed dtypes, strided tensors)."""
import pytest
import torch
import torch_ember

DTYPES = [torch.float32, torch.bfloat16, torch.float64]
TOL = {torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def make_lists(dtype, n=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(3, 5), (7,), (), (2, 2, 3)][:n]
    return [[torch.randn(s, generator=gen).to(dtype) for s in shapes] for _ in range(3)]


def on_ember(lists):
    return [[t.to("ember") for t in l] for l in lists]


CASES = {
    "add_scalar": lambda a, b, c: torch._foreach_add_(a, 0.5),
    "add_list": lambda a, b, c: torch._foreach_add_(a, b, alpha=-2.0),
    "mul_scalar": lambda a, b, c: torch._foreach_mul_(a, 0.9),
    "mul_tensor": lambda a, b, c: torch._foreach_mul_(a, b[2].reshape(())),
    "div_scalarlist": lambda a, b, c: torch._foreach_div_(a, [2.0, 3.0, -1.5, 4.0]),
    "sqrt_": lambda a, b, c: torch._foreach_sqrt_([t.abs_() for t in a]),
    "lerp": lambda a, b, c: torch._foreach_lerp_(a, b, 0.1),
    "addcmul": lambda a, b, c: torch._foreach_addcmul_(a, b, c, value=0.3),
    "addcdiv": lambda a, b, c: torch._foreach_addcdiv_(a, b, [t.abs() + 1 for t in c], value=-0.2),
    "addcdiv_scalarlist": lambda a, b, c: torch._foreach_addcdiv_(a, b, [t.abs() + 1 for t in c],
                                                                   [0.1, 0.2, 0.3, 0.4]),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_inplace_foreach_matches_cpu(case, dtype):
    cpu = make_lists(dtype)
    em = on_ember(cpu)
    torch_ember.reset_fallback_stats()
    CASES[case](*em)
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())
    CASES[case](*cpu)
    for e, c in zip(em[0], cpu[0]):
        torch.testing.assert_close(e.cpu(), c, **TOL.get(dtype, {}))


def test_sqrt_out_of_place_and_mixed_lists_take_the_per_tensor_path():
    cpu = make_lists(torch.float32)
    cpu[0] = [t.abs() for t in cpu[0]]
    em = on_ember(cpu)
    for e, c in zip(torch._foreach_sqrt(em[0]), torch._foreach_sqrt(cpu[0])):
        torch.testing.assert_close(e.cpu(), c)
    # A transposed view and a bfloat16 tensor in the list: not flat, still native and correct.
    mixed_c = [cpu[0][0].t(), cpu[0][1].bfloat16()]
    mixed_e = [em[0][0].t(), em[0][1].bfloat16()]
    torch_ember.reset_fallback_stats()
    torch._foreach_mul_(mixed_e, 3.0)
    assert not torch_ember.fallback_report()
    torch._foreach_mul_(mixed_c, 3.0)
    for e, c in zip(mixed_e, mixed_c):
        torch.testing.assert_close(e.cpu(), c)


def test_foreach_errors_match_cpu():
    a = [torch.ones(3, device="ember")]
    with pytest.raises(RuntimeError, match="same"):
        torch._foreach_add_(a, [torch.ones(3, device="ember"), torch.ones(2, device="ember")])
    with pytest.raises(RuntimeError):
        torch._foreach_add_(a, [torch.ones(4, device="ember")])


@pytest.mark.parametrize("opt", ["adamw", "adam", "sgd"])
def test_optimizer_with_clipping_matches_cpu(opt):
    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(device)
        make = {"adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=True),
                "adam": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.01, foreach=True),
                "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=True)}[opt]
        o = make(model.parameters())
        gen = torch.Generator().manual_seed(1)
        for _ in range(3):
            x = torch.randn(8, 16, generator=gen).to(device)
            o.zero_grad()
            model(x).pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=True)
            o.step()
        return [p.detach().cpu() for p in model.parameters()]

    torch_ember.reset_fallback_stats()
    got = run("ember")
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())
    for g, e in zip(got, run("cpu")):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


def _fused_adam_on_both(cls, numel, dtype, steps, amsgrad, maximize):
    """The same fused Adam(W) steps on CPU and ember parameters (a large and a small tensor);
    returns (cpu optimizer, ember optimizer, cpu params, ember params), after checking that
    ember ran no op on the CPU fallback."""
    torch.manual_seed(0)
    cpu = [torch.nn.Parameter(torch.randn(numel).to(dtype)), torch.nn.Parameter(torch.randn(3, 5).to(dtype))]
    em = [torch.nn.Parameter(p.detach().to("ember")) for p in cpu]
    kw = dict(lr=1e-2, weight_decay=0.1, amsgrad=amsgrad, maximize=maximize, fused=True)
    opt_c, opt_e = cls(cpu, **kw), cls(em, **kw)
    torch_ember.reset_fallback_stats()
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for pc, pe in zip(cpu, em):
            g = torch.randn(pc.shape, generator=gen).to(dtype)
            pc.grad, pe.grad = g, g.to("ember")
        opt_c.step()
        opt_e.step()
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())
    return opt_c, opt_e, cpu, em


@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.Adam])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
def test_fused_adam_is_native_and_matches_cpu_fused(cls, amsgrad, maximize):
    _, _, cpu, em = _fused_adam_on_both(cls, 70000, torch.float32, 3, amsgrad, maximize)
    for pe, pc in zip(em, cpu):
        torch.testing.assert_close(pe.detach().cpu(), pc.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.Adam])
@pytest.mark.parametrize("lr_device", ["ember", "cpu"])
def test_fused_adam_with_a_tensor_lr_is_native(cls, lr_device):
    # Adam(fused=True, lr=tensor) calls the tensor_lr overload: an ember float32 lr is read by the
    # kernel, a CPU one taken as a number (as CUDA's kernel does); both match a float lr on the CPU.
    torch.manual_seed(0)
    cpu = [torch.nn.Parameter(torch.randn(5000)), torch.nn.Parameter(torch.randn(3, 5))]
    em = [torch.nn.Parameter(p.detach().to("ember")) for p in cpu]
    kw = dict(weight_decay=0.1, amsgrad=True, fused=True)
    opt_c = cls(cpu, lr=0.02, **kw)
    opt_e = cls(em, lr=torch.tensor(0.02, device=lr_device), **kw)
    torch_ember.reset_fallback_stats()
    for _ in range(3):
        for pc, pe in zip(cpu, em):
            pc.grad = torch.randn(pc.shape)
            pe.grad = pc.grad.to("ember")
        opt_c.step()
        opt_e.step()
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())
    for pe, pc in zip(em, cpu):
        torch.testing.assert_close(pe.detach().cpu(), pc.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cls,amsgrad,maximize", [(torch.optim.AdamW, False, False), (torch.optim.Adam, True, False),
                                                  (torch.optim.AdamW, True, True)])
def test_sixteen_bit_fused_adam_is_native_and_matches_cpu_fused(dtype, cls, amsgrad, maximize):
    # PyTorch's fused kernels compute 16-bit state in float and round each value once when stored.
    opt_c, opt_e, cpu, em = _fused_adam_on_both(cls, 5000, dtype, 4, amsgrad, maximize)
    for pe, pc in zip(em, cpu):
        # Within one rounding in the dtype: the CPU's float math may round a last bit the other way.
        ulp = torch.finfo(dtype).eps
        for key in ("exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if amsgrad else ())):
            torch.testing.assert_close(opt_e.state[pe][key].cpu(), opt_c.state[pc][key], rtol=ulp, atol=0)
        torch.testing.assert_close(pe.detach().cpu(), pc.detach(), rtol=ulp, atol=1e-3 * ulp)


def test_sixteen_bit_fused_adam_with_grad_scaler_skips_inf_steps(native_only):
    p = torch.ones(64, dtype=torch.bfloat16, device="ember", requires_grad=True)
    ref = torch.ones(64, dtype=torch.bfloat16, requires_grad=True)
    opts = [torch.optim.AdamW([t], lr=0.1, fused=True) for t in (p, ref)]
    scalers = [torch.amp.GradScaler(d, init_scale=8.0) for d in ("ember", "cpu")]
    for k in range(3):  # the second step overflows and is skipped
        for t, o, sc in zip((p, ref), opts, scalers):
            o.zero_grad()
            sc.scale((t * (float("inf") if k == 1 else 2.0)).sum()).backward()
            sc.step(o)
            sc.update()
    torch.testing.assert_close(p.detach().cpu(), ref.detach(), rtol=0, atol=0)
    assert opts[0].state[p]["step"].item() == opts[1].state[ref]["step"].item() == 2
    assert scalers[0].get_scale() == scalers[1].get_scale() == 4.0


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.95, 0.99999)])
def test_fused_adam_moments_round_like_cpu(betas):
    """1 - beta is formed in double, as on the CPU: in float32, 1 - 0.99999 is off by 1e-3 relative,
    and every second-moment update with it."""
    p_c = torch.nn.Parameter(torch.ones(4))
    p_e = torch.nn.Parameter(torch.ones(4, device="ember"))
    opt_c, opt_e = (torch.optim.AdamW([p], lr=1e-2, betas=betas, fused=True) for p in (p_c, p_e))
    for step in range(2):
        p_c.grad = torch.full((4,), 3.0 + step)
        p_e.grad = p_c.grad.to("ember")
        opt_c.step()
        opt_e.step()
    for key in ("exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(opt_e.state[p_e][key].cpu(), opt_c.state[p_c][key], rtol=1e-6, atol=0)


def _sgd_reference(p, g, buf, *, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
    """One SGD step of a 16-bit parameter in float, rounded once per tensor (CUDA's fused kernel)."""
    gf, pf = g.float(), p.float()
    gf = -gf if maximize else gf
    gf = gf + pf * weight_decay if weight_decay else gf
    if momentum:
        bf = gf if buf is None else buf.float() * momentum + gf * (1 - dampening)
        buf = bf.to(p.dtype)
        gf = gf + bf * momentum if nesterov else bf
    return (pf - gf * lr).to(p.dtype), buf


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("options", [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
                                     {"momentum": 0.5, "dampening": 0.1, "maximize": True}])
def test_fused_sgd_updates_sixteen_bit_parameters(dtype, options, native_only):
    # The CPU's fused SGD leaves 16-bit tensors of 16 or more elements unchanged (torch 2.13);
    # ember computes in float and rounds once, as CUDA does.
    g = torch.Generator().manual_seed(5)
    p0 = torch.randn(40, generator=g).to(dtype)
    grads = [torch.randn(40, generator=g).to(dtype) for _ in range(3)]
    p = p0.to("ember").requires_grad_()
    opt = torch.optim.SGD([p], lr=0.1, fused=True, **options)
    ref, buf = p0, None
    for grad in grads:
        p.grad = grad.to("ember")
        opt.step()
        ref, buf = _sgd_reference(ref, grad, buf, lr=0.1, **options)
        torch.testing.assert_close(p.detach().cpu(), ref, rtol=0, atol=0)


def test_fused_sgd_with_grad_scaler_skips_inf_steps_and_unscales(native_only):
    p = torch.ones(32, dtype=torch.float16, device="ember", requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.5, momentum=0.9, fused=True)
    scaler = torch.amp.GradScaler("ember", init_scale=4.0)
    scaler.scale((p * 2).sum()).backward()  # gradients 8 = 2 * 4
    scaler.step(opt)  # unscaled to 2: p = 1 - 0.5 * 2
    scaler.update()
    torch.testing.assert_close(p.detach().cpu(), torch.zeros(32, dtype=torch.float16))
    torch.testing.assert_close(p.grad.cpu(), torch.full((32,), 2.0, dtype=torch.float16))
    opt.zero_grad()
    scaler.scale((p * float("inf")).sum()).backward()
    scaler.step(opt)  # found inf: nothing changes
    scaler.update()
    torch.testing.assert_close(p.detach().cpu(), torch.zeros(32, dtype=torch.float16))
    assert scaler.get_scale() == 2.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", ["_foreach_add_", "_foreach_mul_"])
def test_foreach_with_a_python_scalar_on_16_bit_tensors_matches_cpu_bit_for_bit(dtype, op, native_only):
    """The CPU's foreach add and mul round a Python scalar to a 16-bit tensor's dtype first; the
    results match it bit for bit (optimizers' weight decay, foreach AdamW's lerp of moments)."""
    c = 0.8831494822540025
    g = torch.Generator().manual_seed(0)
    tensors = [(torch.randn(n, generator=g) * 8).to(dtype) for n in (4096, 33, 1)]
    want = [t.clone() for t in tensors]
    got = [t.to("ember") for t in tensors]
    getattr(torch, op)(want, c)
    getattr(torch, op)(got, c)
    for a, b in zip(got, want):
        assert torch.equal(a.cpu(), b)

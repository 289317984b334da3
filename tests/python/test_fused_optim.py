"""SGD(fused=True) and Adagrad(fused=True) on ember: native (no CPU fallback, so a step can be
captured in a graph), matching PyTorch's CPU fused kernels in float32 and float64, and skipping
GradScaler's inf steps on the device."""
import pytest
import torch

import torch_ember

SGD_OPTIONS = [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
               {"momentum": 0.5, "dampening": 0.1, "maximize": True}]
ADAGRAD_OPTIONS = [{}, {"lr_decay": 0.1, "weight_decay": 0.01}, {"maximize": True, "initial_accumulator_value": 0.5}]


def _steps_on_both(cls, dtype, options, lr, steps=4):
    """The same fused steps on CPU and ember parameters (a large and a small one); checks that
    ember ran nothing on the CPU fallback and returns both optimizers and parameter lists."""
    g = torch.Generator().manual_seed(3)
    cpu = [torch.nn.Parameter(torch.randn(5000, generator=g, dtype=dtype)),
           torch.nn.Parameter(torch.randn(3, 7, generator=g, dtype=dtype))]
    em = [torch.nn.Parameter(p.detach().to("ember")) for p in cpu]
    ember_lr = lr.clone().to("ember") if isinstance(lr, torch.Tensor) else lr
    opt_c = cls(cpu, lr=float(lr), fused=True, **options)
    opt_e = cls(em, lr=ember_lr, fused=True, **options)
    torch_ember.reset_fallback_stats()
    for _ in range(steps):
        for pc, pe in zip(cpu, em):
            pc.grad = torch.randn(pc.shape, generator=g, dtype=dtype)
            pe.grad = pc.grad.to("ember")
        opt_c.step()
        opt_e.step()
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())
    return opt_c, opt_e, cpu, em


def _assert_same(opt_c, opt_e, cpu, em, state_key):
    """Parameters and the optimizer's state tensor `state_key` (where the CPU keeps one) agree."""
    for pc, pe in zip(cpu, em):
        torch.testing.assert_close(pe.detach().cpu(), pc.detach())
        if opt_c.state[pc].get(state_key) is not None:
            torch.testing.assert_close(opt_e.state[pe][state_key].cpu(), opt_c.state[pc][state_key])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("options", SGD_OPTIONS)
@pytest.mark.parametrize("lr", [0.1, torch.tensor(0.1)])
def test_fused_sgd_is_native_and_matches_cpu_fused(dtype, options, lr):
    _assert_same(*_steps_on_both(torch.optim.SGD, dtype, options, lr), "momentum_buffer")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("options", ADAGRAD_OPTIONS)
@pytest.mark.parametrize("lr", [0.05, torch.tensor(0.05)])
def test_fused_adagrad_is_native_and_matches_cpu_fused(dtype, options, lr):
    _assert_same(*_steps_on_both(torch.optim.Adagrad, dtype, options, lr), "sum")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sixteen_bit_fused_adagrad_matches_the_float_computation(dtype):
    # Computed in float32 and rounded once per stored value.
    g = torch.Generator().manual_seed(4)
    p0 = torch.randn(300, generator=g)
    p = torch.nn.Parameter(p0.to(dtype).to("ember"))
    ref = torch.nn.Parameter(p0.to(dtype).float())
    opt = torch.optim.Adagrad([p], lr=0.05, fused=True)
    opt_ref = torch.optim.Adagrad([ref], lr=0.05)
    for _ in range(3):
        grad = torch.randn(300, generator=g).to(dtype)
        p.grad, ref.grad = grad.to("ember"), grad.float()
        opt.step()
        opt_ref.step()
        with torch.no_grad():
            ref.copy_(ref.to(dtype).float())
            opt_ref.state[ref]["sum"].copy_(opt_ref.state[ref]["sum"].to(dtype).float())
    torch.testing.assert_close(p.detach().cpu().float(), ref.detach(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("cls, options", [(torch.optim.SGD, {"momentum": 0.9}), (torch.optim.Adagrad, {})])
def test_grad_scaler_inf_steps_change_nothing_and_a_skipped_first_step_leaves_zero_momentum(cls, options):
    p = torch.nn.Parameter(torch.ones(40, device="ember"))
    opt = cls([p], lr=0.5, fused=True, **options)
    scaler = torch.amp.GradScaler("ember", init_scale=4.0)
    scaler.scale((p * float("inf")).sum()).backward()
    scaler.step(opt)  # found inf on the very first step: nothing changes
    scaler.update()
    torch.testing.assert_close(p.detach().cpu(), torch.ones(40))
    if cls is torch.optim.SGD:
        # PyTorch allocates the buffer with empty_like for the kernel to fill; a skipped step
        # leaves it zero rather than whatever the memory held.
        torch.testing.assert_close(opt.state[p]["momentum_buffer"].cpu(), torch.zeros(40))
    opt.zero_grad()
    scaler.scale((p * 2).sum()).backward()  # gradient 2 once unscaled
    scaler.step(opt)
    scaler.update()
    assert torch.isfinite(p.detach()).all()
    assert (p.detach().cpu() < 1).all()
    torch.testing.assert_close(p.grad.cpu(), torch.full((40,), 2.0))


@pytest.mark.parametrize("cls, options", [(torch.optim.SGD, {"momentum": 0.9}), (torch.optim.Adagrad, {})])
def test_a_fused_step_captures_and_replays_like_eager_steps(cls, options):
    torch.manual_seed(0)
    p_cpu = torch.nn.Parameter(torch.randn(64))
    p = torch.nn.Parameter(p_cpu.detach().to("ember"))
    opt, ref = cls([p], lr=0.1, fused=True, **options), cls([p_cpu], lr=0.1, **options)
    grads = [torch.randn(64) for _ in range(4)]
    p.grad, p_cpu.grad = grads[0].to("ember"), grads[0]
    opt.step()  # the first step creates the state outside the graph
    ref.step()
    graph = torch.ember.EmberGraph()
    with torch.ember.graph(graph):
        opt.step()
    for grad in grads[1:]:
        p.grad.copy_(grad.to("ember"))
        p_cpu.grad = grad
        graph.replay()
        ref.step()
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach())

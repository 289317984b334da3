"""Graph capture (torch.ember.EmberGraph, torch.ember.graph, torch.accelerator.Graph): a captured
training step replays to the same results as eager steps, memory the capture used stays its own,
and what cannot be captured is refused with an error that says why."""
import copy

import pytest
import torch
import torch.nn.functional as F
import torch_ember  # noqa: F401


def _step(model, opt, x, y):
    opt.zero_grad(set_to_none=False)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def test_a_captured_training_step_replays_like_eager_steps():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 5)).to("ember")
    ref = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(8, 16, generator=gen) for _ in range(6)]
    ys = [torch.randint(0, 5, (8,), generator=gen) for _ in range(6)]
    static_x, static_y = xs[0].to("ember"), ys[0].to("ember")
    _step(model, opt, static_x, static_y)  # warm-up: gradients and optimizer state exist
    _step(ref, ref_opt, static_x.clone(), static_y.clone())
    g = torch.ember.EmberGraph()
    with torch.ember.graph(g):
        assert torch.ember.is_current_stream_capturing()
        static_loss = _step(model, opt, static_x, static_y)
    assert not torch.ember.is_current_stream_capturing()
    assert g.num_kernels() > 20
    for x, y in zip(xs[1:], ys[1:]):
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        expected = _step(ref, ref_opt, x.to("ember"), y.to("ember"))
        torch.testing.assert_close(static_loss, expected, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_memory_the_capture_used_is_not_handed_out_again():
    x = torch.randn(1000, device="ember")
    g = torch.ember.EmberGraph()
    with torch.ember.graph(g):
        t = (x * 2).sin()  # an intermediate, freed inside the capture
        y = t.exp() + 1
        del t
    for _ in range(3):
        garbage = [torch.full((1000,), float(i), device="ember") for i in range(20)]
        x.copy_(torch.randn(1000))
        g.replay()
        torch.testing.assert_close(y.cpu(), (x.cpu() * 2).sin().exp() + 1)
        del garbage
    g.reset()
    with pytest.raises(RuntimeError, match="holds no capture"):
        g.replay()


def test_a_block_split_inside_the_capture_stays_the_graphs():
    x = torch.randn(1 << 20, device="ember")  # 4 MB
    g = torch.ember.EmberGraph()
    with torch.ember.graph(g):
        a = x * 2  # written by the graph, freed, then split for a smaller tensor
        s = a.sum()
        del a
        b = x[:300_000] + s
    c = torch.full((600_000,), 7.0, device="ember")  # allocated after the capture
    g.replay()
    assert torch.equal(c.cpu(), torch.full((600_000,), 7.0)), "a replay wrote memory handed out after the capture"
    torch.testing.assert_close(b.cpu(), x[:300_000].cpu() + (x.cpu() * 2).sum(), rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize("what,fn,match", [
    ("a read-back", lambda x: (x.sum().item(),), "capturing a graph"),
    ("printing", lambda x: (str(x),), "capturing a graph"),
    ("a CPU-fallback op", lambda x: (torch.nextafter((x + 1).bfloat16(), x.bfloat16()),),
     "'aten::nextafter' cannot be captured: it has no ember kernel and runs on the CPU fallback"),
    ("random numbers", lambda x: (torch.rand_like(x),), "random numbers cannot be captured"),
    ("dropout", lambda x: (F.dropout(x, 0.5),), "random numbers cannot be captured"),
])
def test_what_cannot_be_captured_is_refused(what, fn, match):
    x = torch.randn(4, device="ember")
    g = torch.ember.EmberGraph()
    with pytest.raises(RuntimeError, match=match):
        with torch.ember.graph(g):
            fn(x)
    assert g.num_kernels() == 0 and not torch.ember.is_current_stream_capturing()
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)  # the device works on afterwards


def test_work_on_another_stream_during_a_capture_is_refused():
    x = torch.randn(4, device="ember")
    side = torch.ember.Stream()
    g = torch.ember.EmberGraph()
    with pytest.raises(RuntimeError, match="while stream 0 of ember:0 captures a graph"):
        with torch.ember.graph(g):
            with torch.ember.stream(side):
                x + 1


def test_a_non_capturable_optimizer_step_is_refused():
    model = torch.nn.Linear(4, 4).to("ember")
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4, device="ember")).sum().backward()
    opt.step()
    with pytest.raises(RuntimeError, match="capturable"):
        with torch.ember.graph(torch.ember.EmberGraph()):
            opt.step()


def test_torch_accelerator_graph_on_ember():
    x = torch.randn(6, device="ember")
    g = torch.accelerator.Graph()
    g.capture_begin()
    assert torch.accelerator.current_stream().is_capturing()
    y = x.square() + 3
    g.capture_end()
    x.copy_(torch.arange(6.0))
    g.replay()
    torch.testing.assert_close(y.cpu(), torch.arange(6.0).square() + 3)
    g.reset()


def test_copies_and_host_state_a_replay_would_repeat_are_refused():
    static = torch.empty(4, device="ember")
    with pytest.raises(RuntimeError, match="needs converting or staging cannot be captured"):
        with torch.ember.graph(torch.ember.EmberGraph()):
            static.copy_(torch.zeros(4, dtype=torch.float64))  # staged on the host at capture time
    model = torch.nn.Linear(4, 3).to("ember")
    ref = copy.deepcopy(model)
    x = torch.randn(2, 4, device="ember")
    for m in (model, ref):
        m(x).sum().backward()
    for opt, match in ((torch.optim.Adagrad(model.parameters(), lr_decay=0.5), "state 'step' is a CPU tensor"),
                       (torch.optim.Adam(model.parameters(), lr=torch.tensor(0.05), capturable=True),
                        "param_groups 'lr' is a CPU tensor")):
        with pytest.raises(RuntimeError, match=match):
            with torch.ember.graph(torch.ember.EmberGraph()):
                opt.step()
    # SGD keeps no host state: its captured step replays like eager steps.
    sgd, ref_sgd = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, ref))
    sgd.step()
    ref_sgd.step()
    g = torch.ember.EmberGraph()
    with torch.ember.graph(g):
        sgd.step()
    for _ in range(3):
        g.replay()
        ref_sgd.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_interpolation_is_capturable(mode):
    # Its index and weight tables used to reach the device through a synchronizing upload.
    x = torch.randn(2, 3, 5, 6, device="ember", requires_grad=True)
    g = torch.ember.EmberGraph()
    with torch.ember.graph(g):
        y = F.interpolate(x, scale_factor=1.5, mode=mode)
        y.square().sum().backward()
    for _ in range(2):
        with torch.no_grad():
            x.copy_(torch.randn(2, 3, 5, 6))
        x.grad.zero_()
        g.replay()
        xc = x.detach().cpu().requires_grad_()
        yc = F.interpolate(xc, scale_factor=1.5, mode=mode)
        yc.square().sum().backward()
        torch.testing.assert_close(y.detach().cpu(), yc.detach())
        torch.testing.assert_close(x.grad.cpu(), xc.grad)


def test_pool_of_a_graph_and_nested_captures():
    a, b = torch.ember.EmberGraph(), torch.ember.EmberGraph()
    x = torch.randn(3, device="ember")
    with torch.ember.graph(a, pool=b.pool()):  # (0, 0): no pool to share, as any ember graph's
        y = x + 1
        with pytest.raises(RuntimeError, match="captures do not nest"):
            with torch.ember.graph(b):
                pass
    a.replay()
    torch.testing.assert_close(y.cpu(), x.cpu() + 1)


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
def test_a_fused_step_with_a_device_lr_replays_with_the_lr_of_the_moment(cls):
    # The CUDA-graph recipe for an lr schedule: fused, capturable, lr a device tensor that the
    # schedule changes in place between replays; the captured kernel reads it when it runs.
    torch.manual_seed(0)
    p_cpu = torch.nn.Parameter(torch.randn(1000))
    p = torch.nn.Parameter(p_cpu.detach().to("ember"))
    lr = torch.tensor(0.01, device="ember")
    opt = cls([p], lr=lr, fused=True, capturable=True, weight_decay=0.1)
    ref = cls([p_cpu], lr=0.01, weight_decay=0.1)
    grads = [torch.randn(1000) for _ in range(4)]
    p.grad = grads[0].to("ember")
    opt.step()  # the warm-up step creates the state outside the graph
    p_cpu.grad = grads[0]
    ref.step()
    g = torch.ember.EmberGraph()
    with torch.ember.graph(g):
        opt.step()
    for i, new_lr in enumerate([0.05, 0.002, 0.02], start=1):
        lr.fill_(new_lr)
        p.grad.copy_(grads[i].to("ember"))
        g.replay()
        for group in ref.param_groups:
            group["lr"] = new_lr
        p_cpu.grad = grads[i]
        ref.step()
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6)


def test_complex_rope_step_is_capturable():
    """Complex arithmetic with Python numbers and resolve_conj (in complex RoPE's backward) run
    on the device inside a capture, and a replay follows new inputs like eager code."""
    freqs = torch.polar(torch.ones(8, 4), torch.randn(8, 4))

    def step(x, c):
        y = torch.view_as_real(torch.view_as_complex(x) * c * (1 + 0.5j) + 2).flatten(-2)
        extra = (c.conj().resolve_conj() * 3 - 1).real.sum()
        loss = y.square().sum() + extra
        loss.backward()
        return loss

    x = torch.randn(8, 4, 2, device="ember", requires_grad=True)
    c = freqs.to("ember")
    step(x, c)  # warm-up
    x.grad = None
    g = torch.ember.EmberGraph()
    with torch.ember.graph(g):
        loss = step(x, c)
    for _ in range(2):
        new = torch.randn(8, 4, 2)
        with torch.no_grad():
            x.copy_(new)
        x.grad.zero_()
        g.replay()
        xc = new.clone().requires_grad_()
        want = step(xc, freqs)
        torch.testing.assert_close(loss.cpu(), want.detach())
        torch.testing.assert_close(x.grad.cpu(), xc.grad)

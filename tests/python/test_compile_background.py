"""Background compilation (options={"background": True}): the first calls run eagerly while the
graph compiles on a thread, then the compiled graph takes over; results match the CPU
throughout, under the caller's grad mode and autocast, and a failed compile raises at the next
call."""
import sys

import pytest
import torch
import torch.nn as nn
import torch_ember

if not torch_ember._C._compiler_available():
    pytest.skip("ember was built without the LLVM compiler (EMBER_WITH_LLVM=OFF)", allow_module_level=True)

import torch._dynamo  # noqa: E402
from torch_ember.compile import background  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh(fresh_compile, monkeypatch):
    monkeypatch.delenv("EMBER_BACKGROUND_COMPILE", raising=False)
    yield
    assert background.wait_all(timeout=120), "a background compile did not finish"


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))


def _step(model, x):
    out = model(x)
    loss = out.square().mean()
    loss.backward()
    return out.detach().cpu(), [p.grad.cpu() for p in model.parameters()]


def _check_step(compiled, model, ref, x):
    for m in (model, ref):
        m.zero_grad(set_to_none=True)
    out, grads = _step(compiled, x.to("ember"))
    ref_out, ref_grads = _step(ref, x)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def test_eager_calls_then_the_compiled_graph_takes_over():
    ref = _model()
    model = _model().to("ember")
    compiled = torch.compile(model, backend="ember", options={"background": True})
    xs = [torch.randn(8, 16) for _ in range(6)]
    interval = sys.getswitchinterval()
    _check_step(compiled, model, ref, xs[0])  # the first call returns before the compile ends
    assert background.pending(), "the compile should still be running after the first call"
    for x in xs[1:3]:
        _check_step(compiled, model, ref, x)
    assert background.wait_all(timeout=120)
    assert sys.getswitchinterval() == interval, "the GIL switch interval was not restored"
    for x in xs[3:]:
        _check_step(compiled, model, ref, x)
    recs = torch_ember.compile_stats()
    assert {r["kind"] for r in recs} == {"fw", "bw"}
    assert all(r["background"] and r["eager_calls"] >= 1 for r in recs)
    assert all(r["kernels"] > 0 for r in recs), "the compiled graph did not fuse"


def test_the_thread_traces_under_the_callers_autocast_and_grad_mode():
    model = _model().to("ember")
    x = torch.randn(8, 16, device="ember")
    compiled = torch.compile(model, backend="ember", options={"background": True})
    with torch.no_grad(), torch.autocast("ember", dtype=torch.bfloat16):
        first = compiled(x)
        assert background.wait_all(timeout=120)
        after = compiled(x)
        ref = model(x)
    assert first.dtype == after.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(after.float().cpu(), ref.float().cpu(), rtol=2e-2, atol=2e-2)
    (rec,) = torch_ember.compile_stats()
    assert rec["kind"] == "inference" and rec["background"]


def test_each_new_size_compiles_in_the_background():
    def f(x):
        return torch.softmax(x * 2, dim=-1).sum(0)

    compiled = torch.compile(f, backend="ember", dynamic=True, options={"background": True})
    for n in (5, 7, 5, 9, 7):
        x = torch.randn(n, 6)
        torch.testing.assert_close(compiled(x.to("ember")).cpu(), f(x))
        assert background.wait_all(timeout=120)
    for n in (5, 7, 9):
        x = torch.randn(n, 6)
        torch.testing.assert_close(compiled(x.to("ember")).cpu(), f(x))
    recs = torch_ember.compile_stats()
    assert len(recs) == 3 and all(r["background"] for r in recs)
    assert "5 -> 7" in recs[1]["recompile_reason"]


_LIB = torch.library.Library("ember_background_test", "DEF")
_LIB.define("cpu_only(Tensor a) -> Tensor")
_LIB.impl("cpu_only", torch.special.erfcx, "CPU")
_LIB.impl("cpu_only", lambda a: torch.empty_like(a), "Meta")


def test_a_failed_compile_raises_at_the_next_call():
    def f(x):
        return torch.ops.ember_background_test.cpu_only(x.exp()) + 1

    compiled = torch.compile(f, backend="ember", options={"background": True})
    x = torch.randn(5)
    first = compiled(x.to("ember"))  # eager: the op takes the CPU fallback
    torch.testing.assert_close(first.cpu(), f(x))
    assert background.wait_all(timeout=120)
    with pytest.raises(torch_ember.CompileError, match=r"background compile of graph\d+ failed.*cpu_only"):
        compiled(x.to("ember"))


def test_profiler_shows_the_eager_calls_and_the_switch():
    model = _model().to("ember")
    compiled = torch.compile(model, backend="ember", options={"background": True})
    x = torch.randn(8, 16, device="ember")
    with torch.profiler.profile() as prof:
        compiled(x)
        assert background.wait_all(timeout=120)
        compiled(x)
        compiled(x)
    names = [e.name for e in prof.events()]
    assert sum(n.startswith("ember.eager_while_compiling graph") for n in names) == 1
    assert sum(n.startswith("ember.compiled_takes_over graph") for n in names) == 1


def test_the_environment_variable_makes_it_the_default(monkeypatch):
    monkeypatch.setenv("EMBER_BACKGROUND_COMPILE", "1")
    compiled = torch.compile(lambda x: x.sin() * 2, backend="ember")
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x.to("ember")).cpu(), x.sin() * 2)
    assert background.wait_all(timeout=120)
    (rec,) = torch_ember.compile_stats()
    assert rec["background"]


def test_unknown_background_value_is_refused():
    with pytest.raises(Exception, match=r"background=.yes.; expected one of"):
        torch.compile(lambda x: x + 1, backend="ember", options={"background": "yes"})(torch.ones(2, device="ember"))


def test_a_compiled_optimizer_step_updates_the_callers_state():
    # Dynamo keeps an optimizer's parameters and moments as attributes of its graph: the
    # graph the thread compiles must update those tensors, not copies of them.
    import copy

    eager = _model().to("ember")
    comp = copy.deepcopy(eager)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    opt_c = torch.optim.AdamW(comp.parameters(), lr=1e-2)
    step = torch.compile(opt_c.step, backend="ember", options={"background": True})
    x = torch.randn(8, 16, device="ember")
    for i in range(4):
        for model, do_step, opt in ((eager, opt_e.step, opt_e), (comp, step, opt_c)):
            model(x).square().mean().backward()
            do_step()
            opt.zero_grad()
        for p, q in zip(comp.parameters(), eager.parameters()):
            torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-5, atol=1e-6)
        if i == 0:
            assert background.wait_all(timeout=120)
    (rec,) = torch_ember.compile_stats()
    assert rec["background"] and rec["eager_calls"] == 1


def test_graphs_with_higher_order_ops_compile_in_the_foreground():
    # Run eagerly, a checkpointed region traces its body: that would race the compile thread.
    from torch.utils.checkpoint import checkpoint

    def f(x):
        return checkpoint(lambda t: torch.tanh(t) * t, x, use_reentrant=False).sum()

    x = torch.randn(3, 4, requires_grad=True)
    xe = x.detach().to("ember").requires_grad_()
    out = torch.compile(f, backend="ember", options={"background": True})(xe)
    out.backward()
    assert not background.pending()
    recs = torch_ember.compile_stats()
    assert recs and not any(r["background"] for r in recs)
    f(x).backward()
    torch.testing.assert_close(xe.grad.cpu(), x.grad)


def test_dropout_draws_the_same_random_stream_as_a_foreground_compile():
    # The backward graph traced on the thread held a dead copy of the forward's attention, whose
    # dropout still drew random numbers: seeded runs then diverged from foreground ones.
    import torch.nn.functional as F

    def run(options):
        torch._dynamo.reset()
        torch.manual_seed(0)
        lin = nn.Linear(16, 16).to("ember")
        x = torch.randn(2, 8, 16, device="ember")

        def f(t):
            q = lin(t).view(2, 8, 4, 4).transpose(1, 2)
            return F.scaled_dot_product_attention(q, q, q, dropout_p=0.1).sum()

        compiled = torch.compile(f, backend="ember", options=options)
        torch.manual_seed(1)
        losses = []
        for _ in range(4):
            loss = compiled(x)
            loss.backward()
            background.wait_all()
            losses.append(loss.item())
        return losses, torch.ember.get_rng_state()

    fg_losses, fg_state = run({})
    bg_losses, bg_state = run({"background": True})
    assert torch.equal(bg_state, fg_state)
    # The first background call runs the fused eager attention, the compiled graph its own: the
    # same dropout masks leave only rounding (a sum of mixed signs, ~1e-6 relative); another mask
    # would differ by ~1e-1.
    torch.testing.assert_close(bg_losses, fg_losses, rtol=1e-5, atol=1e-5)

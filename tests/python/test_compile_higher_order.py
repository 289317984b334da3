"""Control-flow higher-order ops (torch.cond, while_loop, scan) and activation checkpointing
compile with backend="ember" under fullgraph=True and match the CPU in forward and backward:
eager mode runs them on ember, so compiled mode must too (as library steps)."""
import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint
import torch_ember


def cond_fn(h):
    return torch.cond(h.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (h,)).sum()


def while_fn(h):
    def body(i, t):
        return i + 1, t * 0.9 + 0.1
    _, t = torch._higher_order_ops.while_loop(lambda i, t: i < 3, body, (torch.tensor(0, device=h.device), h))
    return t.sum()


def scan_fn(h):
    from torch._higher_order_ops.scan import scan

    def combine(c, x):
        nc = c * 0.5 + x
        return nc, nc.sum()
    c, ys = scan(combine, torch.zeros(h.shape[1], device=h.device), h)
    return ys.sum() + c.sum()


def checkpoint_fn(h):
    return checkpoint(lambda t: torch.tanh(t) * t, h, use_reentrant=False).sum()


CASES = {"cond": (cond_fn, True), "while_loop": (while_fn, False), "scan": (scan_fn, True),
         "checkpoint": (checkpoint_fn, True)}


def run(device, compiled, name, sign):
    fn, differentiable = CASES[name]
    torch.manual_seed(0)
    m = nn.Linear(4, 4).to(device)

    def f(x):
        return fn(m(x))
    g = torch.compile(f, backend="ember", fullgraph=True) if compiled else f
    out = g(sign * torch.linspace(-1, 1.5, 12).view(3, 4).to(device))
    grads = []
    if differentiable:
        out.backward()
        grads = [p.grad.cpu() for p in m.parameters()]
    return [out.detach().cpu()] + grads


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("sign", [1.0, -1.0])  # both branches of cond
def test_compiled_matches_cpu(name, sign):
    ref = run("cpu", False, name, sign)
    for compiled in (False, True):
        for got, expected in zip(run("ember", compiled, name, sign), ref):
            torch.testing.assert_close(got, expected)


@torch.library.custom_op("ember_test::scale_", mutates_args=("x",))
def _scale_(x: torch.Tensor, s: float) -> None:
    x.mul_(s)


@_scale_.register_fake
def _(x, s):
    return None


@pytest.mark.parametrize("case", ["intermediate", "graph_input", "view_of_input"])
def test_custom_op_that_mutates_its_argument_compiles(case):
    # AOTAutograd wraps a mutating custom op in auto_functionalized; eager mode runs the op on
    # ember, so the compiled graph runs it as a library step.
    def fn(x):
        if case == "intermediate":
            y = x * 2
            _scale_(y, 3.0)
            return y + 1
        _scale_(x if case == "graph_input" else x[1:], 5.0)
        return x * 1

    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    xe, xc = x.to("ember"), x.clone()
    got = torch.compile(fn, backend="ember", fullgraph=True)(xe)
    torch.testing.assert_close(got.cpu(), fn(xc))
    torch.testing.assert_close(xe.cpu(), xc)


def test_out_dtype_runs_in_compiled_graphs_as_in_eager(fresh_compile, native_only):
    """torchao's dynamic int8 quantization multiplies int8 by int8 into int32 with the out_dtype
    higher-order op; a compiled graph runs it as a library step, as eager mode does."""
    from torch._higher_order_ops.out_dtype import out_dtype

    def f(a, b, x):
        return out_dtype(torch.ops.aten.mm.default, torch.int32, a, b) * 2, \
            out_dtype(torch.ops.aten.mul.Tensor, torch.float32, x, x)

    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 127, (8, 64), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 127, (64, 16), dtype=torch.int8, generator=g)
    x = torch.randn(5, dtype=torch.bfloat16, generator=g)
    want = f(a, b, x)
    for fn in (f, torch.compile(f, backend="ember", fullgraph=True)):
        got = fn(a.to("ember"), b.to("ember"), x.to("ember"))
        for w, r in zip(want, got):
            assert r.dtype == w.dtype
            torch.testing.assert_close(r.cpu(), w, rtol=0, atol=0)

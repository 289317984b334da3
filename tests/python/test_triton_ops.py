"""Triton kernels as PyTorch ops on ember: `torch.library.triton_op` + `wrap_triton` custom ops
in eager mode and inside `torch.compile(backend="ember", fullgraph=True)`, user-defined kernels
called straight from a compiled function (Dynamo's triton_kernel_wrapper_* higher-order ops),
and `register_autograd` backward kernels. A compiled graph runs each kernel as a library step
(no graph break, nothing on the CPU fallback). Skipped when triton is not installed."""
import pytest
import torch

import torch_ember

triton = pytest.importorskip(
    "triton", reason="triton is not installed (pip install 'torch_ember[triton]' to test Triton kernels)")
tl = pytest.importorskip("triton.language", reason="triton is not installed")

from torch.library import triton_op, wrap_triton  # noqa: E402

DEV = "ember"


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 256})], key=["n"])
@triton.jit
def tuned_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def silu_fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * tl.sigmoid(x), mask=m)


@triton.jit
def silu_bwd_kernel(x_ptr, g_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    g = tl.load(g_ptr + offs, mask=m)
    s = tl.sigmoid(x)
    tl.store(dx_ptr + offs, g * (s + x * s * (1 - s)), mask=m)


@triton_op("embertest::add", mutates_args={})
def add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = out.numel()
    wrap_triton(add_kernel)[(triton.cdiv(n, 128),)](x, y, out, n, BLOCK=128)
    return out


@triton_op("embertest::add_into", mutates_args={"out"})
def add_into(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = x.numel()
    wrap_triton(add_kernel)[(triton.cdiv(n, 128),)](x, y, out, n, BLOCK=128)


@triton_op("embertest::silu", mutates_args={})
def silu_op(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    n = x.numel()
    wrap_triton(silu_fwd_kernel)[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
    return y


@triton_op("embertest::silu_backward", mutates_args={})
def silu_backward_op(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    dx = torch.empty_like(x)
    n = x.numel()
    wrap_triton(silu_bwd_kernel)[(triton.cdiv(n, 256),)](x, g, dx, n, BLOCK=256)
    return dx


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, g):
    (x,) = ctx.saved_tensors
    return silu_backward_op(x, g.contiguous())


silu_op.register_autograd(_backward, setup_context=_setup_context)


def _compile(fn):
    return torch.compile(fn, backend="ember", fullgraph=True)


def _library_steps():
    recs = torch_ember.compile_stats()
    assert recs and all(not r["eager_ops"] for r in recs), [r["eager_ops"] for r in recs]
    return [op for r in recs for op, _ in r["library_ops"]]


@pytest.fixture(autouse=True)
def _fresh_stats():
    torch._dynamo.reset()
    torch_ember.reset_compile_stats()
    torch_ember.reset_fallback_stats()
    yield
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())


def test_triton_op_eager():
    x, y = torch.randn(1000), torch.randn(1000)
    torch.testing.assert_close(add_op(x.to(DEV), y.to(DEV)).cpu(), x + y, rtol=0, atol=0)
    out = torch.zeros(1000, device=DEV)
    add_into(x.to(DEV), y.to(DEV), out)
    torch.testing.assert_close(out.cpu(), x + y, rtol=0, atol=0)


def test_triton_op_in_compiled_graph():
    def f(x, y):
        z = add_op(x * 2, y)
        out = torch.zeros_like(z)
        add_into(z, y, out)
        return out.relu()

    x, y = torch.randn(1000), torch.randn(1000)
    got = _compile(f)(x.to(DEV), y.to(DEV))
    torch.testing.assert_close(got.cpu(), (x * 2 + y + y).relu())
    steps = _library_steps()
    assert steps and set(steps) == {"triton_kernel_wrapper_functional"}, steps


def test_user_kernels_called_from_a_compiled_function():
    # In place on a graph input with a grid function, an autotuned kernel, then an ember op.
    def f(x, y):
        n = x.numel()
        add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, x, n, BLOCK=128)
        out = torch.empty_like(x)
        tuned_add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
        return out * 2

    cf = _compile(f)
    for n in (1000, 1500):
        x, y = torch.randn(n), torch.randn(n)
        xe, ye = x.to(DEV), y.to(DEV)
        got = cf(xe, ye)
        torch.testing.assert_close(xe.cpu(), x + y)
        torch.testing.assert_close(got.cpu(), (x + y + y) * 2)
    assert set(_library_steps()) == {"triton_kernel_wrapper_functional"}


def _silu_check(fn):
    x = torch.randn(1000)
    w = torch.randn(1000)
    xe = x.to(DEV).requires_grad_()
    fn(xe, w.to(DEV)).backward()
    xc = x.clone().requires_grad_()
    (torch.nn.functional.silu(xc) * w).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)


def test_register_autograd_triton_backward_eager():
    _silu_check(lambda x, w: (silu_op(x) * w).sum())


def test_register_autograd_triton_backward_compiled():
    _silu_check(_compile(lambda x, w: (silu_op(x) * w).sum()))
    recs = torch_ember.compile_stats()
    assert len(recs) == 2  # forward and backward graphs, each with its kernel as a library step
    assert all([op for op, _ in r["library_ops"]] == ["triton_kernel_wrapper_functional"] for r in recs)

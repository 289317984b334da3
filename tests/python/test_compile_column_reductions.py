"""Compiled reductions over leading dims that also read per-row values (the column form of the
generated kernels): weight and bias gradients of norms, per-row weighted sums, and multi-phase
reductions down the columns match the CPU in forward and backward."""
import pytest
import torch
import torch.nn.functional as F

import torch_ember  # noqa: F401

CASES = {
    # The weight/bias gradients read two [rows, cols] tensors down their columns and each row's
    # mean and rstd: the case that picked the row form (and strided through memory) before.
    "layer_norm": lambda x, a: F.layer_norm(x, x.shape[-1:], a[0, : x.shape[1]] + 1, a[1, : x.shape[1]]),
    "weighted_column_sum": lambda x, a: (x * a[:, :1] + a[:, 1:2]).sum(0),
    "column_softmax_with_row_bias": lambda x, a: torch.softmax(x + a[:, :1], dim=0),
    "column_variance_of_row_scaled": lambda x, a: torch.var(x * a[:, :1], dim=0),
    "column_mean_then_centered": lambda x, a: ((x - x.mean(0)) * a[:, :1]).pow(2).sum(0),
    "bias_gelu_residual": lambda x, a: x + F.gelu(x * a[0, : x.shape[1]] + a[1, : x.shape[1]]),
    "rms_norm": lambda x, a: F.rms_norm(x, x.shape[-1:], a[0, : x.shape[1]]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("shape", [(64, 48), (300, 20), (9, 130)])
def test_column_reductions_match_cpu(name, shape, native_only):
    torch._dynamo.reset()
    fn = CASES[name]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    a = torch.randn(max(shape[0], 2), max(shape[1], 2), generator=g)[: shape[0]] if name not in (
        "layer_norm", "bias_gelu_residual", "rms_norm") else torch.randn(2, shape[1], generator=g)
    xc, ac = x.clone().requires_grad_(), a.clone().requires_grad_()
    xe, ae = x.to("ember").requires_grad_(), a.to("ember").requires_grad_()
    want = fn(xc, ac)
    got = torch.compile(fn, backend="ember")(xe, ae)
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    grad = torch.randn(want.shape, generator=g)
    want.backward(grad)
    got.backward(grad.to("ember"))
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ae.grad.cpu(), ac.grad, rtol=1e-4, atol=1e-5)


def test_shared_derivative_stays_in_one_kernel(native_only):
    """gelu's derivative feeds both the input gradient and the bias gradient's column sum: it is
    computed once inside the column-sum kernel instead of going through scratch memory."""
    torch._dynamo.reset()
    torch_ember.reset_compile_stats()
    def fn(x, w, b):
        return x + F.gelu(x * w + b)

    g = torch.Generator().manual_seed(0)
    cpu = [torch.randn(shape, generator=g).requires_grad_() for shape in ((64, 48), (48,), (48,))]
    ember = [t.detach().to("ember").requires_grad_() for t in cpu]
    torch.compile(fn, backend="ember")(*ember).sum().backward()
    fn(*cpu).sum().backward()
    for got, want in zip(ember, cpu):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-4, atol=1e-5)
    backward = [s for s in torch_ember.compile_stats() if s["kind"] == "bw"]
    assert [s["kernels"] for s in backward] == [1]

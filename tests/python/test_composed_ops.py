"""Ops ember composes from its native kernels: hardtanh (ReLU6) and its gradient, log-sigmoid
and its gradient, sgn of real tensors, a scalar raised to a tensor, one-sided clamps."""
import pytest
import torch
import torch.nn.functional as F

import torch_ember  # noqa: F401


def _grad_check(fn, x, native_only=None):
    xe = x.to("ember").requires_grad_()
    xc = x.clone().requires_grad_()
    ye, yc = fn(xe), fn(xc)
    torch.testing.assert_close(ye.detach().cpu(), yc.detach())
    w = torch.randn(yc.shape, generator=torch.Generator().manual_seed(1))
    (ye * w.to("ember")).sum().backward()
    (yc * w).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)


@pytest.mark.parametrize("fn", [F.relu6, F.hardtanh, lambda x: F.hardtanh(x, -0.5, 2.0), F.logsigmoid,
                                lambda x: torch.sgn(x) * x, lambda x: torch.clamp_min(x, 0.1),
                                lambda x: torch.clamp_max(x, -0.1), lambda x: 3.0 ** x, lambda x: 1 ** x],
                         ids=["relu6", "hardtanh", "hardtanh_range", "logsigmoid", "sgn", "clamp_min",
                              "clamp_max", "scalar_pow", "one_pow"])
def test_matches_cpu_with_gradients(fn, native_only):
    x = torch.randn(64, generator=torch.Generator().manual_seed(0)) * 3
    x[0] = 0.0
    _grad_check(fn, x)


def test_rotary_frequencies_with_scalar_base(native_only):
    d = 16
    exps = torch.arange(0, d, 2).float() / d
    torch.testing.assert_close((10000 ** exps.to("ember")).cpu(), 10000 ** exps)


def test_in_place_hardtanh(native_only):
    x = torch.randn(10) * 3
    xe = x.to("ember")
    F.hardtanh_(xe)
    torch.testing.assert_close(xe.cpu(), F.hardtanh(x))

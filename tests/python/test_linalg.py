"""Linear algebra that runs natively: triangular solves (the chunked linear-attention layers of
hybrid models solve one per step), forward and backward, against the CPU."""
import pytest
import torch

import torch_ember  # noqa: F401


def _triangular(shape, upper, dtype, g):
    a = torch.randn(*shape, generator=g, dtype=dtype)
    a = a.triu() if upper else a.tril()
    return a + 3 * torch.eye(shape[-1], dtype=dtype)  # well conditioned


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_matches_cpu(dtype, upper, left, unit, native_only):
    g = torch.Generator().manual_seed(0)
    a = _triangular((3, 6, 6), upper, dtype, g)
    b = torch.randn(3, 6, 4, generator=g, dtype=dtype) if left else torch.randn(3, 4, 6, generator=g, dtype=dtype)
    ae, be = a.to("ember").requires_grad_(), b.to("ember").requires_grad_()
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    xe = torch.linalg.solve_triangular(ae, be, upper=upper, left=left, unitriangular=unit)
    xc = torch.linalg.solve_triangular(ac, bc, upper=upper, left=left, unitriangular=unit)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
    torch.testing.assert_close(xe.detach().cpu(), xc.detach(), **tol)
    w = torch.randn(xc.shape, generator=g, dtype=dtype)
    (xe * w.to("ember")).sum().backward()
    (xc * w).sum().backward()
    torch.testing.assert_close(ae.grad.cpu(), ac.grad, **tol)
    torch.testing.assert_close(be.grad.cpu(), bc.grad, **tol)


def test_solve_triangular_broadcasts_batches(native_only):
    g = torch.Generator().manual_seed(1)
    a = _triangular((6, 6), False, torch.float32, g)
    b = torch.randn(2, 3, 6, 5, generator=g)
    torch.testing.assert_close(torch.linalg.solve_triangular(a.to("ember"), b.to("ember"), upper=False).cpu(),
                               torch.linalg.solve_triangular(a, b, upper=False), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(4,), (3, 5), (0,), (2, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_eye_native(shape, dtype, native_only):
    torch.testing.assert_close(torch.eye(*shape, dtype=dtype, device="ember").cpu(), torch.eye(*shape, dtype=dtype))

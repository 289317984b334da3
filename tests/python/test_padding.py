"""Reflect and replicate padding (F.pad modes, Conv's padding_mode), forward and backward, eager
and compiled, against PyTorch CPU: values, gradients and the memory format of both."""
import pytest
import torch
import torch.nn.functional as F
import torch_ember

CASES = [((2, 3, 7), (2, 3)), ((2, 3, 7), (0, 4)), ((3, 7), (2, 1)), ((2, 3, 6, 5), (1, 2, 3, 4)),
         ((2, 3, 6, 5), (0, 0, 0, 0)), ((2, 3, 4, 5, 6), (1, 2, 3, 1, 2, 3)), ((1, 1, 2, 2), (1, 1, 1, 1))]


@pytest.fixture
def no_fallback():
    torch_ember.reset_fallback_stats()
    yield
    assert not torch_ember.fallback_report(), torch_ember.fallback_report()


def _pad_and_grad(x, padding, mode, g):
    x = x.detach().requires_grad_()
    y = F.pad(x, padding, mode=mode)
    y.backward(g)
    return y, x.grad


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape, padding", CASES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_padding_matches_cpu(no_fallback, mode, shape, padding, channels_last):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    if channels_last and x.dim() == 4:
        x = x.to(memory_format=torch.channels_last)
    grad = torch.randn(F.pad(x, padding, mode=mode).shape, generator=g, dtype=torch.float64)
    want_y, want_g = _pad_and_grad(x, padding, mode, grad)
    got_y, got_g = _pad_and_grad(x.to("ember"), padding, mode, grad.to("ember"))
    torch.testing.assert_close(got_y.cpu(), want_y.detach())
    torch.testing.assert_close(got_g.cpu(), want_g)
    assert got_y.stride() == want_y.stride() and got_g.stride() == want_g.stride()


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_no_padding_is_a_new_tensor(no_fallback, mode):
    x = torch.randn(1, 2, 3, 3, device="ember", requires_grad=True)
    y = F.pad(x, (0, 0, 0, 0), mode=mode)
    g = torch.randn_like(y)
    y.backward(g)
    assert y.data_ptr() != x.data_ptr() and x.grad.data_ptr() != g.data_ptr()


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_padded_conv_net_compiles_like_cpu(no_fallback, mode):
    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=2, padding_mode=mode), torch.nn.ReLU(),
                                   torch.nn.Conv2d(4, 2, 3, padding=1, padding_mode=mode))

    x = torch.randn(2, 3, 9, 8, generator=torch.Generator().manual_seed(1))
    ref, model = net(), net().to("ember")
    xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
    ref(xc).square().sum().backward()
    torch.compile(model, backend="ember")(xe).square().sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)
    for got, want in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-4, atol=1e-4)

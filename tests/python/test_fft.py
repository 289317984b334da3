"""torch.fft on ember: the FFT library ops (_fft_r2c, _fft_c2c, _fft_c2r) run by the host's FFT
library on device memory (register_library.cc), against the CPU — every transform, norms, sizes,
non-contiguous and conjugated inputs, gradients, and inside a compiled graph."""
import pytest
import torch

import torch_ember  # noqa: F401

F = torch.fft
TRANSFORMS = {
    "fft": lambda x: F.fft(x), "ifft": lambda x: F.ifft(x), "rfft": lambda x: F.rfft(x),
    "irfft": lambda x: F.irfft(F.rfft(x)), "hfft": lambda x: F.hfft(F.rfft(x)), "ihfft": lambda x: F.ihfft(x),
    "fft2": lambda x: F.fft2(x), "ifftn": lambda x: F.ifftn(x, dim=(0, -1)), "rfft2": lambda x: F.rfft2(x),
    "irfftn": lambda x: F.irfftn(F.rfftn(x), s=x.shape), "fft_n_padded": lambda x: F.fft(x, n=37),
    "rfft_ortho": lambda x: F.rfft(x, norm="ortho"), "ifft_forward": lambda x: F.ifft(x, norm="forward"),
    "strided_input": lambda x: F.rfft(x[:, ::2]), "conj_input": lambda x: F.ifft(F.fft(x).conj()),
    "fftshift_roundtrip": lambda x: F.ifftshift(F.fftshift(F.fft(x))),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [16, 15, 31])  # a power of two, a composite, a prime
def test_transforms_match_cpu(name, dtype, n):
    x = torch.randn(6, n, generator=torch.Generator().manual_seed(n), dtype=dtype)
    want = TRANSFORMS[name](x)
    got = TRANSFORMS[name](x.to("ember"))
    assert got.device.type == "ember" and got.dtype == want.dtype and got.shape == want.shape
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
    torch.testing.assert_close(got.cpu(), want, **tol)


def test_no_fft_op_falls_back(native_only):
    x = torch.randn(4, 32, device="ember")
    F.irfft(F.rfft(x), n=32)
    F.fft2(x.to(torch.complex64))
    F.ihfft(x)


def test_gradients_match_cpu():
    x0 = torch.randn(3, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    grads = []
    for dev in ("cpu", "ember"):
        x = x0.detach().to(dev).requires_grad_()
        y = F.irfft(F.rfft(x) * torch.arange(11, device=dev), n=20)
        (y.square().sum() + F.fft(x).real.sum()).backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[1].cpu(), grads[0])


def test_spectral_filter_compiles(native_only):
    # an FNO / Hyena-style spectral mixing layer
    w = torch.randn(9, generator=torch.Generator().manual_seed(1))

    def mix(x, w):
        return F.irfft(F.rfft(x, dim=-1) * w, n=x.shape[-1]).relu()

    x = torch.randn(4, 16)
    got = torch.compile(mix, backend="ember")(x.to("ember"), w.to("ember"))
    torch.testing.assert_close(got.cpu(), mix(x, w), rtol=1e-5, atol=1e-5)


def test_errors_are_the_cpus():
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        F.fft(torch.randn(4, device="ember"), n=0)
    with pytest.raises(RuntimeError, match="Unsupported dtype|not support"):
        F.rfft(torch.randn(8, device="ember").bfloat16())

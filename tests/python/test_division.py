"""Python's division family on ember: floor_divide, div with rounding modes, remainder, fmod, in
float and integer dtypes, signs and zeros included, matched against the CPU bit for bit."""
import pytest
import torch

import torch_ember  # noqa: F401

OPS = {
    "floor_divide": lambda a, b: torch.floor_divide(a, b),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": lambda a, b: torch.remainder(a, b),
    "fmod": lambda a, b: torch.fmod(a, b),
    "floordiv_operator": lambda a, b: a // b,
    "mod_operator": lambda a, b: a % b,
}


def _operands(dtype):
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        a = (torch.randn(500, generator=g) * 10).to(dtype)
        b = (torch.randn(500, generator=g) * 3).to(dtype)
        a[:4] = torch.tensor([7.0, -7.0, 7.0, -7.0])
        b[:4] = torch.tensor([2.0, 2.0, -2.0, -2.0])
        b[4] = 0.0
        return a, b
    a = torch.randint(-50, 50, (500,), generator=g, dtype=dtype)
    b = torch.randint(1, 9, (500,), generator=g, dtype=dtype) * torch.where(torch.rand(500, generator=g) < 0.5, -1, 1).to(dtype)
    return a, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.int8])
@pytest.mark.parametrize("name", list(OPS))
def test_matches_cpu(name, dtype):
    # (bfloat16 floor/trunc division runs on the CPU, whose vector path rounds its own way.)
    a, b = _operands(dtype)
    fn = OPS[name]
    torch.testing.assert_close(fn(a.to("ember"), b.to("ember")).cpu(), fn(a, b), equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(fn(a.to("ember"), 3).cpu(), fn(a, 3), equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["floor_divide", "remainder", "fmod"])
def test_in_place_and_out(name, native_only):
    a, b = _operands(torch.float32)
    ae = a.to("ember")
    getattr(ae, name + "_")(b.to("ember"))
    torch.testing.assert_close(ae.cpu(), getattr(a.clone(), name + "_")(b), equal_nan=True)
    out = torch.empty(500, device="ember")
    getattr(torch, name)(a.to("ember"), b.to("ember"), out=out)
    torch.testing.assert_close(out.cpu(), getattr(torch, name)(a, b), equal_nan=True)


def test_integer_division_by_zero_fails_like_cpu():
    a, b = torch.tensor([4, 5]), torch.tensor([2, 0])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.floor_divide(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.floor_divide(a.to("ember"), b.to("ember")).cpu()


def test_bad_rounding_mode():
    with pytest.raises(RuntimeError, match="rounding_mode to be one of None"):  # as on CPU
        torch.div(torch.ones(2, device="ember"), 2, rounding_mode="round")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64, torch.int8])
@pytest.mark.parametrize("scalar", [3.14, -2.5, 7, -3])
def test_scalar_first_remainder_rounds_the_scalar_like_cpu(scalar, dtype, native_only):
    # remainder(3.14, half_tensor) went through PyTorch's reference decomposition, which computes
    # in float32 from the unrounded scalar: up to 3% off the CPU, which rounds it to float16 first.
    _, b = _operands(dtype)
    b = b[b != 0]
    got = torch.remainder(scalar, b.to("ember")).cpu()
    torch.testing.assert_close(got, torch.remainder(scalar, b), equal_nan=True, rtol=0, atol=0)

"""Python numbers with narrow integer tensors, eager and compiled, as the CPU treats them: in
arithmetic and comparisons the number wraps to the tensor's dtype first (uint8 % 300 is
uint8 % 44, uint8 > -3 compares with 253); a fill or bound that does not fit raises (a
negative int still wraps into an unsigned type); integer fills keep all 64 bits."""
import operator

import pytest
import torch
import torch_ember  # noqa: F401

OPS = {
    "mod": operator.mod, "floordiv": operator.floordiv, "gt": operator.gt, "le": operator.le,
    "eq": operator.eq, "add": operator.add, "mul": operator.mul, "fmod": torch.fmod,
    "div_floor": lambda x, s: torch.div(x, s, rounding_mode="floor"),
    "div_trunc": lambda x, s: torch.div(x, s, rounding_mode="trunc"),
    "clamp": lambda x, s: x.clamp(s, 100), "clamp_max": lambda x, s: x.clamp(max=s),
    "fill": lambda x, s: x.clone().fill_(s), "masked_fill": lambda x, s: x.masked_fill(x > 3, s),
    "where": lambda x, s: torch.where(x > 3, x, s), "pow": lambda x, s: x ** abs(s),
}
MAX64 = torch.iinfo(torch.int64).max


def _outcome(fn, *args):
    try:
        out = fn(*args)
        return out.cpu() if isinstance(out, torch.Tensor) else out
    except RuntimeError as e:
        return ("raised", "without overflow" in str(e))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
@pytest.mark.parametrize("value", [-3, -200, 200, 300, 70000])
def test_out_of_range_numbers_match_cpu(dtype, value, compiled):
    x = torch.tensor([0, 1, 5, 7, 100, 127, 3, 2]).to(dtype)
    for name, fn in OPS.items():
        torch._dynamo.reset()
        expected = _outcome(fn, x, value)
        run = torch.compile(fn, backend="ember") if compiled else fn
        got = _outcome(run, x.to("ember"), value)
        if isinstance(expected, tuple):
            assert got == expected, (name, got)
        else:
            assert isinstance(got, torch.Tensor) and got.dtype == expected.dtype, (name, got)
            assert torch.equal(got, expected), (name, got, expected)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_int64_fills_keep_every_bit(compiled):
    cases = [
        lambda x: torch.full_like(x, 2**53 + 1),
        lambda x: torch.minimum(x, torch.full_like(x, MAX64)),
        lambda x: x.masked_fill(x > 1, MAX64),
        lambda x: torch.full((3,), -MAX64 - 1, dtype=torch.int64, device=x.device) + x * 0,
    ]
    x = torch.tensor([1, 2, 3])
    for fn in cases:
        torch._dynamo.reset()
        run = torch.compile(fn, backend="ember") if compiled else fn
        assert torch.equal(run(x.to("ember")).cpu(), fn(x))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_numbers_past_int64_max_wrap_like_the_cpu(compiled):
    # A Python int in [2^63, 2^64) is a uint64 scalar: an int64 computation wraps it (the golden
    # ratio constant of 64-bit hash embeddings); float computations take its value.
    cases = [
        lambda x: (x * 0x9E3779B97F4A7C15) >> 40,
        lambda x: x + 2**63,
        lambda x: x > 2**63 + 5,
        lambda x: x.float() * 2**63,
    ]
    x = torch.tensor([1, 5, 123456789, -7])
    for fn in cases:
        torch._dynamo.reset()
        run = torch.compile(fn, backend="ember") if compiled else fn
        got, want = run(x.to("ember")).cpu(), fn(x)
        assert got.dtype == want.dtype and torch.equal(got, want)


ZERO_DIM_OPS = {"lt": operator.lt, "gt": lambda x, s: s > x, "mod": operator.mod, "maximum": torch.maximum,
                "floordiv": operator.floordiv, "where": lambda x, s: torch.where(x > 3, x, s),
                "add": operator.add, "sub": lambda x, s: s - x, "mul": operator.mul}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(ZERO_DIM_OPS))
@pytest.mark.parametrize("case", ["int8 by int64 300", "uint8 by int64 -3", "bfloat16 by float32 1.001",
                                  "float16 by float64 0.1"])
def test_zero_dim_device_tensors_of_another_dtype_cast_first(case, name, compiled):
    # A 0-dim tensor does not promote: the CPU casts it to the other operand's dtype first, so
    # int8 < tensor(300) compares with 44 and bfloat16 + tensor(1.001) adds 1.0. On the device
    # the kernels read it at full width and compared with 300.
    dtype, value = {"int8 by int64 300": (torch.int8, torch.tensor(300)),
                    "uint8 by int64 -3": (torch.uint8, torch.tensor(-3)),
                    "bfloat16 by float32 1.001": (torch.bfloat16, torch.tensor(1.001)),
                    "float16 by float64 0.1": (torch.float16, torch.tensor(0.1, dtype=torch.float64))}[case]
    x = torch.tensor([10, 50, 1, 3, 127]).to(dtype)
    if dtype.is_floating_point:
        x = x * 0.0371
    fn = ZERO_DIM_OPS[name]
    torch._dynamo.reset()
    run = torch.compile(fn, backend="ember") if compiled else fn
    want = fn(x, value)
    got = run(x.to("ember"), value.to("ember")).cpu()
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)

"""frexp and ldexp (float_bits.py) match the CPU bit for bit in every floating dtype: zeros,
infinities, NaN, subnormals and the largest finite values, eager and compiled."""
import pytest
import torch
import torch_ember

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def edge_values(dtype, n=200, seed=0):
    info = torch.finfo(dtype)
    special = [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, 0.75, -5.0]
    edges = [info.tiny, info.tiny / 4, -info.smallest_normal * info.eps, 3 * info.smallest_normal * info.eps,
             info.max, -info.max, info.eps]
    rand = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * 100
    return torch.cat([torch.tensor(special + edges, dtype=torch.float64), rand]).to(dtype)


def same_bits(a, b):
    return torch.equal(a.cpu().view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("dtype", FLOATS)
def test_frexp_matches_cpu_bit_for_bit(dtype, native_only):
    x = edge_values(dtype)
    got, want = torch.frexp(x.to("ember")), torch.frexp(x)
    assert torch.equal(got.exponent.cpu(), want.exponent)
    assert same_bits(got.mantissa, want.mantissa)  # NaN and -0.0 too
    m, e = torch.empty(0, dtype=dtype, device="ember"), torch.empty(0, dtype=torch.int32, device="ember")
    torch.frexp(x.to("ember"), out=(m, e))
    assert same_bits(m, want.mantissa) and torch.equal(e.cpu(), want.exponent)
    f = torch.compile(lambda t: torch.frexp(t * 1), backend="ember")
    got = f(x.to("ember"))
    assert same_bits(got[0], want.mantissa) and torch.equal(got[1].cpu(), want.exponent)
    with pytest.raises(RuntimeError, match="frexp"):
        torch.frexp(torch.ones(3, dtype=torch.int64, device="ember"))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("exp_dtype", [torch.int32, torch.int64, torch.uint8])
def test_ldexp_scales_exactly_as_the_cpu(dtype, exp_dtype, native_only):
    x = edge_values(dtype)
    g = torch.Generator().manual_seed(1)
    # Exponents far past the dtype's range too: the CPU rounds once and never overflows early.
    e = torch.randint(0, 255, x.shape, generator=g) if exp_dtype == torch.uint8 else \
        torch.randint(-2300, 2300, x.shape, generator=g)
    e[:40] = torch.randint(0 if exp_dtype == torch.uint8 else -40, 40, (40,), generator=g)
    e = e.to(exp_dtype)
    assert same_bits(torch.ldexp(x.to("ember"), e.to("ember")), torch.ldexp(x, e))
    m, k = torch.frexp(x)  # the round trip: the largest finite value's mantissa times 2**128 in float32
    back = torch.ldexp(m.to("ember"), k.to("ember"))
    assert same_bits(back, torch.ldexp(m, k))
    torch.testing.assert_close(back.cpu(), x, equal_nan=True, rtol=0, atol=0)


def test_ldexp_forms_gradient_and_compile(native_only):
    y = torch.ones(3, device="ember")
    y.ldexp_(torch.tensor([1, 2, 130], device="ember"))
    assert torch.equal(y.cpu(), torch.ones(3).ldexp_(torch.tensor([1, 2, 130])))
    with pytest.raises(RuntimeError, match="broadcast shape"):
        y.ldexp_(torch.ones(2, 3, dtype=torch.long, device="ember"))
    out = torch.empty(0, device="ember")
    torch.ldexp(torch.ones(3, device="ember"), torch.tensor([1, 2, 3], device="ember"), out=out)
    assert torch.equal(out.cpu(), torch.tensor([2.0, 4.0, 8.0]))
    for x, e in [(torch.tensor([1.5, 2.0]).half(), torch.tensor([1.5, 2.0])), (torch.tensor([3, 4]), torch.tensor([2, 3]))]:
        torch.testing.assert_close(torch.ldexp(x.to("ember"), e.to("ember")).cpu(), torch.ldexp(x, e))
    x = torch.randn(5, requires_grad=True)
    xe = x.detach().to("ember").requires_grad_()
    e = torch.tensor([1, 2, 3, 4, 5])
    torch.ldexp(x, e).sum().backward()
    torch.ldexp(xe, e.to("ember")).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), x.grad)
    f = torch.compile(lambda a, b: torch.ldexp(a, b) * 1, backend="ember")
    a, b = torch.tensor([0.9992, 1e-40, 3.0]), torch.tensor([128, -3, 5], dtype=torch.int32)
    assert same_bits(f(a.to("ember"), b.to("ember")), torch.ldexp(a, b))

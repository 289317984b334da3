"""Graphs whose values decide sizes or scalars, under Dynamo's capture flags
(capture_scalar_outputs puts .item() into the graph, capture_dynamic_output_shape_ops keeps
nonzero and boolean masks there): they compile, at the first shape and after a dynamic-shape
recompile, and match the CPU forward and backward."""
import pytest
import torch

import torch_ember  # noqa: F401


@pytest.fixture
def capture_flags():
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
        yield
    torch._dynamo.reset()


def masked_mean(loss, mask):
    n = int(mask.sum().item())  # Python arithmetic on the value: host work, not a device op
    return (loss * mask).sum() / max(n, 1) + loss.numel() / (n * 2 + 1)


def masked_select_sum(x):
    return x[x > 0].sum() + x.mean()


def scaled_by_max(x):
    return (x * x.max().item()).square().sum()


def nonzero_rows(x):
    rows = (x.sum(1) > 0).nonzero().squeeze(1)
    return x.index_select(0, rows).square().sum()


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [masked_select_sum, scaled_by_max, nonzero_rows], ids=lambda f: f.__name__)
def test_value_dependent_graphs_across_shapes(fn, dynamic, capture_flags):
    c = torch.compile(fn, backend="ember", dynamic=dynamic)
    g = torch.Generator().manual_seed(0)
    for n in (4, 5, 7):
        x = torch.randn(n, 8, generator=g)
        xe = x.to("ember").requires_grad_()
        xc = x.clone().requires_grad_()
        out, want = c(xe), fn(xc)
        torch.testing.assert_close(out.cpu(), want)
        out.backward()
        want.backward()
        torch.testing.assert_close(xe.grad.cpu(), xc.grad)


def test_scalar_arithmetic_on_item_compiles(capture_flags):
    g = torch.Generator().manual_seed(1)
    loss, mask = torch.randn(4, 8, generator=g), (torch.rand(4, 8, generator=g) > 0.3).float()
    got = torch.compile(masked_mean, backend="ember")(loss.to("ember"), mask.to("ember"))
    torch.testing.assert_close(got.cpu(), masked_mean(loss, mask))


def test_ops_run_eagerly_at_a_graph_break_are_not_traced_into():
    """repeat_interleave with tensor repeats breaks the graph (its size is data) and runs eagerly
    there; its ember kernel is Python, which Dynamo used to trace as a new frame and break again
    at each host read inside (3 breaks where the CPU has 1)."""
    def f(s, r):
        return torch.repeat_interleave(s, r, dim=0) * 2

    def breaks(device):
        torch._dynamo.reset()
        s, r = torch.randn(5, 2), torch.tensor([1, 0, 2, 1, 3])
        explained = torch._dynamo.explain(f)(s.to(device), r.to(device))
        got = torch.compile(f, backend="ember" if device == "ember" else "aot_eager")(s.to(device), r.to(device))
        torch.testing.assert_close(got.cpu(), f(s, r))
        return explained.graph_break_count

    assert breaks("ember") == breaks("cpu")
    torch._dynamo.reset()

"""Copy-on-write inputs (torch._lazy_clone, which PyTorch's own tests and torch.compile's
functionalization use) stay shared when an ember op only reads them, as with CPU and CUDA
kernels; a write to either side copies first, so the other side never changes."""
import pytest
import torch
import torch.nn.functional as F
import torch_ember

is_cow = torch._C._is_cow_tensor

READERS = {
    "add": lambda t: t + 1,
    "sum": lambda t: t.sum(1),
    "amax": lambda t: t.amax(0),
    "softmax": lambda t: torch.softmax(t, -1),
    "layer_norm": lambda t: F.layer_norm(t, (t.shape[-1],)),
    "matmul": lambda t: t @ t.T,
    "index_select": lambda t: t.index_select(0, torch.tensor([2, 0], device=t.device)),
    "gather": lambda t: t.gather(1, torch.zeros(4, 2, dtype=torch.long, device=t.device)),
    "sort": lambda t: t.sort(1).values,
    "cumsum": lambda t: t.cumsum(1),
    "copy": lambda t: t.to("cpu"),
    "clone": lambda t: t.clone(),
    "contiguous_t": lambda t: t.t().contiguous(),
    "max_pool": lambda t: F.max_pool2d(t.view(1, 1, 4, 6), 2),
    "conv": lambda t: F.conv2d(t.view(1, 1, 4, 6), torch.ones(2, 1, 3, 3, device=t.device)),
    "embedding": lambda t: F.embedding(torch.tensor([1, 3], device=t.device), t),
    "nonzero": lambda t: (t > 0).nonzero(),
    "where": lambda t: torch.where(t > 0, t, -t),
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_reading_ops_keep_the_input_shared(name, native_only):
    base = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    x = base.to("ember")
    y = torch._lazy_clone(x)
    assert is_cow(x) and is_cow(y)
    got = READERS[name](y)
    torch.ember.synchronize()
    assert is_cow(y) and is_cow(x), f"{name} materialized its copy-on-write input"
    torch.testing.assert_close(got.cpu() if isinstance(got, torch.Tensor) else got,
                               READERS[name](base))


def test_backward_keeps_inputs_shared(native_only):
    w = torch.randn(6, 3, device="ember", requires_grad=True)
    x = torch._lazy_clone(torch.randn(4, 6, device="ember"))
    (torch.tanh(x @ w).sum()).backward()
    assert is_cow(x)


@pytest.mark.parametrize("write", ["add_", "copy_", "fill_", "index_add_", "zero_", "normal_"])
def test_writes_copy_first_and_leave_the_other_side(write, native_only):
    base = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    x = base.to("ember")
    y = torch._lazy_clone(x)
    ops = {
        "add_": lambda t: t.add_(1),
        "copy_": lambda t: t.copy_(torch.ones(4, 6, device="ember")),
        "fill_": lambda t: t.fill_(3),
        "index_add_": lambda t: t.index_add_(0, torch.tensor([1], device="ember"), torch.ones(1, 6, device="ember")),
        "zero_": lambda t: t.zero_(),
        "normal_": lambda t: t.normal_(),
    }
    ops[write](y)
    torch.ember.synchronize()
    assert not is_cow(y)
    torch.testing.assert_close(x.cpu(), base)  # the original never changes
    assert not torch.equal(y.cpu(), base)
    # The other direction: writing the original leaves the clone as it was.
    z = torch._lazy_clone(x)
    ops[write](x)
    torch.testing.assert_close(z.cpu(), base)


def test_pending_writes_are_seen_by_the_copy(native_only):
    # A clone taken while a kernel that writes the source is still queued: the copy made at the
    # first write is ordered after that kernel, so the clone holds the finished values.
    a = torch.randn(512, 512, device="ember")
    x = a @ a
    y = torch._lazy_clone(x)
    y.add_(0)  # materializes y on the stream, after the matmul
    torch.testing.assert_close(y.cpu(), x.cpu())

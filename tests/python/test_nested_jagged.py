"""Jagged nested tensors (torch.nested, layout=torch.jagged) on ember: attention over ragged
sequences, eager and compiled, forward and backward, and the padding conversions under them,
against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F
import torch_ember

H, D = 2, 8
LENGTHS = [5, 3, 7]


@pytest.fixture
def no_fallback():
    torch_ember.reset_fallback_stats()
    yield
    assert not torch_ember.fallback_report(), torch_ember.fallback_report()


def _nested(rows, device):
    return torch.nested.nested_tensor([r.to(device) for r in rows], layout=torch.jagged, requires_grad=True)


def _sequences(lengths, width, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, *width, generator=g) for n in lengths]


def _attend(device, queries, keys, **kw):
    q, k = _nested(queries, device), _nested(keys, device)
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, ragged, D)
    out = F.scaled_dot_product_attention(qt, kt, kt, **kw).transpose(1, 2) + q  # a residual: same raggedness
    loss = sum((t * t.detach().cos()).sum() for t in out.unbind())
    loss.backward()
    return [t.detach().cpu() for t in out.unbind()] + [t.cpu() for g in (q.grad, k.grad) for t in g.unbind()]


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_attention_over_ragged_sequences(no_fallback, cross, scale):
    queries = _sequences(LENGTHS, (H, D), 0)
    keys = _sequences([n + 2 for n in LENGTHS], (H, D), 1) if cross else queries
    for got, want in zip(_attend("ember", queries, keys, scale=scale), _attend("cpu", queries, keys, scale=scale)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class _RaggedSelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(H * D, 3 * H * D)
        self.out = torch.nn.Linear(H * D, H * D)

    def forward(self, x):
        q, k, v = (t.contiguous().unflatten(-1, (H, D)).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        o = F.scaled_dot_product_attention(q, k, v)
        return self.out(o.transpose(1, 2).flatten(-2)) + x


@pytest.mark.parametrize("compiled", [False, True, "background"], ids=["eager", "compiled", "background"])
def test_ragged_attention_block_trains_as_on_cpu(no_fallback, compiled):
    torch.manual_seed(0)
    ref = _RaggedSelfAttention()
    rows = _sequences(LENGTHS, (H * D,), 2)
    results = {}
    for device in ("cpu", "ember"):
        model = _RaggedSelfAttention().to(device)
        model.load_state_dict(ref.state_dict())
        x = _nested(rows, device)
        options = {"background": True} if compiled == "background" else {}
        run = torch.compile(model, backend="ember", options=options) if compiled and device == "ember" else model
        out = run(x)
        sum((t * t).sum() for t in out.unbind()).backward()
        results[device] = ([t.detach().cpu() for t in out.unbind()] + [t.cpu() for t in x.grad.unbind()]
                           + [p.grad.cpu() for p in model.parameters()])
    for got, want in zip(results["ember"], results["cpu"]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("max_length", [7, 4, 0])
@pytest.mark.parametrize("padding", [0.0, -1.0, -1e300])
def test_jagged_padded_conversions(no_fallback, dtype, max_length, padding):
    values = (torch.randn(9, 3, generator=torch.Generator().manual_seed(3)) * 10).to(dtype)
    offsets = torch.tensor([0, 2, 2, 9])  # an empty sequence in the middle

    def to_ember(x):
        if isinstance(x, torch.Tensor):
            return x.to("ember")
        return [to_ember(a) for a in x] if isinstance(x, list) else x

    def both(op, *args):
        return op(*map(to_ember, args)).cpu(), op(*args)

    got, want = both(torch.ops.aten._jagged_to_padded_dense_forward, values, [offsets], [max_length], padding)
    torch.testing.assert_close(got, want)
    padded = torch.ops.aten._jagged_to_padded_dense_forward(values, [offsets], [7], padding)
    for total in (None, 9):
        got, want = both(torch.ops.aten._padded_dense_to_jagged_forward, padded, [offsets], total)
        torch.testing.assert_close(got, want)


def test_padding_of_no_values(no_fallback):
    values = torch.zeros(0, 3, device="ember")
    got = torch.ops.aten._jagged_to_padded_dense_forward(values, [torch.zeros(3, dtype=torch.long, device="ember")],
                                                         [4], 2.0)
    torch.testing.assert_close(got.cpu(), torch.full((2, 4, 3), 2.0))


def test_padded_to_jagged_checks_its_offsets():
    padded = torch.randn(3, 7, 3, device="ember")
    offsets = torch.tensor([0, 2, 2, 9], device="ember")
    with pytest.raises(RuntimeError, match="final offset should match total_L"):
        torch.ops.aten._padded_dense_to_jagged_forward(padded, [offsets], 12)
        torch.ember.synchronize()
    with pytest.raises(RuntimeError, match="longer than the max length"):
        torch.ops.aten._padded_dense_to_jagged_forward(padded[:, :4], [offsets], 9)
        torch.ember.synchronize()
    torch.ember.synchronize()  # reported once

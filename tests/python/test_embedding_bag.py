"""Native embedding_bag (sum, mean, max; offsets or 2-D input; per-sample weights, padding_idx,
include_last_offset, scale_grad_by_freq, empty bags) matches PyTorch CPU forward and backward,
in eager mode and compiled."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_ember

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: {},
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def run(device, weight, indices, offsets, dtype=torch.float32, psw=None, **kw):
    w = weight.to(dtype).to(device).requires_grad_()
    p = None if psw is None else psw.to(dtype).to(device).requires_grad_()
    out = F.embedding_bag(indices.to(device), w, None if offsets is None else offsets.to(device),
                          per_sample_weights=p, **kw)
    g = torch.linspace(-2, 3, out.numel(), dtype=torch.float32).reshape(out.shape).to(dtype).to(device)
    grads = torch.autograd.grad(out, [w] + ([p] if p is not None else []), g)
    return [t.detach().cpu() for t in (out, *grads)]


def check(*args, dtype=torch.float32, **kw):
    for got, expected in zip(run("ember", *args, dtype=dtype, **kw), run("cpu", *args, dtype=dtype, **kw)):
        torch.testing.assert_close(got, expected, **TOL[dtype])


W = torch.randn(10, 5, generator=torch.Generator().manual_seed(0))
# Bags of sizes 3, 0 (empty), 1, 4; index 2 repeats; index 0 is used as padding in some cases.
IDX = torch.tensor([1, 2, 4, 5, 2, 0, 9, 2, 0])
OFF = torch.tensor([0, 3, 3, 4])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_modes_with_offsets(dtype, mode, padding_idx, native_only):
    check(W, IDX, OFF, dtype=dtype, mode=mode, padding_idx=padding_idx)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_2d_input_and_include_last_offset(mode, native_only):
    idx2 = torch.tensor([[1, 3, 3], [0, 9, 8]])
    check(W, idx2, None, mode=mode)
    check(W, IDX, torch.tensor([0, 3, 3, 4, 9]), mode=mode, include_last_offset=True)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_per_sample_weights(index_dtype, native_only):
    psw = torch.rand(IDX.numel(), generator=torch.Generator().manual_seed(1))
    check(W, IDX.to(index_dtype), OFF.to(index_dtype), mode="sum", psw=psw)
    check(W, IDX, OFF, mode="sum", psw=psw, padding_idx=0)


def bags_of_embeddings(w, idx, off, mode):
    """embedding_bag spelled as F.embedding (whose scale_grad_by_freq is right on the CPU) and
    a sum or mean per bag."""
    rows = F.embedding(idx, w, scale_grad_by_freq=True)
    ends = off.tolist()[1:] + [idx.numel()]
    out = [rows[a:b].sum(0) if mode == "sum" else rows[a:b].mean(0) if b > a else rows.new_zeros(w.shape[1])
           for a, b in zip(off.tolist(), ends)]
    return torch.stack(out)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_scale_grad_by_freq(mode, native_only):
    # PyTorch 2.13's CPU embedding_bag scales each row's gradient by the wrong index's count
    # (row 1, used once, gets half its gradient), so the reference is F.embedding's, which is
    # right and which CUDA's embedding_bag agrees with: each use divided by the row's count.
    got = run("ember", W, IDX, OFF, mode=mode, scale_grad_by_freq=True)
    w = W.clone().requires_grad_()
    out = bags_of_embeddings(w, IDX, OFF, mode)
    g = torch.linspace(-2, 3, out.numel()).reshape(out.shape)
    (gw,) = torch.autograd.grad(out, w, g)
    torch.testing.assert_close(got[0], out.detach(), **TOL[torch.float32])
    torch.testing.assert_close(got[1], gw, **TOL[torch.float32])


def test_max_ties_take_the_first_row(native_only):
    w = torch.tensor([[1.0, 2.0], [1.0, 5.0], [0.0, 5.0]])
    check(w, torch.tensor([0, 1, 2]), torch.tensor([0]), mode="max")


def test_module_trains_like_cpu_eager_and_compiled():
    def step(device, compiled):
        torch.manual_seed(0)
        bag = nn.EmbeddingBag(20, 6, mode="mean", padding_idx=3)
        head = nn.Linear(6, 2)
        model = nn.Sequential(bag, head).to(device)
        x = torch.tensor([[1, 3, 5, 7], [3, 3, 3, 3], [19, 0, 2, 2]], device=device)
        f = torch.compile(model, backend="ember") if compiled else model
        loss = f(x).square().mean()
        loss.backward()
        return [loss.detach().cpu()] + [p.grad.cpu() for p in model.parameters()]

    ref = step("cpu", False)
    for compiled in (False, True):
        torch_ember.reset_fallback_stats()
        for got, expected in zip(step("ember", compiled), ref):
            torch.testing.assert_close(got, expected)
        assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())


def test_errors_match_cpu():
    w = W.to("ember")
    with pytest.raises(RuntimeError, match="per_sample_weights"):
        F.embedding_bag(IDX.to("ember"), w, OFF.to("ember"), mode="max",
                        per_sample_weights=torch.ones(IDX.numel(), device="ember"))
    with pytest.raises(RuntimeError, match="same dtype|long or int"):
        torch.ops.aten._embedding_bag(w, IDX.to("ember"), OFF.int().to("ember"))
    with pytest.raises(Exception, match="out of range|index"):
        F.embedding_bag(torch.tensor([1, 12], device="ember"), w, torch.tensor([0], device="ember"))
        torch.ember.synchronize()
    torch.ember.synchronize()


@pytest.mark.parametrize("offsets, message", [([1, 0], "offsets\\[0\\] has to be 0"),
                                              ([0, 9], "can not be greater than input's length"),
                                              ([0, 3, 1], "non-decreasing")])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_bad_offsets_raise_like_cpu(offsets, message, include_last_offset):
    # Bags starting elsewhere than 0, past the end or before the previous bag: the CPU raises,
    # and summing them anyway would read the wrong rows.
    idx, off = torch.tensor([1, 2, 3, 4]), torch.tensor(offsets)
    with pytest.raises(RuntimeError):
        F.embedding_bag(idx, W, off, include_last_offset=include_last_offset)
    # Checked on the device without waiting: the error surfaces at the next synchronizing call.
    with pytest.raises(RuntimeError, match=message):
        F.embedding_bag(idx.to("ember"), W.to("ember"), off.to("ember"), include_last_offset=include_last_offset)
        torch.ember.synchronize()
    torch.ember.synchronize()  # reported once


def test_include_last_offset_edges():
    idx, w = torch.tensor([1, 2, 3, 4]), W.to("ember")
    # One offset: no bags (and nothing for the next op to trip over).
    for mode in ("sum", "mean", "max"):
        got = F.embedding_bag(idx.to("ember"), w, torch.tensor([0], device="ember"), include_last_offset=True, mode=mode)
        assert got.shape == (0, W.shape[1])
    torch.testing.assert_close((torch.ones(2, device="ember") + 1).cpu(), torch.full((2,), 2.0))
    # Indices past the last offset belong to no bag: refused (the CPU drops them from sums but
    # keeps them in maxima).
    with pytest.raises(RuntimeError, match="last offset must equal the number of indices"):
        F.embedding_bag(idx.to("ember"), w, torch.tensor([0, 2], device="ember"), include_last_offset=True)
        torch.ember.synchronize()


def test_sparse_gradients_are_refused_clearly():
    w = W.to("ember").requires_grad_()
    out = F.embedding_bag(IDX.to("ember"), w, OFF.to("ember"), sparse=True)
    with pytest.raises(NotImplementedError, match="sparse gradients"):
        out.sum().backward()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padding_idx", [None, 1])
def test_embedding_scale_grad_by_freq_is_native(dtype, padding_idx, native_only):
    # nn.Embedding(scale_grad_by_freq=True): each use of a row divided by the row's count.
    idx = torch.tensor([[1, 1, 2], [3, 1, 0]])
    g = torch.arange(24.0).reshape(2, 3, 4).to(dtype)

    def grad(device):
        w = W[:, :4].detach().to(dtype).to(device).clone().requires_grad_()
        F.embedding(idx.to(device), w, padding_idx=padding_idx, scale_grad_by_freq=True).backward(g.to(device))
        return w.grad.cpu()

    torch.testing.assert_close(grad("ember"), grad("cpu"))

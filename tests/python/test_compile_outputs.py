"""What a compiled graph hands back: every returned value is a tensor of its own, even where a
copy lowers to the value it copies, and values the graph folds to constants (torch.eye) are the
CPU's own."""
import pytest
import torch

import torch_ember  # noqa: F401


@pytest.mark.parametrize("n", [100, 256, 1000])
def test_identity_matrices_of_any_size_compile(n, native_only):
    # PyTorch's eye decomposition ranges over uint16 from n = 256 (peft's DoRA builds
    # torch.eye(in_features)); the graph folds eye to a constant with the CPU's own kernel.
    torch._dynamo.reset()

    def f(x):
        return x @ torch.eye(x.shape[-1], device=x.device, dtype=x.dtype) + torch.eye(3, n, device=x.device)

    x = torch.randn(3, n)
    torch.testing.assert_close(torch.compile(f, backend="ember")(x.to("ember")).cpu(), f(x))


COPIES = {
    "clone": lambda y: y.clone(), "clone_detach": lambda y: y.clone().detach(),
    "to_copy": lambda y: y.to(torch.float32, copy=True), "cat_of_one": lambda y: torch.cat([y]),
    "pow_1": lambda y: y.pow(1), "empty_pad": lambda y: torch.nn.functional.pad(y, (0, 0)),
    "copy_into_empty": lambda y: torch.empty_like(y).copy_(y), "squeeze_clone": lambda y: y.squeeze().clone(),
}


@pytest.mark.parametrize("name", sorted(COPIES))
def test_a_returned_copy_is_a_tensor_of_its_own(name, native_only):
    # A copy lowers to its source value; returned next to that source it must still be another
    # tensor: the same object twice made a mutation of one show in the other, and a detached
    # copy took the gradient away from the original (a DEQ's hook then re-entered forever).
    torch._dynamo.reset()
    copy_of = COPIES[name]

    def f(x):
        y = x.sin()
        return y, copy_of(y)

    x = torch.randn(4, requires_grad=True)
    xe = x.detach().to("ember").requires_grad_()
    a, c = torch.compile(f, backend="ember")(xe)
    assert a is not c and a.requires_grad
    want_a, want_c = f(x)
    ((a * 2).sum() + (c * 3).sum() * c.requires_grad).backward()
    ((want_a * 2).sum() + (want_c * 3).sum() * want_c.requires_grad).backward()
    torch.testing.assert_close(xe.grad.cpu(), x.grad)
    with torch.no_grad():
        a.add_(100)
    torch.testing.assert_close(c.detach().cpu(), want_c.detach())


def test_a_returned_detach_shares_memory_as_in_eager(native_only):
    # detach aliases its input: the compiled graph returns it as a view of the value (no second
    # buffer, no copy), so an in-place change through one shows in the other, as in eager.
    # AOTAutograd's forward graphs return `detach(x)` beside `x` for the backward the same way.
    torch._dynamo.reset()

    def f(x):
        y = x.sin() * 2
        return y, y.detach(), y.detach().view(-1)

    xe = torch.randn(3, 4, device="ember", requires_grad=True)
    a, b, c = torch.compile(f, backend="ember")(xe)
    assert a.requires_grad and not b.requires_grad and not c.requires_grad
    assert a.data_ptr() == b.data_ptr() == c.data_ptr()
    torch.testing.assert_close(b.cpu(), (xe.detach().sin() * 2).cpu())
    b.mul_(0)
    assert a.abs().sum().item() == 0 and c.abs().sum().item() == 0

    def loss(x):
        return torch.nn.functional.cross_entropy(x, torch.arange(3, device=x.device))

    x = torch.randn(3, 5, requires_grad=True)
    xe = x.detach().to("ember").requires_grad_()
    torch.compile(loss, backend="ember")(xe).backward()
    loss(x).backward()
    torch.testing.assert_close(xe.grad.cpu(), x.grad)


SPLITS = {"chunk": lambda y: y.chunk(2)[1], "split_sizes": lambda y: y.split([1, 3])[1],
          "unbind": lambda y: y.unbind(0)[2], "unbind_columns": lambda y: y.view(2, 2).unbind(1)[1]}


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_pieces_of_split_and_unbind_are_views_as_in_eager(name, native_only):
    # An output taken from chunk/split/unbind is a view of the value it splits (replayed on it),
    # not a copy: a change through one shows in the other, with eager's strides.
    torch._dynamo.reset()
    piece = SPLITS[name]

    def f(x):
        y = x * 2
        return y, piece(y)

    x = torch.arange(4.0)
    want_y, want_p = f(x)
    got_y, got_p = torch.compile(f, backend="ember")(x.to("ember"))
    assert got_p.stride() == want_p.stride()
    assert got_p.untyped_storage().data_ptr() == got_y.untyped_storage().data_ptr()
    want_y.add_(100)
    got_y.add_(100)
    torch.testing.assert_close(got_p.cpu(), want_p)


def test_chunks_of_a_parameter_stay_its_views(native_only):
    torch._dynamo.reset()
    w = torch.arange(4.0, device="ember").requires_grad_()
    q, k = torch.compile(lambda w: w.chunk(2), backend="ember")(w)
    assert q._base is w and k._base is w
    with torch.no_grad():
        k.zero_()
    assert w.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_results_of_cpu_scalars_alone_come_back_on_the_cpu(native_only):
    # Eager mode computes s * 2 for a CPU 0-d tensor s on the CPU, even beside ember tensors.
    torch._dynamo.reset()

    def f(x, s):
        return x * s, s * 2, (s + 1).view(1)

    x, s = torch.randn(3, device="ember"), torch.tensor(1.5)
    got, want = torch.compile(f, backend="ember")(x, s), f(x, s)
    assert [t.device for t in got] == [t.device for t in want]
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w.cpu())


def test_in_place_update_of_an_inference_tensor_is_refused_as_in_eager():
    torch._dynamo.reset()

    def f(x):
        x.add_(1)
        return x * 2

    with torch.inference_mode():
        x = torch.ones(3, device="ember")
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        torch.compile(f, backend="ember")(x)
    assert x.tolist() == [1.0, 1.0, 1.0]
    with torch.inference_mode():
        torch.testing.assert_close(torch.compile(f, backend="ember")(x).cpu(), torch.full((3,), 4.0))


@pytest.mark.parametrize("name", ["add_", "iadd", "mul_", "copy_"])
def test_in_place_update_of_an_expanded_view_is_refused_as_in_eager(name):
    """Eager refuses an in-place op whose target shares memory between elements; compiled (after
    AOTAutograd's functionalization) the op ran once per sharing element (a.expand(3, 4).add_(1)
    added 3 to a). Such graphs run op by op, so eager's error is raised."""
    def f(a):
        b = a.expand(3, 4)
        if name == "iadd":
            b += 1
        elif name == "copy_":
            b.copy_(torch.ones(3, 4, device=a.device))
        else:
            getattr(b, name)(2)
        return b

    a = torch.tensor([[0.25, 0.5, 0.0, -1.0]], device="ember")
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        f(a.clone())
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.compile(f, backend="ember")(a)
    torch.testing.assert_close(a.cpu(), torch.tensor([[0.25, 0.5, 0.0, -1.0]]))


def test_fills_of_an_expanded_view_compile_as_eager_runs_them(native_only):
    """A fill of an expanded view is allowed in eager mode; functionalized, it wrote 21 where
    eager writes 7 (on every backend): the graph runs op by op and says why."""
    torch_ember.reset_compile_stats()

    def f(a, mask):
        b = a.expand(3, 4)
        b.masked_fill_(mask, 7.0)
        return a * 1

    import warnings
    mask = torch.tensor([True, False, True, False])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # masked_fill_ on an expanded tensor is deprecated
        want = f(torch.zeros(1, 4), mask)
        got = torch.compile(f, backend="ember")(torch.zeros(1, 4, device="ember"), mask.to("ember"))
    torch.testing.assert_close(got.cpu(), want)
    reasons = [s["recompile_reason"] for s in torch_ember.compile_stats()]
    assert any("masked_fill_ at" in r and "share memory" in r for r in reasons), reasons

"""torch.compile(backend="ember"): compiled results match eager and the CPU (forward and
backward), untranslatable ops fail with CompileError naming op and line or run eagerly under
fallback="eager", and compiled graphs persist in a cache that other processes share."""
import copy
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_ember

if not torch_ember._C._compiler_available():
    pytest.skip("ember was built without the LLVM compiler (EMBER_WITH_LLVM=OFF)", allow_module_level=True)

import torch._dynamo  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def _fresh(fresh_compile):
    yield


def _compile(fn, **options):
    return torch.compile(fn, backend="ember", options=options or None)


def _grads(fn, inputs, device):
    xs = [x.detach().to(device).requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*xs)
    out.backward(torch.ones_like(out))
    return out.detach().cpu(), [x.grad.cpu() if x.grad is not None else None for x in xs]


def _check_parity(fn, inputs, rtol=1e-4, atol=1e-5):
    """Compiled on ember vs eager on the CPU: output and every input gradient."""
    out, grads = _grads(_compile(fn), inputs, "ember")
    ref, ref_grads = _grads(fn, inputs, "cpu")
    torch.testing.assert_close(out, ref, rtol=rtol, atol=atol)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=rtol, atol=atol)


# --- registration --------------------------------------------------------------------------
def test_backend_and_device_interface_are_registered():
    from torch._dynamo.device_interface import get_interface_for_device

    assert "ember" in torch._dynamo.list_backends()
    iface = get_interface_for_device("ember")
    assert iface.device_count() == torch.ember.device_count()
    assert iface.is_available() and iface.current_device() == torch.ember.current_device()
    iface.synchronize()


def test_device_context_manager_in_a_compiled_function():
    # `with torch.ember.device(...)` is traced (Liger-Kernel's ops wrap launches in one), not a
    # graph break; the current device is what it was afterwards.
    def f(x):
        with torch.ember.device(x.device):
            y = x * 2
        return y + 1

    x = torch.randn(5, device="ember:1")
    before = torch.ember.current_device()
    out = torch.compile(f, backend="ember", fullgraph=True)(x)
    torch.testing.assert_close(out.cpu(), x.cpu() * 2 + 1)
    assert out.device == x.device and torch.ember.current_device() == before


def test_graphs_that_move_tensors_between_devices_keep_the_devices():
    # A compiled graph runs on one device; one whose tensors move from ember:0 to ember:1 (a model
    # split across two devices) put every result on the first device. It now runs op by op and
    # says so in compile_stats(); forward and gradients land where eager mode puts them.
    class Split(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)).to(self.b.weight.device)) * 2

    torch.manual_seed(0)
    cpu = Split()
    model = copy.deepcopy(cpu)
    model.a.to("ember:0"), model.b.to("ember:1")
    x = torch.randn(4, 8)
    torch_ember.reset_compile_stats()
    out = torch.compile(model, backend="ember")(x.to("ember:0"))
    assert out.device == torch.device("ember:1")
    out.sum().backward()
    cpu(x).sum().backward()
    torch.testing.assert_close(out.cpu(), cpu(x))
    assert model.a.weight.grad.device == torch.device("ember:0")
    torch.testing.assert_close(model.a.weight.grad.cpu(), cpu.a.weight.grad)
    torch.testing.assert_close(model.b.weight.grad.cpu(), cpu.b.weight.grad)
    assert any("ember:0 and ember:1" in r["recompile_reason"] for r in torch_ember.compile_stats())

    moved = torch.compile(lambda t: t.to("ember:0") + 1, backend="ember")(torch.ones(3, device="ember:1"))
    assert moved.device == torch.device("ember:0")


def test_import_does_not_load_dynamo():
    code = "import sys, torch_ember; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- op chains -------------------------------------------------------------------------------
def activations(x):
    return F.gelu(torch.tanh(x) * F.silu(x)) + torch.sigmoid(x).relu() - F.gelu(x, approximate="tanh")


def softmaxes(x):
    return torch.softmax(x * 2.0, dim=-1) + torch.log_softmax(x, dim=0).exp() * 0.5


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def adamw_update(p, g, m, v):
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v.abs() + 0.001 * g * g  # second moments are non-negative
    return p * (1 - 1e-3 * 0.01) - 1e-3 * (m / 0.1) / ((v / 0.001).sqrt() + 1e-8)


@pytest.mark.parametrize("fn,shapes", [
    (activations, [(6, 10)]),
    (softmaxes, [(5, 7)]),
    (rms_norm, [(4, 16), (16,)]),
    (layer_norm, [(3, 4, 16), (16,), (16,)]),
    (rotary, [(2, 3, 5, 8), (5, 8), (5, 8)]),
    (adamw_update, [(32,), (32,), (32,), (32,)]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_op_chain_matches_cpu(fn, shapes):
    torch.manual_seed(0)
    _check_parity(fn, [torch.randn(s) for s in shapes])
    assert all(not r["eager_ops"] for r in torch_ember.compile_stats())


def test_mlp_forward_backward():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.LogSoftmax(-1))
    ember = nn.Sequential(*[m for m in __import__("copy").deepcopy(mlp)]).to("ember")
    x = torch.randn(4, 16)
    out = _compile(ember)(x.to("ember"))
    out.sum().backward()
    ref = mlp(x)
    ref.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-4, atol=1e-5)
    for pe, pc in zip(ember.parameters(), mlp.parameters()):
        torch.testing.assert_close(pe.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-5)
    kinds = [r["kind"] for r in torch_ember.compile_stats()]
    assert kinds == ["fw", "bw"]


def test_inference_graph_uses_attention_library_kernel():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))

    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    with torch.no_grad():
        out = _compile(attn)(q.to("ember"), k.to("ember"), v.to("ember"))
    torch.testing.assert_close(out.cpu(), attn(q, k, v), rtol=1e-4, atol=1e-5)
    (rec,) = torch_ember.compile_stats()
    assert rec["kind"] == "inference" and rec["library_calls"] >= 1


@pytest.mark.parametrize("case", ["causal", "bool_mask", "float_mask", "gqa", "cross_lengths", "bf16"])
def test_training_graph_runs_fused_attention_and_its_backward(case):
    # A trained attention runs eager mode's fused kernels (forward with logsumexp, backward) as
    # library steps: no [Lq, Lk] score matrix is materialized in either direction.
    gen = torch.Generator().manual_seed(3)
    dtype = torch.bfloat16 if case == "bf16" else torch.float32
    hk, lq, lk = (2 if case == "gqa" else 4), (5 if case == "cross_lengths" else 8), 9 if case == "cross_lengths" else 8
    q = torch.randn(2, 4, lq, 16, generator=gen).to(dtype)
    k, v = (torch.randn(2, hk, lk, 16, generator=gen).to(dtype) for _ in range(2))
    mask = None
    if case == "bool_mask":
        mask = torch.rand(lq, lk, generator=gen) > 0.3
        mask[:, 0] = True
    elif case == "float_mask":
        mask = torch.randn(2, 1, lq, lk, generator=gen)

    def f(q, k, v, m):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=case in ("causal", "bf16", "cross_lengths"),
                                           enable_gqa=case == "gqa")
        return (y * 1.5).sin().sum()

    results = []
    for dev, fn in (("cpu", f), ("ember", _compile(f))):
        leaves = [t.clone().to(dev).requires_grad_() for t in (q, k, v)]
        out = fn(*leaves, mask.to(dev) if mask is not None else None)
        out.backward()
        results.append([out.detach().cpu()] + [t.grad.cpu() for t in leaves])
    tol = dict(rtol=3e-2, atol=3e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    for got, expected in zip(results[1], results[0]):
        torch.testing.assert_close(got, expected, **tol)
    library = {op for rec in torch_ember.compile_stats() for op, _ in rec["library_ops"]}
    assert {"aten._scaled_dot_product_fused_attention_overrideable.default",
            "aten._scaled_dot_product_fused_attention_overrideable_backward.default"} <= library


def test_outputs_that_alias_inputs_stay_views():
    def f(x):
        return x.t(), x[1:], x * 2

    x = torch.randn(3, 4, device="ember")
    a, b, c = _compile(f)(x)
    assert a.data_ptr() == x.data_ptr() and b.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    torch.testing.assert_close(c.cpu(), x.cpu() * 2)




@pytest.mark.parametrize("case", ["embedding", "cross_entropy", "nll_loss_backward"])
def test_compiled_index_ops_check_their_indices(case):
    # An index past the table or a target past the classes raises as eagerly, whatever the sizes.
    w, a = torch.randn(3, 2, device="ember"), torch.randn(2, 3, device="ember", requires_grad=True)
    fn, args = {
        "embedding": (lambda w, i: F.embedding(i, w) * 1, (w, torch.tensor([3], device="ember"))),
        "cross_entropy": (F.cross_entropy, (a.detach(), torch.tensor([0, 3], device="ember"))),
        "nll_loss_backward": (lambda a, t: torch.autograd.grad(F.nll_loss(a, t), a)[0],
                              (a, torch.tensor([0, -1], device="ember"))),
    }[case]
    with pytest.raises(RuntimeError, match="out of (range|bounds)"):
        _compile(fn)(*args).cpu()


def test_compiled_embedding_keeps_nonfinite_rows_to_themselves():
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0], [float("inf"), float("nan")]], requires_grad=True)
    idx = torch.tensor([0, 1, 1])
    g = torch.tensor([[float("nan"), 1.0], [1.0, 1.0], [1.0, -0.0]])
    we = w.detach().to("ember").requires_grad_()
    out = _compile(lambda w, i: F.embedding(i, w) * 1)(we, idx.to("ember"))
    out.backward(g.to("ember"))
    ref = F.embedding(idx, w)
    ref.backward(g)
    torch.testing.assert_close(out.detach().cpu(), ref.detach())
    torch.testing.assert_close(we.grad.cpu(), w.grad, equal_nan=True)


def test_outputs_keep_the_layout_eager_gives():
    # A channels_last input gives a channels_last result in eager; a compiled result written
    # row-major would change what .is_contiguous(memory_format=...) and .view() see downstream.
    def f(x, y):
        z = torch.relu(x) * 2 + 1
        return z, z, (y * 3).t().contiguous().t(), (y + 1).sum(0)

    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    y = torch.randn(4, 6)
    outs = _compile(f)(x.to("ember"), y.to("ember"))
    refs = f(x, y)
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o.cpu(), r)
        assert o.stride() == r.stride()
    assert outs[0] is outs[1]  # one result returned twice stays one tensor
    # A training graph: the gradient of a channels_last input is channels_last as on the CPU.
    xe = x.to("ember").requires_grad_()
    (_compile(lambda t: torch.sigmoid(t) * t)(xe) ** 2).sum().backward()
    xc = x.clone().requires_grad_()
    ((torch.sigmoid(xc) * xc) ** 2).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)
    assert xe.grad.stride() == xc.grad.stride()
    # Such a result is a tensor of its own, not a view: the caller may modify it in place.
    t = torch.randn(4, 3).t()
    te = t.to("ember").requires_grad_()
    out = _compile(lambda a: a * 3)(te)
    assert out._base is None and out.stride() == (1, 3)
    out.mul_(2)
    out.sum().backward()
    torch.testing.assert_close(te.grad.cpu(), torch.full((3, 4), 6.0))
# --- models --------------------------------------------------------------------------------
def _gpt_module():
    sys.path.insert(0, HERE)
    try:
        import test_gpt
    finally:
        sys.path.remove(HERE)
    return test_gpt


def _train_gpt(compiled, steps):
    gpt = _gpt_module()
    torch.manual_seed(0)
    model = gpt.GPT().to("ember")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    run = _compile(model) if compiled else model
    data = torch.randint(0, 96, (steps, 4, 33), generator=torch.Generator().manual_seed(1))
    losses = []
    for step in range(steps):
        batch = data[step].to("ember")
        loss = run(batch[:, :-1], batch[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_gpt_trains_20_steps_like_eager_with_every_op_compiled():
    compiled = _train_gpt(True, 20)
    eager = _train_gpt(False, 20)
    torch.testing.assert_close(compiled, eager, rtol=1e-3, atol=1e-3)
    assert compiled[-1] < compiled[0]
    recs = torch_ember.compile_stats()
    assert {r["kind"] for r in recs} == {"fw", "bw"} and all(not r["eager_ops"] for r in recs)


def test_demo_model_forward_backward_matches_eager():
    pytest.importorskip("transformers")
    from torch_ember.demo.train_lm import build_model

    torch.manual_seed(0)
    model = build_model(16).to("ember")
    x = torch.randint(0, 256, (2, 16)).to("ember")
    y = torch.randint(0, 256, (2, 16)).to("ember")

    def loss_fn(x, y):
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))

    loss = _compile(loss_fn)(x, y)
    loss.backward()
    grads = [p.grad.cpu() for p in model.parameters()]
    model.zero_grad()
    ref = loss_fn(x, y)
    ref.backward()
    torch.testing.assert_close(loss.item(), ref.item(), rtol=1e-5, atol=1e-5)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad.cpu(), rtol=1e-4, atol=1e-5)
    assert all(not r["eager_ops"] for r in torch_ember.compile_stats())


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        h = h + F.relu(self.conv2(h))  # residual
        return self.fc(h.mean((2, 3)))


def test_cnn_runs_convolutions_as_library_steps():
    # No lowering for convolution, but an eager ember kernel: a strict compile runs it as a
    # library step between the compiled pieces, and nothing is reported as a fallback.
    torch.manual_seed(0)
    cpu = SmallCNN()
    ember = __import__("copy").deepcopy(cpu).to("ember")
    x = torch.randn(2, 3, 8, 8)
    torch_ember.reset_fallback_stats()
    out = _compile(ember)(x.to("ember"))
    out.sum().backward()
    ref = cpu(x)
    ref.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-4, atol=1e-5)
    for pe, pc in zip(ember.parameters(), cpu.parameters()):
        torch.testing.assert_close(pe.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-5)
    recs = torch_ember.compile_stats()
    library = [op for r in recs for op, _ in r["library_ops"]]
    assert "aten.convolution.default" in library
    assert "aten.convolution_backward.default" in library
    assert all(r["partitions"] >= 1 and not r["eager_ops"] for r in recs)
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())


# --- errors ----------------------------------------------------------------------------------
def test_op_without_ember_kernel_names_op_and_source_line():
    def f(x):
        y = x.exp()
        return nn.functional.multilabel_margin_loss(y.view(2, 2), y.new_tensor([[1, -1], [0, 1]]).long())  # no ember kernel

    line = f.__code__.co_firstlineno + 2
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match=r"aten\.multilabel_margin_loss_forward") as info:
        _compile(f)(torch.randn(4, device="ember"))
    err = info.value.inner_exception
    assert isinstance(err, torch_ember.CompileError) and isinstance(err, RuntimeError)
    assert f"test_compile.py:{line}" in str(err) and "fallback" in str(err)


def test_fallback_eager_runs_ops_without_ember_kernel():
    def f(x):
        return nn.functional.multilabel_margin_loss(x.exp().view(2, 3) - 2, x.new_tensor([[2, 0, -1], [1, -1, 0]]).long()) * 2

    x = torch.randn(6, device="ember")
    out = _compile(f, fallback="eager")(x)
    torch.testing.assert_close(out.cpu(), f(x.cpu()))
    (rec,) = torch_ember.compile_stats()
    assert [op for op, _ in rec["eager_ops"]] == ["aten.multilabel_margin_loss_forward.default"]
    assert rec["eager_ops"][0][1].endswith(f"test_compile.py:{f.__code__.co_firstlineno + 1}")
    assert "aten.multilabel_margin_loss_forward.default" in torch_ember.fallback_report().compiled_eager_ops


def test_complex_values_are_never_lowered(native_only):
    # rfft and fft are library ops; abs of the complex result is real, but the IR holds no
    # complex values: the abs stays a library step, whose eager kernel composes it from the parts.
    def f(x):
        return torch.fft.rfft(x).abs().sum() + torch.view_as_real(torch.fft.fft(x)).square().mean()

    x = torch.randn(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # nothing ran on the CPU
        out = _compile(f)(x.to("ember"))
    torch.testing.assert_close(out.cpu(), f(x))


def test_complex_constants_compile_strictly():
    # A rotary table built in forward with torch.polar folds to a complex constant, and a
    # complex literal is lifted as one: neither has an IR form, so both run as eager steps.
    def rotary(q):
        t = torch.arange(q.shape[0], device=q.device).float()
        cis = torch.polar(torch.ones_like(t), t * 0.1)
        return torch.view_as_real(torch.view_as_complex(q) * cis)

    def literal(q):
        c = torch.tensor([1 + 2j, 3 - 1j, 0.5j, 2, 1, 1j, -1, 1 - 1j], dtype=torch.complex64)
        return torch.view_as_real(torch.view_as_complex(q) * c.to(q.device)).sin()

    for f in (rotary, literal):
        torch._dynamo.reset()
        q = torch.randn(8, 2)
        qc, qe = q.clone().requires_grad_(), q.to("ember").requires_grad_()
        out, ref = _compile(f)(qe), f(qc)
        torch.testing.assert_close(out.cpu(), ref)
        out.square().sum().backward()
        ref.square().sum().backward()
        torch.testing.assert_close(qe.grad.cpu(), qc.grad)


def test_ops_with_eager_kernels_compile_as_library_steps():
    def f(x):
        return torch.cumsum(x.exp(), 0) * 2  # no lowering for cumsum, but an eager kernel

    x = torch.randn(6, device="ember")
    out = _compile(f)(x)
    torch.testing.assert_close(out.cpu(), f(x.cpu()))
    (rec,) = torch_ember.compile_stats()
    assert [op for op, _ in rec["library_ops"]] == ["aten.cumsum.default"] and not rec["eager_ops"]


def test_views_after_a_piece_see_the_layout_they_were_traced_with():
    # repeat splits the graph; the piece computing q wrote it contiguous where it was traced
    # transposed, attention's output followed that layout, and the traced view of it failed.
    def f(x, k, v, idx):
        q = x.view(2, 12, 4, 8).transpose(1, 2) * 2.0
        o = F.scaled_dot_product_attention(q, k.repeat(1, 2, 1, 1), v)
        return o.transpose(1, 2).view(2, 12, 2, -1).view(-1, 16)[idx] * o.sum()

    g = torch.Generator().manual_seed(0)
    x, k, v = (torch.randn(*s, generator=g) for s in ((2, 12, 32), (2, 2, 12, 8), (2, 4, 12, 8)))
    idx = torch.randperm(48, generator=g)
    xc, xe = x.clone().requires_grad_(), x.to("ember").requires_grad_()
    ref, out = f(xc, k, v, idx), _compile(f)(xe, k.to("ember"), v.to("ember"), idx.to("ember"))
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-4, atol=1e-4)
    ref.sum().backward()
    out.sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, rtol=1e-4, atol=2e-4)


def test_searchsorted_with_a_sorter_compiles_whole(native_only):
    # Eager mode checks the sorter's range on the host; a traced graph has no values to read, and
    # that check must not break it.
    def f(s, v, o):
        return torch.searchsorted(s, v, sorter=o) * 2 + torch.searchsorted(s.sort()[0], v, side="right")

    seq = torch.tensor([3.0, 1.0, 2.0, 5.0])
    args = (seq, torch.tensor([0.5, 2.5, 9.0]), torch.argsort(seq))
    out = torch.compile(f, backend="ember", fullgraph=True)(*[a.to("ember") for a in args])
    torch.testing.assert_close(out.cpu(), f(*args))


def test_a_library_step_that_falls_back_for_its_arguments_is_reported():
    # searchsorted has a composed eager path that hands values of another dtype than the
    # sequence's to the CPU: only running the step shows it. The graph runs (results are right)
    # but says so at its first call.
    def f(s, v, o):
        return torch.searchsorted(s, v, sorter=o) * 2

    seq = torch.tensor([3.0, 1.0, 2.0, 5.0])
    args = (seq, torch.tensor([0, 2, 9]), torch.argsort(seq))
    ember_args = [a.to("ember") for a in args]
    g = _compile(f)
    with pytest.warns(RuntimeWarning, match=r"ran 1 op\(s\) on the CPU: aten\.searchsorted"):
        out = g(*ember_args)
    torch.testing.assert_close(out.cpu(), f(*args))
    (rec,) = torch_ember.compile_stats()
    ((op, src),) = rec["eager_ops"]
    assert op.startswith("aten.searchsorted") and src.endswith(f"test_compile.py:{f.__code__.co_firstlineno + 1}")
    assert any(k.startswith("aten.searchsorted") for k in torch_ember.fallback_report().compiled_eager_ops)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(g(*ember_args).cpu(), f(*args))  # reported once, at the first call


def test_scans_compile_forward_and_backward():
    # logcumsumexp, cummax and cummin have eager kernels, so they compile strictly (and their
    # backwards, which flip and scatter_add, too).
    def f(x):
        v, i = torch.cummax(x, 1)
        return torch.logcumsumexp(x * 2, -1).sum() + v.sum() + torch.cummin(x, 0)[0].mean() + i.float().sum()

    x = torch.randn(4, 9, requires_grad=True)
    xe = x.detach().to("ember").requires_grad_()
    expected, got = f(x), torch.compile(f, backend="ember", fullgraph=True)(xe)
    expected.backward()
    got.backward()
    torch.testing.assert_close(got.cpu(), expected.detach())
    torch.testing.assert_close(xe.grad.cpu(), x.grad)
    assert not any(rec["eager_ops"] for rec in torch_ember.compile_stats())


def test_a_cpu_model_runs_as_written_on_the_cpu():
    # Compiling for ember moved a CPU model's outputs to the device, and its backward then failed
    # on the CPU parameters.
    net = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    with pytest.warns(UserWarning, match="only CPU tensors"):
        y = torch.compile(net, backend="ember")(x)
    assert y.device.type == "cpu"
    y.sum().backward()
    torch.testing.assert_close(y.detach(), net(x).detach())
    assert net.weight.grad is not None and net.weight.grad.device.type == "cpu"
    made = torch.compile(lambda a: a + torch.ones(2, device="ember"), backend="ember")(torch.ones(2, device="ember"))
    assert made.device.type == "ember"


def test_inductor_on_ember_tensors_says_to_use_the_ember_backend():
    # torch.compile's default backend found no code generator for ember and failed an assert.
    f = torch.compile(lambda t: (t.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt() * t)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match=r"backend='ember'.*torch_compile_backend='ember'"):
        f(torch.randn(4, 8, device="ember"))


def test_unknown_option_is_rejected():
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="unknown ember compile option"):
        _compile(lambda x: x + 1, fallbck="eager")(torch.randn(2, device="ember"))


@pytest.mark.parametrize("dynamic", [None, True])
def test_new_shapes_compile_static_specializations(dynamic):
    # dynamic=None: Dynamo recompiles for the second shape with symbolic sizes; dynamic=True:
    # symbolic from the start. Either way ember specializes per concrete shape, when the shape
    # comes a second time: its first call runs eagerly.
    f = torch.compile(lambda x: torch.softmax(x, -1), backend="ember", dynamic=dynamic)
    sizes = (3, 7, 7, 9, 9, 9, 11)
    for n in sizes:
        x = torch.randn(2, n, device="ember")
        torch.testing.assert_close(f(x).cpu(), torch.softmax(x.cpu(), -1))
    recs = torch_ember.compile_stats()
    compiled = [r for r in recs if r["kind"] != "eager"]
    eager = [r for r in recs if r["kind"] == "eager"]
    # dynamic=None compiles its first, static, graph at once.
    assert len(compiled) == (3 if dynamic is None else 2), recs
    assert len(eager) == 1 and eager[0]["eager_calls"] == (3 if dynamic is None else 4), eager
    assert "until they come again" in eager[0]["recompile_reason"]
    # Each specialization is a fused kernel, not a graph of library steps.
    assert all(r["kernels"] and not r["library_ops"] for r in compiled), recs


def test_a_growing_kv_cache_stops_compiling_after_a_few_sizes():
    # A decoding step attends over a cache that grows by one position per call: no size comes
    # twice, so after the first (static) graph the steps run eagerly instead of compiling per token.
    from torch_ember.compile.backend import SPECIALIZATIONS

    def step(kc, q, k, pos):
        kc[:, pos:pos + 1] = k
        keys = kc[:, :pos + 1]
        return (q @ keys.transpose(-1, -2)).softmax(-1) @ keys

    steps = SPECIALIZATIONS + 6
    g = torch.Generator().manual_seed(0)
    qs, ks = torch.randn(steps, 2, 1, 8, generator=g), torch.randn(steps, 2, 1, 8, generator=g)
    kc_cpu, kc = torch.zeros(2, 32, 8), torch.zeros(2, 32, 8, device="ember")
    f = torch.compile(step, backend="ember")
    for pos in range(steps):
        want = step(kc_cpu, qs[pos], ks[pos], pos)
        torch.testing.assert_close(f(kc, qs[pos].to("ember"), ks[pos].to("ember"), pos).cpu(), want)
    torch.testing.assert_close(kc.cpu(), kc_cpu)
    recs = torch_ember.compile_stats()
    compiled = [r for r in recs if r["kind"] != "eager"]
    assert len(compiled) <= 2 < SPECIALIZATIONS, [r["recompile_reason"] for r in recs]
    assert "run eagerly" in recs[-1]["recompile_reason"] and recs[-1]["eager_calls"] == steps - len(compiled)


def test_repeated_sizes_stop_compiling_after_a_few_signatures():
    # Each size comes twice, so each compiles at its second call, up to SPECIALIZATIONS of them;
    # past those, new sizes run eagerly however often they come.
    from torch_ember.compile.backend import SPECIALIZATIONS

    f = torch.compile(lambda x: (x * 2).softmax(-1), backend="ember", dynamic=True)
    sizes = [n for n in range(3, 3 + SPECIALIZATIONS + 3) for _ in range(2)]
    for n in sizes:
        x = torch.randn(2, n, device="ember")
        torch.testing.assert_close(f(x).cpu(), (x.cpu() * 2).softmax(-1))
    recs = torch_ember.compile_stats()
    assert len([r for r in recs if r["kind"] != "eager"]) == SPECIALIZATIONS, recs
    capped = [r for r in recs if "more than" in r["recompile_reason"]]
    assert len(capped) == 1 and capped[0]["eager_calls"] == 2 * 3, recs


# --- cache and logging -------------------------------------------------------------------------
_CHILD = textwrap.dedent("""
    import json, sys, warnings, torch, torch_ember
    def f(x, y):
        return torch.softmax(torch.tanh(x) @ y, -1) * 3.0
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 16, generator=g), torch.randn(16, 4, generator=g)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = torch.compile(f, backend="ember")(x.to("ember"), y.to("ember")).cpu()
    torch.testing.assert_close(out, f(x, y))
    print(json.dumps({"stats": torch_ember.compile_stats(), "warnings": [str(m.message) for m in w],
                      "out": out.tolist()}))
""")


def _child(env=None):
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cache_hit_in_a_new_process():
    first = _child()
    second = _child()
    assert [r["cache_hit"] for r in first["stats"]] == [False]
    assert [r["cache_hit"] for r in second["stats"]] == [True]
    assert second["out"] == first["out"]


def test_corrupt_entry_warns_and_recompiles(tmp_path):
    _child()
    cache = tmp_path / "cache"
    (entry,) = list(cache.iterdir())
    entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    res = _child()
    assert [r["cache_hit"] for r in res["stats"]] == [False]
    assert any("ember compile cache" in w for w in res["warnings"]), res["warnings"]
    assert _child()["stats"][0]["cache_hit"]  # the entry was replaced


def test_concurrent_processes_share_the_cache():
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[0]["out"] == results[1]["out"]
    assert torch_ember._C._cache_info(os.environ["EMBER_CACHE_DIR"])[0] == 1


def test_ember_cache_0_writes_nothing(monkeypatch):
    monkeypatch.setenv("EMBER_CACHE", "0")
    x = torch.randn(4, device="ember")
    torch.testing.assert_close(_compile(lambda x: x.exp() + 1)(x).cpu(), x.cpu().exp() + 1)
    assert not os.path.exists(os.environ["EMBER_CACHE_DIR"]) or \
        torch_ember._C._cache_info(os.environ["EMBER_CACHE_DIR"])[0] == 0


def test_cache_cli_info_and_clear(capsys):
    from torch_ember import cli

    _compile(lambda x: x.sin() * 2)(torch.randn(4, device="ember"))
    assert cli.main(["cache", "info"]) == 0
    assert "1 entries" in capsys.readouterr().out
    assert cli.main(["cache", "clear"]) == 0
    assert torch_ember._C._cache_info(os.environ["EMBER_CACHE_DIR"])[0] == 0


def test_compile_log_line(monkeypatch, capfd):
    monkeypatch.setenv("EMBER_LOG", "compile")
    _compile(lambda x: x.cos() - 1)(torch.randn(4, device="ember"))
    err = capfd.readouterr().err
    assert "ember compile graph" in err and "[inference]" in err and "cache=miss" in err
    (rec,) = torch_ember.compile_stats()
    assert rec["kernels"] >= 1 and rec["total_ms"] >= rec["compile_ms"] > 0


def test_view_of_a_transposed_result_is_returned():
    # The graph returns a view traced on a non-contiguous intermediate (Mamba's scan layout);
    # the executable's contiguous result must be given the traced strides before the view.
    def f(x):
        y = (x * 2).transpose(1, 2).contiguous().transpose(1, 2)  # a result with transposed strides
        return y.view(y.shape[0], -1, y.shape[-1]) if y.is_contiguous() else y.transpose(1, 2).reshape(2, -1), y

    x = torch.randn(2, 3, 4, device="ember")
    got = _compile(f)(x)
    ref = f(x.cpu())
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.cpu(), b)


PAD_CASES = {
    "pad": lambda x: F.pad(x, (1, 2)),
    "pad_2d_value": lambda x: F.pad(x, (2, 0, 1, 3), value=-1.5),
    "pad_negative": lambda x: F.pad(x, (-1, 2, 0, -2)),
    "cat_unequal": lambda x: torch.cat([x[:, :3], x * 2, x[:, :1] + 1], dim=1),
    "slice_scatter_strided": lambda x: torch.slice_scatter(x, x[:, ::2].exp(), 1, 0, None, 2),
    "select_scatter": lambda x: torch.select_scatter(x, x[1] * 3, 0, 2),
    "interleaved_halves": lambda x: torch.stack((x[..., ::2] * 2, x[..., 1::2] - 1), -1).flatten(-2),
}


@pytest.mark.parametrize("name", list(PAD_CASES))
def test_index_maps_fuse_forward_and_backward(name):
    # Padding, unequal concatenation and scatters into slices are index maps with masked loads:
    # they fuse (no library step, no graph split), forward and backward.
    fn = PAD_CASES[name]
    x = torch.randn(4, 6)
    xe, xc = x.to("ember").requires_grad_(), x.clone().requires_grad_()
    ye, yc = _compile(fn)(xe), fn(xc)
    ye.square().sum().backward()
    yc.square().sum().backward()
    torch.testing.assert_close(ye.detach().cpu(), yc.detach())
    torch.testing.assert_close(xe.grad.cpu(), xc.grad)
    recs = torch_ember.compile_stats()
    assert recs and all(not r["library_ops"] for r in recs), [r["library_ops"] for r in recs]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("module", [torch.nn.BatchNorm1d, torch.nn.InstanceNorm1d])
def test_half_precision_batch_norm_trains_compiled(module, dtype):
    # The device's batch-norm statistics stay in the input dtype, where PyTorch's meta function
    # promises float32: the backward graph, compiled for float32, gets them cast, not refused.
    torch.manual_seed(0)
    ref = module(6, affine=True).to(dtype)
    m = copy.deepcopy(ref).to("ember")
    x = torch.randn(4, 6, 8).to(dtype)
    xe = x.to("ember").requires_grad_()
    xc = x.clone().requires_grad_()
    ye = torch.compile(m, backend="ember")(xe)
    yc = ref(xc)
    (ye.float() * torch.linspace(-1, 1, ye.numel()).reshape(ye.shape).to("ember")).sum().backward()
    (yc.float() * torch.linspace(-1, 1, yc.numel()).reshape(yc.shape)).sum().backward()
    torch.testing.assert_close(ye.cpu(), yc, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(xe.grad.cpu(), xc.grad, rtol=5e-2, atol=2e-2)
    for a, b in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=5e-2, atol=5e-2)


def test_empty_splits_and_0d_variance_compile():
    # A dim of size 0 splits into one empty piece; a 0-d variance is NaN, as eagerly.
    def f(x, s):
        return torch.split(x, 2, -1)[0] + 1, s.std(0, keepdim=True), s.var(0)

    x, s = torch.zeros(4, 7, 0), torch.tensor(1.5)
    for got, want in zip(_compile(f)(x.to("ember"), s.to("ember")), f(x, s)):
        assert got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)


def test_take_with_a_0d_index_compiles():
    # PyTorch's take decomposition read a 0-d index as a Python int (a data-dependent guard);
    # every index shape compiles strictly, negative indices wrap as eagerly.
    for x, i in ((torch.tensor(3.0), torch.tensor(0)), (torch.randn(5), torch.tensor(-2)),
                 (torch.randn(3, 4), torch.tensor([[0, -1], [11, 2]]))):
        torch._dynamo.reset()
        f = torch.compile(torch.take, backend="ember", fullgraph=True)
        torch.testing.assert_close(f(x.to("ember"), i.to("ember")).cpu(), torch.take(x, i))

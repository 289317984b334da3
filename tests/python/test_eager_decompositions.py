"""Ops without an ember kernel but with a decomposition in torch._decomp run on ember as that
decomposition (eager_decompositions.py): activations, padding modes, losses and math functions
match PyTorch CPU forward and backward with nothing falling back to the CPU; inputs the
decomposition does not serve (integers, complex) take the visible CPU fallback and still match."""
import pytest
import torch
import torch.nn.functional as F
import torch_ember
from torch_ember import eager_decompositions

G = torch.Generator().manual_seed(0)
X = torch.randn(3, 4, 5, generator=G)
P = torch.rand(3, 4, 5, generator=G) * 0.9 + 0.05  # probabilities
T = torch.rand(3, 4, 5, generator=G)
IMG = torch.randn(2, 3, 6, 5, generator=G)

CASES = {
    "hardswish": (lambda x: F.hardswish(x), [X]),
    "hardsigmoid": (lambda x: F.hardsigmoid(x), [X]),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), [X]),
    "leaky_relu_": (lambda x: F.leaky_relu(x.clone(), 0.2, inplace=True), [X]),
    "mish": (lambda x: F.mish(x), [X]),
    "elu": (lambda x: F.elu(x, 0.7), [X]),
    "elu_": (lambda x: F.elu(x.clone(), 0.7, inplace=True), [X]),
    "glu": (lambda x: F.glu(x, -2), [X]),
    "hardshrink": (lambda x: F.hardshrink(x, 0.4), [X]),
    "softshrink": (lambda x: F.softshrink(x, 0.4), [X]),
    "threshold": (lambda x: F.threshold(x, 0.1, -2.0), [X]),
    "prelu": (lambda x, w: F.prelu(x, w), [IMG, torch.tensor([0.1, 0.2, 0.3])]),
    "reflection_pad1d": (lambda x: F.pad(x, (2, 1), mode="reflect"), [X]),
    "reflection_pad2d": (lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"), [IMG]),
    "reflection_pad3d": (lambda x: F.pad(x[None], (1, 1, 1, 2, 1, 0), mode="reflect"), [IMG]),
    "replication_pad1d": (lambda x: F.pad(x, (2, 3), mode="replicate"), [X]),
    "replication_pad2d": (lambda x: F.pad(x, (2, 1, 3, 0), mode="replicate"), [IMG]),
    "replication_pad3d": (lambda x: F.pad(x[None], (1, 2, 0, 1, 2, 1), mode="replicate"), [IMG]),
    "smooth_l1_loss": (lambda x, t: F.smooth_l1_loss(x, t, beta=0.5), [X, T]),
    "huber_loss": (lambda x, t: F.huber_loss(x, t, delta=0.3), [X, T]),
    "binary_cross_entropy": (lambda p, t: F.binary_cross_entropy(p, t), [P, T]),
    "multi_margin_loss": (lambda x: F.multi_margin_loss(x[0], torch.tensor([1, 0, 3, 4], device=x.device)), [X]),
    "nll_loss2d": (lambda x: F.cross_entropy(x, torch.tensor([[[0, 1, 2, 0, 1]] * 6] * 2, device=x.device)[:, :, :5]),
                   [IMG]),
    "logaddexp": (lambda a, b: torch.logaddexp(a, b), [X, T]),
    "logaddexp2": (lambda a, b: torch.logaddexp2(a, b), [X, T]),
    "xlogy": (lambda a, b: torch.xlogy(a, b), [X, P]),
    "logit": (lambda p: torch.logit(p, eps=1e-3), [P]),
    "sinc": (lambda x: torch.sinc(x), [X]),
    "frac": (lambda x: torch.frac(x * 3), [X]),
    "isin": (lambda x: x * torch.isin((x * 2).round(), torch.tensor([0.0, 1.0], device=x.device)), [X]),
    "rsub": (lambda a, b: torch.rsub(a, b, alpha=2), [X, T]),
    "trace": (lambda x: torch.trace(x[0]), [X]),
    "dot": (lambda a, b: torch.dot(a.flatten(), b.flatten()), [X, T]),
    "prod": (lambda x: x.prod(1) + x[0].prod(), [X]),
    "nansum": (lambda x: torch.where(x > 1, float("nan"), x).nansum(1), [X]),
    "renorm": (lambda x: torch.renorm(x, 2, 0, 1.0), [X]),
    "linalg_cross": (lambda a, b: torch.linalg.cross(a[..., :3], b[..., :3]), [X, T]),
    "unfold_backward": (lambda x: x.unfold(2, 2, 1).square().sum(-1), [X]),
    "special_entr": (lambda p: torch.special.entr(p), [P]),
    "special_xlog1py": (lambda a, b: torch.special.xlog1py(a, b), [X, P]),
    "take": (lambda x: torch.take(x, torch.tensor([0, 7, 59, 7], device=x.device)), [X]),
    "index_fill": (lambda x: x.clone().index_fill_(2, torch.tensor([1, 3], device=x.device), -1.5), [X]),
    "channel_shuffle": (lambda x: F.channel_shuffle(x[:, :2].repeat(1, 3, 1, 1), 3), [IMG]),
    "elu_module": (lambda x: torch.nn.ELU(0.5)(x) + torch.nn.SELU()(x) + torch.nn.CELU(0.8)(x), [X]),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (2, 3)), [IMG]),
    "max_pool3d": (lambda x: F.max_pool3d(x[None], 2, stride=1), [IMG]),
    "max_pool3d_overlap": (lambda x: F.max_pool3d(x[None].repeat(2, 1, 1, 1, 1), 3, stride=2, padding=1,
                                                  ceil_mode=True), [IMG]),
    "adaptive_max_pool3d": (lambda x: F.adaptive_max_pool3d(x[None], (1, 3, 5)), [IMG]),
    "put": (lambda x, t: x.put(torch.tensor([0, -1, 7, 7], device=x.device), t.flatten()[:4], accumulate=True)
            + x.put(torch.tensor([3, -2], device=x.device), t.flatten()[4:6]), [X, T]),
    "copysign": (lambda a, b: torch.copysign(a, b - 0.5), [X, T]),
    "median": (lambda x: torch.median(x) + torch.nanmedian(torch.where(x > 1, float("nan"), x))
               + torch.median(torch.where(x > 2, float("nan"), x)).nan_to_num(7.0), [X]),
    "signbit": (lambda x: x * torch.signbit(torch.cat([x, torch.tensor([[[-0.0, 0.0, float("nan"), -float("nan"),
                                                                           -1.0]]], device=x.device).expand(3, 1, 5)], 1)
                                            )[:, :4], [X]),
    "cumprod": (lambda x: torch.cumprod(x, 1), [X]),
    "fmax_fmin": (lambda a, b: torch.fmax(a, torch.where(b > 0.5, float("nan"), b)) + torch.fmin(a, b), [X, T]),
    "round_decimals": (lambda x: torch.round(x * 10, decimals=1), [X]),
    "bicubic": (lambda x: F.interpolate(x, scale_factor=1.7, mode="bicubic", align_corners=False), [IMG]),
    "bicubic_align": (lambda x: F.interpolate(x, size=(9, 4), mode="bicubic", align_corners=True), [IMG]),
    "bucketize": (lambda x: x * torch.bucketize(x, torch.tensor([-1.0, 0.0, 0.5], device=x.device)) +
                  x * torch.bucketize(x, torch.tensor([-1.0, 0.0, 0.5], device=x.device), right=True,
                                      out_int32=True), [X]),
    "max_unpool2d": (lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=(6, 4)),
                     [IMG[..., :4]]),
    "linspace_logspace": (lambda x: x * torch.linspace(-2.5, 3, 5, device=x.device, dtype=x.dtype)
                          + torch.logspace(-1, 1.5, 5, device=x.device, dtype=x.dtype), [X]),
    "mv_addmv": (lambda m, v: m[0] @ v[0, :, 0] + torch.addmv(m[1, :, 0], m[0], v[0, :, 2], beta=0.5, alpha=2),
                 [X, T.transpose(1, 2)]),
    "masked_select_backward": (lambda x: x.masked_select(x > 0.2).square(), [X]),
    "masked_scatter": (lambda x, t: x.masked_scatter(t > 0.5, x.flip(0) * 3), [X, T]),
    "cdist": (lambda a, b: torch.cdist(a, b) + torch.cdist(a, b, p=1) + torch.cdist(a, b, p=3)
              + torch.cdist(a, b, p=float("inf")) + torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"), [X, T]),
    "searchsorted": (lambda x: x * torch.searchsorted(torch.tensor([-1.0, 0.0, 0.5], device=x.device, dtype=x.dtype), x)
                     + x * torch.searchsorted(torch.tensor([-1.0, 0.0, 0.5], device=x.device, dtype=x.dtype), x,
                                              side="right", out_int32=True), [X]),
}


def run(fn, inputs, device, dtype):
    xs = [t.detach().to(dtype).to(device).requires_grad_() for t in inputs]
    y = fn(*xs)
    grads = []
    if y.requires_grad:
        g = torch.linspace(-1, 2, y.numel(), dtype=torch.float64).reshape(y.shape).to(dtype).to(device)
        grads = torch.autograd.grad(y, xs, g, allow_unused=True)
    return [y.detach().cpu()] + [None if g is None else g.cpu() for g in grads]


# Ops these cases reach that have no decomposition of their own (mostly backward ops) and
# so still take the CPU fallback; every other case runs with nothing on the CPU.
ON_CPU = {
    "multi_margin_loss": {"aten::multi_margin_loss_backward"},
    "bicubic": {"aten::upsample_bicubic2d_backward.grad_input"},
    "bicubic_align": {"aten::upsample_bicubic2d_backward.grad_input"},
    "logaddexp": {"aten::mul.Tensor"},
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_cpu(name, dtype):
    fn, inputs = CASES[name]
    expected = run(fn, inputs, "cpu", dtype)
    torch_ember.reset_fallback_stats()
    got = run(fn, inputs, "ember", dtype)
    on_cpu = {r.op for r in torch_ember.fallback_report()}
    assert on_cpu <= ON_CPU.get(name, set()), on_cpu
    for a, b in zip(got, expected):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, equal_nan=True, rtol=1e-5 if dtype == torch.float32 else 1e-7,
                                       atol=1e-6 if dtype == torch.float32 else 1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_matches_cpu(name):
    # Compiled graphs trace the same decompositions, forward and backward: each must be
    # functional (AOTAutograd refuses an in-place op in a traced graph) and agree with the CPU.
    torch._dynamo.reset()
    fn, inputs = CASES[name]
    expected = run(fn, inputs, "cpu", torch.float32)
    got = run(torch.compile(fn, backend="ember", options={"fallback": "eager"}), inputs, "ember", torch.float32)
    for a, b in zip(got, expected):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, equal_nan=True, rtol=1e-5, atol=1e-6)


# The losses reach their backward's grad_input= form, whose decomposition computes bfloat16 in
# float: the result once went into a float copy of grad_input, leaving the gradient all zeros
# (small enough, under a mean, to pass an absolute tolerance of 2e-2).
@pytest.mark.parametrize("name", ["hardswish", "mish", "reflection_pad2d", "smooth_l1_loss", "huber_loss",
                                  "glu", "elu_module"])
def test_bfloat16(name, native_only):
    fn, inputs = CASES[name]
    for a, b in zip(run(fn, inputs, "ember", torch.bfloat16), run(fn, inputs, "cpu", torch.bfloat16)):
        if a is not None:
            torch.testing.assert_close(a, b, rtol=2e-2, atol=1e-3)


def test_inputs_the_decomposition_does_not_serve_take_the_cpu_fallback():
    torch_ember.reset_fallback_stats()
    i = torch.tensor([[3, -1, 7]])
    torch.testing.assert_close(torch.frac(i.to("ember").double()).cpu(), torch.frac(i.double()))
    for f in (lambda t: F.pad(t, (1, 1), mode="reflect"), lambda t: torch.trace(t.reshape(1, 3)),
              lambda t: F.hardshrink(t)):
        try:
            expected = f(i)
        except Exception as e:  # the CPU refuses integers: ember must refuse them the same way
            with pytest.raises(type(e)):
                f(i.to("ember"))
            continue
        torch.testing.assert_close(f(i.to("ember")).cpu(), expected)
    ops = {r.op for r in torch_ember.fallback_report()}
    assert ops & {"aten::reflection_pad1d", "aten::hardshrink", "aten::hardshrink.out"}, ops


def test_every_listed_op_is_registered_and_in_the_op_table():
    from torch_ember.compile import op_table

    assert eager_decompositions.registered
    routes = {r[0]: r[1] for r in op_table.rows()}
    for name in eager_decompositions.registered:
        assert routes.get("aten." + name) == "decomposed", name


def test_error_mode_refuses_the_cpu_path_for_them_too():
    torch_ember.set_fallback_mode("error")
    try:
        with pytest.raises(RuntimeError, match="hardshrink"):
            F.hardshrink(torch.tensor([1, 2], device="ember"))
    finally:
        torch_ember.set_fallback_mode("warn")


def test_a_decomposition_that_disagrees_with_the_cpu_is_not_used():
    # PyTorch 2.13's multilabel_margin_loss decomposition also counts target entries after the
    # first -1. Eager mode keeps the CPU kernel, and a strict compile refuses the op rather than
    # give the decomposition's value.
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    t = torch.tensor([[1, 0, -1, 2, 3], [3, -1, 0, 0, 0], [0, 1, 2, 3, -1], [4, 2, -1, 0, 0]])
    expected = F.multilabel_margin_loss(x, t)
    torch.testing.assert_close(F.multilabel_margin_loss(x.to("ember"), t.to("ember")).cpu(), expected)
    f = torch.compile(F.multilabel_margin_loss, backend="ember", options={"fallback": "eager"})
    torch.testing.assert_close(f(x.to("ember"), t.to("ember")).cpu(), expected)


@pytest.mark.parametrize("mode", ["replicate"])
def test_edge_padding_compiles_strictly_forward_and_backward(mode):
    # replication_pad*_backward has no decomposition in torch._decomp: Ember supplies one, used by
    # eager mode and by compiled graphs alike.
    def f(x):
        return (F.pad(x, (2, 1), mode=mode).square().sum() + F.pad(x[None], (1, 2, 0, 1), mode=mode).sum()
                + F.softshrink(x, 0.3).sum() + F.hardshrink(x, 0.3).sum())
    xs = [X.clone().requires_grad_(), X.to("ember").requires_grad_()]
    outs = [f(xs[0]), torch.compile(f, backend="ember", fullgraph=True)(xs[1])]
    for o in outs:
        o.backward()
    torch.testing.assert_close(outs[1].cpu(), outs[0].detach())
    torch.testing.assert_close(xs[1].grad.cpu(), xs[0].grad)


def _same(fn, *inputs):
    expected = fn(*inputs)
    got = fn(*[t.to("ember") for t in inputs])
    if isinstance(expected, bool):
        assert got is expected
        return
    for e, g in zip(expected if isinstance(expected, tuple) else (expected,), got if isinstance(got, tuple) else (got,)):
        assert g.device.type == "ember" and g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g.cpu(), e, equal_nan=True)


@pytest.mark.parametrize("kwargs", [{}, {"return_inverse": True}, {"return_counts": True},
                                    {"sorted": False, "return_inverse": True, "return_counts": True}])
def test_unique_matches_cpu(kwargs, native_only):
    # token and expert ids (integers), NaNs (each its own value, as on the CPU), 0-dim and empty
    for x in (torch.tensor([3.0, 1.0, 3.0, 2.0, float("nan"), float("nan")]), torch.tensor([[5, 1, 5], [2, 2, 9]]),
              torch.randint(0, 7, (200,), generator=G), torch.tensor(3), torch.tensor([], dtype=torch.long)):
        _same(lambda t: torch._unique2(t, **kwargs), x)
    _same(lambda t: torch.unique(t, return_counts=True), torch.randint(0, 5, (64,), generator=G))
    _same(lambda t: torch._unique2(t, **kwargs), torch.tensor([True, False, True, True]))


_RUNS = (torch.tensor([1, 1, 2, 2, 3, 1, 1, 2]), torch.tensor([3.0, float("nan"), float("nan"), 3.0, 3.0]),
         torch.tensor([True, True, False]), torch.tensor(4.0), torch.tensor([], dtype=torch.long),
         torch.tensor([[1, 2], [1, 2], [3, 4], [1, 2]]))


@pytest.mark.parametrize("x", [torch.randint(0, 3, (20, 3), generator=G), torch.randint(0, 2, (2, 30), generator=G),
                               torch.randint(0, 3, (4, 5, 6), generator=G), torch.randn(6, 2, generator=G).round(),
                               torch.randint(0, 2, (7, 3), generator=G).bool(),
                               torch.tensor([[1.0, -0.0], [1.0, 0.0]])], ids=["rows", "edges", "3d", "float", "bool", "zeros"])
def test_unique_along_a_dim_matches_cpu(x, native_only):
    # unique(edge_index, dim=1) deduplicates a graph's edges.
    for dim in range(-x.dim(), x.dim()):
        _same(lambda t: torch.unique(t, dim=dim, return_inverse=True, return_counts=True), x)
        _same(lambda t: torch.unique(t, dim=dim, sorted=False), x)


def test_unique_along_a_dim_with_nan_or_no_elements_is_the_cpus():
    for x in (torch.zeros(0, 3), torch.tensor([[1.0, float("nan")], [1.0, float("nan")]])):
        _same(lambda t: torch.unique(t, dim=0, return_inverse=True, return_counts=True), x)


@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True), (True, True)])
def test_unique_consecutive_matches_cpu(dim, flags, native_only):
    for x in _RUNS:
        if dim is not None and (x.dim() == 0 or x.numel() == 0):
            continue
        _same(lambda t: torch.ops.aten.unique_consecutive(t, *flags, dim), x)
    _same(lambda t: torch.unique_consecutive(t, return_counts=True), torch.randint(0, 3, (300,), generator=G))


@pytest.mark.parametrize("size", [0, 2, 9])
def test_nonzero_static_matches_cpu(size, native_only):
    for x in (torch.tensor([[0, 1, 3], [2, 0, 0]]), torch.tensor([0.0, float("nan"), -0.0]), torch.tensor(True),
              torch.zeros(2, 0)):
        _same(lambda t: torch.nonzero_static(t, size=size), x)
        _same(lambda t: torch.nonzero_static(t, size=size, fill_value=7), x)


def test_equal_matches_cpu(native_only):
    x = torch.tensor([1.0, float("nan"), 2.0])
    _same(torch.equal, x, x.clone())  # NaN is not equal to itself
    _same(torch.equal, x[::2], x[::2].clone())
    _same(torch.equal, torch.ones(3), torch.ones(4))
    _same(torch.equal, torch.ones(2), torch.ones(2, dtype=torch.long))  # the CPU promotes
    _same(torch.equal, torch.tensor([1, 2]), torch.tensor([1, 3]))
    _same(torch.equal, torch.ones(0), torch.ones(0))


def test_repeat_interleave_with_a_repeats_tensor(native_only):
    for r in ([2, 0, 3], [0, 0], [], [1, 4]):
        _same(torch.repeat_interleave, torch.tensor(r, dtype=torch.long))
    _same(lambda r: torch.repeat_interleave(r, output_size=3), torch.tensor([1, 2], dtype=torch.int32))
    _same(lambda r: torch.repeat_interleave(torch.arange(3, device=r.device) * 10, r), torch.tensor([1, 2, 0]))
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device="ember"))
    with pytest.raises(RuntimeError, match="allocated size does not match"):
        torch.repeat_interleave(torch.tensor([1, 2], device="ember"), output_size=4)


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
def test_triangle_index_factories_match_cpu(fn, native_only):
    # Pairwise features and packed covariance factors index a triangle with these.
    for row, col, offset in [(0, 0, 0), (1, 4, 0), (5, 3, -1), (4, 6, 2), (6, 6, -9), (3, 7, 9)]:
        for dtype in (torch.int64, torch.int32):
            got = fn(row, col, offset, dtype=dtype, device="ember")
            assert got.device.type == "ember"
            torch.testing.assert_close(got.cpu(), fn(row, col, offset, dtype=dtype))
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        fn(3, 3, device="ember", dtype=torch.float32)


def test_rrelu_matches_cpu_in_eval_and_draws_slopes_in_training(native_only):
    x = torch.randn(4000, dtype=torch.float64, generator=G)
    _same(lambda t: F.rrelu(t, 0.1, 0.3, training=False), x)
    xe = x.to("ember").requires_grad_()
    y = F.rrelu(xe, 0.1, 0.3, training=True)
    y.sum().backward()
    y, grad = y.detach().cpu(), xe.grad.cpu()
    slopes = (y / x)[x < 0]
    assert 0.1 <= slopes.min() and slopes.max() <= 0.3 and abs(slopes.mean() - 0.2) < 0.01
    assert torch.equal(y[x > 0], x[x > 0])
    torch.testing.assert_close(grad, torch.where(x < 0, y / x, torch.ones_like(x)))
    z = x.to("ember")
    F.rrelu(z, 0.1, 0.3, training=True, inplace=True)
    assert abs((z.cpu() / x)[x < 0].mean() - 0.2) < 0.01


def test_binary_cross_entropy_checks_its_probabilities_as_the_cpu(native_only):
    # The forgotten sigmoid: eagerly and compiled the error surfaces at the next synchronization.
    probs, target = torch.rand(6, generator=G), torch.rand(6, generator=G)
    _same(lambda p, t: F.binary_cross_entropy(p, t), probs, target)
    compiled = torch.compile(lambda p, t: F.binary_cross_entropy(p, t), backend="ember", fullgraph=True)
    for fn in (F.binary_cross_entropy, compiled):
        for p, t, name in (([1.5, 0.5], [1.0, 1.0], "input"), ([float("nan"), 0.5], [1.0, 1.0], "input"),
                           ([0.5, 0.5], [2.0, 0.5], "target")):
            with pytest.raises(RuntimeError, match=f"all elements of {name} should be between 0 and 1"):
                fn(torch.tensor(p, device="ember"), torch.tensor(t, device="ember")).cpu()
            torch.ember.synchronize()


def test_normal_with_tensor_mean_and_std(native_only):
    mean = torch.arange(4.0, device="ember")[:, None].expand(4, 5000)
    std = torch.tensor([0.5, 1.0, 2.0, 0.0], device="ember")[:, None]
    g = torch.Generator("ember").manual_seed(7)
    a = torch.normal(mean, std, generator=g)
    g.manual_seed(7)
    torch.testing.assert_close(torch.normal(mean, std, generator=g), a)  # the generator decides
    assert a.shape == (4, 5000) and a.dtype == torch.float32
    torch.testing.assert_close(a.mean(1).cpu(), torch.arange(4.0), atol=0.1, rtol=0)
    torch.testing.assert_close(a.std(1).cpu(), std[:, 0].cpu(), atol=0.1, rtol=0)
    assert torch.normal(mean, 2.0).shape == mean.shape and torch.normal(1.0, std).shape == std.shape
    with pytest.raises(RuntimeError, match="normal expects all elements of std >= 0.0"):
        torch.normal(mean, -std - 1)


# Integer and bool inputs of the decomposed ops: same dtype, values and errors as the CPU (bool
# matrix-vector products, cross and threshold are refused there, and must stay refused).
INTEGER_CASES = {
    "dot": lambda a, b: torch.dot(a, b), "vdot": lambda a, b: torch.vdot(a, b),
    "mv": lambda a, b: torch.mv(torch.stack([a, b, a]), b),
    "addmv": lambda a, b: torch.addmv(a[:3], torch.stack([a, b, a]), b, beta=2, alpha=3),
    "nansum": lambda a, b: torch.nansum(a), "rsub": lambda a, b: torch.rsub(a, b, alpha=2),
    "xlogy": lambda a, b: torch.xlogy(a, b), "fmax": lambda a, b: torch.fmax(a, b),
    "fmin": lambda a, b: torch.fmin(a, b), "copysign": lambda a, b: torch.copysign(a, -b),
    "heaviside": lambda a, b: torch.heaviside(a, b), "sinc": lambda a, b: torch.sinc(a),
    "logit": lambda a, b: torch.logit(a), "threshold": lambda a, b: F.threshold(a, 50, 7),
    "aminmax": lambda a, b: torch.aminmax(a).max, "nan_to_num": lambda a, b: torch.nan_to_num(a),
    "entr": lambda a, b: torch.special.entr(a), "xlog1py": lambda a, b: torch.special.xlog1py(a, b),
    "log_ndtr": lambda a, b: torch.special.log_ndtr(a),
    "cross": lambda a, b: torch.linalg.cross(a[:48].view(16, 3), b[:48].view(16, 3)),
    "masked_scatter": lambda a, b: a.clone().masked_scatter_(a > 50, b),
}


def _outcome(fn, *args):
    try:
        return fn(*args).cpu()
    except (RuntimeError, NotImplementedError) as e:
        return type(e), str(e).split("\n")[0]


@pytest.mark.parametrize("name", sorted(INTEGER_CASES))
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool])
def test_integer_inputs_match_cpu(name, dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 120, (50,), generator=g).to(dtype)
    b = torch.randint(0, 120, (50,), generator=g).to(dtype)
    want = _outcome(INTEGER_CASES[name], a, b)
    got = _outcome(INTEGER_CASES[name], a.to("ember"), b.to("ember"))
    if isinstance(want, tuple):  # the CPU refuses: so must ember (the message may differ)
        assert isinstance(got, tuple), f"ember computed {got} where the CPU raised {want}"
        return
    assert not isinstance(got, tuple), got
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [
    lambda d: torch.cdist(torch.randn(3, 4, device=d).half(), torch.randn(2, 4, device=d).half()),
    lambda d: torch.special.log_ndtr(torch.randn(4, device=d).bfloat16()),
    lambda d: F.multi_margin_loss(torch.randn(3, 4, device=d).half(), torch.tensor([0, 1, 2], device=d)),
    lambda d: torch.trace(torch.ones(2, 2, dtype=torch.bool, device=d)),
    lambda d: torch.isin(torch.tensor([True], device=d), torch.tensor([True], device=d)),
    lambda d: torch.cumsum(torch.tensor([True, False], device=d), 0, dtype=torch.bool),
], ids=["cdist_half", "log_ndtr_bf16", "multi_margin_half", "trace_bool", "isin_bool", "cumsum_bool_result"])
def test_dtypes_the_cpu_refuses_stay_refused(case):
    with pytest.raises((RuntimeError, NotImplementedError)):
        case("cpu")
    with pytest.raises((RuntimeError, NotImplementedError)):
        case("ember")


def test_several_out_tensors(native_only):
    # aminmax's min= and max=: all of them written, resized with the CPU's warning, dtype-checked
    x = torch.randn(5, 5, generator=torch.Generator().manual_seed(0))
    mn, mx = torch.empty(0, device="ember"), torch.full((2,), float("nan"), device="ember")
    r = torch.aminmax(x.to("ember"), dim=1, out=(mn, mx))
    assert r.min is mn and r.max is mx
    want = torch.aminmax(x, dim=1)
    assert torch.equal(mn.cpu(), want.min) and torch.equal(mx.cpu(), want.max)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype"):
        torch.aminmax(x.to("ember").bool(), out=(torch.empty((), device="ember"), torch.empty((), device="ember")))


def test_old_unique_overload_and_index_fill_backward(native_only):
    x = torch.tensor([3.0, 1.0, 3.0, float("nan"), 1.0])
    _same(lambda t: torch._unique(t, return_inverse=True), x)
    w = torch.randn(4, 3, generator=G)
    idx = torch.tensor([0, 2, 2])
    we, wc = w.to("ember").requires_grad_(), w.clone().requires_grad_()
    we.index_fill(0, idx.to("ember"), 0.5).square().sum().backward()
    wc.index_fill(0, idx, 0.5).square().sum().backward()
    torch.testing.assert_close(we.grad.cpu(), wc.grad)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_bucketize_of_a_0d_input(compiled, native_only):
    f = lambda v, b: torch.bucketize(v, b, right=True)
    run = torch.compile(f, backend="ember") if compiled else f
    b = torch.tensor([1, 3, 5, 7, 9])
    for v in (torch.tensor(5), torch.tensor(0), torch.tensor(10)):
        got = run(v.to("ember"), b.to("ember"))
        assert got.shape == () and got.dtype == torch.int64
        torch.testing.assert_close(got.cpu(), f(v, b))



CPU_SCALAR_OPS = {
    "heaviside": lambda a, s: torch.heaviside(a, s), "copysign": lambda a, s: torch.copysign(a, s),
    "fmax": lambda a, s: torch.fmax(a, s), "fmin": lambda a, s: torch.fmin(s, a),
    "xlogy": lambda a, s: torch.xlogy(a.abs(), s), "logaddexp": lambda a, s: torch.logaddexp(a, s),
    "ldexp": lambda a, s: torch.ldexp(a, s.long()), "copysign_": lambda a, s: a.clone().copysign_(s),
    "index_fill": lambda a, s: a.index_fill(0, torch.tensor([0, 2], device=a.device), s),
    "rsub": lambda a, s: torch.rsub(a, s, alpha=2),
}


@pytest.mark.parametrize("name", sorted(CPU_SCALAR_OPS))
@pytest.mark.parametrize("dtype,scalar_dtype", [(torch.float32, torch.float32), (torch.float16, torch.float64),
                                                (torch.float32, torch.int64)])
def test_a_cpu_scalar_operand_stays_native_and_promotes_as_on_the_cpu(name, dtype, scalar_dtype, native_only):
    """Pointwise ops take a 0-dim CPU tensor beside device tensors (as on CUDA): the value is
    used on the device, with the CPU's type promotion, instead of sending the op to the CPU."""
    if name == "heaviside" and dtype != scalar_dtype:
        pytest.skip("heaviside refuses mixed dtypes on the CPU (tested by the error case)")
    if name in ("index_fill", "ldexp") and scalar_dtype != torch.float32:
        pytest.skip("one value dtype is enough for the non-promoting ops")
    a = torch.randn(5, 3, generator=G).to(dtype)
    s = torch.tensor(-0.5 if scalar_dtype.is_floating_point else 2, dtype=scalar_dtype)
    want = CPU_SCALAR_OPS[name](a, s)
    got = CPU_SCALAR_OPS[name](a.to("ember"), s)
    assert got.device.type == "ember" and got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


def test_a_cpu_out_tensor_is_still_refused_for_a_pointwise_op():
    a = torch.randn(3, device="ember")
    with pytest.raises(RuntimeError, match="(?i)device"):
        torch.copysign(a, torch.tensor(1.0), out=torch.empty(()))
    with pytest.raises(RuntimeError, match="heaviside is not yet implemented for tensors with different dtypes"):
        torch.heaviside(a, torch.tensor(1.0, dtype=torch.float64))


@pytest.mark.parametrize("case", ["empty", "too small", "no output size"])
def test_3d_max_pooling_raises_the_cpus_shape_errors(case):
    """The decompositions reached these as reshape or unpacking errors."""
    F = torch.nn.functional
    calls = {"empty": (lambda d: F.max_pool3d(torch.randn(0, 1, 2, 10, device=d), 1),
                       "non-batch dimensions to have positive length"),
             "too small": (lambda d: F.max_pool3d(torch.randn(1, 1, 1, 4, 4, device=d), 2), "Output size is too small"),
             "no output size": (lambda d: torch.ops.aten.adaptive_max_pool3d(torch.randn(1, 2, 2, 2, device=d), []),
                                "output_size.size\\(\\) must be 3")}
    fn, message = calls[case]
    for device in ("cpu", "ember"):
        with pytest.raises(RuntimeError, match=message):
            fn(device)

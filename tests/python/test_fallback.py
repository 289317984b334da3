"""The boxed CPU fallback: ops without an ember kernel run on the host, exactly like CPU, with a
warning once per op, counters in torch_ember.fallback_report(), and EMBER_FALLBACK modes."""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
import torch_ember

EXACT = dict(rtol=0, atol=0)


@pytest.fixture(autouse=True)
def _fallback_state():
    """Every test starts with empty counters in 'warn' mode and leaves the mode as it was."""
    old = torch_ember.set_fallback_mode("warn")
    torch_ember.reset_fallback_stats()
    yield
    torch_ember.set_fallback_mode(old)


def _ember_warnings(records):
    return [str(w.message) for w in records if "has no ember kernel" in str(w.message)]


def _e(t):
    return t.to("ember")


# Ops with a CPU kernel only, defined here so that these tests keep ops without an ember kernel
# however far ember's own coverage grows: the fallback serves every namespace. (The tests of
# Python warnings use ATen ops: a torch.ops call of a custom op reports a C++ warning through
# c10's handler on stderr rather than as a Python warning. Each uses its own op, since the
# warned set is per process.)
_LIB = torch.library.Library("ember_fallback_test", "DEF")
_NS = "ember_fallback_test::"


def _cpu_only(name):
    _LIB.define(f"{name}(Tensor a) -> Tensor")
    _LIB.impl(name, torch.special.erfcx, "CPU")
    return getattr(torch.ops.ember_fallback_test, name)


_refused = _cpu_only("refused")
_counted = _cpu_only("counted")
_sort_a, _sort_b, _sort_c = _cpu_only("sort_a"), _cpu_only("sort_b"), _cpu_only("sort_c")
_large = _cpu_only("large")
_LIB.define("nudge_(Tensor(a!) self, float toward) -> Tensor(a!)")
_LIB.impl("nudge_", lambda t, toward: t.nextafter_(torch.full_like(t, toward)), "CPU")
_reset = _cpu_only("reset")
_ordered = _cpu_only("ordered")


def _nudge_(t, toward=1e6):
    """An in-place op that takes the fallback: each element steps one float toward `toward`
    (the results are exact, so views and write-backs compare bit for bit)."""
    return torch.ops.ember_fallback_test.nudge_(t, toward)


# --- subprocesses: warn-once and EMBER_FALLBACK, started together to keep the file fast -------

_CHILD = textwrap.dedent("""
    import json, warnings
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        import torch, torch_ember
        out = {"mode": torch_ember.set_fallback_mode("warn")}
        torch_ember.set_fallback_mode(out["mode"])
        a = torch.ones(1000, device="ember", dtype=torch.bfloat16)
        b = torch.full((1000,), 2.0, device="ember", dtype=torch.bfloat16)
        try:
            c = torch.nextafter(a, b)  # the bfloat16 after 1 (ember computes float32/64 only)
            c = torch.nextafter(c, a)  # 1 again
            torch.histc(b, 4)  # bfloat16 bins
            torch_ember.reset_fallback_stats()
            torch.nextafter(c, c)  # warned already: a reset does not re-arm it
            out["result"] = c.cpu().tolist()[:2]
        except NotImplementedError as e:
            out["error"] = str(e)
    out["warnings"] = [str(w.message) for w in rec]
    out["report"] = torch_ember.fallback_report().to_dict()
    print(json.dumps(out))
""")

# Ops with no ember kernel that no other test uses (the warn-once set is per process).
_NEXTAFTER = "aten::nextafter"
_HISTC = "aten::histc.out"

# Three interpreters on few cores: an unknown value (which means 'warn', the default) checks
# the warn-once behaviour as well.
_ENVS = {"warn": "nonsense", "silent": "silent", "error": "error"}


@pytest.fixture(scope="module")
def children():
    procs = {}
    for name, value in _ENVS.items():
        env = dict(os.environ, EMBER_FALLBACK=value)
        procs[name] = subprocess.Popen([sys.executable, "-c", _CHILD], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        out[name] = json.loads(stdout.strip().splitlines()[-1])
        out[name]["stderr"] = stderr
    return out


def _op_warnings(child, op):
    return [w for w in child["warnings"] if f"operator '{op}' has no ember kernel" in w]


def test_warns_exactly_once_per_op(children):
    child = children["warn"]
    assert child["mode"] == "warn"
    assert child["result"] == [1.0, 1.0]
    assert len(_op_warnings(child, _NEXTAFTER)) == 1
    assert len(_op_warnings(child, _HISTC)) == 1
    msg = _op_warnings(child, _NEXTAFTER)[0]
    assert "runs on the CPU" in msg and "fallback_report" in msg and "EMBER_FALLBACK" in msg
    assert child["report"][_NEXTAFTER]["calls"] == 1  # counted after the reset


def test_env_silent_counts_without_warning(children):
    child = children["silent"]
    assert child["mode"] == "silent"
    assert child["result"] == [1.0, 1.0]
    assert _ember_warnings_from(child) == []
    assert child["report"][_NEXTAFTER]["calls"] == 1


def test_env_error_refuses(children):
    child = children["error"]
    assert child["mode"] == "error"
    assert _NEXTAFTER in child["error"] and "EMBER_FALLBACK=error" in child["error"]
    assert _ember_warnings_from(child) == []
    assert child["report"] == {}


def test_env_invalid_value_warns_and_uses_warn(children):
    child = children["warn"]
    assert child["mode"] == "warn"
    assert child["result"] == [1.0, 1.0]
    # The warning may come as a Python warning or from c10's handler on stderr.
    assert any("EMBER_FALLBACK=nonsense is not one of warn, silent, error" in w
               for w in child["warnings"] + [child["stderr"]])
    assert len(_op_warnings(child, _NEXTAFTER)) == 1


def _ember_warnings_from(child):
    return [w for w in child["warnings"] if "has no ember kernel" in w]


# --- warnings in this process -----------------------------------------------------------------

def test_warns_once_in_process():
    # An op no other test uses: the warn-once set is per process and survives resets.
    x, alpha = _e(torch.tensor([0.2, 0.5, 0.3])), _e(torch.tensor([1.0, 2.0, 3.0]))
    total = alpha.sum().expand(3)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        y = torch._dirichlet_grad(x, alpha, total)
    msgs = _ember_warnings(rec)
    assert len(msgs) == 1 and "aten::_dirichlet_grad" in msgs[0]
    torch.testing.assert_close(y.cpu(), torch._dirichlet_grad(x.cpu(), alpha.cpu(), total.cpu()))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch._dirichlet_grad(x, alpha, total)
        torch_ember.reset_fallback_stats()
        torch._dirichlet_grad(x, alpha, total)
    assert _ember_warnings(rec) == []


def test_pytest_warns_names_op():
    # histogram has no ember kernel: it runs on the CPU, warning once per process (so this
    # test needs an op no earlier test runs).
    x = _e(torch.linspace(0.1, 2.0, 7))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with pytest.warns(UserWarning, match=r"aten::histogram"):
            torch.histogram(x, bins=4)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        y = torch.histogram(x, bins=4)
    assert _ember_warnings(rec) == []
    torch.testing.assert_close(y.hist.cpu(), torch.histogram(x.cpu(), bins=4).hist)


def test_silent_mode_counts_without_warning():
    assert torch_ember.set_fallback_mode("silent") == "warn"
    x = _e(torch.linspace(0.1, 0.9, 9).view(3, 3))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch.hash_tensor(x)
        torch.hash_tensor(x)
    assert _ember_warnings(rec) == []
    assert torch_ember.fallback_report().to_dict()["aten::hash_tensor.out"]["calls"] == 2
    # The op was never warned about: back in warn mode it warns on first use.
    torch_ember.set_fallback_mode("warn")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch.hash_tensor(x)
    assert len(_ember_warnings(rec)) == 1


def test_error_mode_raises():
    assert torch_ember.set_fallback_mode("error") == "warn"
    a = _e(torch.ones(3))
    with pytest.raises(NotImplementedError,
                       match=r"operator 'ember_fallback_test::refused'.*EMBER_FALLBACK"):
        _refused(a)
    # Native ops still work.
    a.fill_(2)
    assert a.cpu().tolist() == [2.0, 2.0, 2.0]
    assert a.to("ember:1").view(3, 1).t().cpu().tolist() == [[2.0, 2.0, 2.0]]
    assert torch_ember.fallback_report() == []
    assert torch_ember.set_fallback_mode("warn") == "error"
    torch.testing.assert_close(_refused(a).cpu(), torch.special.erfcx(torch.full((3,), 2.0)), **EXACT)


def test_set_fallback_mode_validates():
    with pytest.raises(ValueError, match="'warn', 'silent' or 'error'"):
        torch_ember.set_fallback_mode("loud")
    assert torch_ember.set_fallback_mode("warn") == "warn"


# --- report -----------------------------------------------------------------------------------

def test_report_counts_calls_and_bytes():
    a = _e(torch.randn(1000, dtype=torch.bfloat16))
    b = _e(torch.randn(1000, dtype=torch.bfloat16))
    for _ in range(3):
        torch.nextafter(a, b, out=torch.empty_like(a))
    _counted(a.float())
    report = torch_ember.fallback_report()
    d = report.to_dict()
    rec = d["aten::nextafter.out"]
    assert rec["calls"] == 3
    assert rec["bytes_to_host"] >= 3 * 4000
    assert rec["bytes_to_device"] >= 3 * 2000
    assert rec["seconds"] >= 0
    assert d[_NS + "counted"]["calls"] == 1
    assert report[0].op == "aten::nextafter.out" and report[0].calls == 3  # most-called first
    assert report.total_calls == sum(r.calls for r in report) == 4
    assert report.bytes_to_host == sum(r.bytes_to_host for r in report)
    assert report.bytes_to_device == sum(r.bytes_to_device for r in report)
    text = str(report)
    assert "aten::nextafter.out" in text and _NS + "counted" in text
    assert "4 calls" in text
    assert repr(report) == text


def test_report_is_sorted_by_calls_then_name():
    x = _e(torch.randn(10))
    _sort_a(x)
    for _ in range(2):
        _sort_c(x)
        _sort_b(x)
    ops = [r.op for r in torch_ember.fallback_report()]
    assert ops == [_NS + "sort_b", _NS + "sort_c", _NS + "sort_a"]


def test_report_counts_bytes_of_large_tensors():
    a = _e(torch.randn(256, 256))
    torch_ember.reset_fallback_stats()
    _large(a)
    rec = torch_ember.fallback_report().to_dict()[_NS + "large"]
    assert rec["bytes_to_host"] >= 256 * 256 * 4
    assert rec["bytes_to_device"] >= 256 * 256 * 4


def test_reset_clears_report():
    _reset(_e(torch.ones(2)))
    assert torch_ember.fallback_report().total_calls >= 1
    torch_ember.reset_fallback_stats()
    report = torch_ember.fallback_report()
    assert report == [] and report.total_calls == 0 and report.to_dict() == {}
    assert "no op fell back" in str(report)


def test_native_ops_are_not_reported():
    x = torch.empty(100, device="ember")
    x.fill_(1)
    x.zero_()
    y = x.view(10, 10).t()[2:].unfold(0, 2, 1)
    torch.empty_strided((2, 2), (1, 2), device="ember")
    x.cpu()
    torch.ones(3).to("ember").to(torch.float16).to("ember:1")
    x.resize_(200)
    x[3].item()
    del y
    assert torch_ember.fallback_report() == []


# --- semantics: exactly like CPU --------------------------------------------------------------

BINARY_CASES = {
    "add": lambda a, b: torch.add(a, b, alpha=2),
    "sub_scalar": lambda a, b: a - 1.5,
    "rsub": lambda a, b: 3 - a,
    "mul_int_scalar": lambda a, b: a * 3,
    "div": lambda a, b: a / (b.abs() + 1),
    "floor_div": lambda a, b: torch.div(a, 0.7, rounding_mode="floor"),
    "pow": lambda a, b: a.abs() ** 0.5,
    "matmul": lambda a, b: a @ b.t(),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "cat": lambda a, b: torch.cat([a, b], dim=1),
    "stack": lambda a, b: torch.stack([a, b]),
    "sum": lambda a, b: a.sum(dim=1, keepdim=True),
    "mean_all": lambda a, b: a.mean(),
    "cumsum": lambda a, b: a.cumsum(0),
    "softmax": lambda a, b: torch.softmax(a, dim=-1),
    "clamp": lambda a, b: a.clamp(-0.5, 0.5),
    "index": lambda a, b: a[torch.tensor([2, 0], device=a.device)],
    "masked": lambda a, b: a[a > 0],
    "gather": lambda a, b: a.gather(1, torch.tensor([[0], [3], [2]], device=a.device)),
    "argmax": lambda a, b: a.argmax(dim=1),
    "eq": lambda a, b: a == b,
    "tril": lambda a, b: a.tril(),
    "clone": lambda a, b: a.clone(),
    "contiguous": lambda a, b: a.t().contiguous(),
    "flip": lambda a, b: a.flip(0),
    "roll": lambda a, b: a.roll(1, 1),
    "repeat": lambda a, b: a.repeat(2, 1),
    "topk": lambda a, b: a.topk(2, dim=1).values,
}


@pytest.mark.parametrize("name", sorted(BINARY_CASES))
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_ops_match_cpu(name, layout):
    fn = BINARY_CASES[name]
    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    if layout == "transposed":
        a, b = torch.randn(4, 3).t(), torch.randn(4, 3).t()
        assert not a.is_contiguous()
    expected = fn(a, b)
    got = fn(_e(a) if layout == "contiguous" else _e(a.t()).t(),
             _e(b) if layout == "contiguous" else _e(b.t()).t())
    assert got.device.type == "ember"
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool,
                                   torch.float16, torch.bfloat16, torch.float64])
def test_dtypes_and_promotion(dtype):
    a = (torch.arange(12).reshape(3, 4) % 5).to(dtype)
    b = (torch.arange(12).reshape(3, 4) % 3).to(dtype)
    # Ops with no ember kernel of their own. Integer and bool results of integer and bool inputs
    # are the CPU's bit for bit; floating results (those inputs promoted: xlog1py, log_ndtr) and
    # floating inputs run as PyTorch's decompositions (eager_decompositions.py) on ember's own
    # log1p and friends, equal up to rounding.
    half = dict(rtol=1e-2, atol=1e-2) if dtype in (torch.float16, torch.bfloat16) else {}
    cases = [
        lambda a, b: torch.heaviside(a, b),  # dtype kept
        lambda a, b: torch.fmod(a, 3),  # an int scalar keeps the dtype (bool promotes to int64)
        lambda a, b: torch.special.xlog1py(a, 1.5),  # integers promote to float
        lambda a, b: a & b if dtype in (torch.bool, torch.int64, torch.int32, torch.int8,
                                        torch.uint8) else torch.nextafter(a, b),
        lambda a, b: torch.nansum(a),  # integers accumulate in int64
        lambda a, b: torch.aminmax(a).max,
        lambda a, b: torch.signbit(a),  # bool result
        lambda a, b: torch.special.log_ndtr(a.to(torch.float32)),
        lambda a, b: torch.copysign(a, b),
    ]
    for fn in cases:
        expected = fn(a, b)
        got = fn(_e(a), _e(b))
        assert got.dtype == expected.dtype
        tol = half if got.dtype.is_floating_point else EXACT
        torch.testing.assert_close(got.cpu(), expected, equal_nan=True, **tol)


def test_result_of_mixed_cpu_scalar_tensor():
    a = _e(torch.arange(4.0))
    # A CPU 0-dim tensor is allowed with device tensors.
    got = torch.nextafter(a, torch.tensor(2.0))
    expected = torch.nextafter(torch.arange(4.0), torch.tensor(2.0))
    torch.testing.assert_close(got.cpu(), expected, **EXACT)
    assert got.device.type == "ember"


def test_mixing_cpu_and_ember_tensors_fails():
    with pytest.raises(RuntimeError, match="[Ee]xpected all tensors to be on the same device"):
        torch.nextafter(_e(torch.ones(3)), torch.ones(3), out=_e(torch.empty(3)))


@pytest.mark.parametrize("name, fn", [
    ("polygamma_", lambda x: x.polygamma_(1)),
    ("xlogy_tensor", lambda x: x.xlogy_(torch.arange(4.0, device=x.device))),
    ("clamp_", lambda x: x.clamp_(min=3)),
    ("index_put_", lambda x: x.index_put_((torch.tensor([0, 2], device=x.device),),
                                          torch.tensor(-1.0, device=x.device))),
    ("masked_fill_", lambda x: x.masked_fill_(x > 5, 0.5)),
    ("setitem", lambda x: x.__setitem__((slice(None), 1), 9.0)),
    ("nextafter_", lambda x: _nudge_(x)),
    ("copy_scatter", lambda x: x.scatter_(1, torch.tensor([[1], [0], [3]], device=x.device), 7.0)),
])
@pytest.mark.parametrize("target", ["whole", "transposed-view", "strided-view"])
def test_in_place_matches_cpu(name, fn, target):
    select = {
        "whole": lambda x: x,
        "transposed-view": lambda x: x.t().t()[:, :],
        "strided-view": lambda x: x.view(6, 4)[::2],
    }[target]
    cpu = torch.arange(24.0).reshape(6, 4)
    ember = _e(cpu)
    v_cpu, v = select(cpu), select(ember)
    r_cpu, r = fn(v_cpu), fn(v)
    if r_cpu is v_cpu:
        assert r is v  # in-place ops return self
    torch.testing.assert_close(ember.cpu(), cpu, **EXACT)


def test_in_place_on_transposed_view():
    cpu = torch.arange(12.0).reshape(3, 4)
    ember = _e(cpu)
    cpu.t().xlogy_(torch.arange(3.0))
    ember.t().xlogy_(_e(torch.arange(3.0)))
    torch.testing.assert_close(ember.cpu(), cpu, **EXACT)


def test_in_place_on_view_writes_through_to_base():
    cpu = torch.arange(6.0).reshape(2, 3)
    x = _e(cpu)
    for fn in (lambda t: _nudge_(t[0]), lambda t: _nudge_(t[:, 1], -1e6),
               lambda t: _nudge_(t.diagonal(), -1e6)):
        before = x.cpu()
        fn(x)
        fn(cpu)
        assert not torch.equal(x.cpu(), before)
        torch.testing.assert_close(x.cpu(), cpu, **EXACT)


def test_in_place_keeps_identity_and_storage():
    x = _e(torch.ones(5))
    ptr = x.data_ptr()
    y = _nudge_(x)
    assert y is x and x.data_ptr() == ptr


@pytest.mark.parametrize("out_shape", [(4,), (0,), (2, 2)], ids=["right", "empty", "wrong"])
def test_out_variant(out_shape):
    a, b = torch.arange(4.0), torch.full((4,), 0.5)
    out = torch.empty(out_shape, device="ember")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
        r = torch.nextafter(_e(a), _e(b), out=out)
    assert r is out
    assert out.shape == (4,)
    torch.testing.assert_close(out.cpu(), torch.nextafter(a, b), **EXACT)


def test_out_variant_wrong_numel_is_resized():
    out = torch.empty(2, 3, device="ember")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
        torch.nextafter(_e(torch.arange(10.0)), _e(torch.ones(10)), out=out)
    assert out.shape == (10,)
    torch.testing.assert_close(out.cpu(), torch.nextafter(torch.arange(10.0), torch.ones(10)), **EXACT)


def test_out_variant_non_contiguous_out():
    out_cpu = torch.zeros(4, 3).t()
    out = torch.zeros(4, 3, device="ember").t()
    a = torch.arange(12.0).reshape(3, 4)
    torch.nextafter(a, a.t().t() + 1, out=out_cpu)
    torch.nextafter(_e(a), _e(a) + 1, out=out)
    assert out.stride() == out_cpu.stride()
    torch.testing.assert_close(out.cpu(), out_cpu, **EXACT)


def test_out_variant_dtype_mismatch_fails_like_cpu():
    a = torch.arange(4.0)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.nextafter(a, a, out=torch.empty(4, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.nextafter(_e(a), _e(a), out=torch.empty(4, dtype=torch.int64, device="ember"))


def test_out_variant_multiple_outputs():
    x = torch.randn(5, 4)
    mantissa = torch.empty(0, device="ember")
    exponent = torch.empty(0, dtype=torch.int32, device="ember")
    r = torch.frexp(_e(x), out=(mantissa, exponent))
    assert r[0] is mantissa and r[1] is exponent
    em, ee = torch.frexp(x)
    torch.testing.assert_close(mantissa.cpu(), em, **EXACT)
    torch.testing.assert_close(exponent.cpu(), ee, **EXACT)


@pytest.mark.parametrize("fn", [
    lambda x: torch.max(x, dim=0),
    lambda x: torch.min(x, dim=1, keepdim=True),
    lambda x: torch.sort(x, dim=1, descending=True),
    lambda x: torch.sort(x.t(), dim=0, stable=True),
    lambda x: torch.topk(x, 3, dim=0),
    lambda x: torch.var_mean(x, dim=1),
    lambda x: torch.std_mean(x),
    lambda x: torch.unique(x.round(), return_inverse=True, return_counts=True),
    lambda x: torch.linalg.qr(x[:4, :4]),
    lambda x: x.chunk(2),
], ids=["max", "min-keepdim", "sort", "sort-transposed", "topk", "var_mean", "std_mean",
        "unique", "qr", "chunk"])
def test_multiple_outputs(fn):
    torch.manual_seed(1)
    x = torch.randn(6, 5)
    expected = fn(x)
    got = fn(_e(x))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.device.type == "ember" and g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g.cpu(), e)


def test_fallback_ordered_after_queued_device_work():
    x = torch.zeros(1000, device="ember")
    torch.ember._sleep(100)
    x.fill_(3)  # native, queued behind the sleep
    y = _ordered(x)  # fallback: must see the fill
    torch.testing.assert_close(y.cpu(), torch.special.erfcx(torch.full((1000,), 3.0)), **EXACT)


def test_fallback_result_visible_to_later_native_work():
    x = torch.zeros(100, device="ember")
    torch.ember._sleep(50)
    x.fill_(1)
    x.nextafter_(torch.full((100,), 2.0, device="ember"))  # fallback in place
    x[:50].zero_()  # native, after the fallback's write-back
    expected = torch.full((100,), 1.0).nextafter_(torch.full((100,), 2.0))
    expected[:50] = 0
    torch.testing.assert_close(x.cpu(), expected, **EXACT)


def test_fallback_on_second_device():
    a = _e(torch.arange(5.0)).to("ember:1")
    b = torch.nextafter(a, a + 1)
    assert b.device == torch.device("ember:1")
    torch.testing.assert_close(b.cpu(), torch.nextafter(torch.arange(5.0), torch.arange(5.0) + 1), **EXACT)
    with torch.ember.device(1):
        c = torch.arange(3.0, device="ember")
    assert c.device == torch.device("ember:1")


def test_fallback_errors_surface_like_cpu():
    with pytest.raises(RuntimeError, match="size of tensor a \\(3\\) must match"):
        torch.nextafter(_e(torch.ones(3)), _e(torch.ones(4)), out=_e(torch.empty(3)))
    # take now runs as its decomposition (index_select on the device): like CUDA, an index out
    # of range is a device error, raised by the next synchronizing call.
    with pytest.raises((IndexError, RuntimeError), match="out of bounds|out of range"):
        torch.take(_e(torch.ones(3)), torch.tensor([5], device="ember"))
        torch.ember.synchronize()
    torch.ember.synchronize()


def test_factory_ops_fall_back_onto_ember():
    for fn in (lambda d: torch.arange(5, device=d), lambda d: torch.linspace(0, 1, 5, device=d),
               lambda d: torch.eye(3, device=d), lambda d: torch.full((2, 2), 7, device=d)):
        got = fn("ember")
        assert got.device.type == "ember"
        torch.testing.assert_close(got.cpu(), fn("cpu"), **EXACT)


# --- views keep aliasing ----------------------------------------------------------------------

VIEWS = {
    "t": lambda x: x.t(),
    "view": lambda x: x.view(4, 3),
    "slice": lambda x: x[1:],
    "unsqueeze": lambda x: x.unsqueeze(0),
    "expand": lambda x: x[:1].expand(5, 4),
    "diagonal": lambda x: x.diagonal(),
    "unfold": lambda x: x.unfold(0, 2, 1),
    "narrow": lambda x: x.narrow(1, 1, 2),
    "select": lambda x: x[1],
    "permute": lambda x: x.permute(1, 0),
    "squeeze": lambda x: x.unsqueeze(1).squeeze(1),
    "reshape": lambda x: x.reshape(12),
    "flatten": lambda x: x.flatten(),
    "as_strided": lambda x: x.as_strided((2, 2), (1, 4), 1),
    "unbind": lambda x: x.unbind(1)[2],
    "split": lambda x: x.split(2, dim=1)[1],
    "movedim": lambda x: x.movedim(0, 1),
    "step": lambda x: x[::2, 1::2],
    "alias": lambda x: torch.ops.aten.alias(x),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_alias_base(name):
    make = VIEWS[name]
    cpu = torch.arange(12.0).reshape(3, 4)
    x = _e(cpu)
    v = make(x)
    assert v._base is x
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    torch.testing.assert_close(v.cpu(), make(cpu), **EXACT)
    v.fill_(-1)  # native write through the view
    make(cpu).fill_(-1)
    torch.testing.assert_close(x.cpu(), cpu, **EXACT)
    if name not in ("expand", "unfold"):  # internal overlap: undefined for in-place math
        _nudge_(make(x))  # fallback write through the view
        _nudge_(make(cpu))
        torch.testing.assert_close(x.cpu(), cpu, **EXACT)
    x.add_(100)  # writes to the base show up in the view
    cpu.add_(100)
    torch.testing.assert_close(v.cpu(), make(cpu), **EXACT)


def test_view_as_real_aliases_complex():
    cpu = torch.complex(torch.arange(3.0), torch.zeros(3))
    z = _e(cpu)
    r = torch.view_as_real(z)
    assert r._base is z
    assert r.untyped_storage().data_ptr() == z.untyped_storage().data_ptr()
    r[:, 1].fill_(2)
    _nudge_(r[:, 0])  # fallback write through the view
    expected = torch.complex(_nudge_(torch.arange(3.0)), torch.full((3,), 2.0))
    torch.testing.assert_close(z.cpu(), expected, **EXACT)
    z.imag.fill_(-1)
    assert r[:, 1].cpu().tolist() == [-1.0, -1.0, -1.0]


def test_chained_views_alias_root():
    x = _e(torch.zeros(4, 6))
    v = x.t()[1:].unsqueeze(0).narrow(2, 1, 2)
    assert v._base is x
    v.fill_(5)
    expected = torch.zeros(4, 6)
    expected.t()[1:].unsqueeze(0).narrow(2, 1, 2).fill_(5)
    torch.testing.assert_close(x.cpu(), expected, **EXACT)


def test_in_place_on_expanded_view_fails_like_cpu():
    with pytest.raises(RuntimeError, match="single memory location"):
        _nudge_(torch.zeros(1, 4)[:1].expand(3, 4))
    with pytest.raises(RuntimeError, match="single memory location"):
        _nudge_(_e(torch.zeros(1, 4))[:1].expand(3, 4))


@pytest.mark.parametrize("layout", ["gaps", "transposed"])
@pytest.mark.parametrize("fn", ["det", "slogdet", "lu_factor"])
def test_fallback_keeps_strides_so_gradients_are_right(layout, fn):
    # The CPU kernel must see the input with its strides: linalg_det saves LU factors whose
    # meaning depends on the layout, and its backward reads them with the input's strides.
    torch.manual_seed(0)
    base = torch.randn(3, 4, 8, dtype=torch.float64)
    view = (lambda b: b[:, :, ::2]) if layout == "gaps" else (lambda b: b[:, :4, :4].mT)
    call = {"det": torch.linalg.det, "slogdet": lambda x: torch.linalg.slogdet(x)[1],
            "lu_factor": lambda x: torch.linalg.lu_factor(x)[0]}[fn]
    results = {}
    for dev in ("cpu", "ember"):
        b = base.to(dev).requires_grad_()
        out = call(view(b))
        (grad,) = torch.autograd.grad(out.sum(), b)
        results[dev] = (out.detach().cpu(), out.stride(), grad.cpu())
    torch.testing.assert_close(results["ember"][0], results["cpu"][0])
    assert results["ember"][1] == results["cpu"][1]  # the CPU kernel's output layout is kept
    torch.testing.assert_close(results["ember"][2], results["cpu"][2])


def test_refused_call_does_not_warn():
    # A call the CPU kernel refuses raises its own error with no fallback warning before it;
    # the op's first successful call still warns.
    # (bfloat16 nextafter_: ember computes nextafter in float32/float64 only.)
    a = _e(torch.tensor([4.0, 6.0, 9.0], dtype=torch.bfloat16))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="must match the size"):
            a.nextafter_(_e(torch.ones(4, dtype=torch.bfloat16)))
        with pytest.raises(RuntimeError, match="same device"):
            a.nextafter_(torch.ones(3, dtype=torch.bfloat16))
    assert _ember_warnings(rec) == []
    ref = a.cpu().nextafter_(a.cpu().flip(0))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        a.nextafter_(a.flip(0))
    assert len(_ember_warnings(rec)) == 1
    torch.testing.assert_close(a.cpu(), ref, rtol=0, atol=0)


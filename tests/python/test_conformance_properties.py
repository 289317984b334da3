"""The module_db and op-property halves of the conformance harness on a few modules and ops that
conform, and on deliberately broken ones: each check must be able to fail, not just pass. The
full runs (seconds for module_db, minutes for the properties) are `ember conformance --modules`
and `ember conformance --properties`."""
import copy
import math

import pytest
import torch
import torch_ember
from torch.testing import make_tensor
from torch_ember.conformance import modules, properties, report
from torch_ember.conformance import run as conformance

MODULES = ["nn.Linear", "nn.BatchNorm2d", "nn.LSTM", "nn.KLDivLoss", "nn.LazyConv1d",
           "nn.FractionalMaxPool2d", "nn.TransformerEncoderLayer"]
PROPERTY_OPS = ["add", "abs", "sum", "clamp", "where", "mul", "eq"]


def _fails(data):
    return "\n".join(f"{f['op']} [{f['dtype']} {f['pass']}]: {f['message']}\n    {f['sample']}"
                     for f in report.failures(data["results"]))


def _module_info(cls, make_inputs):
    from torch.testing._internal.common_modules import ModuleInfo

    return ModuleInfo(cls, module_inputs_func=make_inputs)


def _inputs(ctor_args, shape):
    from torch.testing._internal.common_modules import FunctionInput, ModuleInput

    def make(info, device, dtype, requires_grad, training, **kwargs):
        x = make_tensor(shape, device=device, dtype=dtype, requires_grad=requires_grad)
        return [ModuleInput(FunctionInput(*ctor_args), forward_input=FunctionInput(x))]
    return make


def _check_modules(*infos):
    rows = []
    conformance.check_all([(i, torch.float32) for i in infos], {"max_samples": 4, "op_time_limit": 30},
                          math.inf, rows.append, check_fn=modules.check_module_dtype)
    return rows


# --- module_db ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def module_run():
    return conformance.run(modules=MODULES, progress=False)


def test_modules_conform(module_run):
    assert not report.failures(module_run["results"]), _fails(module_run)
    rows = {r["op"]: r for r in module_run["results"]}
    assert set(rows) == set(MODULES) and module_run["meta"]["suite"] == "modules"
    for name, row in rows.items():
        for kind in ("forward", "backward"):
            assert row[kind]["status"] in ("native-pass", "fallback-pass"), (name, kind, row[kind])
            assert row[kind]["samples"] > 0
    # FractionalMaxPool2d has no ember kernel: it passes through the counted CPU fallback.
    assert rows["nn.FractionalMaxPool2d"]["forward"]["status"] == "fallback-pass"
    assert any("fractional_max_pool2d" in op for op in rows["nn.FractionalMaxPool2d"]["forward"]["fallback_ops"])
    assert module_run["summary"]["counts"]["backward"]["float32"]["fail"] == 0


def test_module_names_and_dtypes():
    db = modules.load_module_db()
    assert [m.name for m in modules.select_modules(db, ["Linear", "nn.ReLU"])] == ["nn.Linear", "nn.ReLU"]
    with pytest.raises(ValueError, match="not in module_db"):
        modules.select_modules(db, ["nn.NoSuchLayer"])
    with pytest.raises(ValueError, match="pass module names to --modules"):
        conformance.run(modules=True, ops=["add"], progress=False)
    data = conformance.run(modules=["nn.ReLU"], dtypes=["float64", "int64"], progress=False)
    status = {r["dtype"]: (r["forward"]["status"], r["backward"]["status"]) for r in data["results"]}
    assert status["float64"] == ("native-pass", "native-pass")
    assert status["int64"] == ("skipped", "skipped")  # module_db's modules are floating only


class _OffOnEmber(torch.nn.Linear):
    """A Linear whose output is one too large on ember: a wrong forward."""

    def forward(self, x):
        y = super().forward(x)
        return y + 1 if y.device.type == "ember" else y


class _SkewedGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2 + (1 if g.device.type == "ember" else 0)


class _WrongBackward(torch.nn.Module):
    """Right values, wrong input gradient on ember: only the backward pass may fail."""

    def forward(self, x):
        return _SkewedGrad.apply(x)


class _EmberStats(torch.nn.BatchNorm1d):
    """Batch norm whose running mean moves twice as far on ember: right output, wrong buffer."""

    def forward(self, x):
        y = super().forward(x)
        if x.device.type == "ember":
            with torch.no_grad():
                self.running_mean.mul_(2)
        return y


def test_module_checks_can_fail():
    fwd, bwd, stats = _check_modules(
        _module_info(_OffOnEmber, _inputs((3, 2), (4, 3))),
        _module_info(_WrongBackward, _inputs((), (4, 3))),
        _module_info(_EmberStats, _inputs((3,), (4, 3))))
    assert fwd["forward"]["status"] == "fail" and fwd["forward"]["native"]
    assert "not close" in fwd["forward"]["message"]
    assert bwd["forward"]["status"] == "native-pass"
    assert bwd["backward"]["status"] == "fail" and "grad of input[0]" in bwd["backward"]["message"]
    assert stats["forward"]["status"] == "fail" and "buffer running_mean" in stats["forward"]["message"]


def test_random_module_is_compared_by_shape():
    (row,) = _check_modules(_module_info(torch.nn.Dropout, _inputs((0.5,), (64,))))
    assert row["forward"]["status"] == "native-pass" and row["forward"]["samples"] == 1
    assert (row["backward"]["status"], row["backward"]["reason"]) == ("skipped", "random output")


# --- op properties ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def property_run():
    return conformance.run(ops=PROPERTY_OPS, properties=True, max_samples=3, progress=False)


def test_properties_conform(property_run):
    assert not report.failures(property_run["results"]), _fails(property_run)
    rows = {(r["op"], r["dtype"]): r for r in property_run["results"]}
    assert set(rows[("add", "float32")]) == {"op", "dtype", "out", "noncontiguous", "variants", "bool_bytes"}
    add = rows[("add", "float32")]
    assert all(add[k]["status"] == "native-pass" for k in ("out", "noncontiguous", "variants")), add
    assert add["bool_bytes"]["reason"] == "no bool tensor"
    assert rows[("sum", "bool")]["bool_bytes"]["status"] == "native-pass"
    assert rows[("where", "float32")]["bool_bytes"]["status"] == "native-pass"  # its condition
    assert rows[("where", "float32")]["out"]["status"] in ("native-pass", "fallback-pass")
    counts = property_run["summary"]["counts"]
    assert set(counts) == {"out", "noncontiguous", "variants", "bool_bytes"}
    assert sum(counts["out"]["float32"].values()) == len(conformance.select_ops(
        conformance.load_op_db(), PROPERTY_OPS))


def test_property_report(property_run, tmp_path):
    text = report.format_summary(property_run)
    assert text.startswith("ember OpInfo property conformance") and "float32 out" in text
    report.write_markdown(property_run, tmp_path / "p.md")
    md = (tmp_path / "p.md").read_text()
    assert "| op | dtype | out | noncontiguous | variants | bool_bytes | fell back | detail |" in md
    from torch_ember.kb import store
    assert store.detect_kind(property_run) == "conformance-properties"
    assert {i["name"] for i in store.items_from("conformance-properties", property_run)} >= {
        "add float32 out", "add bool bool_bytes"}


def _op(name, **attrs):
    (base,) = [op for op in conformance.load_op_db() if conformance.full_name(op) == name]
    op = copy.copy(base)
    for key, value in attrs.items():
        setattr(op, key, value)
    return op


def _on_ember(x):
    return isinstance(x, torch.Tensor) and x.device.type == "ember"


def _check_properties(op, dtype, which):
    rows = []
    conformance.check_all([(op, dtype)], {"max_samples": 2, "op_time_limit": 30, "properties": [which]},
                          math.inf, rows.append, check_fn=properties.check_properties)
    return rows[0][which]


def _add_accepting_cpu_out(a, b, *args, out=None, **kwargs):
    if out is not None and _on_ember(a) and not _on_ember(out):  # what a lax kernel would do
        return out.copy_(torch.add(a, b, *args, **kwargs).cpu())
    return torch.add(a, b, *args, out=out, **kwargs)


def _add_ignoring_out_size(a, b, *args, out=None, **kwargs):
    if out is not None and _on_ember(a):  # writes what fits, never resizes
        r = torch.add(a, b, *args, **kwargs)
        return out if out.shape != r.shape else out.copy_(r)
    return torch.add(a, b, *args, out=out, **kwargs)


def _abs_reading_storage(x, *args, **kwargs):
    if _on_ember(x) and not x.is_contiguous():  # ignores the strides: reads the gaps
        x = torch.as_strided(x, x.shape, torch.empty(x.shape).stride(), x.storage_offset())
    return torch.abs(x, *args, **kwargs)


def _not_from_bytes(x, *args, **kwargs):
    if _on_ember(x):  # flips the low bit of the byte: wrong for True stored as 2..255
        return (x.view(torch.uint8) ^ 1).view(torch.bool)
    return torch.logical_not(x)


def test_property_checks_can_fail():
    cpu_out = _check_properties(_op("add", op=_add_accepting_cpu_out), torch.float32, "out")
    assert cpu_out["status"] == "fail" and "CPU out= with ember inputs was accepted" in cpu_out["message"]
    size = _check_properties(_op("add", op=_add_ignoring_out_size), torch.float32, "out")
    assert size["status"] == "fail" and size["message"].startswith("wrong size out=")
    strided = _check_properties(_op("abs", op=_abs_reading_storage), torch.float32, "noncontiguous")
    assert strided["status"] == "fail" and "not close" in strided["message"]
    method = _check_properties(_op("abs", method_variant=lambda x: torch.abs(x) + _on_ember(x)),
                               torch.float32, "variants")
    assert method["status"] == "fail" and method["message"].startswith("method:")
    flip = _check_properties(_op("logical_not", op=_not_from_bytes), torch.bool, "bool_bytes")
    assert flip["status"] == "fail" and flip["native"]


def test_bool_bytes_the_cpu_fails_too_is_not_embers():
    """An op that reads the raw bytes on every device changes its CPU result too: not counted
    against ember."""
    raw = _op("logical_not", op=lambda x: (x.view(torch.uint8) ^ 1).view(torch.bool))
    res = _check_properties(raw, torch.bool, "bool_bytes")
    assert res["status"] == "skipped" and "CPU's result changes" in res["reason"]


def test_properties_are_selectable():
    data = conformance.run(ops=["abs"], properties=["out"], dtypes=["float32"], progress=False,
                           max_samples=1)
    (row,) = data["results"]
    assert set(row) == {"op", "dtype", "out"} and row["out"]["status"] == "native-pass"
    with pytest.raises(ValueError, match="unknown properties"):
        conformance.run(ops=["abs"], properties=["outs"], progress=False)
    with pytest.raises(ValueError, match="separate runs"):
        conformance.run(ops=["abs"], properties=True, compiled=True, progress=False)


def test_isolated_properties_and_replay(tmp_path):
    """The CLI runs each suite in child processes; a failure's replay names the suite."""
    from torch_ember import cli

    rc = cli.main(["conformance", "--properties", "variants", "--ops", "abs", "--dtypes", "float32",
                   "--max-samples", "1", "--no-progress", "--json", str(tmp_path / "p.json")])
    assert rc == 0
    fail = {"status": "fail", "message": "m", "sample_index": 2}
    rows = [{"op": "abs", "dtype": "float32", "variants": fail}]
    (f,) = report.failures(rows, mode="properties")
    assert "--properties variants --ops abs --dtypes float32" in f["replay"]
    assert f["replay"].endswith("--max-samples 3")
    (f,) = report.failures([{"op": "nn.Linear", "dtype": "float32", "backward": fail}], mode="modules")
    assert "--modules nn.Linear" in f["replay"]


def test_cli_help_names_the_new_runs(capsys):
    with pytest.raises(SystemExit):
        conformance.main(["--help"])
    out = capsys.readouterr().out
    assert "--modules" in out and "--properties" in out and "bool_bytes" in out
    with pytest.raises(SystemExit) as exit_:  # one kind of run at a time
        conformance.main(["--modules", "--properties", "--no-progress"])
    assert exit_.value.code == 2


def test_fallback_mode_restored_after_modules():
    old = torch_ember.set_fallback_mode("warn")
    try:
        conformance.run(modules=["nn.ReLU"], progress=False, backward=False)
        assert torch_ember.set_fallback_mode("warn") == "warn"
    finally:
        torch_ember.set_fallback_mode(old)


_CRASH_ON_ABS_ = """
# Loaded by every interpreter started with this directory on PYTHONPATH: in-place abs on ember
# kills the process the way a crashing kernel would.
import os, signal
import torch
_abs_ = torch.Tensor.abs_
def _crashing_abs_(self, *args, **kwargs):
    if self.device.type == "ember":
        os.kill(os.getpid(), signal.SIGSEGV)
    return _abs_(self, *args, **kwargs)
torch.Tensor.abs_ = _crashing_abs_
"""


def test_crash_in_one_property_keeps_the_others(tmp_path, monkeypatch):
    import os

    (tmp_path / "sitecustomize.py").write_text(_CRASH_ON_ABS_)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    data = conformance.run(ops=["abs", "neg"], properties=["out", "variants"], dtypes=["float32"],
                           isolate=True, max_samples=1, progress=False)
    abs_, neg = data["results"]
    assert abs_["out"]["status"] == "native-pass"  # finished before the crash: kept
    assert abs_["variants"]["status"] == "fail" and abs_["variants"]["crash"]
    assert "SIGSEGV" in abs_["variants"]["message"]
    assert neg["variants"]["status"] in ("native-pass", "fallback-pass")  # a fresh child went on
    assert [(f["op"], f["pass"]) for f in data["summary"]["crashes"]] == [("abs", "variants")]

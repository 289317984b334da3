"""The OpInfo conformance harness on a fixed set of ops with native ember kernels: none may fail,
forward or backward. The full op_db run (minutes) is `python -m torch_ember.cli conformance`."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch_ember
from torch_ember.conformance import check, report
from torch_ember.conformance import run as conformance

# Ops whose main kernels are native (some samples may still fall back, e.g. int64 matmul).
NATIVE_OPS = [
    "add", "mul", "sub", "div", "exp", "sigmoid", "tanh", "sum", "mean", "amax", "softmax",
    "log_softmax", "nn.functional.layer_norm", "mm", "bmm", "addmm", "where", "clamp", "cat",
    "index_select", "tril", "cumsum", "lerp", "addcmul", "nn.functional.cross_entropy",
    "nn.functional.nll_loss", "linalg.vector_norm", "var", "argmax",
]
DTYPES = ["float32", "bfloat16", "int64"]


def _describe(fails):
    return "\n".join(f"{f['op']} [{f['dtype']} {f['pass']}] native={f['native']}: {f['message']}\n"
                     f"    sample #{f['sample_index']}: {f['sample']}\n    replay: {f['replay']}"
                     for f in fails)


@pytest.fixture(scope="module")
def native_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance")
    paths = {"json": out / "conformance.json", "markdown": out / "conformance.md"}
    data = conformance.run(ops=NATIVE_OPS, dtypes=DTYPES, budget=120, max_samples=8,
                           progress=False, json_path=paths["json"], markdown_path=paths["markdown"])
    return data, paths


def test_native_ops_conform(native_run):
    data, _ = native_run
    fails = report.failures(data["results"])
    assert not fails, f"{len(fails)} conformance failures:\n{_describe(fails)}"


def test_every_op_and_dtype_ran(native_run):
    data, _ = native_run
    results = data["results"]
    assert {r["op"].split(".")[0] for r in results} >= {"add", "mm", "softmax"}
    budget = [r for r in results if r["forward"].get("reason") == "time budget"]
    assert not budget, f"ran out of time: {[r['op'] for r in budget]}"
    by_key = {(r["op"], r["dtype"]): r for r in results}
    assert by_key[("add", "float32")]["forward"]["status"] == "native-pass"
    assert by_key[("add", "float32")]["backward"]["status"] in ("native-pass", "fallback-pass")
    # Softmax has no int64 variant on the CPU: skipped with a reason, not failed.
    assert by_key[("softmax", "int64")]["forward"] == {"status": "skipped",
                                                       "reason": "dtype unsupported"}


def test_reports_written(native_run):
    data, paths = native_run
    written = json.loads(paths["json"].read_text())
    assert written["summary"] == json.loads(json.dumps(data["summary"]))
    # One row per OpInfo (variants such as div.trunc_rounding included) and dtype.
    opinfos = conformance.select_ops(conformance.load_op_db(), NATIVE_OPS)
    assert len(written["results"]) == len(opinfos) * len(DTYPES)
    md = paths["markdown"].read_text()
    assert md.startswith("# ember OpInfo conformance")
    assert "| add | float32 |" in md


def test_fallback_mode_restored():
    old = torch_ember.set_fallback_mode("warn")
    try:
        conformance.run(ops=["add"], dtypes=["float32"], backward=False, progress=False)
        assert torch_ember.set_fallback_mode("warn") == "warn"
    finally:
        torch_ember.set_fallback_mode(old)


def test_wrong_kernel_is_a_native_failure(monkeypatch):
    """A kernel that computes the wrong thing natively is reported as a native failure, and an
    error raised only on ember as a failure too."""
    real = torch.Tensor.to

    def skewed(self, *args, **kwargs):  # every copy to ember adds one: values go wrong natively
        out = real(self, *args, **kwargs)
        if out.device.type == "ember" and self.device.type == "cpu" and out.is_floating_point():
            out = out + 1
        return out

    monkeypatch.setattr(torch.Tensor, "to", skewed)
    data = conformance.run(ops=["neg"], dtypes=["float32", "int64"], backward=False,
                           progress=False, max_samples=2)
    status = {r["dtype"]: r["forward"]["status"] for r in data["results"]}
    assert status == {"float32": "fail", "int64": "native-pass"}
    (fail,) = data["summary"]["native_failures"]
    assert fail["op"] == "neg" and "not close" in fail["message"]


def test_float64_special_functions_are_judged_against_mpmath(monkeypatch):
    """The CPU's float64 Bessel J0/Y1 are polynomial fits off by ~2e-7 near their zeros; ember's
    exact values pass because they are closer to mpmath's. A result farther from it still fails."""
    data = conformance.run(ops=["special.bessel_j0", "special.bessel_y1"], dtypes=["float64"],
                           backward=False, progress=False, max_samples=2)
    assert [r["forward"]["status"] for r in data["results"]] == ["native-pass"] * 2
    real = torch.Tensor.to

    def skewed(self, *args, **kwargs):  # inputs moved to ember shift by 1e-6: J0 moves by ~1e-7
        out = real(self, *args, **kwargs)
        return out + 1e-6 if out.device.type == "ember" and self.device.type == "cpu" else out

    monkeypatch.setattr(torch.Tensor, "to", skewed)
    data = conformance.run(ops=["special.bessel_j0"], dtypes=["float64"], backward=False,
                           progress=False, max_samples=2)
    assert data["results"][0]["forward"]["status"] == "fail"


def test_random_outputs_are_compared_by_shape():
    """Ops that draw random numbers (directly, or through OpInfo's seeded wrapper as attention's
    dropout does) cannot match the CPU's generator: detected, and only shapes are compared."""
    x = torch.ones(64)
    assert check._cpu_call(lambda: torch.nn.functional.dropout(x, 0.5))[2]
    assert not check._cpu_call(lambda: torch.nn.functional.dropout(x, 0.5, training=False))[2]
    (sdpa,) = conformance.select_ops(conformance.load_op_db(),
                                     ["nn.functional.scaled_dot_product_attention"])
    q = torch.randn(2, 3, 8)
    assert check._cpu_call(lambda: sdpa(q, q, q, dropout_p=0.5))[2]
    assert not check._cpu_call(lambda: sdpa(q, q, q, dropout_p=0.0))[2]

    data = conformance.run(ops=["nn.functional.dropout"], dtypes=["float32"], progress=False)
    (row,) = data["results"]
    assert row["forward"]["status"] in ("native-pass", "fallback-pass")
    assert row["backward"] == {"status": "skipped", "reason": "random output"}


_CRASH_ON_EXP = textwrap.dedent("""
    # Loaded by every interpreter started with this directory on PYTHONPATH: exp on ember kills
    # the process the way a crashing kernel would.
    import os, signal
    import torch
    _exp = torch.exp
    def _crashing_exp(x, *args, **kwargs):
        if x.device.type == "ember":
            os.kill(os.getpid(), signal.SIGSEGV)
        return _exp(x, *args, **kwargs)
    torch.exp = _crashing_exp
""")


def test_crash_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    (tmp_path / "sitecustomize.py").write_text(_CRASH_ON_EXP)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    data = conformance.run(ops=["exp", "neg"], dtypes=["float32"], isolate=True,
                           max_samples=2, progress=False)
    exp, neg = data["results"]
    assert exp["op"] == "exp" and neg["op"] == "neg"
    assert exp["forward"]["status"] == "fail" and exp["forward"]["crash"]
    assert "SIGSEGV" in exp["forward"]["message"]
    assert exp["forward"]["sample_index"] == 0 and "Tensor[size=" in exp["forward"]["sample"]
    assert exp["backward"] == {"status": "skipped", "reason": "forward crashed the process"}
    # A fresh child took over after the crash.
    assert neg["forward"]["status"] == "native-pass"
    assert neg["backward"]["status"] in ("native-pass", "fallback-pass")
    assert [(f["op"], f["pass"]) for f in data["summary"]["crashes"]] == [("exp", "forward")]
    assert not data["summary"]["native_failures"]


def test_unknown_op_and_dtype_are_rejected():
    with pytest.raises(ValueError, match="not in op_db"):
        conformance.run(ops=["no_such_op"], progress=False)
    with pytest.raises(ValueError, match="unknown dtype"):
        conformance.run(ops=["add"], dtypes=["float33"], progress=False)


def test_time_budget_skips_the_rest():
    data = conformance.run(ops=["add", "mul"], dtypes=["float32"], budget=1e-9, progress=False)
    assert all(r["forward"] == {"status": "skipped", "reason": "time budget"}
               for r in data["results"])


def test_cli_help_and_dispatch(capsys):
    from torch_ember import cli

    for argv in (["--help"], ["conformance", "--help"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "conformance" in out and "--budget" in out and "native-pass" in out
    # `python -m torch_ember.conformance` reaches the same parser.
    proc = subprocess.run([sys.executable, "-m", "torch_ember.conformance", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--max-samples" in proc.stdout


def test_cli_runs_and_writes(tmp_path, capsys):
    from torch_ember import cli

    path = tmp_path / "r.json"
    rc = cli.main(["conformance", "--ops", "add", "--dtypes", "float32", "--no-progress",
                   "--no-backward", "--no-isolate", "--json", str(path)])
    assert rc == 0
    assert json.loads(path.read_text())["results"][0]["forward"]["status"] == "native-pass"
    assert "native-pass" in capsys.readouterr().out


# --- compiled: the same op database through torch.compile(backend="ember", fullgraph=True) -----
# Native-pass in eager, so each must be compiled-pass: fused lowerings (add, softmax, ...) and
# library steps (cumsum, gather, sort, index_select, nonzero, ...) alike.
COMPILED_OPS = ["add", "mul", "exp", "sum", "amax", "softmax", "nn.functional.layer_norm", "mm", "addmm", "where",
                "cat", "index_select", "cumsum", "gather", "sort", "topk", "nn.functional.pad", "any", "flip",
                "roll", "tril", "scatter_add", "index_add", "nonzero", "nn.functional.cross_entropy"]


@pytest.fixture(scope="module")
def compiled_run():
    return conformance.run(ops=COMPILED_OPS, dtypes=["float32", "int64"], budget=300, max_samples=2,
                           progress=False, compiled=True)


def test_compiled_native_ops_conform(compiled_run):
    bad = [f for f in report.failures(compiled_run["results"], compiled=True)
           # replicate/reflect/circular pad backward have no ember kernel: a refused compile is
           # the contract there, not a failure of coverage.
           if not (f["status"] == "compile-error" and "_pad" in f["message"] and "no ember kernel" in f["message"])]
    assert not bad, f"{len(bad)} compiled conformance failures:\n{_describe(bad)}"
    counts = compiled_run["summary"]["forward"]["float32"]
    assert counts["compiled-pass"] >= len(COMPILED_OPS) and counts["wrong"] == counts["crash"] == 0


def test_compile_error_is_classified():
    data = conformance.run(ops=["nn.functional.multilabel_margin_loss"], dtypes=["float32"], max_samples=1, progress=False, compiled=True,
                           backward=False)
    (row,) = data["results"]
    assert row["forward"]["status"] == "compile-error"
    assert "aten.multilabel_margin_loss_forward.default" in row["forward"]["message"]

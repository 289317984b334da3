"""`ember kb`: the knowledge base of runs. Two synthetic model sweeps (a model that newly fails, one
that newly passes, fallbacks that appear and go away, compile times that move by 40 % and by 6 %),
two benchmark runs (throughput up 30 % and 5 %) and a conformance run are recorded into a
temporary database; list, search (FTS5 and the plain fallback), compare, add, the explanation
table, the HTML report, and the runners' recording hooks are checked against them. The report is
also rendered in headless Chromium when one is installed."""
import json
import shutil
import subprocess
import sys

import pytest

from torch_ember import kb
from torch_ember.kb import cli, explain, store


def _model(name, *, eager="pass", compiled="pass", cold=10.0, warm=2.0, fallback=None, failure=None,
           category=None, built=True, eager_s=0.5):
    rec = {"model": name, "task": "causal", "built": built, "eager": eager, "compiled": compiled,
           "parameters": 20000, "eager_seconds": eager_s, "seconds": 20.0,
           "eager_parity": {"loss_rel": 1e-7, "grad_rel": 3e-7, "ok": eager == "pass"},
           "fallback_ops": fallback or {}}
    if compiled != "skip":
        rec.update(compile_cold_seconds=cold, compile_warm_seconds=warm,
                   compiled_parity={"loss_rel": 0.0, "grad_rel": 5e-7, "ok": compiled == "pass"})
    if failure:
        rec.update(failure=failure, category=category)
    return rec


REFUSED = ("compiled: CompileError: ember compiler cannot translate 1 op(s): op 'aten.frobnicate.default' "
           "at model.py:12. These ops have no ember kernel (in eager mode they run on the CPU).")
MISSING = "eager: NotImplementedError: ember: operator 'aten::_frob' has no ember kernel"


def sweep_a():
    return {"meta": {"torch": "2.13.0", "transformers": "5.0", "started": "2026-01-01 10:00:00"},
            "summary": {"models": 6, "built": 5},
            "records": [_model("llama"), _model("bert", cold=5.0),
                        _model("gpt2", compiled="fail", failure=REFUSED, category="unsupported op"),
                        _model("t5", fallback={"aten::nonzero": 3}), _model("opt", eager_s=0.01),
                        _model("mistral", cold=10.0),
                        _model("blip", built=False, eager="skip", compiled="skip", category="could not build",
                               failure="ValueError: vision_config is required"),
                        _model("phi", eager="fail", compiled="skip", failure=MISSING, category="error")]}


def sweep_b():
    return {"meta": {"torch": "2.13.0", "transformers": "5.0", "started": "2026-01-02 10:00:00"},
            "summary": {"models": 6, "built": 5},
            "records": [_model("llama", eager="fail", failure="eager: values differ from CPU ({...})",
                               category="wrong values"),
                        _model("bert", cold=5.3),  # +6 %: noise
                        _model("gpt2"), _model("t5"),
                        _model("opt", fallback={"aten::unique": 1}, eager_s=0.02),  # +100 %, but 10 ms
                        _model("mistral", cold=14.0),  # +40 %
                        _model("blip", built=False, eager="skip", compiled="skip", category="could not build",
                               failure="ValueError: vision_config is required"),
                        _model("phi", eager="fail", compiled="skip", failure=MISSING, category="error")]}


def bench(up_fp32, up_bf16):
    return {"bench": "train_step", "baseline": "PyTorch CPU eager",
            "results": [{"dtype": "float32", "cpu_tokens_per_s": 900, "ember_tokens_per_s": up_fp32},
                        {"dtype": "bfloat16", "cpu_tokens_per_s": 800, "ember_tokens_per_s": up_bf16}]}


CONFORMANCE = {
    "meta": {"torch": "2.13.0", "torch_ember": "0.1.0", "dtypes": ["float32", "bfloat16"], "ops": 3,
             "compiled": False, "seconds": 1.0},
    "summary": {},
    "results": [
        {"op": "add", "dtype": "float32", "forward": {"status": "native-pass", "samples": 8, "fallback_ops": []},
         "backward": {"status": "fallback-pass", "samples": 8, "fallback_ops": ["aten::sum.IntList_out"]}},
        {"op": "mm", "dtype": "bfloat16",
         "forward": {"status": "fail", "samples": 2, "message": "Tensor-likes are not close! Mismatched elements: 3",
                     "native": True, "fallback_ops": []}},
        {"op": "sort", "dtype": "float32", "forward": {"status": "skipped", "reason": "dtype unsupported"}},
    ],
}


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "kb.sqlite"
    monkeypatch.setenv("EMBER_KB", str(path))
    return path


@pytest.fixture
def filled(db):
    ids = {"sweep_a": kb.record_run("sweep-models", sweep_a()),
           "bench_a": kb.record_run("bench", bench(1000, 1000)),
           "sweep_b": kb.record_run("sweep-models", sweep_b()),
           "bench_b": kb.record_run("bench", bench(1300, 1050)),  # +30 % and +5 %
           "conformance": kb.record_run("conformance", CONFORMANCE)}
    return ids


def run_cli(capsys, *argv):
    rc = cli.main(list(argv), prog="ember kb")
    return rc, capsys.readouterr().out


def test_record_stores_versions_settings_and_items(filled, db, monkeypatch):
    conn = store.connect()
    run = store.get_run(conn, filled["sweep_a"])
    assert run["kind"] == "sweep-models" and run["created"] == "2026-01-01 10:00:00"
    assert run["ember"] == __import__("torch_ember").__version__
    assert run["torch"] and run["transformers"] and run["llvm"] and run["os"] and run["cpu"]
    assert run["settings"]["EMBER_KB"] == str(db)
    assert (run["n_items"], run["n_pass"], run["n_fail"], run["n_fallback"]) == (8, 5, 3, 1)
    items = store.items(conn, filled["sweep_a"])
    assert items["mistral"]["metrics"]["compile_cold_seconds"] == 10.0
    assert items["t5"]["fallback"] == ["aten::nonzero"]
    assert items["gpt2"]["failures"][0]["explain_key"] == "compile-refused"
    assert items["blip"]["failures"][0]["explain_key"] == "could-not-build"
    assert items["phi"]["failures"][0]["explain_key"] == "missing-kernel"
    conf = store.items(conn, filled["conformance"])
    assert conf["add float32 backward"]["status"] == "pass"
    assert conf["add float32 backward"]["fallback"] == ["aten::sum.IntList_out"]
    assert conf["mm bfloat16 forward"]["failures"][0]["explain_key"] == "wrong-values"
    assert conf["sort float32 forward"]["status"] == "skip"


def test_cpu_flags_and_thread_settings(db, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("EMBER_FALLBACK", "silent")
    env = store.environment()
    assert env["settings"]["OMP_NUM_THREADS"] == "3" and env["settings"]["EMBER_FALLBACK"] == "silent"
    assert all(f.startswith(("avx512", "amx", "avx2", "fma")) for f in env["cpu_flags"].split())


def test_disabled_and_pytest_guard(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KB", "off")
    assert kb.record_run("sweep-models", sweep_a()) is None
    assert cli.main(["list"]) == 2
    # Under pytest with no EMBER_KB, the runners' hooks must not write the user's database.
    monkeypatch.delenv("EMBER_KB")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kb.record_run("sweep-models", sweep_a()) is None
    assert not (tmp_path / ".cache" / "torch_ember" / "kb.sqlite").exists()


def test_list_newest_first(filled, capsys):
    runs = kb.list_runs()
    assert [r["id"] for r in runs] == sorted(filled.values(), reverse=True)
    assert [r["kind"] for r in kb.list_runs(kind="sweep-models")] == ["sweep-models"] * 2
    rc, out = run_cli(capsys, "list")
    assert rc == 0
    lines = [ln for ln in out.splitlines() if "sweep-models" in ln or "conformance" in ln or "bench" in ln]
    assert len(lines) == 5 and "conformance" in lines[0]  # newest first
    assert "62.5%" in out  # sweep A: 5 of 8 pass


@pytest.mark.parametrize("fts", [True, False], ids=["fts5", "plain"])
def test_search(fts, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EMBER_KB", str(tmp_path / f"kb-{fts}.sqlite"))
    monkeypatch.setattr(store, "fts5_available", lambda: fts)
    kb.record_run("sweep-models", sweep_a())
    kb.record_run("conformance", CONFORMANCE)
    assert store.uses_fts(store.connect()) is fts
    hits = kb.search("cannot translate")
    fail = [h for h in hits if h["what"] == "failure"]
    assert [h["name"] for h in fail] == ["gpt2"]
    assert "docs/op_table.md" in fail[0]["advice"]
    # explanations are searchable too, and the kind filter works
    assert {h["name"] for h in kb.search("reduced config")} == {"blip"}
    assert kb.search("Tensor-likes", kind="sweep-models") == []
    assert [h["name"] for h in kb.search("Tensor-likes", kind="conformance")] == ["mm bfloat16 forward"]
    assert any(h["what"] == "run" for h in kb.search("avx512f")) or "avx512f" not in store.cpu_info()[1]
    assert kb.search("aten::nonzero")[0]["name"] == "t5"
    rc, out = run_cli(capsys, "search", "cannot translate")
    assert rc == 0 and "gpt2" in out and ("FTS5" if fts else "plain") in out
    assert run_cli(capsys, "search", "zzzunmatched")[0] == 1


def test_compare_sweeps(filled):
    c = kb.compare("prev", "last", kind="sweep-models")
    assert (c["a"]["id"], c["b"]["id"]) == (filled["sweep_a"], filled["sweep_b"])
    assert [x["name"] for x in c["newly_failing"]] == ["llama"]
    assert c["newly_failing"][0]["explanation"] and "eager pass -> fail" in c["newly_failing"][0]["changes"]
    assert [x["name"] for x in c["newly_passing"]] == ["gpt2"]
    assert [x["name"] for x in c["stopped_fallback"]] == ["t5"]
    assert [x["name"] for x in c["newly_fallback"]] == ["opt"]
    moved = {(m["name"], m["metric"]) for m in c["metric_changes"]}
    assert ("mistral", "compile_cold_seconds") in moved
    assert ("bert", "compile_cold_seconds") not in moved  # 6 %, within the 10 % default
    assert not any(m["metric"] == "seconds" for m in c["metric_changes"])
    assert ("opt", "eager_seconds") not in moved  # under the 0.05 s floor
    assert ("opt", "eager_seconds") in {(m["name"], m["metric"]) for m in kb.compare(
        "prev", "last", kind="sweep-models", min_seconds=0)["metric_changes"]}
    worse = next(m for m in c["metric_changes"] if m["name"] == "mistral")
    assert worse["change_pct"] == 40.0 and worse["better"] is False
    # a wider threshold drops the 40 % change; a narrower one picks up the 6 %
    assert not any(m["name"] == "mistral" for m in kb.compare(filled["sweep_a"], filled["sweep_b"],
                                                              threshold=0.5)["metric_changes"])
    assert any(m["name"] == "bert" for m in kb.compare("prev", "last", kind="sweep-models",
                                                       threshold=0.05)["metric_changes"])


def test_compare_throughput(filled, capsys):
    c = kb.compare("prev:bench", "last:bench")
    moved = {m["name"]: m for m in c["metric_changes"]}
    assert set(moved) == {"train_step: float32"}  # +30 % reported, +5 % not
    assert moved["train_step: float32"]["metric"] == "ember_tokens_per_s"
    assert moved["train_step: float32"]["better"] is True
    rc, out = run_cli(capsys, "compare", str(filled["bench_a"]), "last")  # an id fixes the kind of "last"
    assert rc == 0 and "+30.0 %" in out and "bfloat16" not in out


def test_compare_cli(filled, capsys):
    rc, out = run_cli(capsys, "compare", "prev", "last", "--kind", "sweep-models")
    assert rc == 1  # something newly fails
    assert "newly failing: 1" in out and "llama" in out and "newly passing: 1" in out
    assert "mistral" in out and "bert" not in out.split("metrics that moved")[1]
    rc, out = run_cli(capsys, "compare", "prev", "last", "--kind", "sweep-models", "--threshold", "50", "--json")
    data = json.loads(out)
    assert data["metric_changes"] == [] and data["threshold"] == 0.5
    assert run_cli(capsys, "compare", "prev", "last", "--kind", "upstream")[0] == 2  # no such runs


def test_add_imports_json(db, tmp_path, capsys):
    sweep = tmp_path / "models.json"
    sweep.write_text(json.dumps(sweep_a()))
    conf = tmp_path / "conformance.json"
    conf.write_text(json.dumps({**CONFORMANCE, "meta": {**CONFORMANCE["meta"], "compiled": True}}))
    rc, out = run_cli(capsys, "add", str(sweep), "--kind", "sweep-models", "--label", "baseline")
    assert rc == 0 and "recorded run" in out
    rc, out = run_cli(capsys, "add", str(sweep))
    assert rc == 0 and "already run" in out  # the same output is not stored twice
    rc, out = run_cli(capsys, "add", str(conf))  # the kind is told from the JSON
    assert rc == 0
    upstream = tmp_path / "upstream.json"
    upstream.write_text(json.dumps({"meta": {"torch": "2.13.0"}, "files": {}, "results": [
        {"nodeid": "test_x.py::T::test_a_ember", "status": "passed", "seconds": 0.1},
        {"nodeid": "test_x.py::T::test_b_ember", "status": "failed", "type": "RuntimeError",
         "message": "RuntimeError: foo is only supported on CUDA", "control": "ember's"},
        {"nodeid": "test_x.py::T::test_c_ember", "status": "crash", "message": "signal 11 (SIGSEGV)"}]}))
    assert run_cli(capsys, "add", str(upstream), "--kind", "upstream")[0] == 0
    runs = kb.list_runs()
    assert [r["kind"] for r in runs] == ["upstream", "conformance-compiled", "sweep-models"]
    assert runs[2]["label"] == "baseline" and runs[2]["source"] == str(sweep.resolve())
    conn = store.connect()
    up = store.items(conn, runs[0]["id"])
    assert up["test_x.py::T::test_b_ember"]["failures"][0]["explain_key"] == "device-gate"
    assert up["test_x.py::T::test_c_ember"]["failures"][0]["explain_key"] == "crash"
    bad = tmp_path / "bad.json"
    bad.write_text('{"something": 1}')
    assert run_cli(capsys, "add", str(bad))[0] == 2


@pytest.mark.parametrize("message,category,key", [
    ("compiled: CompileError: ember compiler cannot translate 2 op(s): ...", "unsupported op", "compile-refused"),
    ("NotImplementedError: ember: operator 'aten::foo' has no ember kernel and runs on the CPU", None,
     "missing-kernel"),
    ("ember: operator 'aten::foo' has no ember kernel, and EMBER_FALLBACK=error forbids it", None,
     "fallback-forbidden"),
    ("ember: dtype ComplexFloat is not supported on the ember device", None, "dtype-refused"),
    ('"addmm_impl_cpu_" not implemented for \'Half\'', None, "cpu-dtype-missing"),
    ("RuntimeError: _foo is only supported on CUDA devices", None, "device-gate"),
    ("Dynamo cannot capture it in one graph (Unsupported)", None, "dynamo-capture"),
    ("ValueError: not implemented for 'Half'", "could not build", "could-not-build"),
    ("RuntimeError: ember: out of memory allocating 8 GiB", None, "out-of-memory"),
    ("process exited with -9 (signal 9): ", "crash", "out-of-memory"),
    ("no result within 180 s", "timeout", "timeout"),
    ("process exited with -11 (signal 11): Segmentation fault", "crash", "crash"),
    ("", "crash", "crash"),
    ("eager: values differ from CPU ({'loss_rel': 0.3})", "wrong values", "wrong-values"),
])
def test_explain_known_patterns(message, category, key):
    ex = explain.explain(message, category)
    assert ex is not None and ex.key == key and ex.explanation and ex.advice


def test_explain_missing_kernel_points_at_op_table():
    ex = explain.explain("aten::foo has no ember kernel")
    assert "fallback" in ex.explanation and "docs/op_table.md" in ex.advice
    assert explain.explain("KeyError: 'hidden_size'", "error") is None
    assert set(explain.known_keys()) >= {"missing-kernel", "device-gate", "timeout", "crash", "out-of-memory"}


def test_report_html(filled, tmp_path, capsys):
    out = tmp_path / "report"
    rc, text = run_cli(capsys, "report", "--out", str(out), "--runs", "10")
    assert rc == 0 and "index.html" in text
    page = (out / "index.html").read_text()
    for needle in ('<h2 id="runs">Runs</h2>', "Pass rate per kind", "Latest model sweep", "Failures explained",
                   "Versions and settings", "Changes since the previous run", "compile time, seconds",
                   "mistral", "gpt2", "docs/op_table.md", "ember_tokens_per_s", "EMBER_KB="):
        assert needle in page, needle
    assert page.count("<svg") >= 4  # three kinds' histories and the compile-time chart
    assert "<table>" in page and "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    # the latest sweep's table is the newer run's: llama fails there
    sweep = page.split('id="sweep"')[1].split('id="changes"')[0]
    assert "llama" in sweep and "values differ from CPU" in sweep
    # --runs limits the runs shown
    assert run_cli(capsys, "report", "--out", str(out), "--runs", "1")[0] == 0
    assert "Latest model sweep" not in (out / "index.html").read_text()  # the newest run is conformance


def _browser():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_report_renders_in_headless_browser(filled, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no headless browser installed (chromium or google-chrome); "
                    "`apt-get install chromium` to render the report")
    page = kb.write_report(tmp_path / "report")
    shot = tmp_path / "report.png"
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={shot}", "--window-size=1280,2400", page.resolve().as_uri()],
                       capture_output=True, text=True, timeout=180)
    assert shot.exists(), f"{browser} wrote no screenshot (rc {r.returncode}): {r.stderr[-2000:]}"
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000  # a blank page compresses to a few KB; tables and charts do not


def test_sweep_hook_records_and_never_breaks(db, monkeypatch, capsys):
    from torch_ember.sweep import models, tiny_hf
    monkeypatch.setattr(tiny_hf, "architectures", lambda: [("llama", "causal"), ("gpt2", "causal")])
    monkeypatch.setattr(models, "_child", lambda m, t, limit, compiled: _model(m))
    data = models.run(progress=False)
    assert isinstance(data["kb_run"], int)
    assert kb.list_runs()[0]["n_items"] == 2
    monkeypatch.setenv("EMBER_KB", "off")
    assert models.run(progress=False)["kb_run"] is None

    def broken(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setenv("EMBER_KB", str(db))
    monkeypatch.setattr(store, "record", broken)
    data = models.run(progress=False)
    assert "kb_run" not in data and data["summary"]["models"] == 2
    err = capsys.readouterr().err
    assert "warning: ember kb: run not recorded" in err and "disk full" in err
    assert len([ln for ln in err.splitlines() if "ember kb" in ln]) == 1


def test_conformance_hook_records(db):
    from torch_ember.conformance import run as conformance
    data = conformance.run(ops=["neg"], dtypes=["float32"], backward=False, progress=False)
    run = store.get_run(store.connect(), data["kb_run"])
    assert run["kind"] == "conformance" and run["n_items"] == 1 and run["n_pass"] == 1


def test_cli_is_an_ember_subcommand(filled):
    r = subprocess.run([sys.executable, "-m", "torch_ember.cli", "kb", "list", "--kind", "conformance"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "conformance" in r.stdout and "sweep-models" not in r.stdout

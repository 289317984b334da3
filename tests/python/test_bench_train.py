"""`ember bench train`: the smallest real run (the demo model, float32, PyTorch CPU eager and Ember
eager, 2 steps) through the command line, checked for the shape of DIR/train.json (preparation,
execution and completion apart, the machine and versions), loss parity, the plots and its run in
the knowledge base; a child that runs out of time is recorded, not fatal. No timing assertions:
the numbers are whatever this machine gives."""
import json

import pytest

pytest.importorskip("transformers")

from torch_ember.bench import report, train  # noqa: E402
from torch_ember.kb import store  # noqa: E402


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    kb_path = out / "kb.sqlite"
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_KB", str(kb_path))
    try:
        rc = train.main(["--only", "demo", "--dtypes", "float32", "--modes", "cpu_eager,ember_eager",
                         "--steps", "2", "--out", str(out), "--no-progress"], prog="ember bench train")
    finally:
        mp.undo()
    return rc, out, kb_path


def test_json_has_preparation_execution_completion_apart(smoke):
    rc, out, _ = smoke
    assert rc == 0
    data = json.loads((out / "train.json").read_text())
    assert data["bench"] == "train" and data["config"]["steps"] == 2
    meta = data["meta"]
    for key in ("cpu", "cpu_flags", "OPENBLAS_CORETYPE", "torch", "torch_ember", "transformers", "llvm", "os"):
        assert key in meta
    assert {"avx512f", "amx_bf16"} <= set(meta["cpu_flags"])
    assert [(r["workload"], r["dtype"], r["mode"]) for r in data["results"]] == [
        ("demo", "float32", "cpu_eager"), ("demo", "float32", "ember_eager")]
    for r in data["results"]:
        assert r["status"] == "ok", r
        assert r["preparation"]["first_step_s"] > 0
        assert {"import_s", "setup_s", "first_step_call_s"} <= set(r["preparation"])
        ex = r["execution"]
        assert ex["unit"] == "tokens" and ex["per_s"] > 0 and ex["per_s_min"] <= ex["per_s"] <= ex["per_s_max"]
        c = r["completion"]
        assert c["finished"] and c["steps"] == 2 and len(c["losses"]) == 2 and c["finite"]
        assert isinstance(c["fallback_ops"], dict) and isinstance(r["fallback_ops"], list)
    ember = data["results"][1]
    par = ember["completion"]["loss_parity"]
    assert par["reference"] == "cpu_eager" and par["steps"] == 2 and par["ok"], par
    assert par["max_rel_diff"] <= par["tolerance"]
    assert "throughput_vs_cpu_eager" in data["ratios"]["demo float32"]
    s = data["summary"]
    assert (s["runs"], s["finished"], s["failed"], s["parity_checked"], s["parity_ok"]) == (2, 2, 0, 1, 1)


def test_plots_and_markdown(smoke):
    _, out, _ = smoke
    for name in ("throughput.svg", "first_step.svg"):
        svg = (out / name).read_text()
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
        assert "ember_eager" in svg and "cpu_eager" in svg
    assert "| demo | float32 | ember_eager | ok |" in (out / "train.md").read_text()


def test_run_is_in_the_knowledge_base(smoke):
    _, out, kb_path = smoke
    data = json.loads((out / "train.json").read_text())
    assert store.detect_kind(data) == "bench-train"
    conn = store.connect(kb_path)
    run = store.get_run(conn, data["kb_run"])
    assert run["kind"] == "bench-train" and run["n_pass"] == 2 and run["n_fail"] == 0
    items = store.items(conn, data["kb_run"])
    item = items["train: demo float32 ember_eager"]
    assert item["metrics"]["execution_per_s"] > 0 and "preparation_first_step_s" in item["metrics"]
    conn.close()


def test_timeout_is_recorded_not_fatal():
    rec = train.run_one("resnet", "float32", "cpu_eager", 2, 0, 0.5, {})
    assert rec["status"] == "timeout" and rec["completion"]["finished"] is False


def test_parity_failure_and_left_out_runs_reach_the_knowledge_base(tmp_path):
    def rec(mode, losses, status="ok"):
        r = {"name": f"demo float32 {mode}", "workload": "demo", "dtype": "float32", "mode": mode, "status": status}
        if status == "ok":
            r.update(preparation={"first_step_s": 3.0}, execution={"unit": "tokens", "per_s": 100.0},
                     completion={"finished": True, "losses": losses, "fallback_ops": {}})
        return r

    ref, bad = rec("cpu_eager", [2.0, 1.5]), rec("ember_eager", [2.0, 1.8])
    par = train.parity(bad, ref, 2e-3)
    assert not par["ok"] and par["max_rel_diff"] == pytest.approx(0.2)
    assert train.parity(rec("inductor", [2.0, 1.5]), ref, 2e-3)["ok"]
    assert train.parity(bad, None, 2e-3) is None
    bad["completion"]["loss_parity"], bad["failure"] = par, "loss differs"
    results = [ref, bad, {**rec("inductor", None, "skip"), "reason": "left out by --quick"}]
    for r in results:
        r["fallback_ops"] = []
    data = {"bench": "train", "meta": {}, "config": {}, "results": results, "ratios": report.ratios(results),
            "summary": report.summary(results, 1.0)}
    conn = store.connect(tmp_path / "kb.sqlite")
    run_id = store.record(conn, "bench-train", data)
    statuses = {n: it["status"] for n, it in store.items(conn, run_id).items()}
    assert statuses == {"train: demo float32 cpu_eager": "pass", "train: demo float32 ember_eager": "fail",
                        "train: demo float32 inductor": "skip"}
    assert "summary" not in " ".join(statuses)  # the summary is the run's, not an item
    conn.close()


def test_quick_plan_leaves_out_resnet_inductor():
    todo = train.plan(["demo", "resnet"], ["float32"], train.MODES, quick=True)
    assert todo[0][2] == list(train.MODES) and not todo[0][3]
    assert "inductor" not in todo[1][2] and "inductor" in todo[1][3]
    # warm needs the cold run that fills the cache
    assert train.plan(["demo"], ["float32"], ["ember_compiled_warm"], quick=False)[0][2] == [
        "ember_compiled_cold", "ember_compiled_warm"]

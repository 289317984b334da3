"""CI's small model sweep: `ember sweep models --only llama,bert,gpt2` (a causal LM, a masked LM
and a second causal LM), each model in its own child process, must build, pass eagerly and
compiled against the CPU with no CPU fallbacks, and write models.json / models.md. No timing
assertions."""
import json

import pytest

pytest.importorskip("transformers")

from torch_ember.sweep import models  # noqa: E402

MODELS = ["llama", "bert", "gpt2"]


def test_small_sweep_passes_eager_and_compiled(tmp_path):
    data = models.run(only=MODELS, time_limit=400.0, out=str(tmp_path), progress=False)
    recs = {r["model"]: r for r in data["records"]}
    assert sorted(recs) == sorted(MODELS)
    for name, r in recs.items():
        assert r["built"], r
        assert r["eager"] == "pass", (name, r.get("failure"))
        assert r["compiled"] == "pass", (name, r.get("failure"))
        assert r["eager_parity"]["ok"] and r["compiled_parity"]["ok"], r
        assert r["compile_cold_seconds"] > 0 and r["compile_warm_seconds"] > 0
    s = data["summary"]
    assert (s["built"], s["eager_pass"], s["compiled_pass"]) == (3, 3, 3)
    on_disk = json.loads((tmp_path / "models.json").read_text())
    assert [r["model"] for r in on_disk["records"]] == [r["model"] for r in data["records"]]
    assert "| llama |" in (tmp_path / "models.md").read_text()


def test_failure_messages_name_no_machine_paths():
    from torch_ember.sweep import model_check
    from torch_ember.sweep.results import portable

    e = RuntimeError("op 'aten.x' at /home/u/proj/.venv/lib/python3.11/site-packages/transformers/m.py:3")
    assert model_check._first_line(e) == "RuntimeError: op 'aten.x' at transformers/m.py:3"
    assert portable("/usr/lib/python3/dist-packages/a.py and ./b.py") == "a.py and ./b.py"

"""The README demo: a reduced Qwen3 model trains on ember and matches the same run on CPU."""
import pytest
import torch

train_lm = pytest.importorskip("torch_ember.demo.train_lm", reason="transformers is not installed")


def test_demo_trains_on_ember_like_cpu(capsys):
    cpu = train_lm.train(device="cpu", steps=3, batch=2, seq=32, quiet=True)
    ember = train_lm.train(device="ember", steps=3, batch=2, seq=32, quiet=True)
    torch.testing.assert_close(torch.tensor(ember["losses"]), torch.tensor(cpu["losses"]),
                               rtol=1e-4, atol=1e-4)
    assert ember["losses"][-1] < ember["losses"][0]
    out = capsys.readouterr().out
    assert "ember fallback report" in out  # the report is printed, not hidden

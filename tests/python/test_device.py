import pytest
import torch


def test_device_count_and_current():
    assert torch.ember.is_available()
    assert torch.ember.device_count() >= 2
    assert torch.ember.current_device() == 0
    with torch.ember.device(1):
        assert torch.ember.current_device() == 1
        t = torch.empty(3, device="ember")
        assert t.device == torch.device("ember:1")
    assert torch.ember.current_device() == 0


def test_tensor_and_module_methods():
    x = torch.arange(6.0).reshape(2, 3)
    y = x.ember()
    assert y.is_ember and y.device.type == "ember"
    torch.testing.assert_close(y.cpu(), x)
    m = torch.nn.Linear(3, 2).ember()
    assert m.weight.device.type == "ember"


def test_invalid_device_index():
    with pytest.raises((RuntimeError, ValueError), match="invalid ember device index 99"):
        torch.empty(1, device="ember:99")


def test_tied_parameters_stay_tied_across_moves():
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    model.to("ember")
    assert model["head"].weight is model["emb"].weight
    assert len(list(model.parameters())) == 1
    model.cpu()
    assert model["head"].weight is model["emb"].weight
    assert model["emb"].weight.device.type == "cpu"


def test_interpreter_exits_cleanly_with_work_queued():
    # Queued kernels must not hold Python-owned tensors: dropping them on a stream worker would
    # need the GIL, which an exiting interpreter no longer hands out.
    import subprocess
    import sys

    code = (
        "import torch, torch_ember, torch.nn.functional as F\n"
        "q = torch.randn(2, 4, 64, 32, device='ember', requires_grad=True)\n"
        "F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()\n"
        "x = torch.randn(256, 256, device='ember'); y = torch.softmax(x @ x, -1).sum(0)\n"
        "torch.ember._sleep(50)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]

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

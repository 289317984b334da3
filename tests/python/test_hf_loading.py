"""Weights load straight onto ember from Hugging Face formats: safetensors with `device="ember"`,
and transformers' `from_pretrained(device_map="auto")` placing layers on ember devices."""
import pytest
import torch

safetensors_torch = pytest.importorskip("safetensors.torch", reason="safetensors comes with transformers")
transformers = pytest.importorskip("transformers", reason="transformers is a dev requirement")

import torch_ember  # noqa: E402,F401
from safetensors import safe_open  # noqa: E402


@pytest.mark.parametrize("device", ["ember", "ember:1", torch.device("ember", 1)])
def test_safetensors_load_file_onto_ember(tmp_path, device):
    path = str(tmp_path / "w.safetensors")
    tensors = {"w": torch.randn(4, 5), "i": torch.arange(6, dtype=torch.int64), "h": torch.randn(3).half()}
    safetensors_torch.save_file({k: v.to("ember") for k, v in tensors.items()}, path)
    loaded = safetensors_torch.load_file(path, device=device)
    want = torch.device(device) if torch.device(device).index is not None else torch.device("ember", 0)
    for name, ref in tensors.items():
        assert loaded[name].device == want
        torch.testing.assert_close(loaded[name].cpu(), ref, rtol=0, atol=0)
    with safe_open(path, framework="pt", device=device) as f:
        torch.testing.assert_close(f.get_slice("w")[1:3].cpu(), tensors["w"][1:3], rtol=0, atol=0)
        assert f.get_tensor("i").device == want


def test_safetensors_still_rejects_unknown_devices(tmp_path):
    path = str(tmp_path / "w.safetensors")
    safetensors_torch.save_file({"w": torch.zeros(2)}, path)
    with pytest.raises(Exception, match="invalid"):
        safetensors_torch.load_file(path, device="nodevice")


def _saved_tiny_llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(tmp_path)
    return model


def test_device_map_auto_places_the_model_on_ember(tmp_path):
    from transformers import AutoModelForCausalLM
    ref = _saved_tiny_llama(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="auto").eval()
    devices = {p.device.type for p in model.parameters()}
    assert devices == {"ember"}, devices
    ids = torch.randint(0, 128, (2, 9))
    out = model(ids.to("ember"), labels=ids.to("ember"))
    want = ref(ids, labels=ids)
    torch.testing.assert_close(out.logits.cpu(), want.logits, rtol=1e-4, atol=1e-4)
    out.loss.backward()
    want.loss.backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_device_map_auto_with_max_memory(tmp_path):
    from transformers import AutoModelForCausalLM
    _saved_tiny_llama(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="auto", max_memory={0: "1GB", "cpu": "1GB"})
    assert {p.device for p in model.parameters()} == {torch.device("ember", 0)}
    count = torch.ember.device_count()
    with pytest.raises(ValueError, match=f"names ember devices \\[{count}\\], but there are {count}"):
        AutoModelForCausalLM.from_pretrained(tmp_path, device_map="auto", max_memory={count: "1GB"})

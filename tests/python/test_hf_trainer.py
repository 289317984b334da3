"""Hugging Face Trainer and accelerate train on ember after `import torch_ember`, with nothing
else from the user: bf16 and fp16 mixed precision, gradient checkpointing, save and resume."""
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is a dev requirement")
accelerate = pytest.importorskip("accelerate", reason="accelerate is a dev requirement")

import torch_ember  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def _tiny_llama(**kw):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True, **kw)
    return LlamaForCausalLM(cfg)


class _Data(torch.utils.data.Dataset):
    def __init__(self, n=16, seq=12):
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 128, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _args(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, learning_rate=1e-2,
                max_steps=4, logging_steps=1, save_strategy="no", report_to=[], seed=0,
                dataloader_num_workers=0, disable_tqdm=True)
    base.update(kw)
    return TrainingArguments(**base)


def _losses(trainer):
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_trainer_uses_ember_and_matches_cpu_in_float32(tmp_path):
    args = _args(tmp_path / "ember")
    assert args.device.type == "ember"
    model = _tiny_llama()
    trainer = Trainer(model=model, args=args, train_dataset=_Data())
    trainer.train()
    assert next(model.parameters()).device.type == "ember"
    AcceleratorState._reset_state(reset_partial_state=True)
    cpu_model = _tiny_llama()
    cpu = Trainer(model=cpu_model, args=_args(tmp_path / "cpu", use_cpu=True), train_dataset=_Data())
    cpu.train()
    assert next(cpu_model.parameters()).device.type == "cpu"
    torch.testing.assert_close(torch.tensor(_losses(trainer)), torch.tensor(_losses(cpu)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_trainer_mixed_precision_with_gradient_checkpointing(tmp_path, precision):
    torch_ember.reset_fallback_stats()
    model = _tiny_llama()
    dtypes = []
    model.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    args = _args(tmp_path, activation_checkpointing=True, **{precision: True})
    trainer = Trainer(model=model, args=args, train_dataset=_Data())
    trainer.train()
    expected = torch.bfloat16 if precision == "bf16" else torch.float16
    assert dtypes and all(d == expected for d in dtypes), dtypes  # autocast ran on ember
    losses = _losses(trainer)
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    if precision == "fp16":
        assert trainer.accelerator.scaler is not None
        assert trainer.accelerator.scaler._device == "ember"
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())  # fused AdamW + scaler native


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_trainer_save_and_resume_continues_the_same_run(tmp_path, dropout):
    # With dropout, the resumed run draws the same masks only if the checkpoint kept ember's RNG.
    full_model = _tiny_llama(attention_dropout=dropout)
    full = Trainer(model=full_model, args=_args(tmp_path / "full", max_steps=6), train_dataset=_Data())
    full.train()
    AcceleratorState._reset_state(reset_partial_state=True)

    out = tmp_path / "resumed"
    first = Trainer(model=_tiny_llama(attention_dropout=dropout),
                    args=_args(out, max_steps=6, save_strategy="steps", save_steps=3), train_dataset=_Data())
    first.train()
    AcceleratorState._reset_state(reset_partial_state=True)
    model = _tiny_llama(attention_dropout=dropout)
    resumed = Trainer(model=model, args=_args(out, max_steps=6, save_strategy="no"), train_dataset=_Data())
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-3"))
    assert resumed.state.global_step == 6
    opt_state = resumed.optimizer.state_dict()["state"]
    assert all(s["exp_avg"].device.type == "ember" for s in opt_state.values())
    for p, q in zip(model.parameters(), full_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mixed_precision", ["bf16", "fp16"])
def test_accelerate_documented_order(mixed_precision):
    """Optimizer first, then prepare() moves the model: the optimizer must train it on ember."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randn(64, 1)),
                                       batch_size=16)
    seen = []  # accelerate returns outputs in float32; look inside the model
    model[0].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    accelerator = Accelerator(mixed_precision=mixed_precision)
    assert accelerator.device.type == "ember"
    model, opt, data = accelerator.prepare(model, opt, data)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    for x, y in data:
        assert x.device.type == "ember"
        out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
    expected = torch.bfloat16 if mixed_precision == "bf16" else torch.float16
    assert all(d == expected for d in seen), seen
    assert all(p.device.type == "ember" for p in model.parameters())
    assert any(not torch.equal(p.detach().cpu(), b) for p, b in zip(model.parameters(), before))


def test_accelerate_save_and_load_state_keep_embers_rng(tmp_path):
    accelerator = Accelerator()
    torch.ember.manual_seed(3)
    torch.rand(5, device="ember")
    accelerator.save_state(str(tmp_path))
    after_save = torch.rand(5, device="ember").cpu()
    torch.ember.manual_seed(99)
    accelerator.load_state(str(tmp_path))
    torch.testing.assert_close(torch.rand(5, device="ember").cpu(), after_save, rtol=0, atol=0)


def test_accelerate_cpu_flag_still_means_cpu():
    assert Accelerator(cpu=True).device.type == "cpu"


def test_trainer_compiles_with_the_ember_backend(tmp_path):
    # torch_compile_backend="ember" goes through accelerate's closed DynamoBackend enum.
    torch._dynamo.reset()
    torch_ember.reset_compile_stats()
    model = _tiny_llama()
    args = _args(tmp_path / "compiled", torch_compile=True, torch_compile_backend="ember", max_steps=2)
    trainer = Trainer(model=model, args=args, train_dataset=_Data())
    trainer.train()
    assert torch_ember.compile_stats(), "the model was not compiled by ember"
    AcceleratorState._reset_state(reset_partial_state=True)
    eager = Trainer(model=_tiny_llama(), args=_args(tmp_path / "eager", max_steps=2), train_dataset=_Data())
    eager.train()
    torch.testing.assert_close(torch.tensor(_losses(trainer)), torch.tensor(_losses(eager)), rtol=1e-4, atol=1e-4)


def test_import_accelerate_first_loads_torch_ember_and_patches_it():
    # `import accelerate` imports torch (and so torch_ember, through the device-backend entry
    # point) from inside accelerate/accelerator.py, before that module has defined anything.
    import subprocess
    import sys

    code = ("import accelerate\n"
            "from accelerate.utils import DynamoBackend\n"
            "assert hasattr(accelerate.Accelerator.__init__, '__wrapped__')\n"
            "assert DynamoBackend('EMBER').value.lower() == 'ember'\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]

"""Lightning trains on ember with `L.Trainer(accelerator="ember", ...)` after `import torch_ember`:
the accelerator is registered, mixed precision autocasts on ember, checkpoints resume."""
import pytest
import torch

L = pytest.importorskip("lightning", reason="lightning is a dev requirement")

import torch_ember  # noqa: E402,F401


class TinyLM(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
        self.seen = []

    def training_step(self, batch, _):
        x, y = batch
        out = self.net(x)
        self.seen.append((x.device.type, out.dtype, torch.is_autocast_enabled("ember")))
        state = self.trainer.optimizers[0].state.values()
        self.state_devices = {s["exp_avg"].device.type for s in state}
        loss = torch.nn.functional.cross_entropy(out.float(), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def _data():
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(64, 16, generator=g), torch.randint(0, 4, (64,), generator=g))
    return torch.utils.data.DataLoader(ds, batch_size=16)  # 4 steps per epoch


def _trainer(tmp_path, **kw):
    base = dict(accelerator="ember", devices=1, max_steps=4, logger=False, enable_progress_bar=False,
                enable_model_summary=False, default_root_dir=str(tmp_path), enable_checkpointing=False)
    base.update(kw)
    return L.Trainer(**base)


def test_ember_is_a_registered_accelerator():
    from lightning.pytorch.accelerators import AcceleratorRegistry
    assert "ember" in AcceleratorRegistry
    with pytest.raises(ValueError, match="asks for ember devices"):
        AcceleratorRegistry.get("ember").parse_devices(99)
    with pytest.raises(ValueError, match="multi-device strategies need CUDA streams"):
        AcceleratorRegistry.get("ember").parse_devices(2)


@pytest.mark.parametrize("precision,dtype", [("32-true", torch.float32), ("bf16-mixed", torch.bfloat16),
                                             ("16-mixed", torch.float16)])
def test_fit_on_ember(tmp_path, precision, dtype):
    model = TinyLM()
    trainer = _trainer(tmp_path, precision=precision)
    trainer.fit(model, _data())
    assert trainer.global_step == 4
    assert trainer.strategy.root_device.type == "ember"
    assert {s[0] for s in model.seen} == {"ember"}
    assert {s[1] for s in model.seen} == {dtype}
    assert all(s[2] == (precision != "32-true") for s in model.seen)


def test_fit_matches_cpu_in_float32(tmp_path):
    ember, cpu = TinyLM(), TinyLM()
    _trainer(tmp_path / "e").fit(ember, _data())
    _trainer(tmp_path / "c", accelerator="cpu").fit(cpu, _data())
    for p, q in zip(ember.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)


def _fit_save_resume(tmp_path, accelerator):
    first = TinyLM()
    t1 = _trainer(tmp_path / "run", max_steps=4, accelerator=accelerator)  # one whole epoch
    t1.fit(first, _data())
    ckpt = tmp_path / "run" / "epoch1.ckpt"
    t1.save_checkpoint(ckpt)
    resumed = TinyLM()
    t2 = _trainer(tmp_path / "run", max_steps=8, accelerator=accelerator)
    t2.fit(resumed, _data(), ckpt_path=str(ckpt))
    assert t2.global_step == 8
    return resumed


def test_checkpoint_and_resume_matches_cpu(tmp_path):
    resumed = _fit_save_resume(tmp_path / "ember", "ember")
    assert resumed.state_devices == {"ember"}  # restored optimizer state moved to the device
    ref = _fit_save_resume(tmp_path / "cpu", "cpu")
    for p, q in zip(resumed.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("accelerator", ["auto", "gpu"])
def test_auto_and_gpu_choose_ember(tmp_path, accelerator):
    model = TinyLM()
    trainer = L.Trainer(accelerator=accelerator, max_steps=2, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, default_root_dir=str(tmp_path))
    assert trainer.num_devices == 1  # devices="auto": one virtual device, no data parallelism
    trainer.fit(model, _data())
    assert trainer.strategy.root_device.type == "ember"
    assert {s[0] for s in model.seen} == {"ember"}


def test_standalone_pytorch_lightning_package(tmp_path):
    pl = pytest.importorskip("pytorch_lightning", reason="installed with lightning")

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(16, 4)
            self.devices = set()

        def training_step(self, batch, _):
            x, y = batch
            self.devices.add(x.device.type)
            with torch.no_grad():
                assert torch.is_autocast_enabled("ember")
            return torch.nn.functional.cross_entropy(self.net(x).float(), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    for accelerator in ("ember", "auto"):
        model = Tiny()
        trainer = pl.Trainer(accelerator=accelerator, max_steps=2, precision="bf16-mixed", logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                             default_root_dir=str(tmp_path))
        trainer.fit(model, _data())
        assert trainer.strategy.root_device.type == "ember" and model.devices == {"ember"}


@pytest.mark.parametrize("accelerator,precision,dtype", [("ember", "32-true", torch.float32),
                                                         ("auto", "bf16-mixed", torch.bfloat16),
                                                         ("ember", "16-mixed", torch.float16)])
def test_fabric_on_ember(accelerator, precision, dtype):
    fabric = L.Fabric(accelerator=accelerator, devices=1, precision=precision)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    ref.load_state_dict(model.state_dict())
    seen = []
    model[2].register_forward_hook(lambda m, i, o: seen.append((o.device.type, o.dtype)))
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    model, opt = fabric.setup(model, opt)
    assert fabric.device.type == "ember"
    for x, y in fabric.setup_dataloaders(_data()):
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        fabric.backward(loss)
        opt.step()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            ref_loss = torch.nn.functional.cross_entropy(ref(x.cpu()).float(), y.cpu())
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
    assert set(seen) == {("ember", dtype)}
    tol = dict(rtol=1e-4, atol=1e-5) if precision == "32-true" else dict(rtol=0.05, atol=0.02)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), **tol)

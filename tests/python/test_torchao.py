"""torchao (PyTorch's low-precision library) on ember, as installed from PyPI: float8 training,
dynamic int8 quantization and the low-bit optimizers, eager and compiled, against the CPU."""
import copy

import pytest
import torch
import torch_ember

torchao = pytest.importorskip("torchao", reason="torchao is a dev requirement; not installed here")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32))


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_float8_training_matches_cpu_eager_and_compiled(recipe, fresh_compile, native_only):
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    base, x = _mlp(), torch.randn(16, 64, generator=torch.Generator().manual_seed(1))

    def train(device, compiled):
        m = copy.deepcopy(base).to(device)
        convert_to_float8_training(m, config=Float8LinearConfig.from_recipe_name(recipe))
        f = torch.compile(m, backend="ember" if device == "ember" else "aot_eager") if compiled else m
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        losses = []
        for _ in range(3):
            loss = f(x.to(device)).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in m.parameters()]

    want = train("cpu", False)
    for compiled in (False, True):
        got = train("ember", compiled)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
        for g, w in zip(got[1], want[1]):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_dynamic_int8_quantization_compiles_and_matches_eager(fresh_compile, native_only):
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    m = _mlp().eval().to("ember")
    quantize_(m, Int8DynamicActivationInt8WeightConfig())
    x = torch.randn(16, 64, device="ember")
    with torch.no_grad():
        eager = m(x)
        compiled = torch.compile(m, backend="ember", fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager)


class _EagerCompile:
    """torch as torchao.optim.adam sees it, with compile a no-op: the CPU reference runs eagerly."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def compile(fn, **kwargs):
        return fn


def test_low_bit_optimizer_steps_on_ember_match_cpu(fresh_compile, monkeypatch):
    """AdamW8bit compiles its update with the default backend inside step(); for ember
    parameters that compile takes the ember backend."""
    from torchao.optim import AdamW8bit

    base = torch.nn.Linear(256, 256)
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(2))

    def train(device):
        m = copy.deepcopy(base).to(device)
        opt = AdamW8bit(m.parameters(), lr=1e-2)
        for _ in range(3):
            m(x.to(device)).square().mean().backward()
            opt.step()
            opt.zero_grad()
        return [p.detach().cpu() for p in m.parameters()]

    got = train("ember")
    import torchao.optim.adam

    monkeypatch.setattr(torchao.optim.adam, "torch", _EagerCompile())
    want = train("cpu")
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)

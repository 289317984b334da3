import warnings

import pytest
import torch
import torch_ember


@pytest.fixture(autouse=True)
def _quiet_fallback_warnings():
    # Fallback warnings are asserted in test_fallback.py; elsewhere they are noise.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="ember: operator")
        yield
    torch.ember.synchronize()


@pytest.fixture
def native_only():
    """Fails the test if any op fell back to the CPU while it ran."""
    torch_ember.reset_fallback_stats()
    yield
    assert not torch_ember.fallback_report(), str(torch_ember.fallback_report())


@pytest.fixture
def fresh_compile(tmp_path, monkeypatch):
    """A compile cache of the test's own and no graphs or compile records left from others."""
    import torch._dynamo

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBER_CACHE", raising=False)
    torch._dynamo.reset()
    torch_ember.reset_compile_stats()
    yield
    torch._dynamo.reset()

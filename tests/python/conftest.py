import warnings

import pytest
import torch
import torch_ember  # noqa: F401


@pytest.fixture(autouse=True)
def _quiet_fallback_warnings():
    # Fallback warnings are asserted in test_fallback.py; elsewhere they are noise.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="ember: operator")
        yield
    torch.ember.synchronize()

import os
import subprocess
import sys

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


def test_device_properties_describe_the_device():
    props = torch.ember.get_device_properties(0)
    assert props.name == torch.ember.get_device_name() == torch.ember.get_device_name("ember:0")
    assert props.name.startswith("Ember")
    assert props.total_memory == torch.ember.mem_get_info(0)[1] > 0
    assert props.multi_processor_count >= 1
    assert (props.major, props.minor) == torch.ember.get_device_capability() == torch.ember.get_device_capability(1)
    assert props.is_integrated
    assert isinstance(props.cpu_features, tuple)
    assert "Ember" in repr(props)
    with pytest.raises(ValueError, match="invalid device index 7"):
        torch.ember.get_device_properties(7)


def test_dtype_support_queries():
    assert torch.ember.is_bf16_supported() and torch.ember.is_bf16_supported(including_emulation=False)
    assert torch.ember.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    caps = torch.accelerator.get_device_capability()
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool} <= caps["supported_dtypes"]
    for dtype in caps["supported_dtypes"]:  # every claimed dtype can be allocated and read back
        t = torch.zeros(3, dtype=dtype).to("ember")
        assert t.cpu().dtype == dtype


def test_memory_queries_and_host_cache():
    free, total = torch.ember.mem_get_info()
    x = torch.empty(1 << 20, device="ember")
    assert torch.ember.mem_get_info()[0] <= free
    assert torch.ember.device_memory_used() == torch.ember.memory_reserved() > 0
    assert torch.ember.memory_cached() == torch.ember.memory_reserved()
    p = torch.ones(1000).pin_memory()
    y = p.to("ember", non_blocking=True)
    assert torch.ember.host_memory_stats()["allocated_bytes"] >= 4000
    del p
    torch.ember.synchronize()
    torch.accelerator.empty_host_cache()
    assert torch.ember.host_memory_stats()["cached_bytes"] == 0
    assert y.sum().item() == 1000
    del x


def test_default_generators_and_peer_access():
    assert len(torch.ember.default_generators) == torch.ember.device_count()
    torch.ember.default_generators[1].manual_seed(5)
    assert torch.ember.default_generators[1].initial_seed() == 5
    with pytest.raises(IndexError):
        torch.ember.default_generators[99]
    assert torch.ember.can_device_access_peer(0, 1)


def test_a_child_forked_after_the_parent_used_the_device_is_refused():
    # Its stream worker threads are not in the child: the first wait hung forever.
    import textwrap
    code = textwrap.dedent("""
        import os, torch, torch_ember
        torch.ones(1, device="ember").sum().item()
        pid = os.fork()
        if pid == 0:
            ok = torch.ember._is_in_bad_fork()
            try:
                torch.ones(4, device="ember").sum().item()
                os._exit(3)
            except RuntimeError as e:
                os._exit(0 if ok and "spawn" in str(e) else 4)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, os.WEXITSTATUS(status)
        assert not torch.ember._is_in_bad_fork()
        print(torch.ones(3, device="ember").sum().item())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "3.0"


def test_set_device_with_a_negative_index_keeps_the_current_device():
    before = torch.ember.current_device()
    torch.ember.set_device(-1)  # as torch.cuda.set_device
    assert torch.ember.current_device() == before


def test_an_unreadable_device_memory_setting_is_reported():
    code = "import torch, torch_ember; print(torch.ember.mem_get_info()[1] > 0)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "EMBER_DEVICE_MEMORY": "8GB!"})
    assert r.returncode == 0 and r.stdout.strip() == "True"
    assert "EMBER_DEVICE_MEMORY=8GB! is not a positive size" in r.stderr


@pytest.mark.parametrize("name,value", [("EMBER_DEVICE_COUNT", "two"), ("EMBER_NUM_THREADS", "0")])
def test_an_unreadable_integer_setting_is_reported(name, value):
    # A typo in an integer knob passed silently for the default.
    code = "import torch, torch_ember; torch.ones(1, device='ember').cpu(); print(torch.ember.device_count())"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, name: value})
    assert r.returncode == 0 and r.stdout.strip() == "2", r.stderr[-2000:]
    assert f"{name}={value} is not an integer" in r.stderr

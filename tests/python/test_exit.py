"""The interpreter exits cleanly after ember work, every time. PyTorch's autograd thread for a
device may release a finished backward's graph (which holds Python objects) after the script
ends; Ember drains those threads at exit, so the release never races the shutdown."""
import concurrent.futures
import os
import subprocess
import sys

SCRIPTS = {
    "tiny_backward": (
        "import torch, torch_ember\n"
        "z = torch.ones(3, device='ember', requires_grad=True)\n"
        "(z * 2).sum().backward()\n"
    ),
    "training_step_and_checkpoint": (
        "import torch, torch_ember\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.1)).to('ember')\n"
        "opt = torch.optim.AdamW(m.parameters())\n"
        "x = torch.randn(4, 16, device='ember', requires_grad=True)\n"
        "checkpoint(m, x, use_reentrant=False).sum().backward(); opt.step()\n"
        "m(x).sum().backward()\n"
    ),
}


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_fifty_exits_after_backward_are_all_clean():
    codes = [SCRIPTS["tiny_backward"]] * 40 + [SCRIPTS["training_step_and_checkpoint"]] * 10
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_run, codes))
    failed = [(r.returncode, r.stderr[-400:]) for r in results if r.returncode != 0]
    assert not failed, f"{len(failed)} of {len(codes)} runs failed: {failed[:3]}"


def test_empty_host_cache_after_device_use():
    r = _run(
        "import torch, torch_ember\n"
        "x = torch.ones(1000).pin_memory().to('ember', non_blocking=True); y = (x + 1).cpu()\n"
        "del x\n"
        "torch.accelerator.empty_host_cache(); torch.ember.synchronize()\n"
        "torch.accelerator.empty_host_cache()\n"
        "print(int(y.sum()))\n"
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "2000"


def test_exit_with_a_full_device_is_clean():
    # The exit drain allocated on every device from a bare thread: on a device left full (a run
    # that ended by catching an out-of-memory error) the allocation threw there and aborted.
    code = (
        "import torch, torch_ember\n"
        "keep = []\n"
        "try:\n"
        "    while True: keep.append(torch.empty(1 << 20, device='ember:1'))\n"
        "except torch.OutOfMemoryError:\n"
        "    print('full')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "EMBER_DEVICE_MEMORY": "64MiB"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "full"

"""Ember tensors across processes and devices: DataLoader workers and torch.multiprocessing queues
(a copy, moved back to the same ember device index), and nn.DataParallel over ember devices."""
import copy
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_ember  # noqa: F401


def _run(tmp_path, code: str) -> subprocess.CompletedProcess:
    # A file, not `python -c`: spawned children import the parent's __main__ by path.
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240)


def test_spawned_dataloader_workers_return_ember_tensors(tmp_path):
    # The workers' ember tensors failed to pickle on the queue's feeder thread, which dropped them:
    # the loop waited forever.
    r = _run(tmp_path, """
        import torch, torch_ember
        from torch.utils.data import DataLoader, Dataset

        class Rows(Dataset):
            def __len__(self): return 8
            def __getitem__(self, i):
                return torch.full((3,), float(i), device="ember:1"), torch.tensor(i, device="ember")

        if __name__ == "__main__":
            loader = DataLoader(Rows(), batch_size=4, num_workers=2, multiprocessing_context="spawn")
            for x, i in loader:
                assert x.device == torch.device("ember:1") and i.device == torch.device("ember:0")
                print(x[:, 0].cpu().tolist(), i.cpu().tolist())
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split("\n")[:2] == ["[0.0, 1.0, 2.0, 3.0] [0, 1, 2, 3]", "[4.0, 5.0, 6.0, 7.0] [4, 5, 6, 7]"]


def test_queue_round_trip_keeps_values_dtypes_and_parameters(tmp_path):
    r = _run(tmp_path, """
        import torch, torch_ember
        import torch.multiprocessing as mp

        def echo(inq, outq):
            for item in iter(inq.get, None):
                outq.put(item)

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            inq, outq = ctx.Queue(), ctx.Queue()
            p = ctx.Process(target=echo, args=(inq, outq)); p.start()
            torch.manual_seed(0)
            sent = [torch.randn(4, 5, device="ember").t(), torch.arange(6, device="ember:1").bfloat16(),
                    torch.nn.Parameter(torch.ones(2, device="ember")), torch.zeros(3, device="ember").requires_grad_()]
            for t in sent:
                inq.put(t)
            got = [outq.get(timeout=120) for _ in sent]
            inq.put(None); p.join(60)
            for a, b in zip(sent, got):
                assert a.device == b.device and a.dtype == b.dtype and a.shape == b.shape, (a, b)
                assert a.stride() == b.stride() and a.requires_grad == b.requires_grad
                assert type(a) is type(b)
                torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), rtol=0, atol=0)
            print("ok")
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok"


def test_a_non_leaf_tensor_is_refused_as_on_cpu():
    from multiprocessing.reduction import ForkingPickler

    x = torch.ones(2, device="ember", requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        ForkingPickler.dumps(x)


def test_data_parallel_splits_the_batch_across_ember_devices():
    # DataParallel's scatter/broadcast/gather called CUDA-only C++ functions: with two ember
    # devices (the default) the first forward raised. They are copies between ember devices now.
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    model = copy.deepcopy(cpu).to("ember")
    seen = set()
    model[0].register_forward_pre_hook(lambda mod, args: seen.add(str(args[0].device)))
    dp = torch.nn.DataParallel(model)
    assert dp.device_ids == [0, 1]
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt = torch.optim.SGD(dp.parameters(), lr=0.1)
    for _ in range(3):
        x, y = torch.randn(10, 8), torch.randn(10, 3)
        want = torch.nn.functional.mse_loss(cpu(x), y)
        out = dp(x.to("ember"))
        got = torch.nn.functional.mse_loss(out, y.to("ember"))
        assert out.device == torch.device("ember:0")
        torch.testing.assert_close(got.cpu(), want)
        opt_cpu.zero_grad(), want.backward(), opt_cpu.step()
        opt.zero_grad(), got.backward(), opt.step()
    assert seen == {"ember:0", "ember:1"}
    for a, b in zip(cpu.parameters(), model.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach())

"""TorchTitan, unchanged, trains its llama3 debug model on ember (tests/distributed/).

Two processes through torchrun, with the recipe tests/distributed/titan_llama3_ember.toml: FSDP
over both ranks, then tensor parallelism 2. Each run's losses must fall and equal, step by step,
the same recipe on CPU tensors over Gloo (tests/distributed/titan_cpu_reference.py).
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import torchtitan  # noqa: F401
except ImportError as e:  # 0.2.2 imports triton (its MoE kernels), an optional extra here
    pytest.skip(f"TorchTitan does not import: {e} (torchtitan==0.2.2 is pinned in requirements-dev.txt; it "
                "needs triton: pip install -e .[triton])", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "tests" / "distributed"
STEP = re.compile(r"step:\s+(\d+)\s+loss:\s+([0-9.]+)")


def _train(tmp_path: Path, reference: bool, *overrides: str) -> list:
    entry = [str(RECIPES / "titan_cpu_reference.py")] if reference else ["-m", "torchtitan.train"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--rdzv_backend", "c10d",
           "--rdzv_endpoint=localhost:0", "--local-ranks-filter", "0", *entry,
           "--job.config_file", str(RECIPES / "titan_llama3_ember.toml"),
           "--job.dump_folder", str(tmp_path / ("cpu" if reference else "ember")), *overrides]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(RECIPES), os.environ.get("PYTHONPATH", "")]),
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONWARNINGS="ignore")
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    losses = {}
    for step, loss in STEP.findall(out):
        losses.setdefault(int(step), float(loss))
    assert sorted(losses) == list(range(1, 9)), out[-4000:]
    return [losses[s] for s in sorted(losses)]


@pytest.mark.parametrize("parallelism", [
    ("fsdp", ()),
    ("tp", ("--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1")),
], ids=lambda p: p[0])
def test_torchtitan_llama3_debugmodel_on_ember_matches_cpu_gloo(tmp_path, parallelism):
    name, overrides = parallelism
    ember = _train(tmp_path, False, *overrides)
    cpu = _train(tmp_path, True, *overrides)
    assert ember[-1] < ember[0] - 2, f"{name}: loss did not fall: {ember}"
    for step, (e, c) in enumerate(zip(ember, cpu), 1):
        assert abs(e - c) <= 1e-3 * max(1.0, abs(c)), f"{name} step {step}: ember {e} vs CPU/Gloo {c}\n{ember}\n{cpu}"

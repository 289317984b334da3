"""torch.distributed on ember: the "ember" c10d backend (torch_ember/distributed/).

Multi-process cases run two ranks of _dist_worker.py as subprocesses sharing a FileStore, each
under a deadline, so a hang fails the test instead of stalling the suite. Collectives are
checked bit for bit against Gloo on CPU tensors in the same processes.
"""
import datetime
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch_ember  # noqa: F401
from torch_ember.distributed.staging import DistributedError

from _together import run_together

WORKER = Path(__file__).with_name("_dist_worker.py")


def _launch(case: str, tmp_path: Path, timeout: float = 60.0, world: int = 2,
            returncodes: tuple = (0, 0)) -> list:
    store = str(tmp_path / "store")
    return run_together([[sys.executable, str(WORKER), case, str(r), str(world), store] for r in range(world)],
                        timeout, f"case {case}", returncodes=returncodes)


def test_backend_registered():
    from torch.distributed import Backend

    assert dist.is_backend_available("ember")
    assert Backend.default_device_backend_map["ember"] == "ember"
    assert Backend.default_device_backend_map["cpu"] == "gloo"  # CPU keeps Gloo by default
    assert set(Backend.backend_capability["ember"]) == {"ember", "cpu"}


@pytest.fixture
def one_rank_group():
    dist.init_process_group("ember", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=10))
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_single_rank_group_and_clear_errors(one_rank_group):
    t = torch.arange(4.0, device="ember")
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.equal(t.cpu(), torch.arange(4.0))
    with pytest.raises(DistributedError, match=r"ember all_gather: all tensors of one call must be "
                                               r"on the same device, got cpu and ember:0"):
        dist.all_gather([torch.empty(2)], torch.ones(2, device="ember"))
    with pytest.raises(DistributedError, match="ember all_reduce: ReduceOp.AVG needs a floating-point"):
        dist.all_reduce(torch.ones(2, dtype=torch.int32, device="ember"), op=dist.ReduceOp.AVG)
    with pytest.raises(DistributedError, match=r"ember reduce_scatter_tensor: input has 3 elements, "
                                               r"expected 1 x 2"):
        dist.reduce_scatter_tensor(torch.empty(2, device="ember"), torch.ones(3, device="ember"))


def test_collectives_match_gloo_float32_bfloat16(tmp_path):
    _launch("collectives", tmp_path)


def test_init_process_group_forms_and_device_mesh(tmp_path):
    _launch("init", tmp_path)


def test_ddp_buckets_no_sync_and_comm_hooks_match_one_process(tmp_path):
    _launch("ddp", tmp_path)


def test_compiled_ddp_steps_match_one_process(tmp_path):
    # DDP's reducer calls the process group's Python methods from C++ before each compiled
    # forward (bucket rebuilding at the second step); Dynamo must not trace into them.
    _launch("ddp_compiled", tmp_path, timeout=240)


def test_collectives_run_in_stream_order_and_overlap_compute(tmp_path):
    _launch("stream_order", tmp_path)


def test_errors_name_the_op_and_a_missing_peer_times_out(tmp_path):
    outs = _launch("errors", tmp_path)
    assert "ember all_reduce failed on rank 0" in outs[0]


def test_a_dead_peer_fails_the_next_collective(tmp_path):
    outs = _launch("peer_dies", tmp_path, returncodes=(0, 3))
    assert "peer error:" in outs[0] and "ember all_reduce failed on rank 0 of 2" in outs[0]


def test_fsdp2_dtensor_and_tensor_parallel_match_one_process(tmp_path):
    _launch("fsdp_dtensor", tmp_path)


def test_functional_collectives_and_tensor_parallel_compile_to_library_steps(tmp_path):
    # _c10d_functional.* and wait_tensor have eager kernels (CompositeExplicitAutograd over the
    # process group), so the ember compiler runs them as library steps between compiled pieces.
    outs = _launch("compile_funcol", tmp_path, timeout=240)
    assert "_c10d_functional.wait_tensor.default" in outs[0]

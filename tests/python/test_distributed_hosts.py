"""torch.distributed on ember across hosts: two network namespaces on this machine stand for two
hosts, joined by a veth pair with addresses of their own. A torchrun in each (one process per
"host") meets through the c10d rendezvous at the first host's address, and DDP on ember must give
the gradients of a single-process run (_dist_worker.py case_ddp). Gloo is told to use the veth
interface, so every byte between the ranks crosses it.

The test creates its namespaces and removes them afterwards; it is skipped, with the reason,
where namespaces cannot be created (not root, no `ip`, no CAP_SYS_ADMIN in a container).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _together import run_together

WORKER = Path(__file__).with_name("_dist_worker.py")
PORT = 29517


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


@pytest.fixture
def two_hosts():
    """(namespace, interface, address) for each of the two hosts."""
    if shutil.which("ip") is None:
        pytest.skip("the `ip` tool (iproute2) is not installed")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root")
    tag = f"{os.getpid() % 100000}"
    subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
    hosts = [(f"ember_h{i}_{tag}", f"ev{i}_{tag}", f"{subnet}.{i + 1}") for i in range(2)]
    made = []
    try:
        for ns, _, _ in hosts:
            r = _ip("netns", "add", ns, check=False)
            if r.returncode != 0:
                pytest.skip(f"cannot create a network namespace: {r.stderr.strip()}")
            made.append(ns)
        (_, if0, _), (_, if1, _) = hosts
        try:
            _ip("link", "add", if0, "type", "veth", "peer", "name", if1)
            for ns, ifname, addr in hosts:
                _ip("link", "set", ifname, "netns", ns)
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", ifname)
                _ip("-n", ns, "link", "set", ifname, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot join the namespaces with a veth pair: {' '.join(e.cmd)}: {e.stderr.strip()}")
        yield hosts
    finally:
        for ns in made:  # removing a namespace removes its end of the veth pair, and so both
            _ip("netns", "del", ns, check=False)


def test_ddp_across_two_hosts_matches_one_process(two_hosts, tmp_path):
    (_, _, master), _ = two_hosts
    cmds = []
    for node, (ns, ifname, addr) in enumerate(two_hosts):
        cmds.append(["ip", "netns", "exec", ns, "env", f"GLOO_SOCKET_IFNAME={ifname}",
                     sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
                     f"--node_rank={node}", f"--local_addr={addr}", "--rdzv_backend=c10d",
                     f"--rdzv_endpoint={master}:{PORT}", "--rdzv_id=ember_hosts",
                     # the endpoint is no hostname of this machine, so say which host serves the store
                     f"--rdzv_conf=is_host={int(node == 0)}", str(WORKER), "ddp", "env"])
    run_together(cmds, 180, "the two-host run", label="host", cwd=tmp_path)

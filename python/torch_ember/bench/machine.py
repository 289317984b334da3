"""The machine a benchmark ran on: CPU model (lscpu's 'Model name'), the CPU flags that decide
which kernels run (avx512f, amx_bf16, ...), OPENBLAS_CORETYPE and thread counts, and the
versions of everything involved. Stored in the JSON so that numbers are never read without it."""
from __future__ import annotations

import os
import platform
import subprocess
import time

FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_model() -> str:
    try:
        r = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10)
        for line in r.stdout.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name" and value.strip():
                return value.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    from ..kb.store import cpu_info

    return cpu_info()[0]


def cpu_flags() -> dict:
    present = set()
    try:
        with open("/proc/cpuinfo") as f:
            present = set(next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), []))
    except OSError:
        pass
    return {flag: flag in present for flag in FLAGS}


def versions() -> dict:
    from importlib import metadata

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    import torch

    from .. import __version__ as ember
    from ..kb.store import _os_name, llvm_version

    return {"torch_ember": ember, "torch": torch.__version__, "transformers": version("transformers"),
            "llvm": llvm_version(), "python": platform.python_version(), "os": _os_name()}


def loadavg() -> list | None:
    """1, 5 and 15 minute load averages: other work on the machine is the first suspect of noise."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def describe() -> dict:
    import torch

    return {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu": cpu_model(), "cpu_flags": cpu_flags(),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "loadavg": loadavg(),
            "threads_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
                            if k in os.environ},
            **versions()}

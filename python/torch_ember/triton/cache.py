"""Builds translated kernels with the system C++ compiler and keeps the shared objects on disk.

A kernel's shared object is keyed by a hash of its TTIR, the code generator's version, the
runtime prelude, the compiler flags and the compiler's own version, and lives under
`$EMBER_CACHE_DIR/triton` (default ~/.cache/torch_ember/triton), next to the compiled-graph cache,
so a second process (or a run after Triton's own cache was cleared) skips the C++ build. Files
are written to a temporary name and renamed, so concurrent processes never load a partial file.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

# -fno-trapping-math: nothing reads the floating-point exception flags, and without it the
# compiler keeps every loop whose body selects between float results (vec_math's exp, masked
# loads' `other`) scalar.
CXX_FLAGS = ["-O3", "-march=native", "-std=c++17", "-fPIC", "-shared", "-fwrapv",
             "-fno-strict-aliasing", "-fno-math-errno", "-fno-trapping-math", "-pthread", "-w"]


def cxx() -> str:
    return os.environ.get("EMBER_TRITON_CXX") or shutil.which("g++") or shutil.which("c++") or "g++"


@functools.lru_cache(maxsize=None)
def cpu_flags() -> str:
    """The host CPU's feature flags: -march=native code built on one CPU may not run on another."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=None)
def cxx_version(compiler: str) -> str:
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True,
                              timeout=60).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def cache_dir() -> Path:
    from ..compile.settings import configured_cache_dir
    d = Path(configured_cache_dir()) / "triton"
    d.mkdir(parents=True, exist_ok=True)
    return d


def cache_key(ttir: str) -> str:
    from .codegen import codegen_version  # covers the prelude and runtime library sources too
    compiler = cxx()
    h = hashlib.sha256()
    for part in (ttir, codegen_version(), " ".join(CXX_FLAGS), compiler, cxx_version(compiler), cpu_flags()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _precompiled_prelude(d: Path) -> Path | None:
    """The kernels' prelude (RUNTIME_H) as a header with a GCC precompiled header beside it,
    built once per prelude, flags and compiler. Parsing the prelude's standard headers is most
    of a kernel's build (about 0.5 of 0.6 s); with the .gch a kernel builds in about 0.1 s. None
    when the .gch cannot be built (kernels then include the plain header)."""
    from .runtime_h import RUNTIME_H
    compiler = cxx()
    h = hashlib.sha256("\0".join((RUNTIME_H, " ".join(CXX_FLAGS), compiler, cxx_version(compiler),
                                   cpu_flags())).encode()).hexdigest()[:24]
    header = d / f"prelude-{h}.h"
    gch = d / f"prelude-{h}.h.gch"
    if gch.exists():
        return header
    if not header.exists():
        _write_atomic(header, RUNTIME_H.encode())
    fd, tmp = tempfile.mkstemp(dir=d, prefix=gch.name + ".tmp")
    os.close(fd)
    flags = [f for f in CXX_FLAGS if f != "-shared"]
    r = subprocess.run([compiler, *flags, "-x", "c++-header", str(header), "-o", tmp], capture_output=True)
    if r.returncode != 0:
        os.unlink(tmp)
        return None
    os.replace(tmp, gch)
    return header


def build(cpp_source: str, key: str, name: str) -> bytes:
    """The shared object for `cpp_source` (from the cache, or compiled now)."""
    from .runtime_h import RUNTIME_H
    d = cache_dir()
    so = d / f"{key}.so"
    if so.exists():
        return so.read_bytes()
    if cpp_source.startswith(RUNTIME_H):
        header = _precompiled_prelude(d)
        if header is not None:
            cpp_source = f'#include "{header}"\n' + cpp_source[len(RUNTIME_H):]
    cpp = d / f"{key}.cpp"
    _write_atomic(cpp, cpp_source.encode())
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f"{key}.so.tmp")
    os.close(fd)
    cmd = [cxx(), *CXX_FLAGS, str(cpp), "-o", tmp]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError(f"building Triton kernel {name} for ember failed ({' '.join(cmd)}):\n"
                           f"{r.stderr[-4000:]}")
    os.replace(tmp, so)
    return so.read_bytes()


def loadable_path(binary: bytes) -> Path:
    """A file holding `binary` for dlopen, named by its content hash (written once)."""
    d = cache_dir() / "loaded"
    d.mkdir(exist_ok=True)
    p = d / (hashlib.sha256(binary).hexdigest() + ".so")
    if not p.exists():
        _write_atomic(p, binary)
    return p


@functools.lru_cache(maxsize=None)
def load_runtime() -> None:
    """Build (once, cached) and load the runtime library kernels resolve their thread pool and
    block product from; RTLD_GLOBAL so that kernels loaded afterwards find its symbols."""
    import ctypes
    from .. import _C
    from .runtime_h import RUNTIME_CPP
    key = "runtime-" + cache_key("")
    path = cache_dir() / f"{key}.so"
    if not path.exists():
        build(RUNTIME_CPP, key, "the Triton runtime")
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    lib.ember_rt_set_block_sgemm(ctypes.c_void_p(_C._block_sgemm_address()))

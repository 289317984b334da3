"""Warm start (EMBER_PRECOMPILE=1): a cold process compiles and stores the packages, a second
process over the same cache directories loads them without tracing and must compute the same
losses and gradients. Each case runs in fresh subprocesses with temporary cache directories."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not __import__("torch_ember")._C._compiler_available(),
                                reason="ember built without LLVM")

WORKER = textwrap.dedent('''
    import json, os, sys
    import torch, torch_ember
    import torch.nn as nn
    from torch._dynamo.utils import counters

    HIDDEN = int(os.environ.get("T_HIDDEN", "64"))
    BACKEND = os.environ.get("T_BACKEND", "ember")
    OPTIONS = json.loads(os.environ.get("T_OPTIONS", "{}"))

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(32, HIDDEN)
            self.b = nn.Linear(HIDDEN, 8)

        def forward(self, x):
            h = torch.relu(self.a(x))
            if os.environ.get("T_BREAK") == "1":
                torch._dynamo.graph_break()
            return self.b(h).square().mean()

    torch.manual_seed(0)
    dev = "cpu" if BACKEND == "inductor" else "ember"
    m = M().to(dev)
    kw = {"options": OPTIONS} if OPTIONS else {}
    f = torch.compile(m, backend=BACKEND, **kw)
    losses, grads = [], []
    for step in range(2):
        x = torch.randn(16, 32, generator=torch.Generator().manual_seed(step)).to(dev)
        loss = f(x)
        loss.backward()
        losses.append(loss.item())
        grads.append([p.grad.double().sum().item() for p in m.parameters()])
        m.zero_grad()
    if os.environ.get("T_NEWSHAPE") == "1":  # a guard miss after the load: compiles again
        loss = f(torch.randn(4, 32).to(dev))
        loss.backward()
        losses.append(loss.item())
    layout = None
    if os.environ.get("T_LAYOUT") == "1":  # a result in a transposed layout keeps it when loaded
        t = torch.randn(8, 4, generator=torch.Generator().manual_seed(9)).t().to(dev)
        out = torch.compile(lambda a: a * 2 + 1, backend=BACKEND, **kw)(t)
        layout = [list(out.stride()), out.double().sum().item()]
    stats = torch_ember.compile_stats()
    print("RESULT " + json.dumps({
        "layout": layout,
        "losses": losses, "grads": grads,
        "loaded": counters["dynamo_cache"]["ember_loaded"],
        "rejected": counters["dynamo_cache"]["ember_rejected"],
        "warm_graphs": sum(r["recompile_reason"].startswith("warm start") for r in stats),
        "compiled_graphs": sum(not r["recompile_reason"].startswith("warm start") for r in stats),
    }))
''')


@pytest.fixture
def dirs(tmp_path):
    return {"EMBER_CACHE_DIR": str(tmp_path / "ember"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "torch")}


def run(dirs, tmp_path, **env):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    e = {**os.environ, **dirs, "EMBER_PRECOMPILE": "1", "OMP_NUM_THREADS": "1", **env}
    p = subprocess.run([sys.executable, str(script)], env=e, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-4000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def same(a, b):
    # The same executables run on the same inputs: the numbers agree exactly.
    assert a["losses"] == b["losses"]
    assert a["grads"] == b["grads"]


def test_warm_start_loads_and_matches_cold(dirs, tmp_path):
    cold = run(dirs, tmp_path)
    assert cold["loaded"] == 0 and cold["compiled_graphs"] == 2
    warm = run(dirs, tmp_path)
    assert warm["loaded"] == 1
    assert warm["compiled_graphs"] == 0 and warm["warm_graphs"] == 2  # nothing traced
    same(cold, warm)


def test_warm_start_keeps_output_layouts(dirs, tmp_path):
    cold = run(dirs, tmp_path, T_LAYOUT="1")
    warm = run(dirs, tmp_path, T_LAYOUT="1")
    assert warm["loaded"] == 2 and warm["compiled_graphs"] == 0
    assert cold["layout"][0] == [1, 4]
    assert warm["layout"] == cold["layout"]


def test_changed_model_recompiles(dirs, tmp_path):
    run(dirs, tmp_path)
    other = run(dirs, tmp_path, T_HIDDEN="48")  # parameter sizes differ: Dynamo's guards miss
    assert other["compiled_graphs"] == 2
    fresh = run({k: v + "_fresh" for k, v in dirs.items()}, tmp_path, T_HIDDEN="48")
    same(other, fresh)


def test_each_new_variant_recompiles_after_several_stored_ones(dirs, tmp_path):
    # Each process loads every stored package, misses their guards and compiles its own variant,
    # which it stores too: names Dynamo generates must not collide with the loaded packages'.
    for hidden in ("64", "48", "40", "24"):
        r = run(dirs, tmp_path, T_HIDDEN=hidden)
        assert r["compiled_graphs"] == 2
    fresh = run({k: v + "_fresh" for k, v in dirs.items()}, tmp_path, T_HIDDEN="24")
    same(r, fresh)


def test_other_options_and_backends_do_not_reuse(dirs, tmp_path):
    run(dirs, tmp_path)
    eager_fb = run(dirs, tmp_path, T_OPTIONS='{"fallback": "eager"}')
    assert eager_fb["loaded"] == 0 and eager_fb["rejected"] == 1 and eager_fb["compiled_graphs"] == 2
    ind = run(dirs, tmp_path, T_BACKEND="inductor")
    assert ind["loaded"] == 0 and ind["rejected"] == 1


def test_recompile_after_load_and_graph_breaks(dirs, tmp_path):
    cold = run(dirs, tmp_path, T_BREAK="1", T_NEWSHAPE="1")
    warm = run(dirs, tmp_path, T_BREAK="1", T_NEWSHAPE="1")
    assert warm["loaded"] == 1 and warm["warm_graphs"] >= 2
    # The loaded graphs compute exactly what the cold ones did. The new shape is another story:
    # the cold process runs a new size's first call eagerly, the warm one through a compiled
    # graph, whose sums may be grouped differently (a last-bit difference on CPUs whose eager
    # kernels use wider vectors than the generated ones).
    same({**cold, "losses": cold["losses"][:2]}, {**warm, "losses": warm["losses"][:2]})
    assert warm["losses"][2] == pytest.approx(cold["losses"][2], rel=1e-5)


def test_corrupt_entries_are_recompiled(dirs, tmp_path):
    cold = run(dirs, tmp_path)
    # Garbage in Dynamo's package: discarded, the function compiles from scratch.
    entries = list(Path(dirs["TORCHINDUCTOR_CACHE_DIR"], "dynamo").rglob("entry"))
    assert entries
    saved = [p.read_bytes() for p in entries]
    for p in entries:
        p.write_bytes(b"\x80\x04garbage")
    broken = run(dirs, tmp_path)
    assert broken["loaded"] == 0 and broken["compiled_graphs"] == 2
    same(cold, broken)
    # A damaged kernel-cache entry under an intact package: the C++ cache detects it and
    # compiles the stored IR again.
    for p, b in zip(entries, saved):
        p.write_bytes(b)
    for f in Path(dirs["EMBER_CACHE_DIR"]).rglob("*"):
        if f.is_file() and f.stat().st_size > 64:
            data = bytearray(f.read_bytes())
            data[len(data) // 2] ^= 0xFF
            f.write_bytes(bytes(data))
    again = run(dirs, tmp_path)
    assert again["loaded"] == 1
    same(cold, again)


def test_payload_checksum_rejects_tampering():
    from torch_ember.compile import warm

    code = warm.EmberOutputCode(fn=None, kind="fw", name="g", salt="s", blob=b"x", digest="0" * 64)
    with pytest.raises(RuntimeError, match="corrupt"):
        warm.rebuild(code)
